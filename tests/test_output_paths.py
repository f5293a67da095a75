"""Where the commands write: an output path that cannot be written (a file where a folder goes, a folder where a file
goes, a file under a file) is one error line before any work, never a traceback after training; tasks.submit never
replaces its inputs or a file that is not a zip; tasks.export writes a new or empty OUT whole or not at all; a run
never writes its predictions into another run's directory."""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import zipfile
from pathlib import Path

import pytest
from test_typed_runs import classifier_argv, piece
from torch import nn

import minbert
from minbert import bitfit_tasks
from minbert.bitfit import freeze
from tasks import attention, classifier, export, submit
from tasks.core import curves
from tasks.core.errors import run_cli
from tasks.core.evaluation import write_predictions

pytestmark = pytest.mark.usefixtures("one_thread")


def cli(main, argv: list[str], capsys) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of main(argv) under run_cli, argparse's exit included."""
    try:
        code = run_cli(lambda: main(argv))
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, out, err


def last_error(err: str) -> str:
    return [line for line in err.splitlines() if "error" in line][-1]


def matches(line: str, message: str) -> bool:
    """Whether a line is `message`, each `...` in it standing for any text."""
    return re.fullmatch(".*".join(map(re.escape, message.split("..."))), line) is not None


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def test_submit_out_refuses_its_inputs_a_file_not_a_zip_and_a_name_without_zip(tmp_path, capsys):
    data, pred = tmp_path / "data", tmp_path / "pred"
    data.mkdir()
    pred.mkdir()
    shutil.copyfile(piece(tmp_path, "ids-sst-dev.csv", 4), data / "ids-sst-dev.csv")
    (pred / "sst-dev-output.csv").write_text("the student's predictions\n")
    (tmp_path / "old.zip").write_text("not a zip\n")
    base = ["--pred-dir", str(pred), "--data-dir", str(data), "--out"]
    own_name = "is one of the prediction files the zip holds, which it would replace; give the zip its own name"
    for out, said in ((pred / "sst-dev-output.csv", own_name),
                      (data / "ids-sst-dev.csv", f"is inside --data-dir {data}, the task files"),
                      (tmp_path / "old.zip", "exists and is not a zip, so it is not an earlier submission to replace"),
                      (tmp_path / "sub", f"the upload is a zip and its name ends in .zip; give --out {tmp_path}/sub.zip"),
                      (tmp_path / "s.csv", f"give --out {tmp_path}/s.zip")):
        before = out.read_bytes() if out.exists() else None
        code, _, err = cli(submit.main, base + [str(out)], capsys)
        assert code == 1 and last_error(err).startswith(f"error: --out {out}") and said in err, err
        assert (out.read_bytes() if out.exists() else None) == before
    code, _, err = cli(submit.main, base + [str(data)], capsys)                  # a directory: argparse, exit 2
    assert code == 2 and last_error(err).endswith(f"argument --out: {data} is a directory, not a file: give a file "
                                                  f"name, such as {data}/NAME"), err


def test_export_refuses_a_non_empty_out_moves_it_aside_with_force_and_leaves_nothing_when_it_fails(
        tiny_dir, tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    classifier.run(classifier.parse_settings(classifier_argv(tiny_dir, tmp_path)
                                             + ["--epochs", "1", "--run-dir", str(run)]))
    model = tmp_path / "model"                      # a copy of the run's --model: its pretrained base
    shutil.copytree(tiny_dir, model)
    weights = md5(model / "model.safetensors")
    code, _, err = cli(export.main, [str(run), str(model)], capsys)
    assert code == 1 and last_error(err).startswith(f"error: {model} is not empty (config.json, model.safetensors, "
                                                    "vocab.txt); "), err
    assert last_error(err).endswith("nothing was written. Give an empty or new directory, or --force to move it "
                                    "aside to a backup first")
    assert md5(model / "model.safetensors") == weights

    code, out, err = cli(export.main, [str(run), str(model), "--force"], capsys)
    assert code == 0, err
    backup = next(tmp_path.glob("model.backup-*"))
    assert f"moved the existing {model} to {backup}" in err and md5(backup / "model.safetensors") == weights
    assert json.loads((model / export.EXPORT_RECORD).read_text())["kind"] == "classifier"
    code, _, err = cli(export.main, [str(run), str(run), "--force"], capsys)           # never the run itself
    assert code == 1 and "holds the run being exported" in err and (run / "run.json").is_file()

    def broken(*args, **kwargs):
        raise RuntimeError("the disk went away")
    monkeypatch.setattr(export.minbert.Tokenizer, "from_pretrained", broken)   # after the weights are written
    for out in (tmp_path / "new", tmp_path / "empty"):
        if out.name == "empty":
            out.mkdir()
        with pytest.raises(RuntimeError, match="the disk went away"):
            export.export(run, out)
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith((".new", ".empty", "new"))) == []
        assert not (out.exists() and any(out.iterdir()))
    monkeypatch.undo()

    here = tmp_path / "here"                          # the current folder, even empty, is not replaced
    (here / "e3").mkdir(parents=True)
    monkeypatch.chdir(here / "e3")
    for given in (".", "../e3", "x/..", ".."):
        code, _, err = cli(export.main, [str(run), given], capsys)
        assert code == 1 and f"error: {given} is the current folder" in err, err
    assert sorted(p.name for p in here.rglob("*")) == ["e3"]


