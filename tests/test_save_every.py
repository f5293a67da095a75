"""--save-every N: a checkpoint within the epoch every N optimiser steps; a run SIGKILLed mid-epoch and resumed from it
ends with the same weights, history and predictions as an uninterrupted run, in every training command."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from conftest import ROOT
from test_doc_claims import help_text
from test_faults import killed
from test_typed_runs import classifier_argv, deebert_argv, simcse_argv

from tasks import classifier, deebert, multitask, simcse
from tasks.core.checkpoints import KILL_AT_STEP, load_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")


def multitask_argv(tiny_dir: Path, files: dict) -> list[str]:
    out = ["--model", str(tiny_dir), "--device", "cpu", "--batch-size", "8", "--lr", "1e-3", "--no-progress",
           "--head-hidden", "16", "--epochs", "2", "--eval-batch-size", "8"]
    for t, (train, dev, test) in files.items():
        out += [f"--{t}-train", train, f"--{t}-dev", dev, f"--{t}-test", test]
    return out


def strip(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in h.items() if not k.endswith("seconds")} for h in history]


@pytest.mark.parametrize("command", ["classifier", "multitask", "simcse", "deebert"])
def test_killed_mid_epoch_resumes_from_the_step_checkpoint_to_the_same_run(command, tiny_dir, multitask_files,
                                                                          tmp_path):
    module = {"classifier": classifier, "multitask": multitask, "simcse": simcse, "deebert": deebert}[command]
    ckpt = "stage1.pt" if command == "deebert" else "checkpoint.pt"   # deebert: killed in stage 1, stage 2 after
    argv = {"classifier": lambda: classifier_argv(tiny_dir, tmp_path),
            "multitask": lambda: multitask_argv(tiny_dir, multitask_files),
            "simcse": lambda: simcse_argv(tiny_dir, tmp_path) + ["--max-train-examples", "48", "--eval-every", "4"],
            "deebert": lambda: deebert_argv(tiny_dir, tmp_path),
            }[command]()
    whole, split = tmp_path / "whole", tmp_path / "split"
    module.run(module.parse_settings(argv + ["--run-dir", str(whole)]))
    done = load_checkpoint(whole / ckpt)
    per_epoch = done["optimizer_steps"] // done["epoch"]
    assert per_epoch >= 4, "the test needs epochs of 4 steps or more"
    save_at, kill_at = per_epoch + 2, per_epoch + 3                 # epoch 2: a step checkpoint, then one step more
    killed(command, argv + ["--run-dir", str(split), "--save-every", str(save_at)], tmp_path,
           **{KILL_AT_STEP: str(kill_at)})
    state = load_checkpoint(split / ckpt)
    assert state["optimizer_steps"] == save_at and state["epoch"] == 1 and state["within_epoch"]["groups"] == 2
    module.run(module.parse_settings(["--resume", str(split)]))     # the step checkpoint: 2 steps into epoch 2
    again = load_checkpoint(split / ckpt)
    assert again["optimizer_steps"] == done["optimizer_steps"] and "within_epoch" not in again
    for key in done["model"]:
        assert torch.equal(done["model"][key], again["model"][key]), key
        assert torch.equal(done["best_state"][key], again["best_state"][key]), key
    assert strip(again["history"]) == strip(done["history"])       # the epoch's mean losses too
    for path in sorted((whole / "predictions").glob("*.csv")) if (whole / "predictions").is_dir() else []:
        assert (split / "predictions" / path.name).read_text() == path.read_text(), path.name
    if command == "deebert":                                        # stage 2 ran after the resume: the same too
        last, again2 = (load_checkpoint(d / "stage2.pt") for d in (whole, split))
        assert all(torch.equal(last["model"][k], again2["model"][k]) for k in last["model"])
    curves = split / ckpt.replace(".pt", ".curves.jsonl")
    steps = [line for line in curves.read_text().splitlines() if '"step"' in line]
    assert len(steps) == done["optimizer_steps"]                    # each step's loss logged once


def test_the_resume_help_and_docs_say_a_killed_run_goes_on_from_its_last_step_checkpoint():
    """--resume's help (every training command's, DeeBERT's own) and docs/runs.md: a killed run repeats the epoch in
    progress, or with --save-every N goes on from its last step checkpoint."""
    said = "a killed run repeats the epoch in progress; with --save-every N, from its last step checkpoint"
    for module in ("tasks.classifier", "tasks.multitask", "tasks.simcse", "tasks.deebert"):
        assert said in " ".join(help_text(module, []).split()), module
    page = " ".join((ROOT / "docs" / "runs.md").read_text(encoding="utf-8").split())
    assert ("(a run killed mid-epoch repeats that epoch; with `--save-every N`, it goes on from its last step "
            "checkpoint)") in page


def test_a_resume_with_no_finished_epoch_says_so_not_a_best_score_of_minus_inf(tiny_dir, tmp_path, monkeypatch,
                                                                              capsys):
    """Stopped after a step checkpoint of epoch 1, the resume line says no epoch has finished yet (no best dev score
    of -inf at epoch 0); after one, the epochs done and the best epoch."""
    real, calls = classifier.classification_loss, []

    def loss(model, batch):   # stopped in the 3rd step of epoch 1, after the step checkpoint of step 2
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(model, batch)
    monkeypatch.setattr(classifier, "classification_loss", loss)
    run = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        classifier.run(classifier.parse_settings(classifier_argv(tiny_dir, tmp_path) + [
            "--run-dir", str(run), "--save-every", "2", "--epochs", "1"]))
    monkeypatch.setattr(classifier, "classification_loss", real)
    capsys.readouterr()
    classifier.run(classifier.parse_settings(["--resume", str(run)]))
    out = "".join(capsys.readouterr())
    assert f"resumed from {run / 'checkpoint.pt'}: no epoch finished yet, 2 optimiser steps of epoch 1 done\n" in out
    assert "-inf" not in out
    classifier.run(classifier.parse_settings(["--resume", str(run), "--epochs", "2"]))
    assert re.search(rf"resumed from {re.escape(str(run / 'checkpoint.pt'))}: 1 epochs done, best dev accuracy "
                     r"\d\.\d{4} \(epoch 1\)\n", "".join(capsys.readouterr()))
