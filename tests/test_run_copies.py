"""A run folder copied with the tree it started in (cp -r hw hw2, mv hw hw2): resumed, replayed and predicted in the copy,
from the copy or another folder, it reads and writes the copy's files and leaves the original as it was (its relative
paths from the copy, its absolute ones under the original moved into the copy: tasks.core.run_files.copied, located,
moved); a run folder moved on its own reads from where it started."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import TEST_DEVICE
from test_run_folders import _sst_run

from tasks import classifier, predict
from tasks.core.checkpoints import load_checkpoint
from tasks.core.errors import run_cli
from tasks.core.run_files import changed_files, located, trained_files
from tasks.core.runs import RUN_FILE

pytestmark = pytest.mark.usefixtures("one_thread")


def _contents(folder: Path) -> dict[Path, bytes]:
    """Every file under `folder` and its bytes."""
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _copied(tree: Path) -> tuple[Path, dict[Path, bytes]]:
    """cp -r TREE TREE-copy: the copy, and the original's contents to compare with afterwards."""
    copy = tree.parent / f"{tree.name}-copy"
    shutil.copytree(tree, copy, symlinks=True)
    return copy, _contents(tree)


def test_a_run_copied_with_the_folder_it_started_in_reads_and_writes_in_the_copy(tiny_dir, tmp_path, capsys,
                                                                                   monkeypatch):
    """A tree copied with its runs (cp -r hw hw2) and a run resumed, replayed or predicted in the copy: the copy's files
    are read and written, from the copy or from another folder; the original tree is left as it was."""
    _sst_run(tmp_path, monkeypatch, "--checkpoint", "ck/c.pt", "--predictions-dir", "preds")
    classifier.run(classifier.parse_settings(["--resume", "../run", "--epochs", "2"]))   # resumed from another folder
    copy, before = _copied(tmp_path)
    monkeypatch.chdir(copy)
    classifier.run(classifier.parse_settings(["--resume", "run", "--epochs", "3"]))
    assert load_checkpoint(copy / "ck" / "c.pt")["epoch"] == 3
    assert (copy / "preds" / "sst-dev-output.csv").stat().st_mtime >= (copy / "ck" / "c.pt").stat().st_mtime
    record = json.loads((copy / "run" / RUN_FILE).read_text())
    assert (record["cwd"], record["run_dir"]) == (str(copy), str(copy / "run"))
    assert copy / record["settings"]["files"]["train_file"] == copy / "train.csv"     # the copy's own file
    monkeypatch.chdir(copy / "elsewhere")                                   # the copy's run from another folder
    classifier.run(classifier.parse_settings(["--resume", str(copy / "run"), "--epochs", "4"]))
    assert load_checkpoint(copy / "ck" / "c.pt")["epoch"] == 4
    again = classifier.parse_settings(["--config", str(copy / "run" / RUN_FILE), "--run-dir", "again"])
    assert (again.files.train_file, again.training.model) == (str(copy / "train.csv"), str(copy / "tiny"))
    assert set(trained_files(json.loads((copy / "run" / RUN_FILE).read_text()) | {"cwd": str(copy)}).values()) <= \
        {str(copy / n) for n in ("train.csv", "dev.csv", "test.csv", "tiny", "ck/c.pt", "preds")}
    assert run_cli(lambda: predict.main([str(copy / "run"), "--out", "pred", "--device", TEST_DEVICE])) == 0, \
        capsys.readouterr().err
    assert _contents(tmp_path) == before                                             # the original: untouched
    shutil.rmtree(copy)


def start_folder(record: dict, directory: Path):
    """The cwd a run.json `record` read in `directory` is read from (located's)."""
    return located(record, directory).get("cwd")


