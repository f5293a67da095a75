"""Typed runs: settings generated from dataclasses, config files, run directories, --resume DIR, predict DIR."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from conftest import DATA, ROOT, TEST_DEVICE

from tasks import classifier, predict
from tasks.checkpoints import KILL_AT_STEP, load_checkpoint
from tasks.errors import ConfigurationError, ResumeError
from tasks.settings import differences, dump, load, parse, section, setting

pytestmark = pytest.mark.usefixtures("one_thread")


# ------------------------------------------------------------------ the generator, on a settings class of its own

@dataclass
class Inner:
    """A section."""

    rate: float | None = setting(0.5, parse=float, help="a rate")
    names: str = setting("a", item=lambda s: s if s in ("a", "b", "c") else int("x"), help="some of a, b, c")


@dataclass
class Toy:
    """A command's settings."""

    size: int = setting(3, parse=int, help="a size")
    fast: bool = setting(False, help="go fast")
    shuffle: bool = setting(True, help="keep the order")
    where: str = setting("out", on_resume="free", help="where it writes")
    inner: Inner = section(Inner)


def test_flags_are_generated_with_their_spellings_defaults_and_checks(capsys):
    assert parse(Toy, [], "toy") == Toy()
    got = parse(Toy, ["--size", "5", "--fast", "--no-shuffle", "--rate", "none", "--names", "a", "b,c"], "toy")
    assert got == Toy(5, True, False, "out", Inner(None, "a,b,c"))
    for bad in (["--size", "x"], ["--names", "a,z"], ["--shuffle"]):
        with pytest.raises(SystemExit):
            parse(Toy, bad, "toy")
    with pytest.raises(SystemExit):
        parse(Toy, ["--help"], "toy")
    text = " ".join(capsys.readouterr().out.split())
    assert "a size (default: 3)" in text and "a rate (default: 0.5; none switches it off)" in text


def test_a_config_file_is_checked_as_the_flags_are_and_flags_override_it(tmp_path, capsys):
    with pytest.raises(SystemExit):
        parse(Toy, ["--size", "4", "--print-config"], "toy")
    printed = json.loads(capsys.readouterr().out)
    assert printed == {"size": 4, "fast": False, "shuffle": True, "where": "out", "inner": {"rate": 0.5, "names": "a"}}
    path = tmp_path / "toy.json"
    path.write_text(json.dumps(printed))
    assert parse(Toy, ["--config", str(path)], "toy") == load(Toy, printed) == Toy(size=4)
    assert parse(Toy, ["--config", str(path), "--size", "9"], "toy").size == 9        # a flag beats the file
    for data, message in (({"sizes": 1}, "unknown setting 'sizes'"), ({"size": "x"}, "setting 'size'"),
                          ({"inner": {"names": "a,z"}}, "setting 'inner.names'"), ({"fast": 1}, "true or false"),
                          ({"size": None}, "may not be null"), ({"inner": 3}, "must be a JSON object")):
        path.write_text(json.dumps(data))
        with pytest.raises(ConfigurationError, match=message) as e:
            parse(Toy, ["--config", str(path)], "toy")
        assert str(path) in str(e.value)
    path.write_text('{"size": 3,\n "fast": tru}')
    with pytest.raises(ConfigurationError, match=rf"{path}:2:\d+: not valid JSON"):
        parse(Toy, ["--config", str(path)], "toy")


def test_what_a_resumed_run_may_change_is_a_property_of_the_field():
    stored = dump(Toy())
    assert differences(Toy, stored, Toy(where="elsewhere")) == []                     # on_resume="free"
    assert differences(Toy, stored, Toy(size=4, inner=Inner(rate=0.1))) == [
        "size: was 3, now 4", "inner.rate: was 0.5, now 0.1"]


# ------------------------------------------------------------------ the classifier, a command with typed settings

def piece(tmp_path: Path, name: str, stop: int, start: int = 0) -> str:
    lines = (DATA / name).read_text(encoding="utf-8").splitlines(keepends=True)
    path = tmp_path / f"{start}-{stop}-{name}"
    path.write_text(lines[0] + "".join(lines[1 + start:1 + stop]), encoding="utf-8")
    return str(path)


