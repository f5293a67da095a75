"""A new run never overwrites another run's files; predict and export refuse a run with no finished epoch; resume,
predict and export give the same advice for a run without its checkpoint; --resume a checkpoint in a run directory
resumes that directory; a run directory of another command names that command."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path

import pytest
import torch
import warm
from conftest import ROOT
from test_typed_runs import classifier_argv

from tasks import classifier, export, multitask, predict
from tasks.core.checkpoints import load_checkpoint
from tasks.core.errors import ConfigurationError, MissingFileError, ResumeError
from tasks.core.runs import read_run_json, run_paths, write_run_json

pytestmark = pytest.mark.usefixtures("one_thread")


def recorded(argv: list[str], run_dir: Path) -> classifier.Settings:
    """A run directory's run.json as a run writes it at its start (no training)."""
    settings = classifier.parse_settings(argv + ["--run-dir", str(run_dir)])
    write_run_json(run_paths(settings.run, "classifier"), "classifier", settings)
    return settings


def test_a_new_run_refuses_another_runs_checkpoint_and_a_rerun_config_writes_in_its_own_directory(tiny_dir, tmp_path):
    argv = classifier_argv(tiny_dir, tmp_path)
    a = tmp_path / "A"
    recorded(argv + ["--checkpoint", str(a / "own.pt")], a)          # run A recorded its --checkpoint
    (a / "own.pt").write_bytes(b"A's weights")
    with pytest.raises(ConfigurationError, match=rf"run {a}'s file {a / 'own.pt'} would be overwritten"):
        run_paths(classifier.parse_settings(argv + ["--run-dir", str(tmp_path / "B"), "--checkpoint",
                                                    str(a / "own.pt")]).run, "classifier")
    (tmp_path / "loose.pt").write_bytes(b"x")                        # --run-dir: no existing file is overwritten
    with pytest.raises(ConfigurationError, match="loose.pt would be overwritten"):
        run_paths(classifier.parse_settings(argv + ["--run-dir", str(tmp_path / "B"), "--checkpoint",
                                                    str(tmp_path / "loose.pt")]).run, "classifier")
    (a / "other.curves.jsonl").write_text("{}\n")                     # nor another run's curves
    with pytest.raises(ConfigurationError, match="other.curves.jsonl would be overwritten"):
        run_paths(classifier.parse_settings(argv + ["--run-dir", str(tmp_path / "B"), "--checkpoint",
                                                    str(a / "other.pt")]).run, "classifier")

    flat = classifier.parse_settings(argv + ["--checkpoint", str(tmp_path / "loose.pt")])   # a course command again:
    assert run_paths(flat.run, "classifier").checkpoint == tmp_path / "loose.pt"           # its own file, rewritten

    bare = tmp_path / "bare"                          # a --run-dir with a checkpoint and no run.json to own it
    bare.mkdir()
    (bare / "checkpoint.pt").write_bytes(b"someone's weights")
    with pytest.raises(ConfigurationError, match=rf"--run-dir {bare}: {bare / 'checkpoint.pt'} is there already, "
                                                 rf"with no run.json"):
        run_paths(classifier.parse_settings(argv + ["--run-dir", str(bare)]).run, "classifier")
    assert (bare / "checkpoint.pt").read_bytes() == b"someone's weights"


def test_a_run_json_as_config_for_a_new_run_directory_writes_in_that_directory(tiny_dir, tmp_path):
    a = tmp_path / "A"
    recorded(classifier_argv(tiny_dir, tmp_path) + ["--checkpoint", str(a / "own.pt")], a)
    (a / "own.pt").write_bytes(b"A's weights")
    again = classifier.parse_settings(["--config", str(a / "run.json"), "--seed", "2", "--run-dir", str(tmp_path / "B")])
    assert run_paths(again.run, "classifier").checkpoint == tmp_path / "B" / "checkpoint.pt"   # B's own, not A's
    assert (a / "own.pt").read_bytes() == b"A's weights"
    given = classifier.parse_settings(["--config", str(a / "run.json"), "--run-dir", str(tmp_path / "B"),
                                       "--checkpoint", str(tmp_path / "b.pt")])
    assert given.run.checkpoint == str(tmp_path / "b.pt")                # a flag still says where


