"""A Gradescope "Export Submissions" folder (submission_NNN/ and submission_metadata.yml) graded as a batch and
scored as a board: the metadata is no submission, and each row names its students (assignments/export.py); the
scoreboard takes the leaderboard bundle's private fraction (--settings)."""

from __future__ import annotations

import csv
import io
import json
import zipfile
from pathlib import Path

import pytest
from conftest import DATA
from leaderboard_fixtures import SALT, dev_labels, partial, write_gold, write_upload
from test_grade_batch import fake_grade, read_rows, write_zip

from assignments import bundle, scoreboard
from assignments.batch import grade_batch
from assignments.export import MetadataError, Submitter, read_metadata
from assignments.grade import main as grade_main
from assignments.leaderboard import SETTINGS_MEMBER

METADATA = """---
submission_101:
  :submitters:
  - :name: Ada Lovelace
    :sid: '001'
    :email: ada@example.edu
  :created_at: 2026-11-20 10:00:00.000000000 -08:00
  :score: 0.0
  :status: processed
  :history:
  - :id: 99
    :created_at: 2026-11-19 09:00:00.000000000 -08:00
    :submitters:
    - :name: Not A Submitter
  :results:
    output: |-
      a block of text
      - that looks like an item
    tests:
    - name: 'attention: 25 points'
      score: 0
submission_102:
  :submitters:
  - :name: "Charles Babbage"
    :sid: '002'
    :email: charles@example.edu
  - :name: Mary O'Brien  # two students, one submission
    :sid: 3
    :email: mary@example.edu
  :created_at: 2026-11-21 11:30:00.000000000 -08:00
  :score: 0.0
  :status: processed
submission_103:
  :submitters:
  - :name: 'Grace ''Amazing'' Hopper'
    :sid: '004'
    :email: grace@example.edu
  :created_at: 2026-11-22 08:15:00.000000000 -08:00
  :score: 0.0
  :status: processed
"""
STUDENTS = {"submission_101": ("Ada Lovelace", "ada@example.edu", "001"),
            "submission_102": ("Charles Babbage; Mary O'Brien", "charles@example.edu; mary@example.edu", "002; 3"),
            "submission_103": ("Grace 'Amazing' Hopper", "grace@example.edu", "004")}


def export(tmp_path: Path) -> Path:
    """A made-up export: two submission folders and one zip (as an upload may stay zipped), and the metadata."""
    folder = tmp_path / "export"
    for name, text in (("submission_101", "PASS"), ("submission_102", "WRONG")):
        (folder / name / "minbert").mkdir(parents=True)
        (folder / name / "minbert" / "model.py").write_text(text)
    write_zip(folder / "submission_103.zip", {"model.py": "PASS"})
    (folder / "submission_metadata.yml").write_text(METADATA)
    return folder


def test_the_reader_takes_each_submissions_students_and_skips_the_rest(tmp_path: Path) -> None:
    (tmp_path / "m.yml").write_text(METADATA)
    found = read_metadata(tmp_path / "m.yml")
    assert found == {"submission_101": [Submitter("Ada Lovelace", "ada@example.edu", "001")],
                     "submission_102": [Submitter("Charles Babbage", "charles@example.edu", "002"),
                                        Submitter("Mary O'Brien", "mary@example.edu", "3")],
                     "submission_103": [Submitter("Grace 'Amazing' Hopper", "grace@example.edu", "004")]}


def test_the_reader_agrees_with_a_yaml_parser_where_there_is_one(tmp_path: Path) -> None:
    yaml = pytest.importorskip("yaml")            # not a dependency of minbert; huggingface_hub brings it
    (tmp_path / "m.yml").write_text(METADATA)
    theirs = {name: [Submitter(*(str(s.get(k, "")) for k in (":name", ":email", ":sid"))) for s in v[":submitters"]]
              for name, v in yaml.safe_load(METADATA).items()}
    assert read_metadata(tmp_path / "m.yml") == theirs


