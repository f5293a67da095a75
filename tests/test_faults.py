"""Fault injection: a training CLI killed with SIGKILL at a random (seeded) optimiser step, or inside a checkpoint
write, resumes to the same weights and history as an uninterrupted run; a NaN loss stops the run naming the step."""

from __future__ import annotations

import math
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import warm
from conftest import DATA, ROOT, TEST_DEVICE

from tasks import classifier, deebert, multitask, simcse
from tasks.core.checkpoints import KILL_AT_STEP, KILL_IN_SAVE, load_checkpoint
from tasks.core.errors import TrainingError, run_cli

pytestmark = pytest.mark.usefixtures("one_thread")
CLIS = {"classifier": classifier, "deebert": deebert, "multitask": multitask, "simcse": simcse}


def piece(tmp_path: Path, name: str, stop: int, start: int = 0) -> str:
    lines = (DATA / name).read_text(encoding="utf-8").splitlines(keepends=True)
    path = tmp_path / f"{start}-{name}"
    path.write_text(lines[0] + "".join(lines[1 + start:1 + stop]), encoding="utf-8")
    return str(path)


def cli_argv(cli: str, tiny_dir: Path, tmp_path: Path, name: str) -> list[str]:
    """Tiny runs of three epochs (rounds, for simcse) on slices of the real files."""
    if cli == "deebert":   # two stages of two epochs; its checkpoints are --out's stage1.pt and stage2.pt
        return ["--task", "sst2", "--model", str(tiny_dir), "--device", TEST_DEVICE, "--no-progress", "--out",
                str(tmp_path / name), "--train-file", piece(tmp_path, "ids-sst-train.csv", 40), "--dev-file",
                piece(tmp_path, "ids-sst-dev.csv", 16), "--test-file", piece(tmp_path, "ids-sst-dev.csv", 24, 16),
                "--epochs", "2", "--ramp-epochs", "2", "--batch-size", "8", "--lr", "1e-3", "--eval-batch-size", "8",
                "--thresholds", "0.3"]
    common = ["--model", str(tiny_dir), "--device", TEST_DEVICE, "--batch-size", "8", "--lr", "1e-3", "--no-progress",
              "--checkpoint", str(tmp_path / f"{name}.pt")]
    if cli == "classifier":
        return common + ["--train-file", piece(tmp_path, "ids-sst-train.csv", 40), "--epochs", "3",
                         "--dev-file", piece(tmp_path, "ids-sst-dev.csv", 16), "--test-file",
                         piece(tmp_path, "ids-sst-dev.csv", 24, 16), "--predictions-dir", str(tmp_path / name)]
    if cli == "multitask":
        out = common + ["--epochs", "3", "--head-hidden", "8", "--predictions-dir", str(tmp_path / name)]
        for t, prefix in (("sst", "ids-sst"), ("para", "quora"), ("sts", "sts")):
            out += [f"--{t}-train", piece(tmp_path, f"{prefix}-train.csv", 16),
                    f"--{t}-dev", piece(tmp_path, f"{prefix}-dev.csv", 8),
                    f"--{t}-test", piece(tmp_path, f"{prefix}-dev.csv", 12, 8)]
        return out
    return common + ["--out", str(tmp_path / name), "--eval-every", "2", "--epochs", "2", "--patience", "10",
                     "--max-train-examples", "24", "--sst-train", piece(tmp_path, "ids-sst-train.csv", 30),
                     "--para-train", piece(tmp_path, "quora-train.csv", 80), "--sts-train",
                     piece(tmp_path, "sts-train.csv", 20), "--sts-dev", piece(tmp_path, "sts-dev.csv", 16)]


def killed(cli: str, argv: list[str], cwd: Path, timeout: int = 240, **env: str) -> subprocess.CompletedProcess:
    """The CLI in a fresh process with a fault-injection variable set; it must die of SIGKILL (if the variable
    were ignored, the run would finish and exit 0)."""
    proc = warm.run([sys.executable, "-m", f"tasks.{cli}", *argv], cwd=cwd, capture_output=True, text=True,
                    env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **env}, timeout=timeout, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    return proc


def assert_same_run(a: dict, b: dict) -> None:
    assert a["epoch"] == b["epoch"] and a["optimizer_steps"] == b["optimizer_steps"]
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
        assert torch.equal(a["best_state"][key], b["best_state"][key]), key
    strip = [[{k: v for k, v in h.items() if not k.endswith("seconds")} for h in s["history"]] for s in (a, b)]
    assert strip[0] == strip[1]


@pytest.mark.parametrize("cli", sorted(CLIS))
def test_sigkill_at_a_random_step_then_resume_equals_an_uninterrupted_run(cli, tiny_dir, tmp_path):
    module = CLIS[cli]
    module.run(module.parse_settings(cli_argv(cli, tiny_dir, tmp_path, "whole")))
    where = {"whole": tmp_path / "whole.pt", "split": tmp_path / "split.pt"}
    if cli == "deebert":   # killed in stage 1 (each stage counts its own steps), stage 2 then runs after the resume
        where = {name: tmp_path / name / "stage1.pt" for name in where}
    whole = load_checkpoint(where["whole"])
    total = whole["optimizer_steps"]
    per_epoch = total // whole["epoch"]
    step = random.Random(f"issue 24 {cli}").randint(per_epoch + 1, total - 1)   # after the first checkpoint
    argv = cli_argv(cli, tiny_dir, tmp_path, "split")
    killed(cli, argv, tmp_path, **{KILL_AT_STEP: str(step)})
    state = load_checkpoint(where["split"])
    assert state["epoch"] == (step - 1) // per_epoch            # the epoch in progress is all that was lost
    resume = ["--resume-training"] if cli == "deebert" else ["--resume", str(where["split"])]
    module.run(module.parse_settings(argv + resume))
    assert_same_run(whole, load_checkpoint(where["split"]))
    if cli == "deebert":
        assert_same_run(*(load_checkpoint(tmp_path / name / "stage2.pt") for name in ("whole", "split")))


