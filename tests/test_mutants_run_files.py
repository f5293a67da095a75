"""A run's relative files read from the folder it started in (tasks/core/run_files.py), pinned where mutation testing
found it loose: which settings are paths, what is joined to the run's start and when, the refusal of a task file found
nowhere, same place and same bytes, the data folder's default file, the lines a resume is refused with, the files a
prediction notes as changed, and where a run's checkpoint and predictions are found (tests/MUTATION.md:
`python tests/mutation.py tasks/core/run_files.py`)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tasks import classifier
from tasks.core.errors import MissingFileError
from tasks.core.run_files import (
    changed_files,
    default_file,
    forget_same_bytes,
    is_path_setting,
    other_files,
    prediction_folder,
    read_as,
    relative_paths,
    replayed,
    same_bytes,
    same_place,
    started_from,
    started_in,
    trained_checkpoint,
    trained_files,
)
from tasks.core.settings import build
from tasks.multitask.settings import Settings as MultitaskSettings


@pytest.fixture(autouse=True)
def fresh(tmp_path, monkeypatch):
    """Each test in tmp_path, with no start folder and no files taken as the same bytes, before and after."""
    monkeypatch.chdir(tmp_path)
    forget_same_bytes()
    started_in(None)
    yield
    forget_same_bytes()
    started_in(None)


def _mark(data: bytes, labelled: bool | None = True) -> dict:
    mark = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    return mark if labelled is None else mark | {"labelled": labelled}


def _put(path: Path, data: bytes = b"a") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _run_json(folder: Path, settings: dict, command: str = "classifier", **more) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.json").write_text(json.dumps({"command": command, "settings": settings, **more}))
    return folder


def test_path_settings_are_the_data_folder_simcse_output_split_files_and_task_files():
    for key in ("files.data_dir", "files.after_simcse", "files.sst_train", "files.para_dev", "files.sts_test",
                "files.train_file", "files.dev_file", "files.test_file"):
        assert is_path_setting(key), key
    for key in ("files.task", "files.data_dirs", "files.train", "run.train_file", "data_dir", "training.data_dir",
                "files.files.data_dir"):
        assert not is_path_setting(key), key


def test_a_run_jsons_relative_paths_are_its_files_outputs_from_run_and_a_model_that_may_be_a_folder(tmp_path):
    settings = {"files": {"data_dir": "data", "after_simcse": "simc", "sst_train": "t.csv", "para_dev": "/abs/d.csv",
                          "sts_test": "", "dev_file": None, "test_file": 3, "task": "words"},
                "run": {"checkpoint": "ck/c.pt", "predictions_dir": "/abs/p", "resume": "r"},
                "sweep": {"from_run": "stage1"}, "training": {"model": "tiny", "lr": "x"}}
    assert relative_paths(settings) == {"files.data_dir": "data", "files.after_simcse": "simc",
                                        "files.sst_train": "t.csv", "run.checkpoint": "ck/c.pt",
                                        "sweep.from_run": "stage1", "training.model": "tiny"}
    written = {"run": {"checkpoint": "/abs/c.pt", "predictions_dir": "preds"}, "sweep": {"from_run": ""}}
    assert relative_paths(written) == {"run.predictions_dir": "preds"}
    for model in ("minilm", "/abs/model", "", None):                      # an alias, absolute, none: never joined
        assert relative_paths({"training": {"model": model}}) == {}
    for odd in ({}, {"files": None, "run": None, "training": None}, {"files": ["data"], "run": "x", "training": "tiny"}):
        assert relative_paths(odd) == {}


def test_trained_files_joins_what_exists_where_the_run_started_and_its_outputs_whenever_that_folder_is_there(tmp_path):
    start = tmp_path / "start"
    _put(start / "data" / "x.csv")
    _put(start / "t.csv")
    (start / "tiny").mkdir()
    _put(start / "stage1")                                             # a file: a --from-run that exists
    settings = {"files": {"data_dir": "data", "train_file": "t.csv", "dev_file": "gone.csv"},
                "run": {"checkpoint": "ck/c.pt", "predictions_dir": "preds"}, "sweep": {"from_run": "stage1"},
                "training": {"model": "tiny"}}
    assert trained_files({"cwd": str(start), "settings": settings}) == {
        "files.data_dir": str(start / "data"), "files.train_file": str(start / "t.csv"),
        "run.checkpoint": str(start / "ck/c.pt"), "run.predictions_dir": str(start / "preds"),
        "sweep.from_run": str(start / "stage1"), "training.model": str(start / "tiny")}
    settings["training"]["model"] = "t.csv"                            # a file there: a Hub name, not a folder
    assert "training.model" not in trained_files({"cwd": str(start), "settings": settings})
    assert trained_files({"cwd": str(tmp_path / "gone"), "settings": settings}) == {}   # its folder gone: nothing
    assert trained_files({"settings": settings}) == trained_files({"cwd": 3, "settings": settings}) == {}
    assert trained_files({"cwd": str(start), "settings": ["files"]}) == {}


def test_replayed_joins_paths_to_where_the_run_started_leaves_out_replaced_settings_and_names_a_file_found_nowhere(
        tmp_path, monkeypatch):
    start, here = tmp_path / "start", tmp_path / "here"
    _put(start / "t.csv")
    _put(here / "only-here.csv")
    settings = {"task": "sst", "files": {"data_dir": "data", "train_file": "t.csv", "dev_file": "only-here.csv"},
                "run": {"checkpoint": "c.pt", "epochs": 1}, "training": {"model": "hub/name"}}
    record = {"cwd": str(start), "settings": settings}
    monkeypatch.chdir(here)
    assert replayed(record, "r.json") == {
        "task": "sst", "files": {"data_dir": "data", "train_file": str(start / "t.csv"), "dev_file": "only-here.csv"},
        "run": {"checkpoint": str(start / "c.pt"), "epochs": 1}, "training": {"model": "hub/name"}}
    assert replayed(record, "r.json", {"files.train_file", "run.checkpoint"}) == {
        "task": "sst", "files": {"data_dir": "data", "dev_file": "only-here.csv"}, "run": {"epochs": 1},
        "training": {"model": "hub/name"}}
    monkeypatch.chdir(start)                                           # from where it started: as written
    assert replayed(record, "r.json", {"run.epochs"})["files"] == settings["files"]
    monkeypatch.chdir(here)
    settings["files"]["test_file"] = "lost.csv"                         # neither there nor here
    with pytest.raises(MissingFileError) as caught:
        replayed(record, "r.json")
    assert str(caught.value) == (f"r.json: setting 'files.test_file': lost.csv: no such file, relative to {start}, "
                                 f"where the run started (nor here, {here}): run from there, or put the file back")
    assert replayed(record, "r.json", {"files.test_file"})["files"] == {   # a flag replaces it: need not exist
        "data_dir": "data", "train_file": str(start / "t.csv"), "dev_file": "only-here.csv"}
    assert replayed({"settings": settings}, "r.json")["files"]["test_file"] == "lost.csv"   # no cwd: as written


def test_a_run_json_whose_settings_are_not_an_object_is_one_error_naming_the_file(tmp_path):
    from tasks.core.errors import ConfigurationError
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"command": "classifier", "settings": ["data"], "cwd": "/elsewhere"}))
    with pytest.raises(ConfigurationError, match=rf"^{path}: the file must be a JSON object of settings$"):
        classifier.parse_settings(["--config", str(path)])


def test_same_place_reads_the_recorded_path_from_where_the_run_started_and_the_new_one_from_here(tmp_path,
                                                                                                 monkeypatch):
    start, here = tmp_path / "start", tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    assert started_from() == here
    assert same_place("a.csv", str(start / "a.csv"), start) and same_place("a.csv", "../start/a.csv", start)
    assert not same_place("a.csv", "../start/b.csv", start)
    assert same_place("a.csv", "a.csv", start)                          # as written: the same name
    assert not same_place("a.csv", "../start/a.csv") and same_place("../start/a.csv", "../start/a.csv")
    started_in(start)                                                   # a resumed run's start
    assert started_from() == start and same_place("a.csv", "../start/a.csv")
    assert same_place("a.csv", str(here / "a.csv"), here)                # a start given wins over started_in's
    started_in("")
    assert started_from() == here
    assert same_place(None, None) and same_place("", "") and not same_place(None, "a.csv")
    assert not same_place("a.csv", None) and not same_place("a.csv", "") and not same_place(3, "a.csv")
    assert not same_place("a.csv", 3) and not same_place("", ".", here)         # an empty path is no folder


def test_same_bytes_compares_each_labelled_file_the_run_read_under_the_new_folder(tmp_path, monkeypatch):
    for folder, dev, test in (("data", b"dev", b"test"), ("copy", b"dev", b"other"), ("short", b"de", b"test"),
                              ("edited", b"deV", b"test")):
        _put(tmp_path / folder / "sub" / "dev.csv", dev)
        _put(tmp_path / folder / "test.csv", test)
    record = {"cwd": str(tmp_path), "data_files": {"other/x.csv": _mark(b"x"),      # not under the folder: skipped
                                                   "data/test.csv": _mark(b"test", False),
                                                   "data/sub/dev.csv": _mark(b"dev", None)}}   # no "labelled": it is
    for key in ("files.data_dir", "files.after_simcse", "training.model"):
        forget_same_bytes()
        assert same_bytes(key, "data", "copy", record) == (key == "files.data_dir"), key
    assert not same_bytes("files.data_dir", "data", "short", record)          # its size differs
    assert not same_bytes("files.data_dir", "data", "edited", record)         # the same size, another sha256
    assert not same_bytes("files.data_dir", "data", "nowhere", record)
    assert not same_bytes("files.data_dir", None, "copy", record) and not same_bytes("files.data_dir", "data", 3, record)
    assert not same_bytes("files.train_file", "data", "copy", record)         # a file setting: only that file
    assert not same_bytes("files.data_dir", "data", "copy", {"cwd": str(tmp_path)})   # nothing recorded to compare
    assert not same_bytes("files.data_dir", "data/test.csv", "copy/test.csv", record)  # unlabelled only: nothing
    assert not same_place("data/sub/dev.csv", "short/sub/dev.csv", tmp_path)
    assert same_bytes("files.data_dir", "data", "copy", record)
    assert same_place("data/sub/dev.csv", "copy/sub/dev.csv", tmp_path) and same_place("data", "copy", tmp_path)
    forget_same_bytes()
    assert same_bytes("files.data_dir", "data", "copy", {"data_files": record["data_files"]})   # no cwd: from here
    assert same_place("data/sub/dev.csv", "copy/sub/dev.csv")
    monkeypatch.chdir(tmp_path / "copy")
    assert same_bytes("files.dev_file", "../data/sub/dev.csv", "sub/dev.csv", {"data_files": {
        "../data/sub/dev.csv": _mark(b"dev")}})
    assert not same_bytes("files.dev_file", "../data/sub/dev.csv", "test.csv", {"data_files": {
        "../data/sub/dev.csv": _mark(b"dev")}})


def test_the_data_folders_default_file_is_the_one_the_run_read_for_an_unset_task_file(tmp_path):
    one = build(classifier.Settings, {"files.data_dir": "dd", "task": "cfimdb"})
    assert default_file(one, "files.train_file") == "dd/ids-cfimdb-train.csv"
    assert default_file(one, "files.dev_file") == "dd/ids-cfimdb-dev.csv"
    assert default_file(one, "files.test_file") == "dd/ids-cfimdb-test-student.csv"
    many = build(MultitaskSettings, {"files.data_dir": "dd"})
    assert default_file(many, "files.sst_train") == "dd/ids-sst-train.csv"
    assert default_file(many, "files.para_dev") == "dd/quora-dev.csv"
    assert default_file(many, "files.sts_test") == "dd/sts-test-student.csv"
    for key in ("files.data_dir", "files.after_simcse", "run.train_file", "training.model"):
        assert default_file(many, key) is None and default_file(one, key) is None, key
    assert default_file(None, "files.train_file") is None
    assert default_file(many, "files.train_file") is None                    # a classifier's setting, not its


def test_other_files_are_named_with_where_the_recorded_one_is_read_from(tmp_path, monkeypatch):
    start = tmp_path / "start"
    _put(start / "train.csv", b"train")
    _put(start / "dd" / "ids-sst-dev.csv", b"dev")
    _put(tmp_path / "other.csv", b"other")
    _put(tmp_path / "dev-copy.csv", b"dev")
    record = {"cwd": str(start), "settings": {"files": {"train_file": "train.csv", "test_file": "/abs/t.csv",
                                                        "dev_file": None}, "training": {"model": "tiny"}},
              "data_files": {"dd/ids-sst-dev.csv": _mark(b"dev")}}
    monkeypatch.chdir(tmp_path)
    flags = {"files.train_file": "other.csv", "files.test_file": "t.csv", "training.model": "big", "run.epochs": 3,
             "training.lr": "x.csv", "files.dev_file": None}
    assert other_files(record, flags) == [
        f"files.train_file: run.json 'train.csv' (relative to {start}, where the run started), now 'other.csv'",
        "files.test_file: run.json '/abs/t.csv', now 't.csv'",
        f"training.model: run.json 'tiny' (relative to {start}, where the run started), now 'big'"]
    assert other_files(record, {"files.train_file": "start/train.csv", "training.model": "start/tiny"}) == []
    assert not same_place(None, "start/train.csv")                # it replaced a recorded file, not the run's None
    assert other_files(record, {"files.train_file": "start/train.csv", "files.test_file": "t.csv"}) == [
        "files.test_file: run.json '/abs/t.csv', now 't.csv'"]    # each flag compared, past one of the same place
    defaults = {"files.dev_file": "dd/ids-sst-dev.csv"}
    assert other_files(record, {"files.dev_file": "other.csv"}, defaults) == [
        (f"files.dev_file: run.json None (the data folder's dd/ids-sst-dev.csv, relative to {start}, where the run "
         "started), now 'other.csv'")]
    assert not same_place(None, "dev-copy.csv")
    assert other_files(record, {"files.dev_file": "dev-copy.csv"}, defaults) == []     # the same bytes
    assert same_place(None, "dev-copy.csv") and same_place(None, str(tmp_path / "dev-copy.csv"))  # the checkpoint's None
    assert not same_place(None, "other.csv")
    _put(tmp_path / "copy" / "ids-sst-dev.csv", b"dev")
    data = record | {"settings": {"files": {"data_dir": "dd"}}}
    assert other_files(data, {"files.data_dir": "copy"}) == []                       # a data folder of the same bytes
    assert other_files(data, {"files.data_dir": "start"}) == [
        f"files.data_dir: run.json 'dd' (relative to {start}, where the run started), now 'start'"]
    assert other_files({"settings": {"files": {"train_file": "train.csv"}}}, {"files.train_file": "other.csv"}) == [
        "files.train_file: run.json 'train.csv', now 'other.csv'"]                     # no cwd: no folder to name
    assert other_files({"settings": {"files": "x"}}, {"files.train_file": "other.csv"}) == [
        "files.train_file: run.json None, now 'other.csv'"]


def test_read_as_finds_the_recorded_file_among_those_read_now(tmp_path, monkeypatch):
    start, here = tmp_path / "start", tmp_path / "here"
    _put(start / "data" / "sub" / "dev.csv", b"dev")
    _put(here / "copy" / "sub" / "dev.csv", b"dev")
    _put(start / "data" / "test.csv", b"test")
    _put(here / "copy" / "test.csv", b"other")
    _put(here / "train.csv")
    monkeypatch.chdir(here)
    assert read_as("data/sub/dev.csv", ["x.csv", "../start/data/sub/dev.csv"], start) == "../start/data/sub/dev.csv"
    assert read_as("data/sub/dev.csv", ["copy/sub/dev.csv"], start) is None
    assert same_bytes("files.data_dir", "data", "copy", {"cwd": str(start), "data_files": {
        "data/sub/dev.csv": _mark(b"dev")}})
    assert read_as("data/sub/dev.csv", ["x.csv", "copy/sub/dev.csv"], start) == "copy/sub/dev.csv"
    assert read_as("data/test.csv", ["copy/test.csv"], start) == "copy/test.csv"   # its name under the copy
    assert read_as("data/sub/dev.csv", ["copy/sub/dev.csv"]) is None          # from here: not that file
    started_in(start)
    assert read_as("data/sub/dev.csv", ["copy/sub/dev.csv"]) == "copy/sub/dev.csv"
    assert read_as("data", ["copy"]) == "copy"
    assert read_as("train.csv", ["train.csv"]) == "train.csv"                 # its start's file gone: read here
    assert read_as("train.csv", ["other.csv", str(here / "train.csv")]) == str(here / "train.csv")
    _put(start / "train.csv")
    assert read_as("train.csv", [str(here / "train.csv")]) is None            # there, and not this one
    assert read_as("missing.csv", ["x.csv"]) is None


def test_changed_files_are_the_labelled_files_read_whose_bytes_differ_from_the_record(tmp_path, monkeypatch):
    start = tmp_path / "start"
    start.mkdir()
    recorded = {"dev.csv": _mark(b"dev"), "test.csv": _mark(b"test", False), "train.csv": _mark(b"train")}
    read = {str(start / "dev.csv"): _mark(b"deV"), str(start / "test.csv"): _mark(b"tesT", False),
            str(start / "train.csv"): _mark(b"train"), str(start / "new.csv"): _mark(b"new"),
            str(start / "short.csv"): _mark(b"shor")}
    assert changed_files(recorded | {"short.csv": _mark(b"short")}, read, start) == [
        str(start / "dev.csv"), str(start / "short.csv")]
    recorded["test.csv"]["labelled"] = True                    # a test file is read unlabelled: never a change
    assert changed_files(recorded, read, start) == [str(start / "dev.csv")]
    read[str(start / "dev.csv")].pop("labelled")               # labelled unless said otherwise
    assert changed_files(recorded, read, start) == [str(start / "dev.csv")]
    assert changed_files(None, read, start) == []
    monkeypatch.chdir(start)
    assert changed_files(recorded, {"dev.csv": _mark(b"deV")}, None) == ["dev.csv"]   # no start: this folder


def test_a_runs_predictions_and_checkpoint_are_found_where_it_wrote_them(tmp_path):
    start = tmp_path / "start"
    start.mkdir()
    run = _run_json(tmp_path / "run", {"run": {"predictions_dir": "preds", "checkpoint": "ck/c.pt"}},
                    cwd=str(start))
    assert prediction_folder(run) == start / "preds"
    assert trained_checkpoint(run) == start / "ck/c.pt"
    old = _run_json(tmp_path / "old", {"run": {"predictions_dir": "preds", "checkpoint": "ck/c.pt"}})
    assert prediction_folder(old) == Path("preds") and trained_checkpoint(old) == Path("ck/c.pt")   # from here
    plain = _run_json(tmp_path / "plain", {"run": {"predictions_dir": None}})
    assert prediction_folder(plain) == plain / "predictions" and trained_checkpoint(plain) == plain / "checkpoint.pt"
    bare = _run_json(tmp_path / "bare", {})
    assert trained_checkpoint(bare) == bare / "checkpoint.pt" and prediction_folder(bare) == bare / "predictions"
    assert trained_checkpoint(run / "run.json") == run / "run.json"                 # a file: itself
    (tmp_path / "older").mkdir()
    assert trained_checkpoint(tmp_path / "older") == tmp_path / "older" / "stage2.pt"   # DeeBERT before run.json


def test_a_deebert_sweep_finds_the_checkpoint_of_the_run_it_swept(tmp_path, monkeypatch):
    start = tmp_path / "start"
    _run_json(start / "trained", {"run": {"checkpoint": "c.pt"}}, "deebert", cwd=str(start))
    swept = _run_json(tmp_path / "swept", {"sweep": {"from_run": "trained"}}, "deebert", cwd=str(start))
    assert trained_checkpoint(swept) == start / "trained" / "stage2.pt"
    again = _run_json(tmp_path / "again", {"sweep": {"from_run": "swept"}}, "deebert", cwd=str(tmp_path))
    assert trained_checkpoint(again) == start / "trained" / "stage2.pt"            # followed back to the trained run
    own = _run_json(tmp_path / "own", {"sweep": {"from_run": None}, "run": {"checkpoint": "c.pt"}}, "deebert")
    assert trained_checkpoint(own) == own / "stage2.pt"
    assert trained_checkpoint(_run_json(tmp_path / "none", {}, "deebert")) == tmp_path / "none" / "stage2.pt"
    monkeypatch.chdir(start)                                   # a record without cwd: its from_run read from here
    old = _run_json(tmp_path / "old", {"sweep": {"from_run": "trained"}}, "deebert")
    assert trained_checkpoint(old) == Path("trained") / "stage2.pt"
