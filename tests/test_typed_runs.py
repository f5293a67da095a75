"""Typed runs: settings generated from dataclasses, config files, run directories, --resume DIR, predict DIR."""

from __future__ import annotations

import json
import os
import signal
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import warm
from conftest import DATA, ROOT, TEST_DEVICE, killed_after_first_epoch
from test_faults import killed

from tasks import classifier, export, predict
from tasks.core.checkpoints import KILL_AT_STEP, load_checkpoint
from tasks.core.curves import summary_writer_class
from tasks.core.errors import ConfigurationError, MissingFileError, ResumeError
from tasks.core.runs import run_paths, write_run_json
from tasks.core.settings import dump, load

pytestmark = pytest.mark.usefixtures("one_thread")


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
    over = classifier.parse_settings(["--config", str(path), "--epochs", "5", "--optimizer", "course"])
    assert over.training.epochs == 5 and over.recipe.optimizer == "course" and over.fine_tune == settings.fine_tune
    assert classifier.parse_settings([]).recipe.loop() == {"precision": "fp32", "warmup_ratio": 0.1,   # the recipe
                                                           "max_grad_norm": 1.0, "grad_accum": 1,
                                                           "gradual_unfreezing": 0.0, "compile": "off",
                                                           "cuda_graphs": False}


def test_a_run_directory_holds_its_run_resumes_after_sigkill_and_predicts(tiny_dir, tmp_path):
    argv = classifier_argv(tiny_dir, tmp_path)
    whole, split = tmp_path / "whole", tmp_path / "split"
    classifier.run(classifier.parse_settings(argv + ["--run-dir", str(whole)]))
    record = json.loads((whole / "run.json").read_text())
    assert record["command"] == "classifier" and record["environment"]["torch"] == torch.__version__
    assert record["environment"]["commit"] and record["result"]["best_epoch"] >= 1
    settings = classifier.parse_settings(argv + ["--run-dir", str(whole)])
    assert load(classifier.Settings, record["settings"]) == settings                  # run.json round-trips
    optional = ["checkpoint.tensorboard"] if summary_writer_class() else []          # with the optional package
    assert sorted(p.name for p in whole.iterdir()) == sorted(["checkpoint.curves.jsonl", "checkpoint.curves.png",
                                                              "checkpoint.pt", "predictions", "run.json", *optional])
    assert not optional or any(f.name.startswith("events.out.tfevents") for f in (whole / optional[0]).iterdir())

    with pytest.raises(ConfigurationError, match="holds a run already"):              # a new run loses nothing
        classifier.run(classifier.parse_settings(argv + ["--run-dir", str(whole)]))

    done = load_checkpoint(whole / "checkpoint.pt")
    step = done["optimizer_steps"] // done["epoch"] + 2                                # inside epoch 2
    killed("classifier", argv + ["--run-dir", str(split)], tmp_path, **{KILL_AT_STEP: str(step)})
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
    assert predict.main([str(split), "--out", str(out), "--device", TEST_DEVICE, "--eval-batch-size", "8",
                         "--raw-outputs"]) == 0
    for name in ("sst-dev-output.csv", "sst-test-output.csv"):
        assert (out / name).read_text() == (whole / "predictions" / name).read_text()
    own = tmp_path / "predicted-at-the-runs-batch-size"           # no --eval-batch-size: the run's 8, not 128
    assert predict.main([str(split), "--out", str(own), "--device", TEST_DEVICE, "--raw-outputs"]) == 0
    for name in ("sst-dev-raw.csv", "sst-test-raw.csv"):
        assert (own / name).read_text() == (out / name).read_text(), name
    with pytest.raises(ResumeError, match="not a run directory"):
        classifier.parse_settings(["--resume", str(tmp_path)])


