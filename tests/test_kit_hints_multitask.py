"""Part 2's checks against a mistake a student tree met (the student2 review): a pair head squeezed with .squeeze(),
which a batch of one pair turns into a 0-d tensor (the checker, the grader's replay and training itself now stop it,
naming predict_from_embeddings)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_grading_hidden import _replayed

import minbert.multitask
from assignments import hidden
from assignments.check import run_part
from assignments.checks import PARTS

SQUEEZE_ALL = "squeeze(-1), not squeeze(): a batch of one must stay (1,)"


def _squeeze_all(self, task, embeddings, inputs):
    """predict_from_embeddings as the review's student wrote it: .squeeze() drops B when B = 1."""
    out = self.head[task](self.features(inputs, embeddings))
    return out if task == "sst" else out.squeeze()


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