def test_the_start_folder_of_a_run_json_read_where_it_is(tmp_path):
    """located: the recorded cwd where the run folder is where the run wrote it, or was moved on its own (even into
    another runs/ folder) or renamed; the copy's when the folder holding the run and the folder it started in was
    copied (nested, --run-dir outside the start folder, a default run folder or a --run-dir of a run.json before
    run_dir was recorded, the original gone), its absolute paths under the original read under the copy."""
    hw, hw2 = tmp_path / "hw", tmp_path / "hw2"
    (hw / "runs" / "r1").mkdir(parents=True)
    (hw / "train.csv").write_text("x")
    record = {"cwd": str(hw), "run_dir": str(hw / "runs" / "r1"), "settings": {"files": {"train_file": "train.csv"}}}
    assert start_folder(record, hw / "runs" / "r1") == str(hw)
    shutil.copytree(hw, hw2)
    shutil.copytree(hw, hw / "backup")
    for folder in (hw2, hw / "backup"):                                              # cp -r hw hw2; cp -r hw hw/backup
        assert start_folder(record, folder / "runs" / "r1") == str(folder)
    (tmp_path / "archive" / "runs" / "r1").mkdir(parents=True)                       # archived alone: not a copy
    assert start_folder(record, tmp_path / "archive" / "runs" / "r1") == str(hw)
    assert start_folder(record, hw2 / "runs" / "best") == str(hw)                    # renamed: not told apart
    for legacy in ({"run": {"run_dir": "runs/r1"}}, {"run": {"run_dir": None}}):     # --run-dir; a default folder
        old = {"cwd": str(hw), "settings": {"files": {"train_file": "train.csv"}} | legacy}
        assert start_folder(old, hw2 / "runs" / "r1") == str(hw2)
    gone = record | {"cwd": str(tmp_path / "gone"), "run_dir": str(tmp_path / "gone" / "runs" / "r1")}   # mv hw hw2
    assert start_folder(gone, hw2 / "runs" / "r1") == str(hw2)
    (hw / "part1").mkdir()
    outside = record | {"cwd": str(hw / "part1"), "settings": {"files": {"train_file": "../train.csv"}}}
    shutil.copytree(hw, tmp_path / "hw3", ignore=shutil.ignore_patterns("backup"))   # --run-dir ../runs/r1 from part1
    assert start_folder(outside, tmp_path / "hw3" / "runs" / "r1") == str(tmp_path / "hw3" / "part1")
    joined = {"cwd": str(hw / "other"), "run_dir": str(hw / "runs" / "r1"),           # resumed from hw/other, or
              "settings": {"files": {"train_file": str(hw / "train.csv")}}}          # given $PWD/train.csv
    copy = located(joined, hw2 / "runs" / "r1")
    assert (copy["cwd"], copy["moved_from"], copy["moved_to"]) == (str(hw2 / "other"), str(hw), str(hw2))
    assert trained_files(copy) == {"files.train_file": str(hw2 / "train.csv")}
    assert located(joined, hw / "runs" / "r1") == joined
    assert start_folder({"settings": {}}, hw) is None


def test_a_resume_from_another_folder_with_a_file_flag_resumes_again_and_absolute_paths_move_with_a_copy(
        tiny_dir, tmp_path, capsys, monkeypatch):
    """A resume from another folder given --train-file relative to that folder is resumed again plainly, from where the
    run started and from elsewhere; a run given absolute paths ($PWD/...) and copied with its tree reads and writes the
    copy's files, the original left as it was."""
    _, elsewhere = _sst_run(tmp_path, monkeypatch, "--checkpoint", str(tmp_path / "ck" / "c.pt"),
                            "--predictions-dir", str(tmp_path / "preds"))
    classifier.run(classifier.parse_settings(["--resume", "../run", "--train-file", "../train.csv", "--epochs", "2"]))
    monkeypatch.chdir(tmp_path)
    classifier.run(classifier.parse_settings(["--resume", "run", "--epochs", "3"]))
    monkeypatch.chdir(elsewhere)
    classifier.run(classifier.parse_settings(["--resume", "../run", "--epochs", "4"]))
    assert load_checkpoint(tmp_path / "ck" / "c.pt")["epoch"] == 4
    copy, before = _copied(tmp_path)
    monkeypatch.chdir(copy)
    classifier.run(classifier.parse_settings(["--resume", "run", "--epochs", "5"]))
    assert load_checkpoint(copy / "ck" / "c.pt")["epoch"] == 5
    assert run_cli(lambda: predict.main([str(copy / "run"), "--out", "pred", "--device", TEST_DEVICE])) == 0, \
        capsys.readouterr().err
    assert _contents(tmp_path) == before                                             # the original: untouched
    shutil.rmtree(copy)