def test_sigkill_inside_a_checkpoint_write_keeps_the_previous_one(tiny_dir, tmp_path):
    argv = cli_argv("classifier", tiny_dir, tmp_path, "split")
    killed("classifier", argv, tmp_path, **{KILL_IN_SAVE: "2"})   # during the write of epoch 2's checkpoint
    assert load_checkpoint(tmp_path / "split.pt")["epoch"] == 1    # the previous checkpoint, whole
    assert list(tmp_path.glob(".split.pt.*"))                      # the half-done write was a temporary file


def test_a_nan_loss_stops_the_run_naming_the_step_and_keeps_the_checkpoint(tiny_dir, tmp_path, monkeypatch, capsys):
    real = classifier.classification_loss
    calls = []

    def loss(model, batch):   # the 8th batch (the 3rd of epoch 2: 5 batches an epoch) diverges
        calls.append(1)
        value = real(model, batch)
        return value * math.nan if len(calls) == 8 else value
    monkeypatch.setattr(classifier, "classification_loss", loss)
    argv = cli_argv("classifier", tiny_dir, tmp_path, "nan")
    with pytest.raises(TrainingError, match=r"loss is nan in epoch 2, optimiser step 8; .*nan.pt still holds"):
        classifier.run(classifier.parse_settings(argv))
    assert load_checkpoint(tmp_path / "nan.pt")["epoch"] == 1
    calls.clear()
    assert run_cli(lambda: classifier.main(argv)) == 1            # through the CLI: one line, no traceback
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith("error: the training loss is nan in epoch") and "Traceback" not in err
    assert "Start a new run with a lower --lr" in err and "--resume it" not in err     # a resume would refuse --lr


def test_a_nan_loss_after_a_step_checkpoint_of_epoch_1_says_no_epoch_finished(tiny_dir, tmp_path, monkeypatch):
    """With --save-every, a NaN in epoch 1 leaves a checkpoint holding no finished epoch: the message says so and
    advises a new run, not tasks.predict (which refuses such a checkpoint) nor a resume (which would diverge again);
    docs/errors.md's fault row quotes both messages."""
    real = classifier.classification_loss
    calls = []

    def loss(model, batch):   # the 3rd batch of epoch 1 diverges, after two step checkpoints
        calls.append(1)
        value = real(model, batch)
        return value * math.nan if len(calls) == 3 else value
    monkeypatch.setattr(classifier, "classification_loss", loss)
    argv = cli_argv("classifier", tiny_dir, tmp_path, "nan1") + ["--save-every", "1"]
    with pytest.raises(TrainingError) as e:
        classifier.run(classifier.parse_settings(argv))
    said = str(e.value)
    assert load_checkpoint(tmp_path / "nan1.pt")["epoch"] == 0                 # a step checkpoint of epoch 1
    assert said == (f"the training loss is nan in epoch 1, optimiser step 3; {tmp_path / 'nan1.pt'} holds no finished "
                    "epoch (a step checkpoint of epoch 1: resumed, the run would diverge again, a resume repeats it "
                    "exactly). Start a new run with a lower --lr or --max-grad-norm, or check the data for extreme "
                    "labels"), said
    row = " ".join(next(line for line in (ROOT / "docs" / "errors.md").read_text(encoding="utf-8").splitlines()
                        if line.startswith("| the loss becomes NaN or inf |")).split())
    assert "still holds the last finished epoch (tasks.predict can use it;" in row
    assert "holds no finished epoch (a step checkpoint of epoch 1: resumed, the run would diverge again" in row


def torchrun(argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """tasks.classifier under torchrun: two CPU processes (gloo), one thread each."""
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "-m", "tasks.classifier", *argv], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **env}, check=False)


@pytest.mark.skipif(os.environ.get("MINBERT_SLOW_TESTS") != "1", reason="six torchrun processes: "
                    "run with MINBERT_SLOW_TESTS=1")
def test_sigkill_under_torchrun_then_resume_equals_an_uninterrupted_run(tiny_dir, tmp_path):
    whole = torchrun(cli_argv("classifier", tiny_dir, tmp_path, "whole"), tmp_path)
    assert whole.returncode == 0, whole.stderr[-3000:]
    argv = cli_argv("classifier", tiny_dir, tmp_path, "split")
    step = random.Random("issue 24 torchrun").randint(6, 14)      # 5 steps an epoch, 3 epochs: in epoch 2 or 3
    crashed = torchrun(argv, tmp_path, **{KILL_AT_STEP: str(step)})
    assert crashed.returncode != 0 and "SIGKILL" in crashed.stderr, crashed.stderr[-3000:]
    assert load_checkpoint(tmp_path / "split.pt")["epoch"] == (step - 1) // 5
    resumed = torchrun(argv + ["--resume", str(tmp_path / "split.pt")], tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert_same_run(load_checkpoint(tmp_path / "whole.pt"), load_checkpoint(tmp_path / "split.pt"))