def test_a_submitter_written_as_a_bare_dash_keeps_its_keys(tmp_path: Path) -> None:
    """YAML's other list layout: '-' alone on its line, the submitter's keys below it at any deeper column."""
    text = ("submission_7:\n  :submitters:\n  -\n    :name: Dan Bare\n    :sid: '07'\n  - :name: Eve\n"
            "  -\n      :email: f@example.edu\n      :name: Fay\n  :score: 1.0\n")
    (tmp_path / "m.yml").write_text(text)
    assert read_metadata(tmp_path / "m.yml") == {"submission_7": [
        Submitter("Dan Bare", "", "07"), Submitter("Eve", "", ""), Submitter("Fay", "f@example.edu", "")]}
    yaml = pytest.importorskip("yaml")
    theirs = [Submitter(*(str(s.get(k, "")) for k in (":name", ":email", ":sid")))
              for s in yaml.safe_load(text)["submission_7"][":submitters"]]
    assert read_metadata(tmp_path / "m.yml")["submission_7"] == theirs


@pytest.mark.parametrize("text, line, says", [
    ("submission_1:\n  :submitters:\n  - :name: 'Ada\n", 3, "a quoted value that does not end on its line"),
    ("submission_1: 5\n", 1, "expected a submission's name and a colon"),
    ("  :submitters:\n", 1, "an indented line before the first submission"),
    ("submission_1:\n  :submitters: Ada\n", 2, "expected the submitters as a list"),
    ("submission_1:\n  :submitters:\n  - :name: A\n   :sid: 1\n", 4, "expected a submitter's key"),
    ("submission_1:\n\t:submitters:\n", 2, "indented with a tab"),
    ("submission_1:\n  :a: 1\nsubmission_1:\n", 3, "submission_1 is named twice"),
    ("submission_1:\n  :submitters:\n  - :name: |\n      Ada\n", 3, "a value this reader does not read"),
], ids=["open-quote", "value", "indented", "not-a-list", "bad-indent", "tab", "twice", "block"])
def test_a_malformed_metadata_file_is_refused_with_its_line(tmp_path: Path, text: str, line: int, says: str) -> None:
    (tmp_path / "m.yml").write_text(text)
    with pytest.raises(MetadataError, match=rf"m\.yml:{line}: {says}"):
        read_metadata(tmp_path / "m.yml")


def test_a_batch_over_an_export_names_each_submissions_students(tmp_path: Path, capsys) -> None:
    folder, out = export(tmp_path), tmp_path / "grades.csv"
    calls: list = []
    grade_batch(folder, out, grade_fn=fake_grade(calls), seed=1, as_user="none")
    assert len(calls) == 3                                  # the metadata is no submission (no "bad upload" row)
    rows = read_rows(out)
    assert list(rows[0])[:5] == ["submission", "names", "emails", "sids", "state"]
    assert {r["submission"]: (r["names"], r["emails"], r["sids"]) for r in rows} == {
        "submission_101": STUDENTS["submission_101"], "submission_102": STUDENTS["submission_102"],
        "submission_103.zip": STUDENTS["submission_103"]}
    assert [(r["state"], r["score"]) for r in rows] == [("graded", "45"), ("graded", "25"), ("graded", "45")]
    before = out.read_text()
    calls.clear()
    grade_batch(folder, out, grade_fn=fake_grade(calls), seed=1, as_user="none")
    assert not calls and out.read_text() == before           # unchanged: skipped, the students' columns kept
    (folder / "submission_metadata.yml").write_text(METADATA.replace("  - :name: Ada", "  - :name: 'Ada", 1))
    (folder / "submission_101" / "minbert" / "model.py").write_text("WRONG")
    capsys.readouterr()
    grade_batch(folder, out, grade_fn=fake_grade(calls), seed=1, as_user="none")
    assert "submission_metadata.yml:4: a quoted value that does not end on its line" in capsys.readouterr().err
    rows = {r["submission"]: r for r in read_rows(out)}       # graded all the same; the names it had are kept
    assert rows["submission_101"]["score"] == "25" and rows["submission_101"]["names"] == "Ada Lovelace"


