"""SimCSE and the margin loss against hand computations, the contrastive stage's CLI end to end (split, output
directory, resume), the multitask CLI reading its output, and fit()'s early stopping."""

from __future__ import annotations

import json
import math

import pytest
import torch
from conftest import DATA, TEST_DEVICE, fit_with, kill_after, killed_after_first_epoch
from safetensors.torch import load_file
from torch import nn

import minbert
from minbert.checkpoint import name_table
from minbert.simcse import SimCSE, SimCSEConfig, margin_loss, sup_simcse_loss, unsup_simcse_loss
from tasks import multitask, simcse
from tasks.core.checkpoints import load_checkpoint
from tasks.core.data import TASKS, DataError
from tasks.core.errors import ConfigurationError
from tasks.core.train import Interrupted, watching
from tasks.simcse import Examples, Round, mine_hard_negatives, parse_settings, plan, run, split_quora, write_rows

pytestmark = pytest.mark.usefixtures("one_thread")


def unit(*angles: float) -> torch.Tensor:
    """Unit vectors in the plane at the given angles (radians), scaled by 1..n so that only directions count."""
    return torch.tensor([[(k + 1) * math.cos(a), (k + 1) * math.sin(a)] for k, a in enumerate(angles)])


def info_nce(cos: list[list[float]], t: float, extra: list[list[float]] | None = None) -> float:
    """-mean_i log softmax of row i at i, written out: the loss every SimCSE variant reduces to."""
    total = 0.0
    for i, row in enumerate(cos):
        logits = [c / t for c in row] + ([x for x in extra[i]] if extra else [])
        total += -(logits[i] - math.log(sum(math.exp(v) for v in logits)))
    return total / len(cos)


def test_unsup_simcse_loss_by_hand_and_the_temperature():
    a1, a2 = [0.0, 1.0, 2.5], [0.3, 1.2, 2.0]
    cos = [[math.cos(x - y) for y in a2] for x in a1]
    for t in (0.05, 0.5, 1.0):
        assert unsup_simcse_loss(unit(*a1), unit(*a2), t).item() == pytest.approx(info_nce(cos, t), rel=1e-4, abs=1e-6)
    # orthonormal identical positives: log(1 + e^{-1/t}): log(1 + 1/e) at t = 1, log(1 + e^{-5}) at t = 0.2
    eye = torch.eye(2)
    assert unsup_simcse_loss(eye, eye, 1.0).item() == pytest.approx(math.log(1 + math.exp(-1)), rel=1e-6)
    assert unsup_simcse_loss(eye, eye, 0.2).item() == pytest.approx(math.log(1 + math.exp(-5)), rel=1e-4)
    # a lower temperature sharpens: with positives closer than negatives the loss falls, otherwise it rises
    assert unsup_simcse_loss(unit(*a1), unit(*a2), 0.05) < unsup_simcse_loss(unit(*a1), unit(*a2), 1.0)
    swapped = unit(*reversed(a2))
    assert unsup_simcse_loss(unit(*a1), swapped, 0.05) > unsup_simcse_loss(unit(*a1), swapped, 1.0)


def test_sup_simcse_loss_by_hand_with_weighted_hard_negatives():
    a, p, n = [0.0, 1.5, 3.0], [0.2, 1.4, 2.7], [0.5, 1.0, 2.0]
    cos_p = [[math.cos(x - y) for y in p] for x in a]
    cos_n = [[math.cos(x - y) for y in n] for x in a]
    t = 0.1
    A, P, N = unit(*a), unit(*p), unit(*n)
    assert sup_simcse_loss(A, P, temperature=t).item() == pytest.approx(info_nce(cos_p, t), rel=1e-4, abs=1e-6)
    assert sup_simcse_loss(A, P, temperature=t).item() == pytest.approx(unsup_simcse_loss(A, P, t).item(), rel=1e-6)
    for w in (0.0, 1.5, -2.0):  # w lifts only each anchor's own hard negative (the diagonal of the second block)
        extra = [[cos_n[i][j] / t + (w if i == j else 0.0) for j in range(3)] for i in range(3)]
        assert sup_simcse_loss(A, P, N, t, w).item() == pytest.approx(info_nce(cos_p, t, extra), rel=1e-4, abs=1e-6)
    assert sup_simcse_loss(A, P, N, t) > sup_simcse_loss(A, P, temperature=t)  # more negatives, more loss
    assert sup_simcse_loss(A, P, N, t, 2.0) > sup_simcse_loss(A, P, N, t, 0.0)


