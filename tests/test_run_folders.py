"""Predict, ensemble and submit from another folder than the run trained in: a run.json's relative data folder is
read from the folder it trained in (its recorded cwd); an older run.json's, from the current folder; a data folder
missing, or nothing to write or zip, is one error line naming the folder and --data-dir, exit status 1."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from conftest import TEST_DEVICE
from test_ensemble_cli import data_dir as sst_data
from test_ensemble_cli import run_dir as sst_run

from tasks import ensemble, multitask, predict, submit
from tasks.core.errors import run_cli
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
