"""The multitask CLI's scoring, selection and prediction paths end to end, checked against hand computations.

One tiny run with the flags `make train` uses (--symmetric-pairs, --sts-head-bias, --warmup-ratio, --max-grad-norm,
--optimizer fused, --batch-size); then every dev figure it prints is recomputed from the files it wrote, by
tasks.score and by hand (csv + statistics), and each flag is checked to have done what it says.
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import re
import statistics
from pathlib import Path

import pytest
import torch
from conftest import DATA, TEST_DEVICE

import minbert
from minbert.multitask import MultitaskBert, MultitaskConfig
from tasks import score as score_cli
from tasks.core import train as train_module
from tasks.core.batching import pad as _pad
from tasks.core.checkpoints import load_checkpoint
from tasks.multitask import load, parse_settings, run

pytestmark = pytest.mark.usefixtures("one_thread")

SIZES = {"sst": 40, "para": 48, "sts": 32}           # training rows per task
BATCH, EPOCHS, MAX_NORM, LR, WARMUP = 8, 2, 0.05, 1e-3, 0.1
NAMES = {"sst": "ids-sst", "para": "quora", "sts": "sts"}
LABEL = {"sst": "sentiment", "para": "is_duplicate", "sts": "similarity"}


def piece(tmp_path: Path, name: str, start: int, stop: int, out: str) -> str:
    lines = (DATA / name).read_text(encoding="utf-8").splitlines(keepends=True)
    path = tmp_path / out
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(lines[0] + "".join(lines[1 + start:1 + stop]), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One run of the multitask CLI with make train's flags on slices of the real files (dev slices in data/)."""
    tmp = tmp_path_factory.mktemp("cli")
    tiny = tmp / "tiny"
    torch.manual_seed(0)
    config = minbert.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=64, max_position_embeddings=128)
    minbert.save_pretrained(minbert.BertModel(config), tiny)
    (tiny / "vocab.txt").write_bytes((minbert.checkpoint.resolve("minilm") / "vocab.txt").read_bytes())
    args = ["--model", str(tiny), "--device", TEST_DEVICE, "--no-progress", "--head-hidden", "16", "--lr", str(LR),
            "--epochs", str(EPOCHS), "--batch-size", str(BATCH), "--symmetric-pairs", "--sts-head-bias", "2.5",
            "--warmup-ratio", str(WARMUP), "--max-grad-norm", str(MAX_NORM), "--optimizer", "fused",
            "--checkpoint", str(tmp / "run.pt"), "--predictions-dir", str(tmp / "pred")]
    for t in ("sst", "para", "sts"):
        train = piece(tmp, f"{NAMES[t]}-train.csv", 0, SIZES[t], f"train/{t}.csv")
        dev = piece(tmp, f"{NAMES[t]}-dev.csv", 0, 24, f"data/{NAMES[t]}-dev.csv")
        args += [f"--{t}-train", train, f"--{t}-dev", dev, f"--{t}-test", dev]

    norms: list[float] = []
    real_clip = torch.nn.utils.clip_grad_norm_

    def clip(params, max_norm, *a, **k):  # the clip itself, then the gradients' norm after it
        params = list(params)
        out = real_clip(params, max_norm, *a, **k)
        norms.append(math.sqrt(sum(float(p.grad.pow(2).sum()) for p in params if p.grad is not None)))
        return out
    mp = pytest.MonkeyPatch()
    mp.setattr(train_module.torch.nn.utils, "clip_grad_norm_", clip)
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            summary = run(parse_settings(args))
    finally:
        mp.undo()
    return {"dir": tmp, "summary": summary, "norms": norms, "printed": printed.getvalue()}


def gold(tmp: Path, task: str) -> dict[str, float]:
    with open(tmp / "data" / f"{NAMES[task]}-dev.csv", newline="", encoding="utf-8") as f:
        return {r["id"]: float(r[LABEL[task]]) for r in csv.DictReader(f, delimiter="\t")}


def written(tmp: Path, task: str) -> dict[str, float]:
    lines = (tmp / "pred" / f"{task}-dev-output.csv").read_text().splitlines()[1:]
    return {i.strip(): float(v) for i, v in (line.split(",") for line in lines)}