@pytest.mark.parametrize("distance", ["cosine", "euclidean"])
def test_margin_loss_both_branches_by_hand(distance):
    e1 = torch.tensor([[1.0, 0.0], [1.0, 0.0], [2.0, 0.0], [0.0, 3.0]])
    e2 = torch.tensor([[0.0, 1.0], [1.0, 1.0], [-1.0, 1.0], [0.0, 1.0]])
    y = torch.tensor([1.0, 0.0, 0.0, 0.0])
    if distance == "cosine":  # d = 1 - cos
        d, m = [1.0, 1 - 1 / math.sqrt(2), 1 + 1 / math.sqrt(2), 0.0], 0.5
    else:                     # d = ||e1 - e2||
        d, m = [math.sqrt(2), 1.0, math.sqrt(10), 2.0], 2.5
    # y = 1: 0.5 d^2, whatever the margin; y = 0: 0.5 max(0, m - d)^2, zero once d >= m (row 2)
    by_hand = [0.5 * d[0] ** 2] + [0.5 * max(0.0, m - x) ** 2 for x in d[1:]]
    assert by_hand[1] > 0 and by_hand[3] > 0 and by_hand[2] == 0.0
    for i in range(4):
        one = margin_loss(e1[i:i + 1], e2[i:i + 1], y[i:i + 1], m, distance).item()
        assert one == pytest.approx(by_hand[i], abs=1e-7)
    assert margin_loss(e1, e2, y, m, distance).item() == pytest.approx(sum(by_hand) / 4, rel=1e-6)
    with pytest.raises(ValueError, match="distance"):
        margin_loss(e1, e2, y, distance="manhattan")


def test_the_losses_stay_fp32_under_autocast():
    torch.manual_seed(0)
    z1, z2, n = torch.randn(6, 16), torch.randn(6, 16), torch.randn(6, 16)
    plain = [unsup_simcse_loss(z1, z2), sup_simcse_loss(z1, z2, n, 0.05, 1.0), margin_loss(z1, z2, torch.ones(6))]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cast = [unsup_simcse_loss(z1, z2), sup_simcse_loss(z1, z2, n, 0.05, 1.0), margin_loss(z1, z2, torch.ones(6))]
    for a, b in zip(plain, cast):
        assert b.dtype == torch.float32 and torch.equal(a, b)


SENTENCES = ["a fine film", "dull and far too long , with nothing to say", "How do I learn Python quickly?"]


@pytest.mark.parametrize("pooling", ["mean", "cls_mlp"])
def test_unsup_simcse_with_dropout_off_is_the_loss_of_identical_positives(pooling, tiny_config, tokenizer):
    torch.manual_seed(0)
    model = SimCSE(minbert.BertModel(tiny_config), SimCSEConfig("unsup", pooling))
    batch = dict(tokenizer(SENTENCES))
    model.eval()
    z = model.embed(batch["input_ids"], batch["attention_mask"])
    identical = unsup_simcse_loss(z, z)
    torch.testing.assert_close(model.loss(batch), identical)
    model.train()  # dropout on: the two views differ, and so does the loss
    assert not torch.allclose(model.loss(batch), identical)
    if pooling == "cls_mlp":  # the MLP is used in training only; the saved encoder's embedding is [CLS]
        model.eval()
        out = model.bert(batch["input_ids"], batch["attention_mask"]).last_hidden_state
        torch.testing.assert_close(model.sentence_embedding(batch["input_ids"], batch["attention_mask"]), out[:, 0])