def test_a_run_from_before_the_attention_setting_resumes_and_predicts_with_fused(tiny_dir, tmp_path, monkeypatch):
    """run.json and the checkpoint of a run killed after epoch 1, with --attention taken out as a run from before the
    setting wrote them: --resume DIR continues with fused (its `before`), refuses eager, and predict DIR builds the
    model with the run's own attention (fused here, eager for an eager run)."""
    import minbert
    from tasks.core.runs import resume_base
    from tasks.core.train import Interrupted
    argv = classifier_argv(tiny_dir, tmp_path) + ["--epochs", "2"]
    old = tmp_path / "old"
    real_fit = classifier.fit
    monkeypatch.setattr(classifier, "fit", killed_after_first_epoch(real_fit))
    with pytest.raises(Interrupted):
        classifier.run(classifier.parse_settings(argv + ["--run-dir", str(old), "--attention", "fused"]))
    monkeypatch.setattr(classifier, "fit", real_fit)
    record = json.loads((old / "run.json").read_text())
    del record["settings"]["recipe"]["attention"]
    (old / "run.json").write_text(json.dumps(record))
    state = load_checkpoint(old / "checkpoint.pt")
    del state["config"]["recipe.attention"]
    torch.save(state, old / "checkpoint.pt")

    assert resume_base(str(old), classifier.Settings)["recipe.attention"] == "fused"
    with pytest.raises(ResumeError, match=r"recipe.attention: checkpoint 'fused', now 'eager'"):
        classifier.run(classifier.parse_settings(["--resume", str(old), "--attention", "eager"]))
    built: list[str | None] = []
    real_load = minbert.load_pretrained

    def recording_load(*args, **kwargs):
        built.append(kwargs.get("attn_implementation"))
        return real_load(*args, **kwargs)
    monkeypatch.setattr(minbert, "load_pretrained", recording_load)
    settings = classifier.parse_settings(["--resume", str(old)])
    assert settings.recipe.attention == "fused"
    assert classifier.run(settings)["best_epoch"] >= 1 and built == ["sdpa"]            # it resumed, on the kernel

    for run_dir, attention in ((old, None), (tmp_path / "eager", "eager")):
        if attention is not None:
            classifier.run(classifier.parse_settings(argv + ["--run-dir", str(run_dir), "--attention", attention]))
        else:                                                      # the finished run's run.json, again without it
            record = json.loads((run_dir / "run.json").read_text())
            del record["settings"]["recipe"]["attention"]
            (run_dir / "run.json").write_text(json.dumps(record))
        built.clear()
        out = tmp_path / f"predicted-{run_dir.name}"
        assert predict.main([str(run_dir), "--out", str(out), "--device", TEST_DEVICE, "--eval-batch-size", "8"]) == 0
        assert built == ["eager" if attention == "eager" else "sdpa"]
        for name in ("sst-dev-output.csv", "sst-test-output.csv"):
            assert (out / name).read_text() == (run_dir / "predictions" / name).read_text()


# ------------------------------------------------------------------ tasks.simcse, the contrastive stage

def simcse_argv(tiny_dir: Path, tmp_path: Path) -> list[str]:
    """A tiny stage: 24 examples, batch 8, evaluated every 2 steps over 2 passes: 3 rounds of 2 steps."""
    return ["--model", str(tiny_dir), "--device", TEST_DEVICE, "--batch-size", "8", "--lr", "1e-3", "--no-progress",
            "--eval-every", "2", "--epochs", "2", "--patience", "10", "--max-train-examples", "24",
            "--eval-batch-size", "8", "--sst-train", piece(tmp_path, "ids-sst-train.csv", 30),
            "--para-train", piece(tmp_path, "quora-train.csv", 80), "--sts-train", piece(tmp_path, "sts-train.csv", 20),
            "--sts-dev", piece(tmp_path, "sts-dev.csv", 16)]


def test_simcse_print_config_fed_back_reproduces_the_settings(tiny_dir, tmp_path, capsys):
    from minbert.simcse import SimCSEConfig
    from tasks import simcse
    argv = simcse_argv(tiny_dir, tmp_path) + ["--objective", "sup", "--hard-negatives", "--pooling", "cls_mlp",
                                              "--warmup-ratio", "none", "--out", str(tmp_path / "r")]
    with pytest.raises(SystemExit) as done:
        simcse.main(argv + ["--print-config"])
    assert done.value.code == 0
    printed = capsys.readouterr().out
    path = tmp_path / "stage-config.json"
    path.write_text(printed)
    settings = simcse.parse_settings(argv)
    assert simcse.parse_settings(["--config", str(path)]) == settings
    assert settings.run.run_dir == str(tmp_path / "r") == simcse.parse_settings(
        ["--run-dir", str(tmp_path / "r")]).run.run_dir                               # --out is --run-dir
    assert settings.simcse_config() == SimCSEConfig("sup", "cls_mlp")                   # the library's config
    over = simcse.parse_settings(["--config", str(path), "--temperature", "0.1", "--epochs", "3"])
    assert over.simcse.temperature == 0.1 and over.training.epochs == 3 and over.files == settings.files
    assert over.simcse.hard_negatives and over.recipe.warmup_ratio is None                # the rest from the file
    # what does not apply to the stage is neither a flag nor a setting
    assert not {"dropout", "bucket"} & set(json.loads(printed)["training"])
    assert not {"predictions_dir", "raw_outputs"} & set(json.loads(printed)["run"])
    for flag in ("--dropout", "--no-bucket", "--predictions-dir", "--raw-outputs"):
        with pytest.raises(SystemExit):
            simcse.parse_settings([flag, "0.1"] if flag == "--dropout" else [flag])
    defaults = simcse.parse_settings([])
    tr = defaults.training
    assert (tr.batch_size, tr.max_length, tr.weight_decay, tr.epochs, tr.lr) == (64, 64, 0.01, None, None)
    assert defaults.recipe.loop() == {"precision": "fp32", "warmup_ratio": 0.1, "max_grad_norm": 1.0, "grad_accum": 1,
                                        "gradual_unfreezing": 0.0, "compile": "off", "cuda_graphs": False}