def test_printed_dev_figures_equal_tasks_score_and_a_hand_computation(trained, capsys):
    tmp, summary = trained["dir"], trained["summary"]
    hand = {}
    for t in ("sst", "para"):
        g, p = gold(tmp, t), written(tmp, t)
        assert set(g) == set(p) and len(g) == 24
        hand[t] = sum(p[i] == g[i] for i in g) / len(g)
    g, p = gold(tmp, "sts"), written(tmp, "sts")
    hand["sts"] = statistics.correlation([p[i] for i in g], [g[i] for i in g])
    overall = (hand["sst"] + hand["para"] + (hand["sts"] + 1) / 2) / 3
    dev = summary["dev"]
    assert dev["sst_accuracy"] == pytest.approx(hand["sst"], abs=1e-12)
    assert dev["para_accuracy"] == pytest.approx(hand["para"], abs=1e-12)
    assert dev["sts_pearson"] == pytest.approx(hand["sts"], abs=1e-9)
    assert dev["overall"] == pytest.approx(overall, abs=1e-9)
    shown = (f"dev SST acc {hand['sst']:.4f}  Quora acc {hand['para']:.4f}  STS r {hand['sts']:.4f}  "
             f"overall {overall:.4f}")
    assert f"best epoch {summary['best_epoch']}; {shown}" in trained["printed"]   # the line the CLI prints

    assert score_cli.main([str(tmp / "pred"), "--data-dir", str(tmp / "data")]) == 0
    table = capsys.readouterr().out
    for name, value in (("SST accuracy", hand["sst"]), ("Quora accuracy", hand["para"]),
                        ("STS Pearson r", hand["sts"]), ("overall", overall)):
        assert re.search(rf"^{name} .* {value:.4f}$", table, re.MULTILINE), (name, value, table)


def test_the_best_epoch_is_the_one_with_the_highest_dev_overall(trained):
    summary = trained["summary"]
    history = [h["dev_overall"] for h in summary["history"]]
    assert len(history) == EPOCHS
    best = max(range(EPOCHS), key=lambda e: (history[e], -e)) + 1      # the first epoch with the highest score
    assert summary["best_epoch"] == best
    assert summary["dev_overall"] == pytest.approx(history[best - 1])
    assert summary["dev"]["overall"] == pytest.approx(history[best - 1], abs=1e-9)  # the files are that epoch's
    for h in summary["history"]:
        assert h["dev_overall"] == pytest.approx(
            (h["dev_sst_accuracy"] + h["dev_para_accuracy"] + (h["dev_sts_pearson"] + 1) / 2) / 3, abs=1e-12)


def test_batch_size_warmup_and_the_fused_optimizer_reach_the_optimiser(trained):
    state = load_checkpoint(trained["dir"] / "run.pt")
    per_epoch = sum(math.ceil(n / BATCH) for n in SIZES.values())     # round-robin, drop: every batch once
    total = EPOCHS * per_epoch
    group = state["optimizer"]["param_groups"][0]
    assert group["fused"] is True
    steps = {float(s["step"]) for s in state["optimizer"]["state"].values()}
    # the encoder takes every step; each task's head only the steps of its own batches
    assert steps == {total} | {EPOCHS * math.ceil(n / BATCH) for n in SIZES.values()}
    warmup = math.ceil(WARMUP * total)
    assert group["lr"] == pytest.approx(LR * (total - (total - 1)) / (total - warmup), rel=1e-9)  # the last update's


def test_max_grad_norm_clips_every_step(trained):
    norms = trained["norms"]
    total = EPOCHS * sum(math.ceil(n / BATCH) for n in SIZES.values())
    assert len(norms) == total and max(norms) <= MAX_NORM * (1 + 1e-4)


def test_the_sts_head_starts_mid_scale(trained):
    state = load_checkpoint(trained["dir"] / "run.pt")["model"]
    bias = state["head.sts.fc2.bias"]                                   # its output layer
    assert bias.numel() == 1 and abs(bias.item() - 2.5) < 0.05           # 30 clipped steps of lr <= 1e-3 from 2.5


def test_symmetric_pairs_predict_the_mean_of_both_orders(trained):
    """The dev files equal the mean of the best weights' outputs for (s1, s2) and (s2, s1), computed here."""
    tmp = trained["dir"]
    state = load_checkpoint(tmp / "run.pt")["best_state"]
    model = MultitaskBert(minbert.load_pretrained(str(tmp / "tiny")),
                          MultitaskConfig(head_hidden=16, similarity_bias=2.5, symmetric_pairs=False))
    model.load_state_dict(state)
    model.eval()
    tokenizer = minbert.Tokenizer.from_pretrained(str(tmp / "tiny"))
    for task, fn in (("sts", model.predict_similarity), ("para", model.predict_paraphrase)):
        data = load(task, "dev", tmp / "data" / f"{NAMES[task]}-dev.csv", tokenizer)
        a, b = _pad(data.ids), _pad(data.ids2)
        with torch.no_grad():
            mean = ((fn(*a, *b) + fn(*b, *a)) / 2).tolist()
            one = fn(*a, *b).tolist()
        p = written(tmp, task)
        got = [p[e.id] for e in data.records]
        if task == "sts":
            assert got == pytest.approx(mean, abs=1e-5)
            assert got != pytest.approx(one, abs=1e-5)                    # one order alone gives other values
        else:
            assert got == [float(y > 0) for y in mean]