@pytest.mark.parametrize("objective", ["sup", "margin"])
def test_pair_objectives_on_a_batch_equal_the_pure_losses(objective, tiny_config, tokenizer):
    torch.manual_seed(0)
    model = SimCSE(minbert.BertModel(tiny_config), SimCSEConfig(objective, temperature=0.1, hard_negative_weight=0.7,
                                                                distance="euclidean")).eval()
    views = [tokenizer(SENTENCES), tokenizer(["fine film", "far too long", "learn Python"]),
             tokenizer(["a truly awful , boring film from start to finish", "short", "cook rice"])]
    batch = {f"{k}_{i}": v[k] for i, v in enumerate(views, 1) for k in ("input_ids", "attention_mask")}
    z = [model.embed(v.input_ids, v.attention_mask) for v in views]  # each view alone: its own padding
    if objective == "sup":  # one forward over the three views, padded together, gives the same embeddings
        torch.testing.assert_close(model.loss(batch), sup_simcse_loss(*z, 0.1, 0.7))
    else:
        batch = {k: v for k, v in batch.items() if not k.endswith("_3")} | {"labels": torch.tensor([1.0, 0.0, 1.0])}
        torch.testing.assert_close(model.loss(batch), margin_loss(z[0], z[1], batch["labels"], 0.5, "euclidean"))


def test_the_quora_split_is_disjoint_complete_and_seeded():
    stage, rest = split_quora(1000, 0.15, seed=3)
    assert len(stage) == 150 and len(rest) == 850
    assert not set(stage) & set(rest) and sorted(stage + rest) == list(range(1000))
    assert (stage, rest) == split_quora(1000, 0.15, seed=3)
    assert stage != split_quora(1000, 0.15, seed=4)[0]
    assert split_quora(5, 0.0, 0) == ([], [0, 1, 2, 3, 4])


def test_rounds_cut_a_stream_of_shuffled_passes_into_equal_parts():
    assert plan(24, 8, 2, 2) == (2, 3)        # 6 steps: 3 rounds of 2
    assert plan(100, 8, 3, 10) == (10, 4)     # 39 steps: 4 rounds of 10, the last reaching 1 step into pass 4
    assert plan(100, 8, 3, 125) == (39, 1)    # fewer steps than eval_every: one round of all of them
    data = Examples([[[101, 7 + i, 102] for i in range(20)]])
    every, rounds = plan(len(data), 8, 3, 4)   # 3 batches a pass, 9 steps: 3 rounds of 4 (12 steps)
    stream = [b for k in range(rounds) for b in Round(data, 8, every, seed=5, k=k)]
    assert len(stream) == 12 and all(len(Round(data, 8, every, 5, k)) == 4 for k in range(rounds))
    passes = [[int(t) - 7 for b in stream[p:p + 3] for t in b["input_ids"][:, 1]] for p in (0, 3, 6)]
    assert all(sorted(x) == list(range(20)) for x in passes) and passes[0] != passes[1]  # each a new shuffle
    again = [b["input_ids"] for b in Round(data, 8, every, seed=5, k=1)]
    assert all(torch.equal(a, b["input_ids"]) for a, b in zip(again, stream[4:8]))  # a round depends on (seed, k)


def test_written_rows_read_back_as_the_same_pairs(tmp_path):
    records = TASKS["para"].read(DATA / "quora-train.csv")
    keep = {r.line for r in records[:300]}
    write_rows(DATA / "quora-train.csv", keep, tmp_path / "part.csv")
    back = TASKS["para"].read(tmp_path / "part.csv")
    assert not back.skipped and [(r.id, r.sentence1, r.sentence2, r.label) for r in back] == \
        [(r.id, r.sentence1, r.sentence2, r.label) for r in records[:300]]
    assert any('"' in r.sentence1 for r in back)  # the doubly quoted cells survive


def test_hard_negatives_are_the_closest_other_sentences():
    candidates = ["how do i learn java", "what is the capital of france", "how do i learn python fast", "python"]
    anchors = ["how can i learn python", "capital city of france", "python"]
    positives = ["how do i learn python fast", "what is the capital of france", "the python language"]
    # the first anchor's closest candidate is its own positive: the next best is taken; the third anchor's
    # exact copy is skipped too
    assert mine_hard_negatives(anchors, positives, candidates) == [0, 0, 2]


