"""tasks.ensemble on hand-made run directories: the set is checked against the runs' own data directory (their
run.json's files.data_dir), runs of different data directories are refused by name, and a split some runs lack is
named; each refusal is one error line, before any file is written."""

from __future__ import annotations

import json

import pytest
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



def test_an_out_that_is_a_file_is_refused_before_anything_is_read(tmp_path, capsys):
    data, ids = data_dir(tmp_path)
    a = run_dir(tmp_path, "a", data, ids)
    taken = tmp_path / "taken.csv"
    taken.write_text("mine\n")
    with pytest.raises(SystemExit) as stopped:
        ensemble.main([a, a, "--out", str(taken)])
    assert stopped.value.code == 2 and f"{taken} is a file, not a directory" in capsys.readouterr().err
    assert taken.read_text() == "mine\n"


@pytest.mark.parametrize("edit, said", [
    (lambda lines: lines[:2] + [lines[2].split(" , ")[0] + " , 0.1 abc 0.3 0.4 0.5"] + lines[3:],
     ":3: id {id2}: value 'abc' is not a number"),
    (lambda lines: lines[:2] + [lines[2].split(" , ")[0] + " , 0.1 0.2"] + lines[3:], ":3: id {id2}: 2 values, "),
    (lambda lines: lines[:2] + [lines[2].replace(" , ", " ,")] + lines[3:], ":3: expected 'id , values'"),
    (lambda lines: lines + [lines[1]], ":6: duplicate id {id1} (first on line 2)"),
    (lambda lines: lines[:2] + [lines[2].split(" , ")[0] + " , 0.1 nan 0.3 0.4 0.5"] + lines[3:],
     ":3: id {id2}: value 'nan' is not finite"),
])
def test_a_malformed_raw_file_is_one_error_naming_its_line(tmp_path, capsys, edit, said):
    data, ids = data_dir(tmp_path)
    a, b = run_dir(tmp_path, "a", data, ids), run_dir(tmp_path, "b", data, ids)
    raw = raw_path(f"{b}/predictions", "sst", "dev")
    raw.write_text("\n".join(edit(raw.read_text().splitlines())) + "\n")
    assert run_cli(lambda: ensemble.main([a, b, "--out", str(tmp_path / "out")])) == 1
    err = errors(capsys)
    assert len(err) == 1 and err[0].startswith(f"error: {raw}" + said.format(id1=ids[0], id2=ids[1])), err
    assert not (tmp_path / "out").exists()


def test_a_run_missing_an_id_is_named_with_the_file_and_the_id(tmp_path, capsys):
    data, ids = data_dir(tmp_path)
    a, b = run_dir(tmp_path, "a", data, ids), run_dir(tmp_path, "b", data, ids[:3])
    assert run_cli(lambda: ensemble.main([a, b, "--out", str(tmp_path / "out")])) == 1
    err = errors(capsys)
    assert len(err) == 1 and str(raw_path(f"{b}/predictions", "sst", "dev")) in err[0] and ids[3] in err[0], err
    assert str(raw_path(f"{a}/predictions", "sst", "dev")) in err[0]


def test_a_run_given_twice_is_refused(tmp_path, capsys):
    data, ids = data_dir(tmp_path)
    a = run_dir(tmp_path, "a", data, ids)
    assert run_cli(lambda: ensemble.main([a, f"{a}/predictions", "--out", str(tmp_path / "out")])) == 1
    err = errors(capsys)
    assert len(err) == 1 and "the same" in err[0] and a in err[0], err
    assert not (tmp_path / "out").exists()
    b = tmp_path / "b"                                # another run that wrote its files into a's predictions/
    b.mkdir()
    (b / "run.json").write_text(json.dumps({"command": "multitask", "settings": {
        "files": {"data_dir": str(data)}, "run": {"predictions_dir": f"{a}/predictions"}}}))
    assert run_cli(lambda: ensemble.main([a, str(b), "--out", str(tmp_path / "out")])) == 1
    err = errors(capsys)
    assert len(err) == 1 and f"{a} and {b} wrote their raw outputs to the same folder" in err[0], err
    assert "tasks.predict RUN --raw-outputs --out DIR" in err[0] and "same run" not in err[0]



