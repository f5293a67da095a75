"""Predict, ensemble and submit from another folder than the run trained in: a run.json's relative data folder is
read from the folder it trained in (its recorded cwd); an older run.json's, from the current folder; a data folder
missing, or nothing to write or zip, is one error line naming the folder and --data-dir, exit status 1."""

from __future__ import annotations

import hashlib
import json
import shutil
import zipfile
from pathlib import Path

import pytest
from conftest import DATA, TEST_DEVICE
from test_ensemble_cli import data_dir as sst_data
from test_ensemble_cli import run_dir as sst_run

from tasks import attention, classifier, ensemble, export, multitask, predict, submit
from tasks.core.checkpoints import load_checkpoint
from tasks.core.errors import MissingFileError, ResumeError, run_cli
from tasks.core.run_files import trained_files
from tasks.core.runs import RUN_FILE

pytestmark = pytest.mark.usefixtures("one_thread")


def _errors(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith(("error:", "  "))]


def test_submit_refuses_a_missing_or_empty_data_folder_with_one_line(tmp_path, capsys):
    out = tmp_path / "submission.zip"
    (tmp_path / "empty").mkdir()
    for folder, said in (("nowhere", "no such data folder: run from the tree's root, or pass --data-dir DIR"),
                         ("empty", ("none of the leaderboard's task files (ids-sst-dev.csv, ...), so nothing to check "
                                   "or zip: pass --data-dir DIR, the folder holding them"))):
        assert submit.main(["--data-dir", str(tmp_path / folder), "--out", str(out)]) == 1
        assert _errors(capsys) == [f"  {tmp_path / folder}: {said}"]
        assert not out.exists()


def test_ensemble_reads_a_runs_relative_data_folder_from_where_it_trained(tmp_path, capsys, monkeypatch):
    trained, elsewhere = tmp_path / "trained", tmp_path / "elsewhere"
    elsewhere.mkdir()
    trained.mkdir()
    _data, ids = sst_data(trained, "data")
    runs = [sst_run(trained, n, "data", ids) for n in ("a", "b")]              # files.data_dir "data", relative
    for run in runs:
        record = json.loads((Path(run) / RUN_FILE).read_text())
        (Path(run) / RUN_FILE).write_text(json.dumps(record | {"cwd": str(trained)}))
    monkeypatch.chdir(elsewhere)
    assert run_cli(lambda: ensemble.main([*runs, "--out", "ens"])) == 0, capsys.readouterr().err
    assert zipfile.ZipFile(elsewhere / "ens" / "submission.zip").namelist() == ["predictions/sst-dev-output.csv"]
    for run in runs:                                                            # a run.json from before the cwd
        (Path(run) / RUN_FILE).write_text(json.dumps({k: v for k, v in record.items() if k != "cwd"}))
    capsys.readouterr()
    assert run_cli(lambda: ensemble.main([*runs, "--out", "ens2"])) == 1
    assert _errors(capsys) == [("error: data: no such data folder (from the runs' run.json (files.data_dir)), so the "
                               "ensemble cannot be checked: run from the folder the runs trained in, or pass --data-dir "
                               "DIR")]
    assert not (elsewhere / "ens2").exists()
    monkeypatch.chdir(trained)                                                  # from the training folder: as before
    assert run_cli(lambda: ensemble.main([*runs, "--out", "ens3"])) == 0, capsys.readouterr().err
    for run in runs:                                        # moved from another machine: its cwd is not here
        (Path(run) / RUN_FILE).write_text(json.dumps(record | {"cwd": str(tmp_path / "gone")}))
    assert run_cli(lambda: ensemble.main([*runs, "--out", "ens4"])) == 0, capsys.readouterr().err
    (Path(runs[0]) / RUN_FILE).write_text(json.dumps({k: v for k, v in record.items() if k != "cwd"}))
    (Path(runs[1]) / RUN_FILE).write_text(json.dumps(record | {"cwd": str(trained)}))      # an old run and a new one
    assert run_cli(lambda: ensemble.main([*runs, "--out", "ens5"])) == 0, capsys.readouterr().err