def test_fit_stops_after_patience_evaluations_without_improvement(tmp_path):
    scores = [0.1, 0.5, 0.4, 0.3, 0.45, 0.2, 0.9]

    def train(patience, resume=None, stop_after=None):
        torch.manual_seed(0)
        model = nn.Linear(2, 1)
        seen = []

        def evaluate(m):
            seen.append(len(seen))
            return {"r": scores[len(seen) - 1 + (start if resume else 0)]}

        start = load_checkpoint(resume)["epoch"] if resume else 0
        batches = lambda e: [{"x": torch.ones(2, 2), "y": torch.zeros(2, 1)}]
        with watching(kill_after(stop_after)):
            return fit_with(model, torch.optim.SGD(model.parameters(), 0.1), batches,
                            lambda m, b: ((m(b["x"]) - b["y"]) ** 2).mean(), evaluate, metric="r",
                            epochs=len(scores), device=torch.device("cpu"), checkpoint=tmp_path / "c.pt",
                            resume=resume, patience=patience, progress=False, log=lambda s: None)

    assert len(train(None).history) == 7 and train(None).best_epoch == 7
    early = train(3)
    assert len(early.history) == 5 and early.best_epoch == 2 and early.best_score == 0.5
    assert len(train(4).history) == 6
    with pytest.raises(Interrupted):
        train(3, stop_after=4)
    resumed = train(3, resume=tmp_path / "c.pt")
    assert [h["dev_r"] for h in resumed.history] == [h["dev_r"] for h in early.history]
    assert len(train(3, resume=tmp_path / "c.pt").history) == 5  # a run that stopped early stays stopped
    with pytest.raises(ValueError, match="patience"):
        train(0)


@pytest.fixture
def files(tmp_path):
    """Small slices of the real training files and of the STS dev file."""
    def piece(name, stop, start=0):
        lines = (DATA / name).read_text(encoding="utf-8").splitlines(keepends=True)
        path = tmp_path / f"{start}-{name}"
        path.write_text(lines[0] + "".join(lines[1 + start:1 + stop]), encoding="utf-8")
        return str(path)
    return {"sst_train": piece("ids-sst-train.csv", 30), "para_train": piece("quora-train.csv", 80),
            "sts_train": piece("sts-train.csv", 20), "sts_dev": piece("sts-dev.csv", 24)}


def stage_argv(tiny_dir, files, tmp_path, name, *extra):
    out = ["--model", str(tiny_dir), "--out", str(tmp_path / name), "--checkpoint", str(tmp_path / f"{name}.pt"),
           "--device", TEST_DEVICE, "--batch-size", "8", "--lr", "1e-3", "--eval-every", "2", "--no-progress"]
    for flag, path in files.items():
        out += [f"--{flag.replace('_', '-')}", path]
    return out + list(extra)