def classifier_argv(tiny_dir: Path, tmp_path: Path) -> list[str]:
    return ["--model", str(tiny_dir), "--device", TEST_DEVICE, "--batch-size", "8", "--lr", "1e-3", "--no-progress",
            "--epochs", "3", "--eval-batch-size", "8", "--train-file", piece(tmp_path, "ids-sst-train.csv", 40),
            "--dev-file", piece(tmp_path, "ids-sst-dev.csv", 16),
            "--test-file", piece(tmp_path, "ids-sst-dev.csv", 24, 16)]


def test_print_config_fed_back_reproduces_the_settings(tiny_dir, tmp_path, capsys):
    argv = classifier_argv(tiny_dir, tmp_path) + ["--fine-tune-mode", "bitfit", "--bitfit-terms", "bq", "bm2",
                                                  "--warmup-ratio", "none", "--run-dir", str(tmp_path / "r")]
    with pytest.raises(SystemExit) as done:                                        # as --help: prints, exits 0
        classifier.main(argv + ["--print-config"])
    assert done.value.code == 0
    path = tmp_path / "run-config.json"
    path.write_text(capsys.readouterr().out)
    settings = classifier.parse_settings(argv)
    assert classifier.parse_settings(["--config", str(path)]) == settings
    assert settings.recipe.warmup_ratio is None and settings.fine_tune.bitfit_terms == "bq,bm2"
    over = classifier.parse_settings(["--config", str(path), "--epochs", "5", "--optimizer", "minbert"])
    assert over.training.epochs == 5 and over.recipe.optimizer == "minbert" and over.fine_tune == settings.fine_tune
    assert classifier.parse_settings([]).recipe.loop() == {"precision": "fp32", "warmup_ratio": 0.1,
                                                           "max_grad_norm": 1.0, "grad_accum": 1}  # the recipe


def run_classifier(argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tasks.classifier", *argv], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **env}, timeout=180,
                          check=False)


def test_a_run_directory_holds_its_run_resumes_after_sigkill_and_predicts(tiny_dir, tmp_path):
    argv = classifier_argv(tiny_dir, tmp_path)
    whole, split = tmp_path / "whole", tmp_path / "split"
    classifier.run(classifier.parse_settings(argv + ["--run-dir", str(whole)]))
    record = json.loads((whole / "run.json").read_text())
    assert record["command"] == "classifier" and record["environment"]["torch"] == torch.__version__
    assert record["environment"]["commit"] and record["result"]["best_epoch"] >= 1
    settings = classifier.parse_settings(argv + ["--run-dir", str(whole)])
    assert load(classifier.Settings, record["settings"]) == settings                  # run.json round-trips
    assert sorted(p.name for p in whole.iterdir()) == ["checkpoint.curves.jsonl", "checkpoint.curves.png",
                                                       "checkpoint.pt", "predictions", "run.json"]

    with pytest.raises(ConfigurationError, match="holds a run already"):              # a new run loses nothing
        classifier.run(classifier.parse_settings(argv + ["--run-dir", str(whole)]))

    done = load_checkpoint(whole / "checkpoint.pt")
    step = done["optimizer_steps"] // done["epoch"] + 2                                # inside epoch 2
    proc = run_classifier(argv + ["--run-dir", str(split)], tmp_path, **{KILL_AT_STEP: str(step)})
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert load_checkpoint(split / "checkpoint.pt")["epoch"] == 1
    with pytest.raises(ResumeError, match=r"training.lr: checkpoint 0.001, now 0.01"):  # a setting it must keep
        classifier.run(classifier.parse_settings(["--resume", str(split), "--lr", "1e-2"]))
    classifier.run(classifier.parse_settings(["--resume", str(split), "--threads", "1"]))   # nothing else given
    again = load_checkpoint(split / "checkpoint.pt")
    assert again["optimizer_steps"] == done["optimizer_steps"]
    for key in done["model"]:
        assert torch.equal(done["model"][key], again["model"][key]), key
    for name in ("sst-dev-output.csv", "sst-test-output.csv"):
        assert (split / "predictions" / name).read_text() == (whole / "predictions" / name).read_text()
    assert json.loads((split / "run.json").read_text())["resumed"]

    out = tmp_path / "predicted"
    assert predict.main([str(split), "--out", str(out), "--device", TEST_DEVICE, "--eval-batch-size", "8"]) == 0
    for name in ("sst-dev-output.csv", "sst-test-output.csv"):
        assert (out / name).read_text() == (whole / "predictions" / name).read_text()
    with pytest.raises(ResumeError, match="not a run directory"):
        classifier.parse_settings(["--resume", str(tmp_path)])