def test_runs_with_one_relative_predictions_dir_started_in_two_folders_are_two_runs(tmp_path, capsys, monkeypatch):
    """A relative --predictions-dir is read from the folder each run was started in (run.json's cwd), not from
    the ensemble's: two runs that wrote preds/ in x/ and y/ are averaged."""
    data, ids = data_dir(tmp_path)
    runs = []
    for name in ("x", "y"):
        started = tmp_path / name
        write_raw(raw_path(started / "preds", "sst", "dev"), ids, torch.randn(len(ids), 5))
        run = tmp_path / "runs" / name
        run.mkdir(parents=True)
        (run / "run.json").write_text(json.dumps({"command": "multitask", "cwd": str(started), "settings": {
            "files": {"data_dir": str(data)}, "run": {"predictions_dir": "preds"}}}))
        runs.append(str(run))
    (tmp_path / "z").mkdir()
    monkeypatch.chdir(tmp_path / "z")
    assert run_cli(lambda: ensemble.main([*runs, "--out", str(tmp_path / "out")])) == 0, errors(capsys)
    assert (tmp_path / "out" / "sst-dev-output.csv").is_file()


def test_a_malformed_gold_row_is_named_by_its_line(tmp_path, capsys):
    data, ids = data_dir(tmp_path)
    runs = [run_dir(tmp_path, n, data, ids) for n in ("a", "b")]
    gold = data / "ids-sst-dev.csv"
    lines = gold.read_text(encoding="utf-8").splitlines(keepends=True)
    gold.write_text("".join(lines[:2]) + lines[2].rstrip("\n").rsplit("\t", 1)[0] + "\tx\n" + "".join(lines[3:]))
    assert run_cli(lambda: ensemble.main([*runs, "--out", str(tmp_path / "out")])) == 1
    err = errors(capsys)
    assert len(err) == 1 and f"{gold}:3: unparsable label" in err[0], err


def test_read_raw_names_each_fault_as_written(tmp_path):
    """read_raw's messages and rules one by one (mutation testing): unreadable, not UTF-8, a blank line skipped
    (rows after it read), an empty id or no values, a width naming the line that set it, a diverged value."""
    from tasks.core.data import DataError
    from tasks.core.evaluation import read_raw
    path = tmp_path / "sst-dev-raw.csv"

    def said(body: bytes | str) -> str:
        path.write_bytes(body if isinstance(body, bytes) else body.encode())
        with pytest.raises(DataError) as e:
            read_raw(path)
        return str(e.value)

    with pytest.raises(DataError, match=rf"^{tmp_path}: cannot read the raw outputs \(Is a directory\)$"):
        read_raw(tmp_path)
    assert said(b"id , values\na , 1 \xff\n") == f"{path}: not UTF-8 text (byte 18): not a file --raw-outputs wrote"
    path.write_text("id , values\na , 1 2\n\nb , 3 4\n")
    assert read_raw(path) == {"a": [1.0, 2.0], "b": [3.0, 4.0]}
    assert said("id , values\n , 1 2\n") == f"{path}:2: expected 'id , values' (written by --raw-outputs), got ' , 1 2'"
    assert said("id , values\na , \n").startswith(f"{path}:2: expected 'id , values'")
    assert said("id , values\na , 1 2 3\nb , 3 4 5\nc , 5\n") == \
        f"{path}:4: id c: 1 values, where line 2 has 3: write the file again with --raw-outputs"
    assert said("id , values\na , 1 inf\n").endswith("is not finite: the run's outputs diverged; leave it out of the "
                                                     "ensemble")
    assert said("id , values\na , 1 , 2\n") == f"{path}:2: id a: value ',' is not a number"
