"""Part 2's checks against two mistakes a student tree met (the student2 review): a pair head squeezed with .squeeze(),
which a batch of one pair turns into a 0-d tensor (the checker, the grader's replay and training itself now stop it,
naming predict_from_embeddings); and a wrong pool() (part 1), which the sentence and bi-encoder checks run through,
named as pool() rather than blamed on MultitaskBert.features."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_grading_hidden import _replayed

import minbert.multitask
import minbert.pooling
from assignments import hidden
from assignments.check import run_part
from assignments.checks import PARTS

SQUEEZE_ALL = "squeeze(-1), not squeeze(): a batch of one must stay (1,)"


def _squeeze_all(self, task, embeddings, inputs):
    """predict_from_embeddings as the review's student wrote it: .squeeze() drops B when B = 1."""
    out = self.head[task](self.features(inputs, embeddings))
    return out if task == "sst" else out.squeeze()


def _student_pool(monkeypatch: pytest.MonkeyPatch, pool) -> None:
    """pool as a student's minbert/pooling.py defines it: there, and where minbert/multitask.py imported it."""
    monkeypatch.setattr(minbert.pooling, "pool", pool)
    monkeypatch.setattr(minbert.multitask, "pool", pool)


def _mean_with_padding(real):
    def pool(hidden, attention_mask, pooler_output, how):
        return hidden.mean(1) if how == "mean" else real(hidden, attention_mask, pooler_output, how)
    return pool


def test_a_head_squeezed_whole_fails_on_a_batch_of_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(minbert.multitask.MultitaskBert, "predict_from_embeddings", _squeeze_all)
    r = run_part("mt_heads")
    assert r["status"] == "fail", r
    assert "on a batch of one pair (eval mode) returned shape (), expected (1,)" in r["message"], r["message"]
    assert r["message"].endswith(SQUEEZE_ALL) and 'predict_from_embeddings("para"' in r["message"]


def test_the_reference_heads_pass_with_the_batch_of_one() -> None:
    assert run_part("mt_heads")["status"] == "pass"


@pytest.mark.parametrize("task", ["para", "sts"])
def test_a_batch_of_one_stays_1_for_each_pair_head(monkeypatch: pytest.MonkeyPatch, task: str) -> None:
    # the other head squeezed right: the one squeezed whole is the one named
    def predict(self, t, embeddings, inputs):
        out = self.head[t](self.features(inputs, embeddings))
        return out if t == "sst" else out.squeeze() if t == task else out.squeeze(-1)
    monkeypatch.setattr(minbert.multitask.MultitaskBert, "predict_from_embeddings", predict)
    r = run_part("mt_heads")
    assert r["status"] == "fail" and f'predict_from_embeddings("{task}"' in r["message"], r
    assert SQUEEZE_ALL in r["message"]