def test_predict_and_export_refuse_a_run_with_no_finished_epoch(tiny_dir, tmp_path):
    run = tmp_path / "run"
    classifier.run(classifier.parse_settings(classifier_argv(tiny_dir, tmp_path) + ["--epochs", "1", "--run-dir",
                                                                                   str(run)]))
    state = load_checkpoint(run / "checkpoint.pt")          # as a --save-every checkpoint within epoch 1 leaves it
    state.update(epoch=0, best_epoch=0, best_score=float("-inf"), history=[], best_state=state["model"])
    torch.save(state, run / "checkpoint.pt")
    said = rf"^no epoch of {run} finished: python -m tasks.classifier --resume {run} first$"
    with pytest.raises(ResumeError, match=said):
        predict.load_run(run)
    with pytest.raises(ResumeError, match=said):
        predict.load_run(run / "checkpoint.pt")
    with pytest.raises(ResumeError, match=said):
        export.export(run, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_resume_names_the_command_of_another_commands_run(tmp_path):
    other = tmp_path / "mt"
    settings = multitask.parse_settings(["--run-dir", str(other)])
    write_run_json(run_paths(settings.run, "multitask"), "multitask", settings)
    with pytest.raises(ResumeError, match=rf"^{other} is a run of tasks.multitask, not tasks.classifier: python -m "
                                          rf"tasks.multitask --resume {other}$"):
        classifier.parse_settings(["--resume", str(other)])


def test_python_m_classifier_resume_names_the_command_of_another_commands_run(tmp_path):
    """As a command: tasks/classifier.py is one file, so under `python -m` its Settings live in __main__, and the
    run.json's command is still compared with tasks.classifier (docs/runs.md's line), for the directory and for the
    checkpoint in it."""
    other = tmp_path / "mt"
    settings = multitask.parse_settings(["--run-dir", str(other)])
    write_run_json(run_paths(settings.run, "multitask"), "multitask", settings)
    for given in (other, other / "checkpoint.pt"):
        (other / "checkpoint.pt").write_bytes(b"")
        proc = warm.run([sys.executable, "-m", "tasks.classifier", "--resume", str(given)], cwd=tmp_path,
                        env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120,
                        check=False)
        assert proc.returncode != 0
        said = f"error: {other} is a run of tasks.multitask, not tasks.classifier: python -m tasks.multitask --resume {other}"
        assert proc.stderr.strip().splitlines() == [said]


def test_resume_a_checkpoint_in_a_run_directory_resumes_that_directory(tiny_dir, tmp_path):
    run = tmp_path / "run"
    settings = recorded(classifier_argv(tiny_dir, tmp_path), run)
    (run / "checkpoint.pt").write_bytes(b"")
    resumed = classifier.parse_settings(["--resume", str(run / "checkpoint.pt")])   # run.json's settings, not defaults
    assert resumed.files == settings.files and resumed.training == settings.training
    assert resumed.run.run_dir == str(run) and read_run_json(run)["command"] == "classifier"


def test_resuming_with_other_epochs_says_the_schedule_is_laid_out_again(tiny_dir, tmp_path, capsys):
    """--epochs is free on resume, but a warm-up and decay schedule spans the run's steps: the run says so, and that
    run.json records it (tests/test_extended_runs.py replays it)."""
    run = tmp_path / "run"
    argv = [*classifier_argv(tiny_dir, tmp_path), "--epochs", "1", "--warmup-ratio", "0.1", "--run-dir", str(run)]
    classifier.run(classifier.parse_settings(argv))
    capsys.readouterr()
    classifier.run(classifier.parse_settings(["--resume", str(run), "--epochs", "2"]))
    err = " ".join("".join(capsys.readouterr()).split())
    steps = load_checkpoint(run / "checkpoint.pt")["optimizer_steps"] // 2                   # those of epoch 1
    assert ("note: the run was started for 1 epochs and goes on for 2: its learning-rate schedule is laid out again "
            f"over the new number of steps from step {steps + 1} on, so the result is neither the 1-epoch run's nor an "
            "uninterrupted 2-epoch run's; run.json records it (--earlier-epochs), so that --config RUN/run.json "
            "replays this run") in err
    classifier.run(classifier.parse_settings(["--resume", str(run)]))                 # the same epochs: no note
    assert "note: the run was started for" not in "".join(capsys.readouterr())


def test_ctrl_c_names_the_command_that_continues_the_run(tiny_dir, tmp_path, monkeypatch, capsys):
    """Ctrl-C prints the command that continues the interrupted run: --resume RUN_DIR once a checkpoint is written,
    before it the restart in its directory that a --resume without a checkpoint advises (a rerun of the same command
    would start a new run in a new timestamped directory); and that command works."""
    from tasks.core.errors import run_cli
    from tasks.core.loop import watching
    from tasks.core.runs import runs_root

    def ctrl_c(epoch, *_):
        if epoch == 1:
            raise KeyboardInterrupt
    run = tmp_path / "run"
    with watching(ctrl_c):
        assert run_cli(lambda: classifier.main(classifier_argv(tiny_dir, tmp_path) + ["--run-dir", str(run)])) == 130
    assert capsys.readouterr().err.splitlines()[-1] == (f"interrupted (Ctrl-C); continue it with: python -m "
                                                        f"tasks.classifier --resume {run}")
    assert run_cli(lambda: classifier.main(["--resume", str(run)])) == 0
    capsys.readouterr()

    def before_training(*_, **__):
        raise KeyboardInterrupt
    monkeypatch.setattr(classifier, "train_batches", before_training)    # after run.json, before any checkpoint
    assert run_cli(lambda: classifier.main(classifier_argv(tiny_dir, tmp_path))) == 130   # a default run directory
    [new] = runs_root().glob("classifier-*")
    restart = f"python -m tasks.classifier --config {new / 'run.json'} --run-dir {new}"
    assert capsys.readouterr().err.splitlines()[-1] == (f"interrupted (Ctrl-C) before the run's first checkpoint; "
                                                        f"start it again in its directory: {restart}")
    with pytest.raises(MissingFileError, match=re.escape(restart)):         # what --resume of it says, too
        run_paths(classifier.parse_settings(["--resume", str(new)]).run, "classifier")
    assert run_cli(lambda: 0) == 0 and run_cli(_interrupted) == 130                        # no run: the bare line
    assert capsys.readouterr().err.splitlines()[-1] == "interrupted (Ctrl-C)"


def _interrupted() -> int:
    raise KeyboardInterrupt


def test_the_commands_a_resume_advises_are_shell_quoted_for_a_path_with_spaces(tiny_dir, tmp_path):
    """The restart before a checkpoint and the other command's --resume paste into a shell as they are printed."""
    run = tmp_path / "my run"
    recorded(classifier_argv(tiny_dir, tmp_path), run)                     # run.json, no checkpoint yet
    with pytest.raises(MissingFileError, match="start the run again in its directory: ") as e:
        classifier.run(classifier.parse_settings(["--resume", str(run)]))
    command = str(e.value).split("start the run again in its directory: ", 1)[1]
    assert shlex.split(command) == ["python", "-m", "tasks.classifier", "--config", str(run / "run.json"),
                                    "--run-dir", str(run)]
    other = tmp_path / "my mt"
    settings = multitask.parse_settings(["--run-dir", str(other)])
    write_run_json(run_paths(settings.run, "multitask"), "multitask", settings)
    with pytest.raises(ResumeError, match="not tasks.classifier: ") as e:
        classifier.parse_settings(["--resume", str(other)])
    assert shlex.split(str(e.value).split("not tasks.classifier: ", 1)[1]) == [
        "python", "-m", "tasks.multitask", "--resume", str(other)]


def test_a_run_without_its_checkpoint_is_advised_a_restart_that_run_paths_accepts(tiny_dir, tmp_path):
    """Unfinished, the restart in its own directory; finished (run.json has its result, which a new run in the same
    directory is refused for), putting the checkpoint back or the restart in a new directory: each advised command
    passes run_paths, and --resume, predict and export say the same."""
    def advised(run: Path) -> list[str]:
        with pytest.raises(MissingFileError) as e:
            run_paths(classifier.parse_settings(["--resume", str(run)]).run, "classifier")
        for other in (lambda: predict.main([str(run), "--out", str(tmp_path / "out")]),
                      lambda: export.main([str(run), str(tmp_path / "exported")])):
            with pytest.raises(MissingFileError) as again:
                other()
            assert str(again.value) == str(e.value)
        return str(e.value).split(": python -m tasks.classifier ", 1)[1].split()

    run = tmp_path / "run"
    recorded(classifier_argv(tiny_dir, tmp_path), run)                     # stopped before its first checkpoint
    argv = advised(run)
    assert argv == ["--config", str(run / "run.json"), "--run-dir", str(run)]
    assert run_paths(classifier.parse_settings(argv).run, "classifier").dir == run
    record = read_run_json(run)                                            # finished, its checkpoint since moved
    (run / "run.json").write_text(json.dumps(record | {"result": {"best_epoch": 1}}))
    with pytest.raises(MissingFileError) as e:
        run_paths(classifier.parse_settings(["--resume", str(run)]).run, "classifier")
    assert str(e.value) == (f"{run}: no checkpoint ({run / 'checkpoint.pt'} is missing: the run finished and the "
                            f"file was moved or deleted); put it back there, or start the run again in a new "
                            f"directory: python -m tasks.classifier --config {run / 'run.json'} --run-dir "
                            f"{tmp_path / 'run-again'}")
    argv = advised(run)
    assert run_paths(classifier.parse_settings(argv).run, "classifier").dir == tmp_path / "run-again"


@pytest.mark.parametrize("text", ["[1, 2]", '"a run"', "null", "{}", '{"command": "classifier"}',
                                  '{"command": 3, "settings": {}}'])
def test_a_run_json_that_is_not_an_object_is_one_line(tmp_path, text):
    """A run.json damaged into valid JSON of another shape: one line naming it, for resume, predict and export."""
    (tmp_path / "run.json").write_text(text)
    with pytest.raises(ConfigurationError, match=rf"^{re.escape(str(tmp_path / 'run.json'))}: not a run's record"):
        read_run_json(tmp_path)
    for call in (lambda: classifier.parse_settings(["--resume", str(tmp_path)]),
                 lambda: predict.main([str(tmp_path), "--out", str(tmp_path / "out")])):
        with pytest.raises(ConfigurationError, match="not a run's record"):
            call()