def test_predict_finds_a_runs_files_from_anywhere_and_refuses_to_write_nothing(tiny_dir, multitask_files, tmp_path,
                                                                             capsys, monkeypatch):
    trained, elsewhere = tmp_path / "trained", tmp_path / "elsewhere"
    (trained / "data").mkdir(parents=True)
    elsewhere.mkdir()
    names = {"sst": "ids-sst", "para": "quora", "sts": "sts"}
    argv = ["--model", str(tiny_dir), "--device", TEST_DEVICE, "--batch-size", "8", "--no-progress", "--head-hidden",
            "16", "--epochs", "1", "--run-dir", "run", "--data-dir", "data"]
    for t, (train, dev, test) in multitask_files.items():
        (trained / "data" / f"{names[t]}-dev.csv").write_text(Path(dev).read_text())
        (trained / "data" / f"{names[t]}-test-student.csv").write_text(Path(test).read_text())
        argv += [f"--{t}-train", train]
    monkeypatch.chdir(trained)
    multitask.run(multitask.parse_settings(argv))
    record = json.loads((trained / "run" / RUN_FILE).read_text())
    assert record["cwd"] == str(trained) and record["settings"]["files"]["data_dir"] == "data"
    monkeypatch.chdir(elsewhere)
    assert run_cli(lambda: predict.main([str(trained / "run"), "--out", "pred", "--device", TEST_DEVICE])) == 0
    assert len(list((elsewhere / "pred").glob("*-output.csv"))) == 6
    (trained / "run" / RUN_FILE).write_text(json.dumps({k: v for k, v in record.items() if k != "cwd"}))
    capsys.readouterr()
    assert run_cli(lambda: predict.main([str(trained / "run"), "--out", "pred2", "--device", TEST_DEVICE])) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: {trained / 'run'}: none of the run's dev/test files found in its data folder data, so nothing was "
        "written: pass --data-dir DIR (or the files' own flags)")
    assert run_cli(lambda: predict.main([str(trained / "run"), "--out", "pred3", "--device", TEST_DEVICE,
                                         "--data-dir", str(trained / "data")])) == 0


def _sst_run(tmp_path: Path, monkeypatch, *extra: str) -> tuple[Path, Path]:
    """A one-epoch classifier run started in tmp_path with relative names for everything: --model tiny (conftest's
    tiny_dir, tmp_path/tiny), train.csv, dev.csv, test.csv, --run-dir run, `extra` flags; (the run's folder, another
    folder)."""
    lines = (DATA / "ids-sst-dev.csv").read_text(encoding="utf-8").splitlines(keepends=True)
    for name, rows in (("train.csv", lines[1:33]), ("dev.csv", lines[33:49]), ("test.csv", lines[49:65])):
        (tmp_path / name).write_text(lines[0] + "".join(rows), encoding="utf-8")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    classifier.run(classifier.parse_settings([
        "--model", "tiny", "--device", TEST_DEVICE, "--batch-size", "8", "--no-progress", "--epochs", "1",
        "--eval-batch-size", "8", "--train-file", "train.csv", "--dev-file", "dev.csv", "--test-file", "test.csv",
        "--run-dir", "run", *extra]))
    monkeypatch.chdir(tmp_path / "elsewhere")
    return tmp_path / "run", tmp_path / "elsewhere"


