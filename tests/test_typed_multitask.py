"""Typed runs of the multitask command (make train's): its settings as a config file, its run directory, --resume DIR
after a SIGKILL, and predict, export and ensemble reading run.json."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import torch
from conftest import ROOT, TEST_DEVICE
from test_faults import killed

from tasks import ensemble, export, multitask, predict
from tasks.core.checkpoints import KILL_AT_STEP, load_checkpoint
from tasks.core.settings import load

pytestmark = pytest.mark.usefixtures("one_thread")
SIX = [f"{t}-{s}-output.csv" for t in ("sst", "para", "sts") for s in ("dev", "test")]


def test_make_train_runs_the_committed_config_of_the_main_job():
    make = (ROOT / "Makefile").read_text()
    assert "--config tasks/multitask/main-job.json" in make
    flags = ("--design cross-encoder --schedule round-robin --fine-tune-mode full-model --model minilm --lr 5e-5 "
             "--batch-size 16 --warmup-ratio 0.1 --max-grad-norm 1.0 --sts-head-bias 2.5 --epochs 2 --symmetric-pairs "
             "--optimizer fused --precision fp32")                # the main job's flags before the config file
    from_file = multitask.parse_settings(["--config", str(ROOT / "tasks/multitask/main-job.json")])
    assert from_file == multitask.parse_settings(shlex.split(flags))
    assert multitask.parse_settings(["--config", str(ROOT / "tasks/multitask/main-job.json"), "--precision", "bf16"]
                                    ).recipe.precision == "bf16"          # make train PRECISION=bf16: a flag beats it


def test_print_config_round_trips_every_section(tmp_path, capsys):
    argv = ["--smart", "--smart-lambda", "5", "--pals", "concat", "--pals-size", "12", "--pals-heads", "3",
            "--gradient-surgery", "sum", "--tasks", "sst", "para", "sts", "--no-predictions", "--swap-pairs"]
    with pytest.raises(SystemExit):
        multitask.main(argv + ["--print-config"])
    path = tmp_path / "c.json"
    path.write_text(capsys.readouterr().out)
    settings = multitask.parse_settings(argv)
    assert multitask.parse_settings(["--config", str(path)]) == settings
    assert settings.smart.config().lambda_s == 5 and settings.pals.config().size == 12
    assert multitask.parse_settings(["--config", str(path), "--smart-lambda", "3"]).smart.smart_lambda == 3


def argv(tiny_dir: Path, files: dict, run_dir: Path, *extra: str) -> list[str]:
    out = ["--model", str(tiny_dir), "--device", TEST_DEVICE, "--batch-size", "8", "--lr", "1e-3", "--no-progress",
           "--head-hidden", "16", "--epochs", "3", "--eval-batch-size", "8", "--run-dir", str(run_dir)]
    for t, (train, dev, test) in files.items():
        out += [f"--{t}-train", train, f"--{t}-dev", dev, f"--{t}-test", test]
    return out + list(extra)


def test_a_multitask_run_directory_resumes_after_sigkill_predicts_and_exports(tiny_dir, multitask_files, tmp_path):
    whole, split = tmp_path / "whole", tmp_path / "split"
    multitask.run(multitask.parse_settings(argv(tiny_dir, multitask_files, whole, "--raw-outputs")))
    record = json.loads((whole / "run.json").read_text())
    assert record["command"] == "multitask" and record["result"]["dev"]["overall"] > 0
    assert load(multitask.Settings, record["settings"]) == multitask.parse_settings(
        argv(tiny_dir, multitask_files, whole, "--raw-outputs"))
    done = load_checkpoint(whole / "checkpoint.pt")
    step = done["optimizer_steps"] // done["epoch"] + 3                               # inside epoch 2
    killed("multitask", argv(tiny_dir, multitask_files, split, "--raw-outputs"), tmp_path, **{KILL_AT_STEP: str(step)})
    multitask.run(multitask.parse_settings(["--resume", str(split)]))                 # the run's own settings
    again = load_checkpoint(split / "checkpoint.pt")
    for key in done["model"]:
        assert torch.equal(done["model"][key], again["model"][key]), key
    for name in SIX:
        assert (split / "predictions" / name).read_text() == (whole / "predictions" / name).read_text(), name

    ensemble.ensemble([whole, split], tmp_path / "ens")                               # run directories, via run.json
    for name in SIX:
        assert (tmp_path / "ens" / name).read_text() == (whole / "predictions" / name).read_text(), name
    out = tmp_path / "predicted"
    assert predict.main([str(whole), "--out", str(out), "--device", TEST_DEVICE, "--eval-batch-size", "8"]) == 0
    for name in SIX:
        assert (out / name).read_text() == (whole / "predictions" / name).read_text(), name
    assert export.main([str(whole), str(tmp_path / "exp")]) == 0
    assert predict.main([str(tmp_path / "exp"), "--out", str(tmp_path / "from-export"), "--device", TEST_DEVICE,
                         "--eval-batch-size", "8"]) == 0
    for name in SIX:
        assert (tmp_path / "from-export" / name).read_text() == (whole / "predictions" / name).read_text(), name


@pytest.mark.parametrize("flag, value, message", [
    ("--embedding-loss-weight", "nan", "must be a finite number"), ("--embedding-loss-weight", "-1", "0 or more"),
    ("--cosent-lambda", "-1", "must be positive"), ("--cosent-lambda", "inf", "must be a finite number"),
    ("--mnrl-scale", "0", "must be positive"), ("--sts-head-bias", "inf", "must be a finite number")])
def test_the_loss_weights_scales_and_the_head_bias_are_finite_numbers_in_their_range(flag, value, message, capsys):
    with pytest.raises(SystemExit):
        multitask.parse_settings([flag, value])
    assert message in capsys.readouterr().err
    assert multitask.parse_settings(["--sts-head-bias", "-0.5", "--embedding-loss-weight", "0"]).design.sts_head_bias == -0.5