def test_the_stage_end_to_end_resumes_and_writes_a_loadable_encoder(tiny_dir, files, tmp_path, monkeypatch):
    extra = ("--max-train-examples", "24", "--epochs", "2", "--patience", "10")  # 3 steps a pass: 3 rounds of 2
    whole = run(parse_settings(stage_argv(tiny_dir, files, tmp_path, "whole", *extra)))
    out = tmp_path / "whole"
    assert len(whole["history"]) == 3 and [h["step"] for h in whole["history"]] == [2, 4, 6]
    # the output directory: the best round's encoder, bit for bit, and nothing of the MLP or the checkpoint
    best = load_checkpoint(tmp_path / "whole.pt")["best_state"]
    saved = minbert.load_pretrained(str(out)).state_dict()
    assert set(saved) == {k.removeprefix("bert.") for k in best}
    for k, v in saved.items():
        assert torch.equal(v, best["bert." + k]), k
    initial = minbert.load_pretrained(str(tiny_dir)).state_dict()
    assert any(not torch.equal(initial[k], saved[k]) for k in saved)  # it did train
    assert (out / "vocab.txt").read_bytes() == (tiny_dir / "vocab.txt").read_bytes()
    summary = json.loads((out / "simcse-summary.json").read_text())
    assert summary["sts_dev_pearson_best"] == max(h["dev_sts_pearson"] for h in summary["history"])
    # the split: disjoint, complete, 15 / 85, in the training file's format
    pairs = TASKS["para"].read(files["para_train"])
    stage, rest = TASKS["para"].read(out / "quora-train-stage.csv"), TASKS["para"].read(out / "quora-train-rest.csv")
    assert len(stage) == round(0.15 * len(pairs)) and len(stage) + len(rest) == len(pairs)
    assert not {r.id for r in stage} & {r.id for r in rest}
    assert sorted(r.id for r in list(stage) + list(rest)) == sorted(r.id for r in pairs)
    assert not list(out.glob(".output-*"))  # no temporary directory left behind
    assert json.loads((out / "run.json").read_text())["result"]["best_round"] == summary["best_round"]
    # the curves: the dev axis in rounds of --eval-every steps, from the zero-shot score at round 0 (a resume keeps it)
    curves = [json.loads(line) for line in (tmp_path / "whole.curves.jsonl").read_text().splitlines()]
    assert curves[0] == {"kind": "start", "epoch": 0, "unit": "round of 2 optimiser steps",
                         "dev_sts_pearson": summary["sts_dev_pearson_before"]}
    assert [x["epoch"] for x in curves if x["kind"] == "epoch"] == [1, 2, 3]

    real_fit = simcse.fit

    monkeypatch.setattr(simcse, "fit", killed_after_first_epoch(real_fit))
    with pytest.raises(Interrupted):
        run(parse_settings(stage_argv(tiny_dir, files, tmp_path, "split", *extra)))
    assert not (tmp_path / "split" / "config.json").exists()   # the run directory holds run.json, no encoder
    monkeypatch.setattr(simcse, "fit", real_fit)
    resumed = run(parse_settings(stage_argv(tiny_dir, files, tmp_path, "split", *extra,
                                            "--resume", str(tmp_path / "split.pt"))))
    assert [h["dev_sts_pearson"] for h in resumed["history"]] == [h["dev_sts_pearson"] for h in whole["history"]]
    kinds = [json.loads(line)["kind"] for line in (tmp_path / "split.curves.jsonl").read_text().splitlines()]
    assert kinds == [json.loads(line)["kind"] for line in (tmp_path / "whole.curves.jsonl").read_text().splitlines()]
    assert (tmp_path / "split" / "model.safetensors").read_bytes() == (out / "model.safetensors").read_bytes()
    assert (tmp_path / "split" / "quora-train-rest.csv").read_text() == (out / "quora-train-rest.csv").read_text()

    # the multitask stage starts from it and trains Quora on the remaining pairs only
    mt = ["--after-simcse", str(out), "--device", TEST_DEVICE, "--epochs", "1", "--batch-size", "8", "--no-progress",
          "--head-hidden", "8", "--max-train-examples", "16", "--checkpoint", str(tmp_path / "mt.pt"),
          "--predictions-dir", str(tmp_path / "mt"), "--sst-train", files["sst_train"], "--sts-train",
          files["sts_train"], "--sst-dev", files["sst_train"], "--para-dev", files["para_train"], "--sts-dev",
          files["sts_dev"], "--sst-test", files["sst_train"], "--para-test", files["para_train"], "--sts-test",
          files["sts_dev"]]
    multitask.run(multitask.parse_settings(mt))
    used = multitask.after_simcse(multitask.parse_settings(mt))
    assert used.training.model == str(out) and used.files.para_train == str(out / "quora-train-rest.csv")
    with pytest.raises(ConfigurationError, match="quora-train-rest.csv"):
        multitask.run(multitask.parse_settings(["--after-simcse", str(tiny_dir)]))
    with pytest.raises(ConfigurationError, match="give neither"):
        multitask.run(multitask.parse_settings(["--after-simcse", str(out), "--model", str(tiny_dir)]))