def test_a_runs_relative_model_directory_is_read_from_where_it_trained(tiny_dir, tmp_path, capsys, monkeypatch):
    run, elsewhere = _sst_run(tmp_path, monkeypatch)
    assert json.loads((run / RUN_FILE).read_text())["settings"]["training"]["model"] == "tiny"
    assert run_cli(lambda: predict.main([str(run), "--out", "pred", "--device", TEST_DEVICE])) == 0, \
        capsys.readouterr().err
    assert sorted(p.name for p in (elsewhere / "pred").iterdir()) == ["sst-dev-output.csv", "sst-test-output.csv"]
    own = (run / "predictions" / "sst-dev-output.csv").read_text()
    assert (elsewhere / "pred" / "sst-dev-output.csv").read_text() == own
    assert run_cli(lambda: export.main([str(run), "exported"])) == 0, capsys.readouterr().err
    assert (elsewhere / "exported" / "vocab.txt").is_file()
    _, base, _ = attention.encoder(str(run), "eager")
    assert base == str(tmp_path / "tiny")
    assert trained_files({"cwd": str(tmp_path), "settings": {"training": {"model": "minilm"}}}) == {}  # an alias
    (tmp_path / "minilm").mkdir()                                                  # never a path, a folder or not
    assert trained_files({"cwd": str(tmp_path), "settings": {"training": {"model": "minilm"}}}) == {}


def test_resume_and_a_run_json_as_config_read_relative_files_from_where_the_run_started(tiny_dir, tmp_path, capsys,
                                                                                      monkeypatch):
    run, elsewhere = _sst_run(tmp_path, monkeypatch)
    record = json.loads((run / RUN_FILE).read_text())                       # its paths relative, as given
    again = classifier.parse_settings(["--config", str(run / RUN_FILE), "--run-dir", "again"])
    assert (again.files.train_file, again.training.model) == (str(tmp_path / "train.csv"), str(tmp_path / "tiny"))
    monkeypatch.chdir(tmp_path)                                                     # from where it started: as given
    assert classifier.parse_settings(["--config", str(run / RUN_FILE), "--run-dir", "again"]).files.train_file == \
        "train.csv"
    monkeypatch.chdir(elsewhere)
    train = (tmp_path / "train.csv").read_bytes()
    (tmp_path / "moved.csv").write_bytes(train[:-80])                                 # other bytes
    with monkeypatch.context() as patched:
        patched.setattr(classifier, "load_split", lambda *a, **k: pytest.fail("data read"))
        with pytest.raises(ResumeError, match=(rf"files.train_file: run.json 'train.csv' \(relative to {tmp_path}, "
                                               r"where the run started\), now '../moved.csv'")):  # before any data
            classifier.run(classifier.parse_settings(["--resume", str(run), "--train-file", "../moved.csv"]))
    dev = (tmp_path / "dev.csv").read_bytes()
    (tmp_path / "dev.csv").write_bytes(dev.replace(b"\t4\n", b"\t3\n", 1))           # a label changed since
    with pytest.raises(ResumeError, match=rf"cannot resume: {tmp_path / 'dev.csv'} has changed since the run started"):
        classifier.run(classifier.parse_settings(["--resume", str(run), "--epochs", "2"]))
    (tmp_path / "dev.csv").write_bytes(dev)
    classifier.run(classifier.parse_settings(["--resume", str(run), "--epochs", "2"]))      # one more epoch, here
    assert load_checkpoint(run / "checkpoint.pt")["epoch"] == 2
    monkeypatch.chdir(tmp_path)                                       # and again from there: the same files
    classifier.run(classifier.parse_settings(["--resume", str(run), "--epochs", "3"]))
    monkeypatch.chdir(elsewhere)
    (tmp_path / "moved.csv").write_bytes(train)                                       # the same bytes: the same data
    (tmp_path / "train.csv").unlink()
    classifier.run(classifier.parse_settings(["--resume", str(run), "--train-file", "../moved.csv", "--epochs", "4"]))
    assert load_checkpoint(run / "checkpoint.pt")["epoch"] == 4
    gone = elsewhere / "copy"
    gone.mkdir()
    (gone / RUN_FILE).write_text(json.dumps(record | {"cwd": str(tmp_path / "gone")}))
    with pytest.raises(MissingFileError, match=(rf"setting 'files.train_file': train.csv: no such file, relative to "
                                                rf"{tmp_path / 'gone'}, where the run started")):
        classifier.parse_settings(["--config", str(gone / RUN_FILE), "--run-dir", "again2"])


