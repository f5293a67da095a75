"""tasks.ensemble on hand-made run directories: the set is checked against the runs' own data directory (their
run.json's files.data_dir), runs of different data directories are refused by name, and a split some runs lack is
named; each refusal is one error line, before any file is written."""

from __future__ import annotations

import json

import torch
from conftest import DATA

from tasks import ensemble
from tasks.core.errors import run_cli
from tasks.core.evaluation import raw_path, write_raw


def data_dir(tmp_path, name="mydata", rows=4):
    """A data directory holding the first `rows` rows of SST's dev file."""
    lines = (DATA / "ids-sst-dev.csv").read_text(encoding="utf-8").splitlines(keepends=True)
    (tmp_path / name).mkdir()
    (tmp_path / name / "ids-sst-dev.csv").write_text(lines[0] + "".join(lines[1:1 + rows]), encoding="utf-8")
    return tmp_path / name, [line.split("\t")[1] for line in lines[1:1 + rows]]


def run_dir(tmp_path, name, data, ids, splits=("dev",)):
    """A run directory as tasks.multitask --raw-outputs writes it: run.json and predictions/sst-SPLIT-raw.csv."""
    run = tmp_path / name
    (run / "predictions").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"command": "multitask", "settings": {"files": {"data_dir": str(data)},
                                                                                   "run": {}}}))
    for split in splits:
        write_raw(raw_path(run / "predictions", "sst", split), ids, torch.randn(len(ids), 5))
    return str(run)


def errors(capsys) -> list[str]:
    return capsys.readouterr().err.strip().splitlines()


def test_the_runs_own_data_directory_checks_the_set(tmp_path, capsys):
    data, ids = data_dir(tmp_path)
    runs = [run_dir(tmp_path, n, data, ids) for n in ("a", "b")]
    assert run_cli(lambda: ensemble.main([*runs, "--out", str(tmp_path / "out")])) == 0, capsys.readouterr().err
    assert (tmp_path / "out" / "sst-dev-output.csv").is_file() and (tmp_path / "out" / "submission.zip").is_file()


def test_runs_of_different_data_directories_are_refused_by_name_before_writing(tmp_path, capsys):
    data, ids = data_dir(tmp_path)
    other, _ = data_dir(tmp_path, "other")
    a, b = run_dir(tmp_path, "a", data, ids), run_dir(tmp_path, "b", other, ids)
    assert run_cli(lambda: ensemble.main([a, b, "--out", str(tmp_path / "out")])) == 1
    err = errors(capsys)
    assert len(err) == 1 and f"{a}: {data}" in err[0] and f"{b}: {other}" in err[0], err
    assert not (tmp_path / "out").exists()


def test_ids_of_another_data_directory_are_refused_before_writing(tmp_path, capsys):
    data, ids = data_dir(tmp_path)
    runs = [run_dir(tmp_path, n, data, ids) for n in ("a", "b")]
    other, _ = data_dir(tmp_path, "other", rows=6)
    assert run_cli(lambda: ensemble.main([*runs, "--out", str(tmp_path / "out"), "--data-dir", str(other)])) == 1
    err = errors(capsys)
    assert len(err) == 1 and "sst dev: the runs' ids are not those of" in err[0] and "2 missing" in err[0], err
    assert not (tmp_path / "out").exists()


def test_a_split_one_run_lacks_is_named_before_writing(tmp_path, capsys):
    data, ids = data_dir(tmp_path)
    a, b = run_dir(tmp_path, "a", data, ids, ("dev", "test")), run_dir(tmp_path, "b", data, ids)
    assert run_cli(lambda: ensemble.main([a, b, "--out", str(tmp_path / "out")])) == 1
    err = errors(capsys)
    assert len(err) == 1 and err[0].startswith(f"error: sst test: {b} has no raw outputs of the test split"), err
    assert f"which {a} has" in err[0]
    assert not (tmp_path / "out").exists()


def test_run_directories_that_do_not_exist_are_named_as_such(tmp_path, capsys):
    data, ids = data_dir(tmp_path)
    a = run_dir(tmp_path, "a", data, ids)
    assert run_cli(lambda: ensemble.main([a, str(tmp_path / "nodir"), "--out", str(tmp_path / "out")])) == 1
    said = (f"error: {tmp_path / 'nodir'}: no such run directory (give the folders the runs wrote, or the folders "
            "tasks.predict --raw-outputs wrote)")
    assert errors(capsys) == [said]
    assert not (tmp_path / "out").exists()