def test_simcse_run_directory_round_trips_and_resumes_after_sigkill(tiny_dir, tmp_path):
    import minbert
    from tasks import simcse
    argv = simcse_argv(tiny_dir, tmp_path)
    whole, split = tmp_path / "whole", tmp_path / "split"
    simcse.run(simcse.parse_settings(argv + ["--out", str(whole)]))
    record = json.loads((whole / "run.json").read_text())
    assert record["command"] == "simcse" and record["result"]["best_round"] >= 1
    assert load(simcse.Settings, record["settings"]) == simcse.parse_settings(argv + ["--run-dir", str(whole)])
    assert {"run.json", "checkpoint.pt", "checkpoint.curves.jsonl", "config.json", "model.safetensors", "vocab.txt",
            "quora-train-stage.csv", "quora-train-rest.csv", "simcse-summary.json"} <= {p.name for p in whole.iterdir()}
    minbert.load_pretrained(str(whole))                                        # the encoder, as --after-simcse reads it
    with pytest.raises(ConfigurationError, match="holds a run already"):
        simcse.run(simcse.parse_settings(argv + ["--out", str(whole)]))

    done = load_checkpoint(whole / "checkpoint.pt")
    step = done["optimizer_steps"] // done["epoch"] + 1                                # inside round 2
    proc = warm.run([sys.executable, "-m", "tasks.simcse", *argv, "--run-dir", str(split)], cwd=tmp_path,
                    capture_output=True, text=True, timeout=180, check=False,
                    env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", KILL_AT_STEP: str(step)})
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert load_checkpoint(split / "checkpoint.pt")["epoch"] == 1 and not (split / "config.json").exists()
    with pytest.raises(ResumeError, match=r"simcse.temperature: checkpoint 0.05, now 0.1"):
        simcse.run(simcse.parse_settings(["--resume", str(split), "--temperature", "0.1"]))
    simcse.run(simcse.parse_settings(["--resume", str(split), "--threads", "1"]))          # nothing else given
    again = load_checkpoint(split / "checkpoint.pt")
    assert again["optimizer_steps"] == done["optimizer_steps"]
    for part in ("model", "best_state"):
        for key in done[part]:
            assert torch.equal(done[part][key], again[part][key]), (part, key)
    strip = [[{k: v for k, v in h.items() if not k.endswith("seconds")} for h in c["history"]] for c in (done, again)]
    assert strip[0] == strip[1]
    for name in ("model.safetensors", "quora-train-rest.csv", "quora-train-stage.csv"):
        assert (split / name).read_bytes() == (whole / name).read_bytes(), name
    assert json.loads((split / "run.json").read_text())["resumed"]


# ------------------------------------------------------------------ deebert: two stages, a sweep, --from-run

def deebert_argv(tiny_dir: Path, tmp_path: Path) -> list[str]:
    return ["--task", "sst2", "--model", str(tiny_dir), "--device", TEST_DEVICE, "--batch-size", "8", "--lr", "1e-3",
            "--no-progress", "--epochs", "2", "--ramp-epochs", "2", "--eval-batch-size", "8", "--rounds", "1",
            "--thresholds", "0.3", "0.6", "--train-file", piece(tmp_path, "ids-sst-train.csv", 40),
            "--dev-file", piece(tmp_path, "ids-sst-dev.csv", 24),
            "--test-file", piece(tmp_path, "ids-sst-dev.csv", 36, 24)]


def test_deebert_print_config_fed_back_reproduces_the_settings(tiny_dir, tmp_path, capsys):
    from tasks import deebert
    argv = deebert_argv(tiny_dir, tmp_path) + ["--no-ramp-pooler", "--warmup-ratio", "none",
                                               "--out", str(tmp_path / "r")]
    with pytest.raises(SystemExit) as done:
        deebert.main(argv + ["--print-config"])
    assert done.value.code == 0
    path = tmp_path / "run-config.json"
    path.write_text(capsys.readouterr().out)
    settings = deebert.parse_settings(argv)
    assert deebert.parse_settings(["--config", str(path)]) == settings
    assert settings.run.run_dir == str(tmp_path / "r") and settings.sweep.thresholds == [0.3, 0.6]   # --out: --run-dir
    assert settings.ramps.ramp_pooler is False and settings.recipe.warmup_ratio is None
    over = deebert.parse_settings(["--config", str(path), "--ramp-epochs", "5", "--exit", "patience", "--run-dir", "x"])
    assert over.ramps.ramp_epochs == 5 and over.sweep.exit == "patience" and over.run.run_dir == "x"
    assert over.training == settings.training and over.files == settings.files
    bare = deebert.parse_settings([])
    assert bare.run.eval_batch_size == 1 and bare.training.lr == 3e-5 and bare.ramps.ramp_pooler is True
    assert bare.recipe.loop() == {"precision": "fp32", "warmup_ratio": 0.1, "max_grad_norm": 1.0, "grad_accum": 1,
                                    "gradual_unfreezing": 0.0, "compile": "off", "cuda_graphs": False}


def test_deebert_run_directory_round_trips_resumes_after_sigkill_and_predicts(tiny_dir, tmp_path):
    from tasks import deebert
    argv = deebert_argv(tiny_dir, tmp_path)
    whole, split = tmp_path / "whole", tmp_path / "split"
    deebert.run(deebert.parse_settings(argv + ["--out", str(whole)]))
    record = json.loads((whole / "run.json").read_text())
    assert record["command"] == "deebert" and record["result"]["prediction_setting"] in (0.3, 0.6)
    assert load(deebert.Settings, record["settings"]) == deebert.parse_settings(argv + ["--run-dir", str(whole)])
    assert {"run.json", "stage1.pt", "stage2.pt", "sweep.csv", "sweep.json", "predictions"} <= {
        p.name for p in whole.iterdir()}
    with pytest.raises(ConfigurationError, match="holds a run already"):
        deebert.run(deebert.parse_settings(argv + ["--out", str(whole)]))

    done = load_checkpoint(whole / "stage1.pt")
    step = done["optimizer_steps"] // done["epoch"] + 2                                # stage 1, inside epoch 2
    killed("deebert", argv + ["--run-dir", str(split)], tmp_path, **{KILL_AT_STEP: str(step)})
    assert load_checkpoint(split / "stage1.pt")["epoch"] == 1 and not (split / "stage2.pt").exists()
    with pytest.raises(ResumeError, match=r"training.lr: checkpoint 0.001, now 0.01"):
        deebert.run(deebert.parse_settings(["--resume", str(split), "--lr", "1e-2"]))
    deebert.run(deebert.parse_settings(["--resume", str(split), "--threads", "1"]))   # nothing else given
    for stage in ("stage1.pt", "stage2.pt"):
        a, b = load_checkpoint(whole / stage), load_checkpoint(split / stage)
        assert a["optimizer_steps"] == b["optimizer_steps"], stage
        for key in a["model"]:
            assert torch.equal(a["model"][key], b["model"][key]), (stage, key)
    for name in ("sst2-dev-output.csv", "sst2-test-output.csv"):
        assert (split / "predictions" / name).read_text() == (whole / "predictions" / name).read_text()
    assert json.loads((split / "run.json").read_text())["resumed"]

    out = tmp_path / "predicted"                                  # at the setting the run chose, from its run.json
    assert predict.main([str(split), "--out", str(out), "--device", TEST_DEVICE]) == 0
    for name in ("sst2-dev-output.csv", "sst2-test-output.csv"):
        assert (out / name).read_text() == (whole / "predictions" / name).read_text()

    swept = tmp_path / "swept"                    # the trained model, swept again at batch 4: its settings, its files
    summary = deebert.run(deebert.parse_settings(["--from-run", str(whole), "--out", str(swept), "--eval-batch-size",
                                                  "4"]))
    assert summary["eval_batch_size"] == 4 and not (swept / "stage1.pt").exists()
    for name in ("sst2-dev-output.csv", "sst2-test-output.csv"):
        assert (swept / "predictions" / name).read_text() == (whole / "predictions" / name).read_text()
    assert predict.main([str(swept), "--out", str(tmp_path / "again"), "--device", TEST_DEVICE]) == 0
    assert (tmp_path / "again" / "sst2-test-output.csv").read_text() == (out / "sst2-test-output.csv").read_text()
    with pytest.raises(ConfigurationError, match="--eval-batch-size is for classifier and multitask runs"):
        predict.main([str(split), "--out", str(tmp_path / "batched"), "--eval-batch-size", "8"])  # its exits' own
    with pytest.raises(ConfigurationError, match=r"^the run chose .*: with the patience exit .* give --threshold P$"):
        predict.main([str(split), "--out", str(tmp_path / "patience"), "--exit", "patience"])   # S=... is no P
    assert not (tmp_path / "batched").exists() and not (tmp_path / "patience").exists()
    with pytest.raises(ConfigurationError, match="--resume continues training and --from-run"):
        deebert.parse_settings(["--resume", str(split), "--from-run", str(whole)])


def test_deebert_run_json_as_config_for_a_new_run_directory_writes_its_predictions_there(tiny_dir, tmp_path):
    from tasks import deebert
    first = deebert.parse_settings(deebert_argv(tiny_dir, tmp_path) + ["--run-dir", str(tmp_path / "A"),
                                                                      "--predictions-dir", str(tmp_path / "pa")])
    write_run_json(run_paths(first.run, "deebert", "sst2"), "deebert", first)          # run A, as recorded at its start
    config = ["--config", str(tmp_path / "A" / "run.json")]
    again = deebert.parse_settings(config + ["--run-dir", str(tmp_path / "B")])
    assert run_paths(again.run, "deebert", "sst2").predictions == tmp_path / "B" / "predictions"   # B's own, not A's
    assert replace(again, run=first.run) == first
    given = deebert.parse_settings(config + ["--run-dir", str(tmp_path / "B"), "--predictions-dir", str(tmp_path / "pb")])
    assert given.run.predictions_dir == str(tmp_path / "pb")                           # a flag still says where
    assert deebert.parse_settings(config + ["--run-dir", str(tmp_path / "A")]).run.predictions_dir == str(tmp_path / "pa")


def test_a_run_stopped_before_its_first_checkpoint_starts_again_in_its_directory(tiny_dir, tmp_path):
    argv = classifier_argv(tiny_dir, tmp_path) + ["--run-dir", str(tmp_path / "r"), "--epochs", "1"]
    settings = classifier.parse_settings(argv)
    write_run_json(run_paths(settings.run, "classifier"), "classifier", settings)   # as a run killed in epoch 1
    advice = rf"python -m tasks.classifier --config {tmp_path / 'r' / 'run.json'} --run-dir {tmp_path / 'r'}$"
    with pytest.raises(MissingFileError, match=advice):                           # resume, predict, export agree
        classifier.run(classifier.parse_settings(["--resume", str(tmp_path / "r")]))
    with pytest.raises(MissingFileError, match=advice):
        predict.load_run(tmp_path / "r")
    with pytest.raises(MissingFileError, match=advice):
        export.export(tmp_path / "r", tmp_path / "x")
    again = classifier.parse_settings(["--config", str(tmp_path / "r" / "run.json"), "--run-dir", str(tmp_path / "r")])
    assert again == settings
    classifier.run(again)                                                          # what they advise: it starts
    with pytest.raises(ConfigurationError, match="holds a run already"):           # now there is
        classifier.run(settings)


@pytest.mark.parametrize("command", ["classifier", "deebert"])
def test_print_config_of_a_replayed_run_json_shows_the_new_runs_own_paths(command, tiny_dir, tmp_path, capsys):
    """--print-config prints the settings the run would use: a run.json given as --config for another --run-dir
    leaves out where the recorded run wrote (its --checkpoint, --predictions-dir), as the run itself does; before,
    the printed config kept them, and running that printed file wrote into the first run's folder."""
    import importlib
    module = importlib.import_module(f"tasks.{command}")
    argv = (classifier_argv(tiny_dir, tmp_path) if command == "classifier" else deebert_argv(tiny_dir, tmp_path))
    first = module.parse_settings(argv + ["--run-dir", str(tmp_path / "A"), "--predictions-dir", str(tmp_path / "pa")])
    write_run_json(run_paths(first.run, *([command, "sst2"] if command == "deebert" else [command])), command, first)
    replay = ["--config", str(tmp_path / "A" / "run.json"), "--run-dir", str(tmp_path / "B")]
    with pytest.raises(SystemExit) as e:
        module.parse_settings(replay + ["--print-config"])
    printed = json.loads(capsys.readouterr().out)
    assert e.value.code == 0 and printed["run"]["predictions_dir"] is None
    assert printed == dump(module.parse_settings(replay))