def test_a_relative_checkpoint_and_predictions_dir_are_read_from_where_the_run_started(tiny_dir, tmp_path, capsys,
                                                                                        monkeypatch):
    run, elsewhere = _sst_run(tmp_path, monkeypatch, "--checkpoint", "ck/c.pt", "--predictions-dir", "preds")
    assert run_cli(lambda: predict.main([str(run), "--out", "pred", "--device", TEST_DEVICE])) == 0, \
        capsys.readouterr().err
    assert (elsewhere / "pred" / "sst-dev-output.csv").read_text() == (tmp_path / "preds" / "sst-dev-output.csv").read_text()
    (tmp_path / "preds" / "sst-dev-output.csv").unlink()
    classifier.run(classifier.parse_settings(["--resume", str(run), "--epochs", "2"]))       # from another folder
    assert load_checkpoint(tmp_path / "ck" / "c.pt")["epoch"] == 2
    assert (tmp_path / "preds" / "sst-dev-output.csv").is_file()
    assert sorted(p.name for p in elsewhere.iterdir()) == ["pred"]                   # nothing written here


def test_run_json_records_the_data_and_predict_notes_a_changed_labelled_file(tiny_dir, tmp_path, capsys, monkeypatch):
    run, _ = _sst_run(tmp_path, monkeypatch)
    record = json.loads((run / RUN_FILE).read_text())
    expected = {name: {"bytes": (tmp_path / name).stat().st_size,
                       "sha256": hashlib.sha256((tmp_path / name).read_bytes()).hexdigest(), "labelled": True}
                for name in ("train.csv", "dev.csv", "test.csv")}
    assert record["data_files"] == record["started"]["data_files"] == expected
    classifier.run(classifier.parse_settings(["--resume", str(run), "--epochs", "2"]))
    assert json.loads((run / RUN_FILE).read_text())["resumed"][-1]["data_files"] == {
        str(tmp_path / name): mark for name, mark in expected.items()}
    capsys.readouterr()
    assert run_cli(lambda: predict.main([str(run), "--out", "same", "--device", TEST_DEVICE])) == 0
    assert "note:" not in capsys.readouterr().err
    lines = (tmp_path / "dev.csv").read_text().splitlines(keepends=True)
    (tmp_path / "dev.csv").write_text("".join(lines[:9]))                           # cut to 8 rows since
    assert run_cli(lambda: predict.main([str(run), "--out", "cut", "--device", TEST_DEVICE])) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and str(tmp_path / "dev.csv") in notes[0] and "differs from" in notes[0], notes


def test_a_resumes_other_data_folder_with_the_same_bytes_is_the_same_data(tmp_path, monkeypatch):
    from tasks.core.run_files import forget_same_bytes, same_bytes, same_place
    for folder, text in (("data", "a"), ("copy", "a"), ("edited", "b")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "sst-dev.csv").write_text(text)
        (tmp_path / folder / "sst-test.csv").write_text(folder)                  # unlabelled: may differ
    record = {"cwd": str(tmp_path), "data_files": {
        "data/sst-dev.csv": {"bytes": 1, "sha256": hashlib.sha256(b"a").hexdigest(), "labelled": True},
        "data/sst-test.csv": {"bytes": 4, "sha256": hashlib.sha256(b"data").hexdigest(), "labelled": False}}}
    monkeypatch.chdir(tmp_path / "copy")
    forget_same_bytes()
    assert not same_bytes("files.data_dir", "data", "../edited", record)
    assert not same_place("data/sst-dev.csv", "../edited/sst-dev.csv", tmp_path)
    assert same_bytes("files.data_dir", "data", "../copy", record)
    assert same_place("data", ".", tmp_path) and same_place("data/sst-dev.csv", "sst-dev.csv", tmp_path)
    forget_same_bytes()
    assert not same_place("data/sst-dev.csv", "sst-dev.csv", tmp_path)