def test_transformers_loads_the_stage_output(tiny_dir, files, tmp_path, tokenizer):
    import transformers  # a test dependency (requirements-test.txt, installed by make test): never skipped
    run(parse_settings(stage_argv(tiny_dir, files, tmp_path, "hf", "--max-train-examples", "8",
                                  "--objective", "margin")))
    ours = minbert.load_pretrained(str(tmp_path / "hf"))
    theirs = transformers.BertModel.from_pretrained(str(tmp_path / "hf")).eval()
    batch = tokenizer(SENTENCES)
    with torch.no_grad():
        expected = ours(batch.input_ids, batch.attention_mask).last_hidden_state
        got = theirs(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
    keep = batch.attention_mask.bool()  # padding positions' states are nobody's output
    torch.testing.assert_close(got[keep], expected[keep], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("extra", [("--objective", "sup", "--hard-negatives", "--pooling", "cls_mlp"),
                                   ("--objective", "margin", "--distance", "euclidean", "--margin", "2")])
def test_the_pair_objectives_run_and_replace_an_earlier_output(extra, tiny_dir, files, tmp_path):
    argv = stage_argv(tiny_dir, files, tmp_path, "pairs", "--quora-fraction", "0.5", "--epochs", "1", *extra)
    first = run(parse_settings(argv))
    assert first["quora"]["stage"] == 40 and first["history"]
    assert "sentences of non-duplicate pairs" in first["examples"] or "--hard-negatives" not in extra
    with pytest.raises(ConfigurationError, match="holds a run already"):   # a new run loses nothing
        run(parse_settings(argv))
    (tmp_path / "pairs" / "run.json").unlink()   # left: an older version's output, which a new run replaces
    again = run(parse_settings(argv + ["--checkpoint", str(tmp_path / "again.pt")]))
    strip = [[{k: v for k, v in h.items() if not k.endswith("seconds")} for h in r["history"]] for r in (first, again)]
    assert strip[0] == strip[1]
    assert json.loads((tmp_path / "pairs" / "simcse-summary.json").read_text())["checkpoint"] == str(tmp_path / "again.pt")
    # the encoder alone, under Hugging Face's names: the training MLP is not saved
    names = set(load_file(tmp_path / "pairs" / "model.safetensors"))
    assert names == set(name_table(minbert.load_pretrained(str(tiny_dir)).config.num_hidden_layers))


def test_clear_errors_before_training(tiny_dir, files, tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("not ours")
    for extra, message in [(("--out", str(tmp_path / "taken")), "was not written by"),
                           (("--objective", "sup", "--quora-fraction", "0"), "above 0"),
                           (("--hard-negatives",), "goes with --objective sup"),
                           (("--grad-accum", "2"), "whole batch")]:
        with pytest.raises(ConfigurationError, match=message):
            run(parse_settings(stage_argv(tiny_dir, files, tmp_path, "err", *extra)))
    with pytest.raises(SystemExit, match="2"):   # checked by argparse: "must be a positive integer, not 0"
        parse_settings(stage_argv(tiny_dir, files, tmp_path, "err", "--eval-every", "0"))
    assert (tmp_path / "taken" / "notes.txt").read_text() == "not ours"


@pytest.mark.parametrize("flag,task,column,split", [("para_train", "para", "is_duplicate", "training"),
                                                    ("sts_dev", "sts", "similarity", "dev")])
def test_a_file_without_its_label_column_names_the_column(flag, task, column, split, tiny_dir, files, tmp_path):
    path = tmp_path / f"renamed-{flag}.csv"
    with open(files[flag], encoding="utf-8") as f:
        path.write_text(f.read().replace(f"\t{column}\n", "\tlabel\n", 1), encoding="utf-8")
    settings = parse_settings(stage_argv(tiny_dir, files | {flag: str(path)}, tmp_path, "err"))
    with pytest.raises(DataError, match="^" + rf"{path}:1: no '{column}' column \(header \[.*'label'\]\); the "
                       rf"{task} {split} files label each row in a column named '{column}'$"):
        run(settings)