def test_an_export_given_one_folder_too_high_is_refused_not_graded_as_one_student(tmp_path: Path, capsys) -> None:
    """--batch wrap/ where wrap/ holds the export (or its zip, as Gradescope downloads it): that entry is no
    submission; grading it would take submission_101's files as one student's. Refused, naming the folder to give."""
    wrap = tmp_path / "top" / "wrap"
    folder = export(wrap)
    write_zip(wrap / "assignment_77_export.zip", {"assignment_77_export/submission_metadata.yml": METADATA,
                                                  "assignment_77_export/submission_101/model.py": "PASS"})
    calls: list = []
    rows = grade_batch(wrap, tmp_path / "g1.csv", grade_fn=fake_grade(calls))
    assert not calls
    assert [(r["submission"], r["state"]) for r in rows] == [("assignment_77_export.zip", "bad upload"),
                                                            ("export", "bad upload")]
    assert rows[1]["notes"] == f"a Gradescope export, not one submission (it holds submission_metadata.yml): " \
                               f"give --batch {folder}"
    assert rows[0]["notes"].startswith("a zip of a Gradescope export, not one submission (it holds "
                                       "assignment_77_export/submission_metadata.yml): unzip it and give --batch")
    assert "export: bad upload: a Gradescope export" in capsys.readouterr().out       # said as it goes
    # one more folder up: the metadata one folder down is found too
    rows = grade_batch(tmp_path / "top", tmp_path / "g2.csv", grade_fn=fake_grade(calls))
    assert not calls and rows[0]["submission"] == "wrap" and rows[0]["state"] == "bad upload"
    assert "(it holds export/submission_metadata.yml): give --batch" in rows[0]["notes"]
    # given as one submission: refused in one line, exit 2
    capsys.readouterr()
    assert grade_main([str(folder), "--as-user", "none", "--out", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {folder}: a Gradescope export, not one submission (it holds submission_metadata.yml): " \
                  f"give --batch {folder}\n", err
    assert not (tmp_path / "r.json").exists()


def test_the_scoreboard_names_an_exports_students_and_takes_the_bundles_fraction(tmp_path: Path, capsys) -> None:
    labels, dev = write_gold(tmp_path / "gold"), dev_labels()
    (tmp_path / "salt").write_text(SALT + "\n")
    folder = tmp_path / "export"
    write_upload(folder / "submission_101", labels, dev)
    write_upload(folder / "submission_102" / "predictions", partial(labels), dev)
    (folder / "submission_metadata.yml").write_text(METADATA)
    files = bundle.leaderboard_files(str(tmp_path / "gold"), str(tmp_path / "salt"), 0, 0.3, 1.0, "full")
    bundle.write_zip(tmp_path / "leaderboard.zip", files)   # the bundle's own settings, as its zip holds them
    with zipfile.ZipFile(tmp_path / "leaderboard.zip") as z:
        (tmp_path / "settings.json").write_bytes(z.read(SETTINGS_MEMBER))
    assert json.loads((tmp_path / "settings.json").read_text())["private_fraction"] == 0.3
    base = [str(folder), "--gold", str(tmp_path / "gold"), "--salt-file", str(tmp_path / "salt"), "--data-dir",
            str(DATA)]

    def board(*extra: str) -> list[dict]:
        argv = [*base, *extra, "--csv", str(tmp_path / "board.csv"), "--md", str(tmp_path / "board.md")]
        assert scoreboard.main(argv) == 0
        return list(csv.DictReader(io.StringIO((tmp_path / "board.csv").read_text())))
    typed = board("--private-fraction", "0.3")
    rows = board("--settings", str(tmp_path / "leaderboard.zip"))
    assert rows == typed != board()                                    # the bundle's 0.3, not the default 0.5
    assert board("--settings", str(tmp_path / "settings.json"), "--private-fraction", "0.3") == typed
    assert list(rows[0])[:5] == ["rank", "submission", "names", "emails", "sids"]
    assert [(r["submission"], r["names"], r["sids"]) for r in rows] == [
        ("submission_101", *STUDENTS["submission_101"][::2]), ("submission_102", *STUDENTS["submission_102"][::2])]
    assert "| 1 | submission_101 | Ada Lovelace | ada@example.edu | 001 |" in (tmp_path / "board.md").read_text()
    capsys.readouterr()
    argv = [*base, "--settings", str(tmp_path / "leaderboard.zip"), "--private-fraction", "0.5", "--csv",
            str(tmp_path / "b2.csv"), "--md", str(tmp_path / "b2.md")]
    assert scoreboard.main(argv) == 2                                  # given both ways, and not the same: refused
    err = capsys.readouterr().err
    assert err.startswith("error: --private-fraction 0.5 differs from 0.3 in ") and err.count("\n") == 1, err
    assert not (tmp_path / "b2.csv").exists()
