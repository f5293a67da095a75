"""grade --batch into one CSV from two folders: a row is never silently replaced by another folder's entry of its name."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from test_grade_batch import fake_grade

from assignments.batch import grade_batch, run_batch


def rows_of(path: Path) -> dict[str, tuple[str, str]]:
    with open(path, newline="") as f:
        return {r["submission"]: (r["state"], r["score"]) for r in csv.DictReader(f)}


def folders(tmp_path: Path) -> tuple[Path, Path, Path]:
    """batch/alice (full marks) and batch/bob, late/alice (a resubmission scoring 25) and late/carol."""
    batch, late = tmp_path / "batch", tmp_path / "late"
    for folder, name, text in ((batch, "alice", "PASS"), (batch, "bob", "PASS"), (late, "alice", "WRONG"),
                               (late, "carol", "PASS")):
        (folder / name).mkdir(parents=True)
        (folder / name / "model.py").write_text(text)
    return batch, late, tmp_path / "grades.csv"


def test_another_folders_entry_of_the_same_name_is_refused_naming_both(tmp_path: Path) -> None:
    batch, late, out = folders(tmp_path)
    grade_batch(batch, out, grade_fn=fake_grade())
    before, results = out.read_bytes(), (tmp_path / "grades" / "alice.json").read_bytes()
    with pytest.raises(ValueError) as e:
        grade_batch(late, out, grade_fn=fake_grade())
    said = str(e.value)
    assert "\n" not in said and "alice" in said and str(batch.resolve()) in said and str(late.resolve()) in said
    assert "--regrade" in said and "another --csv" in said
    assert out.read_bytes() == before and (tmp_path / "grades" / "alice.json").read_bytes() == results
    assert not (tmp_path / "grades" / "carol.json").exists()          # refused before any entry is graded


def test_the_refusal_is_one_error_line_and_exit_2(tmp_path: Path, capsys) -> None:
    batch, late, out = folders(tmp_path)
    assert run_batch(str(batch), str(out), False, {"grade_fn": fake_grade()}) == 0
    capsys.readouterr()
    assert run_batch(str(late), str(out), False, {"grade_fn": fake_grade()}) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {out}: ")


def test_regrade_replaces_on_request_and_then_the_first_folder_is_refused(tmp_path: Path, capsys) -> None:
    batch, late, out = folders(tmp_path)
    grade_batch(batch, out, grade_fn=fake_grade())
    grade_batch(late, out, regrade=True, grade_fn=fake_grade())
    assert rows_of(out) == {"alice": ("graded", "25"), "bob": ("graded", "45"), "carol": ("graded", "45")}
    assert f"alice (graded from {batch.resolve()}) graded again from {late.resolve()}" in capsys.readouterr().err
    with pytest.raises(ValueError, match="alice"):                    # the old upload never comes back silently
        grade_batch(batch, out, grade_fn=fake_grade())
    assert rows_of(out)["alice"] == ("graded", "25")
    sources = json.loads((tmp_path / "grades.options.json").read_text())["sources"]
    assert sources == {"alice": str(late.resolve()), "bob": str(batch.resolve()), "carol": str(late.resolve())}


def test_reruns_of_one_folder_and_new_names_from_another_go_on_as_before(tmp_path: Path) -> None:
    batch, late, out = folders(tmp_path)
    (late / "alice" / "model.py").unlink()
    (late / "alice").rmdir()
    calls: list = []
    grade_batch(batch, out, grade_fn=fake_grade(calls))
    grade_batch(batch, out, grade_fn=fake_grade(calls))                # unchanged: skipped
    grade_batch(late, out, grade_fn=fake_grade(calls))                 # carol is new: graded, the others kept
    (batch / "bob" / "model.py").write_text("WRONG")
    grade_batch(batch, out, grade_fn=fake_grade(calls))                # bob changed: graded again
    assert [c[0] for c in calls] == ["alice", "bob", "carol", "bob"]
    assert rows_of(out) == {"alice": ("graded", "45"), "bob": ("graded", "25"), "carol": ("graded", "45")}


def test_a_record_without_sources_takes_its_one_folder_for_every_row(tmp_path: Path) -> None:
    """A CSV graded before the sources were recorded: its one recorded folder is every row's."""
    batch, late, out = folders(tmp_path)
    grade_batch(batch, out, grade_fn=fake_grade())
    path = tmp_path / "grades.options.json"
    record = json.loads(path.read_text())
    del record["sources"]
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match=f"alice .*{batch.resolve()}"):
        grade_batch(late, out, grade_fn=fake_grade())
    grade_batch(batch, out, grade_fn=fake_grade())                     # its own folder: graded on
    assert json.loads(path.read_text())["sources"] == {"alice": str(batch.resolve()), "bob": str(batch.resolve())}