def test_an_older_default_run_folder_under_minbert_runs_is_found_in_a_copy(tmp_path, monkeypatch):
    """A run.json before run_dir was recorded, of a default run folder under a relative $MINBERT_RUNS: its copy is
    told by that folder too."""
    hw, hw2 = tmp_path / "hw", tmp_path / "hw2"
    (hw / "myruns" / "r1").mkdir(parents=True)
    (hw / "train.csv").write_text("x")
    shutil.copytree(hw, hw2)
    old = {"cwd": str(hw), "settings": {"files": {"train_file": "train.csv"}, "run": {"run_dir": None}}}
    assert start_folder(old, hw2 / "myruns" / "r1") == str(hw)
    monkeypatch.setenv("MINBERT_RUNS", "myruns")
    assert start_folder(old, hw2 / "myruns" / "r1") == str(hw2)


def test_a_copy_is_told_from_a_resume_outside_the_tree_a_run_folder_at_its_start_and_a_copy_without_outputs(tmp_path):
    """located finds the folder copied above the run folder even when the run.json's cwd lies outside it (resumed from
    a sibling folder: its paths absolute under the tree), when the run folder is where the run started (--run-dir .),
    and when the copy left out the checkpoint (what a run reads decides, not what it wrote); predict's note on a
    changed file reads the checkpoint's absolute paths under the copy."""
    t, t2 = tmp_path / "T", tmp_path / "T2"
    (t / "runs" / "r").mkdir(parents=True)
    (t / "ck").mkdir()
    (tmp_path / "elsewhere").mkdir()
    for name in ("train.csv", "ck/c.pt"):
        (t / name).write_text("x")
    shutil.copytree(t, t2, ignore=shutil.ignore_patterns("c.pt"))
    sibling = {"cwd": str(tmp_path / "elsewhere"), "run_dir": str(t / "runs" / "r"),
               "settings": {"files": {"train_file": str(t / "train.csv")}, "run": {"checkpoint": str(t / "ck/c.pt")}}}
    copy = located(sibling, t2 / "runs" / "r")
    assert (copy["cwd"], copy["moved_from"], copy["moved_to"]) == (str(tmp_path / "elsewhere"), str(t), str(t2))
    assert trained_files(copy) == {"files.train_file": str(t2 / "train.csv"), "run.checkpoint": str(t2 / "ck/c.pt")}
    itself = {"cwd": str(t), "run_dir": str(t), "settings": {"files": {"train_file": "train.csv"}}}
    assert start_folder(itself, t2) == str(t2) and start_folder(itself, t) == str(t)
    relative = {"cwd": str(t), "run_dir": str(t / "runs" / "r"),
                "settings": {"files": {"train_file": "train.csv"}, "run": {"checkpoint": "ck/c.pt"}}}
    assert start_folder(relative, t2 / "runs" / "r") == str(t2)                     # no ck/c.pt in the copy
    mark = {"bytes": 1, "sha256": "0" * 64, "labelled": True}
    now = {str(t2 / "train.csv"): {"bytes": 2, "sha256": "1" * 64, "labelled": True}}
    assert changed_files({str(t / "train.csv"): mark}, now, str(t2), (str(t), str(t2))) == [str(t2 / "train.csv")]
    assert changed_files({str(t / "train.csv"): mark}, now, str(t2)) == []