def test_output_paths_are_refused_before_training(tiny_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(classifier, "run", lambda settings: pytest.fail("trained with a bad output path"))
    taken = tmp_path / "taken.csv"
    taken.write_text("a file\n")
    argv = classifier_argv(tiny_dir, tmp_path)
    for flag, value, said in (
            ("--run-dir", taken, f"{taken} is a file, not a directory: give a directory to write into"),
            ("--predictions-dir", taken, f"{taken} is a file, not a directory: give a directory to write into"),
            ("--checkpoint", taken / "x.pt", f"{taken / 'x.pt'}: {taken} is a file, not a directory: give a path in a folder"),
            ("--bitfit-task-file", tmp_path, f"{tmp_path} is a directory, not a file: give a file name, such as {tmp_path}/NAME")):
        code, _, err = cli(classifier.main, argv + [flag, str(value)], capsys)
        assert (code, last_error(err)) == (2, f"python -m tasks.classifier: error: argument {flag}: {said}")


def test_predictions_are_never_written_into_another_runs_directory(tiny_dir, tmp_path, capsys, monkeypatch):
    other = tmp_path / "run1"
    (other / "predictions").mkdir(parents=True)
    (other / "run.json").write_text("{}")
    argv = classifier_argv(tiny_dir, tmp_path)
    code, _, err = cli(classifier.main, argv + ["--predictions-dir", str(other / "predictions")], capsys)
    assert code == 1 and matches(last_error(err), (
        f"error: --predictions-dir {other / 'predictions'} is inside {other / 'predictions'}, the prediction folder of "
        f"another run ({other}), whose files it would replace; leave --predictions-dir out (this run's own: "
        ".../runs/classifier-sst-full-model-...), or give a folder outside other runs' prediction folders")), err
    flat = tmp_path / "flat"                        # a run that wrote its predictions to its --predictions-dir
    flat.mkdir()
    (flat / "run.json").write_text(json.dumps({"command": "classifier",
                                               "settings": {"run": {"predictions_dir": str(flat / "a")}}}))
    code, _, err = cli(classifier.main, argv + ["--predictions-dir", str(flat / "a" / "x")], capsys)
    assert code == 1 and f"inside {flat / 'a'}, the prediction folder of another run ({flat})" in err, err
    from tasks.core.runs import run_paths
    own = tmp_path / "own"          # the run's own directory, a folder outside runs, and one beside a flat run's files
    for where in (own / "preds", tmp_path / "elsewhere", flat / "b", other / "mine", flat / "predictions"):
        settings = classifier.parse_settings(argv + ["--run-dir", str(own), "--predictions-dir", str(where)])
        assert run_paths(settings.run, "classifier").predictions == where


def test_run_cli_says_an_os_error_naming_a_path_in_one_line(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    for make in (lambda: (tmp_path / "nodir" / "x.csv").write_text("x"), lambda: tmp_path.write_text("x"),
                 lambda: (tmp_path / "f").mkdir()):
        assert run_cli(make) == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines == [f"error: {tmp_path / 'nodir' / 'x.csv'}: No such file or directory",
                     f"error: {tmp_path}: Is a directory", f"error: {tmp_path / 'f'}: File exists"]

    taken = tmp_path / "pd" / "sst-dev-output.csv"      # a folder where a file is renamed into place: the target
    taken.mkdir(parents=True)                          # is named, not the temporary file the rename removed
    assert run_cli(lambda: write_predictions(taken, "sst", ["a"], [1])) == 1
    assert capsys.readouterr().err.splitlines() == [f"error: {taken}: Is a directory"]
    assert [p.name for p in taken.parent.iterdir()] == ["sst-dev-output.csv"]

    def a_bug() -> None:
        raise OSError(5, "Input/output error")        # no path named: may be a bug, keeps its traceback
    with pytest.raises(OSError):
        run_cli(a_bug)


def test_a_bitfit_task_file_goes_into_new_folders_and_a_failed_write_leaves_no_temporary(tiny_config, tmp_path):
    model = minbert.BertModel(tiny_config)
    freeze(model, "all")
    path = tmp_path / "new" / "folder" / "t.safetensors"
    assert bitfit_tasks.save_task(path, model, nn.Linear(32, 3)) == path.stat().st_size
    (tmp_path / "d").mkdir()
    with pytest.raises(IsADirectoryError):
        bitfit_tasks.save_task(tmp_path / "d", model)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "new"]
    assert sorted(p.name for p in path.parent.iterdir()) == ["t.safetensors"]


def test_a_figure_named_without_an_extension_is_written_as_png_and_its_folders_made(tiny_dir, tmp_path, capsys):
    lines = [{"kind": "step", "epoch": 1, "step": 1, "loss": 1.0}, {"kind": "epoch", "epoch": 1, "dev_accuracy": 0.5}]
    (tmp_path / "c.curves.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    code, out, _ = cli(curves.main, [str(tmp_path / "c.curves.jsonl"), "--out", str(tmp_path / "nodir" / "c")], capsys)
    assert code == 0 and out == f"wrote {tmp_path / 'nodir' / 'c.png'}\n" and (tmp_path / "nodir" / "c.png").is_file()
    code, out, _ = cli(attention.main, ["--model", str(tiny_dir), "--out", str(tmp_path / "a" / "att")], capsys)
    assert code == 0 and out == f"wrote {tmp_path / 'a' / 'att.png'}\n" and (tmp_path / "a" / "att.png").is_file()
    code, _, err = cli(curves.main, [str(tmp_path / "c.curves.jsonl"), "--out", str(tmp_path / "c.foo")], capsys)
    assert code == 2 and "matplotlib writes no .foo figure; end the name with .png" in err


def test_check_result_is_refused_before_the_checks_when_it_cannot_be_written(tmp_path):
    import argparse

    from assignments.check import result_file
    (tmp_path / "f").write_text("x")
    assert result_file(str(tmp_path / "nodir" / "r.json")) == str(tmp_path / "nodir" / "r.json")
    for bad, said in ((tmp_path, "is a directory, not a file"), (tmp_path / "f" / "r.json", "f is a file, not a dir")):
        with pytest.raises(argparse.ArgumentTypeError, match=said):
            result_file(str(bad))


def test_a_submission_zip_is_written_when_out_is_a_zip_to_replace(tmp_path, capsys):
    data, pred = tmp_path / "data", tmp_path / "pred"
    data.mkdir()
    pred.mkdir()
    shutil.copyfile(piece(tmp_path, "ids-sst-dev.csv", 4), data / "ids-sst-dev.csv")
    ids = [line.split("\t")[1] for line in (data / "ids-sst-dev.csv").read_text().splitlines()[1:]]
    (pred / "sst-dev-output.csv").write_text("id \t Predicted_Sentiment \n" + "".join(f"{i} , 1 \n" for i in ids))
    with zipfile.ZipFile(tmp_path / "old.zip", "w") as z:
        z.writestr("x", "an earlier submission")
    code, _, err = cli(submit.main, ["--pred-dir", str(pred), "--data-dir", str(data), "--out",
                                       str(tmp_path / "old.zip")], capsys)
    assert code == 0, err
    assert zipfile.ZipFile(tmp_path / "old.zip").namelist() == ["predictions/sst-dev-output.csv"]


def test_a_pgf_figure_without_its_tex_system_is_refused_before_the_work(tmp_path, capsys, monkeypatch):
    """matplotlib writes .pgf through a TeX system (pgf.texsystem, xelatex by default): without it the name is refused
    by the flag's check, not by a traceback after the command's work."""
    import shutil
    lines = [{"kind": "step", "epoch": 1, "step": 1, "loss": 1.0}, {"kind": "epoch", "epoch": 1, "dev_accuracy": 0.5}]
    (tmp_path / "c.curves.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name.endswith("latex") else real(name, *a, **k))
    code, _, err = cli(curves.main, [str(tmp_path / "c.curves.jsonl"), "--out", str(tmp_path / "c.pgf")], capsys)
    assert code == 2 and "matplotlib writes a .pgf figure through xelatex, which is not installed here" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.curves.jsonl"]


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """$HOME is tmp_path/home, holding a run directory (run/run.json) and a file (f.csv)."""
    home = tmp_path / "home"
    (home / "run").mkdir(parents=True)
    (home / "run" / "run.json").write_text("{}")
    (home / "f.csv").write_text("x\n")
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.mark.parametrize("kind,given,expanded", [
    ("existing_path", "~/run", "run"), ("existing_dir", "~/run", "run"), ("existing_file", "~/f.csv", "f.csv"),
    ("directory_to_write", "~/new", "new"), ("file_to_write", "~/c.pt", "c.pt"),
    ("figure_to_write", "~/fig", "fig.png"), ("user_path", "~/x", "x")])
def test_each_path_parser_expands_a_tilde(kind, given, expanded, home):
    from tasks.core import errors
    assert getattr(errors, kind)(given) == str(home / expanded)


class Parsed(Exception):
    """What a command's argparse parser gave (parsed() stops the command there)."""


REAL_PARSE_ARGS = argparse.ArgumentParser.parse_args


def parsed(main, argv: list[str], monkeypatch) -> dict:
    """The namespace a command's own argparse parser gives for `argv` (the command stopped right after parsing)."""
    def parse_args(self, args=None, namespace=None):
        raise Parsed(vars(REAL_PARSE_ARGS(self, args, namespace)))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_args)
    with pytest.raises(Parsed) as caught:
        main(argv)
    return caught.value.args[0]


def test_the_commands_read_a_tilde_in_every_path_they_are_given(home, monkeypatch):
    from tasks import ensemble, predict, score
    from tasks import multitask as mt
    from tasks.deebert import parse_settings as deebert_settings
    h = str(home)
    run = mt.parse_settings(["--run-dir=~/new", "--checkpoint=~/c.pt", "--predictions-dir=~/p"]).run
    assert (run.run_dir, run.checkpoint, run.predictions_dir) == (f"{h}/new", f"{h}/c.pt", f"{h}/p")
    both = mt.parse_settings(["--model=~/m", "--after-simcse=~/s"])
    assert (both.training.model, both.files.after_simcse) == (f"{h}/m", f"{h}/s")
    assert deebert_settings(["--model=~/m", "--out=~/o"]).run.run_dir == f"{h}/o"
    assert vars(predict.build_parser().parse_args(["~/run", "--out=~/o", "--data-dir=~/d", "--sst-dev=~/s.csv",
                                                   "--dev-file=~/x.csv", "--test-file=~/y.csv"])) == \
        vars(predict.build_parser().parse_args([f"{h}/run", f"--out={h}/o", f"--data-dir={h}/d", f"--sst-dev={h}/s.csv",
                                                f"--dev-file={h}/x.csv", f"--test-file={h}/y.csv"]))
    assert attention.parse(attention.Settings, ["--model=~/run", "--out=~/a"], prog="a", description="").model == \
        f"{h}/run"
    for main, argv, keys in [(export.main, ["~/run", "~/out"], ("checkpoint", "out")),
                             (ensemble.main, ["~/run", "--out=~/e", "--data-dir=~/d"], ("runs", "out", "data_dir")),
                             (submit.main, ["--pred-dir=~/p", "--data-dir=~/d", "--out=~/s.zip"],
                              ("pred_dir", "data_dir", "out")),
                             (curves.main, ["~/run", "--out=~/c"], ("path", "out")),
                             (score.main, ["~/run", "--data-dir=~/d"], ("pred_dir", "data_dir"))]:
        args = parsed(main, argv, monkeypatch)
        for key in keys:
            value = args[key][0] if isinstance(args[key], list) else args[key]
            assert value.startswith(h) and "~" not in value, (main, key, value)


@pytest.mark.parametrize("kind", ["existing_path", "existing_dir", "existing_file", "directory_to_write",
                                  "file_to_write", "figure_to_write", "user_path"])
def test_a_path_that_starts_with_a_tilde_of_no_user_is_a_relative_name(kind, tmp_path, monkeypatch):
    """`~tiny` (no user 'tiny': the shell leaves it as it is, a quoted '~r1' always) is a file or folder of that name
    here, as the shell and os.path.expanduser read it (pathlib's expanduser raised RuntimeError: a traceback)."""
    from tasks.core import errors
    monkeypatch.chdir(tmp_path)
    name = "~no-such-user-minbert"
    (tmp_path / name).mkdir() if kind in ("existing_path", "existing_dir") else None
    (tmp_path / f"{name}.csv").write_text("x\n")
    given = f"{name}.csv" if kind == "existing_file" else name
    expected = f"{name}.png" if kind == "figure_to_write" else given
    assert getattr(errors, kind)(given) == expected


def test_the_model_checkpoint_and_searchs_folders_read_a_tilde_of_no_user_as_a_name_and_expand_a_home_tilde(
        home, tmp_path, monkeypatch):
    """minbert.checkpoint.resolve (every --model), tasks.search's --study-dir and --record (docs/errors.md: '~ is the
    home folder, as in every other path a command is given'), and --config's own path."""
    from minbert.checkpoint import resolve
    from tasks.search import build_parser
    monkeypatch.chdir(tmp_path)
    (tmp_path / "~tiny").mkdir()
    assert resolve("~tiny") == Path("~tiny")
    (home / "run2").mkdir()
    space = home / "sp.json"
    space.write_text("{}")
    args = vars(build_parser().parse_args(["--space=~/sp.json", "--study-dir=~/st", "--record=~/run2"]))
    assert (args["space"], args["study_dir"], args["record"]) == (str(space), str(home / "st"), [str(home / "run2")])