def test_an_after_simcse_run_predicts_and_replays_from_another_folder(tiny_dir, multitask_files, tmp_path, capsys,
                                                                      monkeypatch):
    from tasks.multitask.settings import SIMCSE_QUORA_REST
    shutil.copytree(tiny_dir, tmp_path / "simc")                                 # as tasks.simcse --out simc writes
    shutil.copyfile(multitask_files["para"][0], tmp_path / "simc" / SIMCSE_QUORA_REST)
    argv = ["--after-simcse", "simc", "--device", TEST_DEVICE, "--batch-size", "8", "--no-progress", "--head-hidden",
            "16", "--epochs", "1", "--run-dir", "run", "--no-predictions"]
    for t, (train, dev, test) in multitask_files.items():
        argv += [f"--{t}-dev", dev, f"--{t}-test", test] + ([f"--{t}-train", train] if t != "para" else [])
    monkeypatch.chdir(tmp_path)
    multitask.run(multitask.parse_settings(argv))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert run_cli(lambda: predict.main([str(tmp_path / "run"), "--out", "pred", "--device", TEST_DEVICE])) == 0, \
        capsys.readouterr().err
    assert len(list((tmp_path / "elsewhere" / "pred").glob("*-output.csv"))) == 6
    again = multitask.after_simcse(multitask.parse_settings(["--config", str(tmp_path / "run" / RUN_FILE),
                                                             "--run-dir", "again"]))
    assert again.training.model == str(tmp_path / "simc") == again.files.after_simcse


def test_a_resume_takes_a_moved_default_task_file_of_the_same_bytes(tiny_dir, tmp_path, monkeypatch):
    lines = (DATA / "ids-sst-dev.csv").read_text(encoding="utf-8").splitlines(keepends=True)
    (tmp_path / "dd").mkdir()
    for name, rows in (("train", lines[1:33]), ("dev", lines[33:49]), ("test-student", lines[49:57])):
        (tmp_path / "dd" / f"ids-sst-{name}.csv").write_text(lines[0] + "".join(rows), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    classifier.run(classifier.parse_settings([                        # the data folder's default files
        "--model", "tiny", "--device", TEST_DEVICE, "--batch-size", "8", "--no-progress", "--epochs", "1",
        "--eval-batch-size", "8", "--data-dir", "dd", "--run-dir", "run"]))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    train = (tmp_path / "dd" / "ids-sst-train.csv").read_bytes()
    (tmp_path / "elsewhere" / "edited.csv").write_bytes(train[:-80])
    with pytest.raises(ResumeError, match=(r"files.train_file: run.json None \(the data folder's dd/ids-sst-train.csv, "
                                           rf"relative to {tmp_path}, where the run started\), now 'edited.csv'")):
        classifier.parse_settings(["--resume", str(tmp_path / "run"), "--train-file", "edited.csv"])
    (tmp_path / "elsewhere" / "moved.csv").write_bytes(train)                        # the same bytes: the same data
    classifier.run(classifier.parse_settings(["--resume", str(tmp_path / "run"), "--train-file", "moved.csv",
                                              "--epochs", "2"]))
    assert load_checkpoint(tmp_path / "run" / "checkpoint.pt")["epoch"] == 2


def test_a_labelled_file_the_checkpoint_recorded_and_this_resume_does_not_read_is_refused(tmp_path, monkeypatch):
    from tasks.core.checkpoints import check_data_files
    from tasks.core.run_files import forget_same_bytes, started_in
    monkeypatch.chdir(tmp_path)
    forget_same_bytes()
    started_in(None)
    mark = {"bytes": 1, "sha256": hashlib.sha256(b"a").hexdigest(), "labelled": True}
    test = {"bytes": 1, "sha256": hashlib.sha256(b"t").hexdigest(), "labelled": False}
    check_data_files("c.pt", {"dev.csv": mark, "test.csv": test}, {"dev.csv": mark})   # a test file may go
    with pytest.raises(ResumeError, match=rf"^c.pt: cannot resume: train.csv \(relative to {tmp_path}, where the run "
                                          r"started\), a labelled file the run read, is not among the files this run"):
        check_data_files("c.pt", {"train.csv": mark, "dev.csv": mark}, {"dev.csv": mark})
