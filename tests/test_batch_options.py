"""A batch's CSV never mixes grades made with other options (assignments/batch_options.py): the options are recorded
beside it, a run with others is refused unless --regrade, which starts the CSV again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_grade_batch import fake_grade, read_rows, uploads

from assignments import batch, batch_options, provenance
from assignments.batch import grade_batch
from assignments.batch_options import options_path
from assignments.grade import main as grade_main
from assignments.make import ROOT

SEED, OTHER = 8072917364512093847, 8072917364512093848


def test_a_run_with_other_options_is_refused_and_leaves_the_csv_and_its_record(tmp_path: Path) -> None:
    subs, out = uploads(tmp_path), tmp_path / "grades.csv"
    grade_batch(subs, out, grade_fn=fake_grade(), groups=["core"], seed=SEED)
    csv_before, record_before = out.read_bytes(), options_path(out).read_bytes()
    assert options_path(out) == tmp_path / "grades.options.json"
    record = json.loads(record_before)
    assert record["groups"] == ["core"] and record["profile"] == "full" and record["timeout"] == 20.0
    assert record["reference_commit"] == provenance.reference_commit(ROOT)
    assert len(record["seed_sha256"]) == 16 and str(SEED) not in record_before.decode()     # never the seed
    for changed, says in (({"groups": ["multitask"]}, "--groups core -> multitask"),
                          ({"seed": OTHER}, "the grading seed"),
                          ({"timeout": 5.0}, "--timeout 20 s -> 5 s"),
                          ({"hide_hints": True}, "--hide-hints off -> on"),
                          ({"profile": "part1"}, "--profile full -> part1"),
                          ({"parts": ["adamw"]}, "--parts (none) -> adamw")):
        calls: list = []
        with pytest.raises(ValueError) as refused:
            grade_batch(subs, out, grade_fn=fake_grade(calls), **{"groups": ["core"], "seed": SEED, **changed})
        said = str(refused.value)
        assert says in said and "--regrade" in said and "another --csv" in said and "\n" not in said, said
        assert str(OTHER) not in said and str(SEED) not in said
        assert not calls and out.read_bytes() == csv_before and options_path(out).read_bytes() == record_before
    calls = []
    grade_batch(subs, out, grade_fn=fake_grade(calls), groups=["core"], seed=SEED)       # the same options: skip
    assert [c[0] for c in calls] == ["carol"]                       # the grader's own error, retried as ever
    calls.clear()
    rows = grade_batch(subs, out, grade_fn=fake_grade(calls), groups=["core"], seed=OTHER, regrade=True)
    assert len(calls) == 4 and len(rows) == 6                       # every gradable entry, on the new seed
    assert json.loads(options_path(out).read_text())["seed_sha256"] != record["seed_sha256"]
    calls.clear()
    grade_batch(subs, out, grade_fn=fake_grade(calls), groups=["core"], seed=OTHER)
    assert [c[0] for c in calls] == ["carol"]


def test_a_regrade_with_other_options_starts_the_csv_again_so_a_kill_never_mixes_them(tmp_path: Path) -> None:
    subs, out = uploads(tmp_path), tmp_path / "grades.csv"
    grade_batch(subs, out, grade_fn=fake_grade(), seed=SEED)
    (subs / "frank.rar").unlink()                                   # gone from the folder since
    inner, seen = fake_grade(), []

    def killed_at_the_second(submission: Path, **kwargs: object) -> dict:
        seen.append(1)
        if len(seen) == 2:
            raise KeyboardInterrupt
        return inner(submission, **kwargs)
    with pytest.raises(KeyboardInterrupt):
        grade_batch(subs, out, grade_fn=killed_at_the_second, seed=OTHER, regrade=True)
    assert [r["submission"] for r in read_rows(out)] == ["alice.zip"]     # no row of the old seed is left
    with pytest.raises(ValueError, match="the grading seed"):
        grade_batch(subs, out, grade_fn=fake_grade(), seed=SEED)
    calls: list = []
    rows = grade_batch(subs, out, grade_fn=fake_grade(calls), seed=OTHER)          # goes on where it stopped
    assert [c[0] for c in calls] == ["bob", "carol", "upload"]
    assert [r["submission"] for r in rows] == ["alice.zip", "bob", "carol", "dave.zip", "erin.zip"]


def test_a_csv_with_no_record_of_its_options_is_refused_unless_regrade(tmp_path: Path, monkeypatch) -> None:
    subs, out = uploads(tmp_path), tmp_path / "grades.csv"
    grade_batch(subs, out, grade_fn=fake_grade(), seed=SEED)
    options_path(out).unlink()                                      # a CSV written before the options were recorded
    with pytest.raises(ValueError, match=r"no record of the options they were made with \(grades.options.json is "
                                         "missing\\); rerun with"):
        grade_batch(subs, out, grade_fn=fake_grade(), seed=SEED)
    options_path(out).write_text("{not json")
    with pytest.raises(ValueError, match="cannot read the record"):
        grade_batch(subs, out, grade_fn=fake_grade(), seed=SEED)
    assert len(grade_batch(subs, out, grade_fn=fake_grade(), seed=SEED, regrade=True)) == 6
    monkeypatch.setattr(provenance, "reference_commit", lambda root: "f00d")      # the reference has moved on
    with pytest.raises(ValueError, match="the reference commit [0-9a-f]{40} -> f00d"):
        grade_batch(subs, out, grade_fn=fake_grade(), seed=SEED)
    monkeypatch.undo()
    assert len(grade_batch(subs, out, grade_fn=fake_grade(), seed=SEED)) == 6     # as recorded: nothing new
    monkeypatch.setattr(batch_options, "code_digest", lambda root: "0" * 16)      # a check edited, not committed
    with pytest.raises(ValueError, match=r"the grading code \(its files' hash\) [0-9a-f]{16} -> 0{16}"):
        grade_batch(subs, out, grade_fn=fake_grade(), seed=SEED)


def test_cli_refuses_another_seed_in_one_line_and_exit_2(tmp_path: Path, monkeypatch, capsys) -> None:
    inner = fake_grade()

    def stand_in(submission: Path, timeout: float = 20.0, parts: list | None = None, jobs: int | None = None,
                 groups: tuple = ("core",), hide_hints: bool = False, profile: str = "full", seed: int | None = None,
                 as_user: str | None = None) -> dict:          # grade()'s keywords, which the CLI passes on
        return inner(submission)
    monkeypatch.setattr(batch, "grade", stand_in)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "subs" / "ann").mkdir(parents=True)
    (tmp_path / "subs" / "ann" / "model.py").write_text("PASS")
    args = ["--batch", "subs", "--csv", "g.csv", "--as-user", "none"]
    assert grade_main([*args, "--seed", "1"]) == 0
    before = (tmp_path / "g.csv").read_bytes()
    capsys.readouterr()
    assert grade_main([*args, "--seed", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: g.csv: not adding to its grades") and "the grading seed" in err, err
    assert err.count("\n") == 1 and (tmp_path / "g.csv").read_bytes() == before
    assert grade_main([*args, "--seed", "2", "--regrade"]) == 0