def test_the_grader_fails_a_head_squeezed_whole_on_hidden_inputs(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    # the grader's hidden multitask fixture, drawn from its seed, holds the batch of one too: the check takes the
    # first pair of the drawn batch
    torch.set_num_threads(1)
    fixtures = {f: hidden.hidden_fixture(f, 20261127) for f in PARTS["mt_heads"].fixtures}
    hidden.write_inputs(tmp_path / "inputs", fixtures)
    status, message, _ = _replayed("mt_heads", fixtures, tmp_path)
    assert (status, message) == ("pass", ""), message
    monkeypatch.setattr(minbert.multitask.MultitaskBert, "predict_from_embeddings", _squeeze_all)
    status, message, _ = _replayed("mt_heads", fixtures, tmp_path)
    assert status == "fail" and "returned shape (), expected (1,)" in message and SQUEEZE_ALL in message, message


def _pair_batch(B: int) -> dict:
    ids = torch.tensor([[2, 7, 8, 3], [2, 9, 3, 0]])[:B]
    return {"input_ids_1": ids, "attention_mask_1": (ids != 0).long(), "input_ids_2": ids,
            "attention_mask_2": (ids != 0).long(), "labels": torch.tensor([1.0, 0.0])[:B]}


@pytest.mark.parametrize("task", ["para", "sts"])
def test_training_on_a_batch_of_one_stops_naming_the_head(monkeypatch: pytest.MonkeyPatch, task: str) -> None:
    # the review's crash: a last batch of one pair (17 examples, --batch-size 16) reached paraphrase_loss as a 0-d
    # output, a raw torch ValueError; the model's loss and the multitask command's TaskForward stop before, in one line
    from assignments.checks_multitask import multitask_model
    from minbert.shapes import ShapeError
    from tasks.multitask.model import TaskForward
    model = multitask_model("cross-encoder")
    assert model.loss(task, _pair_batch(1)).dim() == 0                    # the reference: a batch of one trains
    monkeypatch.setattr(minbert.multitask.MultitaskBert, "predict_from_embeddings", _squeeze_all)
    assert model.loss(task, _pair_batch(2)).dim() == 0                    # B > 1: .squeeze() is not seen
    for run in (lambda: model.loss(task, _pair_batch(1)), lambda: TaskForward(model, task, _pair_batch(1)).task_loss,
                lambda: model.eval().predict(task, _pair_batch(1))):
        with pytest.raises(ShapeError) as e:
            run()
        assert str(e.value) == (f'MultitaskBert.predict_from_embeddings("{task}", ...) returned shape (), expected '
                                f"(B,) = (1,): {SQUEEZE_ALL}; python -m assignments.check mt_heads")


@pytest.mark.parametrize("part, says", [
    ("mt_sentence", 'on the encoder\'s output for a sentence (token_type_ids None) with a perturbed h0, how="mean"'),
    ("mt_bi_encoder", 'on the encoder\'s output for sentence 1 of the pair, how="mean"'),
])
def test_a_wrong_pool_is_named_not_features(monkeypatch: pytest.MonkeyPatch, part: str, says: str) -> None:
    _student_pool(monkeypatch, _mean_with_padding(minbert.pooling.pool))
    r = run_part(part)
    assert r["status"] == "fail", r
    assert r["message"].startswith("pool() in minbert/pooling.py (see classifier_head), which this part runs "
                                   "through"), r["message"]
    assert says in r["message"] and "MultitaskBert.features" not in r["message"].split(". It matches")[0]
    assert r["message"].endswith("It matches what you get when padding tokens are counted in the mean"), r["message"]


@pytest.mark.parametrize("part", ["mt_sentence", "mt_bi_encoder"])
def test_a_wrong_pool_without_a_known_mistake_says_to_fix_it_first(monkeypatch: pytest.MonkeyPatch,
                                                                   part: str) -> None:
    real = minbert.pooling.pool
    _student_pool(monkeypatch, lambda h, m, p, how: 2 * real(h, m, p, how))
    r = run_part(part)
    assert r["status"] == "fail" and r["message"].startswith("pool() in minbert/pooling.py"), r
    assert "fix pool() first, check it with  python -m assignments.check classifier_head" in r["message"]


@pytest.mark.parametrize("part", ["mt_sentence", "mt_bi_encoder"])
def test_features_is_still_judged_once_pool_is_right(monkeypatch: pytest.MonkeyPatch, part: str) -> None:
    def features(self, inputs, embeddings):     # u and v in the wrong order / a pooler output: features' own fault
        v = [self.encode(x.input_ids, x.attention_mask, x.token_type_ids, h) for x, h in zip(inputs, embeddings)]
        return v[0] if len(v) == 1 else torch.cat([v[1], v[0], (v[0] - v[1]).abs()], -1)
    monkeypatch.setattr(minbert.multitask.MultitaskBert, "features", features)
    r = run_part(part)
    if part == "mt_sentence":
        assert r["status"] == "pass", r
    else:
        assert r["status"] == "fail" and r["message"].startswith("MultitaskBert.features"), r
        assert "[v, u, |u - v|]" in r["message"]
