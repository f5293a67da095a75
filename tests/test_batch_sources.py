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
    path.write_text(json.dumps({**record, "folders": [str(batch.resolve())]}))     # as such a record was written
    with pytest.raises(ValueError, match=f"alice .*{batch.resolve()}"):
        grade_batch(late, out, grade_fn=fake_grade())
    grade_batch(batch, out, grade_fn=fake_grade())                     # its own folder: graded on
    record = json.loads(path.read_text())
    assert record["sources"] == {"alice": str(batch.resolve()), "bob": str(batch.resolve())}
    assert "folders" not in record                                     # every row's folder is known: not needed


def two_folders(tmp_path: Path) -> tuple[Path, Path, Path]:
    """on-time/alice and on-time/bob, late/carol (a late upload under a new name), all full marks."""
    on_time, late = tmp_path / "on-time", tmp_path / "late"
    for folder, name in ((on_time, "alice"), (on_time, "bob"), (late, "carol")):
        (folder / name).mkdir(parents=True)
        (folder / name / "model.py").write_text("PASS")
    return on_time, late, tmp_path / "grades.csv"


def said_lines(capsys) -> list[str]:
    """The console's lines before the progress bar (the notes and the dropped rows)."""
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith(("note: ", "1 row", "2 rows"))]


def test_a_folders_gone_entry_is_dropped_though_another_folder_was_graded_into_the_csv(tmp_path: Path,
                                                                                       capsys) -> None:
    """The on-time folder's bob resubmits as bob2 after late uploads were graded into the same CSV: rerun, the
    on-time folder drops bob's row (it was graded from there) and keeps carol's (the late folder's), saying both."""
    on_time, late, out = two_folders(tmp_path)
    grade_batch(on_time, out, grade_fn=fake_grade())
    capsys.readouterr()
    grade_batch(late, out, grade_fn=fake_grade())
    assert said_lines(capsys) == [(f"note: 2 rows of entries not in {late} kept: the CSV also holds grades from "
                                   f"{on_time.resolve()}")]
    (on_time / "bob").rename(on_time / "bob2")
    rows = grade_batch(on_time, out, grade_fn=fake_grade())
    assert [r["submission"] for r in rows] == ["alice", "bob2", "carol"] == list(rows_of(out))
    assert said_lines(capsys) == [
        f"note: 1 row of entries not in {on_time} kept: the CSV also holds grades from {late.resolve()}",
        f"1 row of entries no longer in {on_time} dropped: bob (their results stay in {tmp_path / 'grades'}/)"]
    assert (tmp_path / "grades" / "bob.json").is_file()
    record = json.loads((tmp_path / "grades.options.json").read_text())
    assert record["sources"] == {"alice": str(on_time.resolve()), "bob2": str(on_time.resolve()),
                                 "carol": str(late.resolve())}
    assert "folders" not in record                                     # every row's folder is known


def test_another_folders_gone_entry_is_kept_until_that_folder_is_graded(tmp_path: Path, capsys) -> None:
    """late/carol taken out: the on-time folder's rerun keeps carol's row (a note names the late folder); the late
    folder's rerun drops it and keeps the on-time rows."""
    on_time, late, out = two_folders(tmp_path)
    grade_batch(on_time, out, grade_fn=fake_grade())
    grade_batch(late, out, grade_fn=fake_grade())
    capsys.readouterr()
    (late / "carol" / "model.py").unlink()
    (late / "carol").rmdir()
    assert [r["submission"] for r in grade_batch(on_time, out, grade_fn=fake_grade())] == ["alice", "bob", "carol"]
    assert said_lines(capsys) == [(f"note: 1 row of entries not in {on_time} kept: the CSV also holds grades from "
                                   f"{late.resolve()}")]
    assert [r["submission"] for r in grade_batch(late, out, grade_fn=fake_grade())] == ["alice", "bob"]
    assert said_lines(capsys) == [
        f"note: 2 rows of entries not in {late} kept: the CSV also holds grades from {on_time.resolve()}",
        f"1 row of entries no longer in {late} dropped: carol (their results stay in {tmp_path / 'grades'}/)"]


def test_a_gone_row_of_a_folder_the_record_does_not_tell_is_kept(tmp_path: Path, capsys) -> None:
    """A record older than its "sources" that names two folders: a gone row's folder is not known, so it is kept (the
    note names the record's other folders), and the record keeps naming them while such a row is left."""
    on_time, late, out = two_folders(tmp_path)
    grade_batch(on_time, out, grade_fn=fake_grade())
    grade_batch(late, out, grade_fn=fake_grade())
    path = tmp_path / "grades.options.json"
    record = json.loads(path.read_text())
    del record["sources"]
    path.write_text(json.dumps({**record, "folders": sorted([str(on_time.resolve()), str(late.resolve())])}))
    (late / "carol").rename(late / "dave")
    capsys.readouterr()
    rows = grade_batch(late, out, grade_fn=fake_grade())
    assert [r["submission"] for r in rows] == ["alice", "bob", "carol", "dave"]
    assert said_lines(capsys) == [(f"note: 3 rows of entries not in {late} kept: the CSV also holds grades from "
                                   f"{on_time.resolve()}")]
    record = json.loads(path.read_text())
    assert record["sources"] == {"dave": str(late.resolve())}
    assert record["folders"] == sorted([str(on_time.resolve()), str(late.resolve())])
