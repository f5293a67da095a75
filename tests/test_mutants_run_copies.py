"""Which folder a run folder copied with its tree reads and writes (tasks/core/run_files.py's copied, located, moved),
pinned where mutation testing found it loose: an older run.json's --run-dir outside runs/, a run.json whose cwd or
run_dir is not a path, and a copied run's absolute --predictions-dir (tests/MUTATION.md:
`python tests/mutation.py tasks/core/run_files.py`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tasks.core.run_files import located, prediction_folder


def _tree(tmp_path: Path, run: str = "runs/r1") -> tuple[Path, Path]:
    """hw with train.csv and an empty run folder `run`, copied to hw2 (cp -r hw hw2): (hw, hw2)."""
    hw, hw2 = tmp_path / "hw", tmp_path / "hw2"
    (hw / run).mkdir(parents=True)
    (hw / "train.csv").write_text("x")
    shutil.copytree(hw, hw2)
    return hw, hw2


def test_an_older_run_json_given_a_run_dir_outside_runs_is_found_in_a_copy(tmp_path):
    """A run.json written before run_dir was recorded, of a run given --run-dir out/r1 (not a default folder under
    runs/): its copy reads and writes the copy, told by that --run-dir; where it was written, the record as it is."""
    hw, hw2 = _tree(tmp_path, "out/r1")
    old = {"cwd": str(hw), "settings": {"files": {"train_file": "train.csv"}, "run": {"run_dir": "out/r1"}}}
    copy = located(old, hw2 / "out" / "r1")
    assert (copy["cwd"], copy["moved_from"], copy["moved_to"]) == (str(hw2), str(hw), str(hw2))
    assert located(old, hw / "out" / "r1") == old


def test_a_run_json_whose_cwd_or_run_dir_is_not_a_path_is_read_as_one_without(tmp_path, monkeypatch):
    """A hand-edited run.json: an empty, relative or non-string cwd is no start folder to tell a copy by (read from
    here, as before the cwd was recorded), and a run_dir that is not a string is no run folder (a default one under
    runs/ is looked for); neither is a traceback."""
    hw, hw2 = _tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    settings = {"files": {"train_file": "train.csv"}}
    for cwd in ("", 5, "hw"):
        record = {"cwd": cwd, "run_dir": str(hw / "runs" / "r1"), "settings": settings}
        assert located(record, hw2 / "runs" / "r1") == record
    for run_dir in (5, ["runs/r1"]):
        record = {"cwd": str(hw), "run_dir": run_dir, "settings": settings}
        assert located(record, hw2 / "runs" / "r1")["cwd"] == str(hw2)


def test_a_copied_runs_absolute_predictions_dir_is_read_in_the_copy(tmp_path):
    """prediction_folder of a run given an absolute --predictions-dir ($PWD/preds) and copied with its tree: the
    copy's, whether the run started at the top of the tree or in a folder beside it; the original's own, where it
    is."""
    hw, hw2 = _tree(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    for cwd in (hw, tmp_path / "elsewhere"):
        record = {"command": "classifier", "cwd": str(cwd), "run_dir": str(hw / "runs" / "r1"),
                  "settings": {"files": {"train_file": str(hw / "train.csv")},
                               "run": {"predictions_dir": str(hw / "preds")}}}
        for tree in (hw, hw2):
            (tree / "runs" / "r1" / "run.json").write_text(json.dumps(record))
        assert prediction_folder(hw2 / "runs" / "r1") == hw2 / "preds"
        assert prediction_folder(hw / "runs" / "r1") == hw / "preds"
