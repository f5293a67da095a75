"""Batch regrades (assignments/batch.py): a folder of uploads -> one CSV row and one results JSON per submission."""

from __future__ import annotations

import csv
import json
import os
import shutil
import stat
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import grading_user

from assignments import batch, entries
from assignments.batch import grade_batch
from assignments.entries import BadUpload, safe_extract
from assignments.grade import grade
from assignments.grade import main as grade_main
from assignments.make import ROOT

PART1 = ["minbert/model.py", "minbert/optim.py", "minbert/pooling.py", "tasks/classifier.py"]
FAKE_PARTS = {"attention": 25, "adamw": 20}


def fake_grade(calls: list | None = None):
    """A stand-in for grade.grade: what model.py (anywhere in the submission) says decides each part's state."""
    def grade_fn(submission: Path, **kwargs: object) -> dict:
        if calls is not None:
            calls.append((Path(submission).name, kwargs))
        found = sorted(Path(submission).rglob("model.py"))
        text = found[0].read_text() if found else "STUB"
        if "RAISE" in text:
            raise RuntimeError("boom\nsecond line")
        status = {"attention": "timeout" if "HANG" in text else "not started" if "STUB" in text else "pass",
                  "adamw": "not started" if "STUB" in text else "fail" if "WRONG" in text else "pass"}
        parts = [{"part": p, "status": s, "score": FAKE_PARTS[p] if s == "pass" else 0, "max_score": FAKE_PARTS[p],
                  "message": "PASS" if s == "pass" else f"{p} says {s}\nmore"} for p, s in status.items()]
        return {"score": sum(r["score"] for r in parts), "execution_time": 0.1, "tests": [], "parts": parts,
                "groups": []}
    return grade_fn


def write_zip(path: Path, files: dict[str, str | bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


def uploads(tmp_path: Path) -> Path:
    """A folder of uploads: zips (flat, nested, corrupt), folders, a stray file, hidden entries and __MACOSX."""
    subs = tmp_path / "subs"
    (subs / "bob" / "hw" / "minbert").mkdir(parents=True)
    (subs / "bob" / "hw" / "minbert" / "model.py").write_text("HANG")
    (subs / "carol").mkdir()
    (subs / "carol" / "model.py").write_text("RAISE")
    write_zip(subs / "alice.zip", {"model.py": "PASS", "optim.py": "x"})
    write_zip(subs / "dave.zip", {"a/b/model.py": "WRONG", "a/b/notes.txt": "skipped", "__MACOSX/a/model.py": "STUB",
                                  "a/.hidden/model.py": "STUB"})
    (subs / "erin.zip").write_bytes(b"PK\x03\x04 this is not a zip")
    (subs / "frank.rar").write_bytes(b"Rar!")
    (subs / ".DS_Store").write_text("")
    (subs / "__MACOSX").mkdir()
    return subs


def read_rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_one_row_per_submission_with_points_states_and_notes(tmp_path: Path, capsys) -> None:
    subs, out = uploads(tmp_path), tmp_path / "out" / "grades.csv"
    calls: list = []
    rows = grade_batch(subs, out, grade_fn=fake_grade(calls), timeout=5.0)
    assert [c[0] for c in calls] == ["upload", "bob", "carol", "upload"]    # zips are graded from a temporary folder
    assert all(c[1] == {"timeout": 5.0} for c in calls)
    on_disk = read_rows(out)
    assert list(on_disk[0]) == ["submission", "state", "score", "max", "attention", "adamw", "hash", "notes"]
    got = {r["submission"]: (r["state"], r["score"], r["max"], r["attention"], r["adamw"]) for r in on_disk}
    assert got == {"alice.zip": ("graded", "45", "45", "25", "20"),
                   "bob": ("graded", "20", "45", "timeout", "20"),       # the state where no verdict came
                   "carol": ("error", "", "", "", ""),
                   "dave.zip": ("graded", "25", "45", "25", "0"),        # two folders down; __MACOSX, hidden ignored
                   "erin.zip": ("bad upload", "", "", "", ""),
                   "frank.rar": ("bad upload", "", "", "", "")}
    assert [r["submission"] for r in on_disk] == sorted(got) == [r["submission"] for r in rows]
    notes = {r["submission"]: r["notes"] for r in on_disk}
    assert notes["alice.zip"] == ""
    assert notes["bob"] == "timeout: attention | attention: attention says timeout more"     # one line
    assert notes["carol"] == "RuntimeError: boom second line"
    assert notes["dave.zip"] == "fail: adamw | adamw: adamw says fail more"
    assert notes["erin.zip"].startswith("cannot unpack the zip: BadZipFile")
    assert notes["frank.rar"] == "neither a .zip file nor a folder"
    assert all(len(r["hash"]) == 16 for r in on_disk)
    assert rows[0]["score"] == 45 and rows[0]["attention"] == 25       # returned with numbers, not text
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    assert summary.startswith("graded 3, skipped 0, errors 1, bad uploads 2 in ")


def test_each_submission_has_its_full_results_beside_the_csv(tmp_path: Path) -> None:
    subs, out = uploads(tmp_path), tmp_path / "grades.csv"
    grade_batch(subs, out, grade_fn=fake_grade())
    results = tmp_path / "grades"
    assert sorted(p.name for p in results.iterdir()) == [
        "alice.zip.json", "bob.json", "carol.json", "dave.zip.json", "erin.zip.json", "frank.rar.json"]
    alice = json.loads((results / "alice.zip.json").read_text())
    assert alice["score"] == 45 and [p["part"] for p in alice["parts"]] == ["attention", "adamw"]
    assert alice["submission"] == "alice.zip" and len(alice["hash"]) == 16
    carol = json.loads((results / "carol.json").read_text())
    assert carol["state"] == "error" and "RuntimeError: boom" in carol["traceback"]
    assert json.loads((results / "erin.zip.json").read_text())["state"] == "bad upload"


def test_a_second_run_skips_unchanged_rows_and_grades_changed_ones(tmp_path: Path, capsys) -> None:
    subs, out = uploads(tmp_path), tmp_path / "grades.csv"
    grade_batch(subs, out, grade_fn=fake_grade())
    first = read_rows(out)
    calls: list = []
    grade_batch(subs, out, grade_fn=fake_grade(calls))
    assert [c[0] for c in calls] == ["carol"]          # the grader's own error is retried; the rest stand
    assert "graded 0, skipped 5, errors 1, bad uploads 2 (2 unchanged, skipped) in " in capsys.readouterr().out
    assert read_rows(out) == first
    write_zip(subs / "alice.zip", {"model.py": "WRONG"})          # a new upload under the same name
    (subs / "carol" / "model.py").write_text("PASS")
    calls.clear()
    grade_batch(subs, out, grade_fn=fake_grade(calls))
    assert [c[0] for c in calls] == ["upload", "carol"]
    rows = {r["submission"]: r for r in read_rows(out)}
    assert (rows["alice.zip"]["score"], rows["carol"]["score"], rows["carol"]["state"]) == ("25", "45", "graded")
    assert rows["alice.zip"]["hash"] != next(r["hash"] for r in first if r["submission"] == "alice.zip")
    calls.clear()
    grade_batch(subs, out, grade_fn=fake_grade(calls), regrade=True)
    assert len(calls) == 4                              # every gradable entry again (the bad uploads never reach it)
    assert "graded 4, skipped 0, errors 0, bad uploads 2" in capsys.readouterr().out


def test_a_kill_loses_only_the_submission_in_flight(tmp_path: Path) -> None:
    subs, out = uploads(tmp_path), tmp_path / "grades.csv"
    seen, inner = [], fake_grade()

    def grade_fn(submission: Path, **kwargs: object) -> dict:
        seen.append([r["submission"] for r in read_rows(out)] if out.exists() else [])
        if len(seen) == 3:
            raise KeyboardInterrupt                    # Ctrl-C (or a kill) while bob... carol is graded
        return inner(submission, **kwargs)
    with pytest.raises(KeyboardInterrupt):
        grade_batch(subs, out, grade_fn=grade_fn)
    assert seen == [[], ["alice.zip"], ["alice.zip", "bob"]]      # rewritten after each submission
    assert [r["submission"] for r in read_rows(out)] == ["alice.zip", "bob"]
    calls: list = []
    grade_batch(subs, out, grade_fn=fake_grade(calls))
    assert [c[0] for c in calls] == ["carol", "upload"]           # carol, dave.zip: the rest of the batch
    assert len(read_rows(out)) == 6


def test_a_kill_while_the_csv_is_written_leaves_the_previous_one(tmp_path: Path, monkeypatch) -> None:
    subs, out = uploads(tmp_path), tmp_path / "grades.csv"
    grade_batch(subs, out, grade_fn=fake_grade())
    before = out.read_text()

    def half_then_killed(self: csv.DictWriter, rows: object) -> None:
        self.writerow(next(iter(rows)))
        raise KeyboardInterrupt
    monkeypatch.setattr(csv.DictWriter, "writerows", half_then_killed)
    with pytest.raises(KeyboardInterrupt):
        grade_batch(subs, out, grade_fn=fake_grade(), regrade=True)
    assert out.read_text() == before


@pytest.mark.parametrize("members, says", [
    ({"../evil.py": "x"}, "in the zip: member '../evil.py' points outside the archive"),
    ({"a/../../model.py": "x"}, "points outside the archive"),
    ({"/etc/model.py": "x"}, "points outside the archive"),
    ({"..\\model.py": "x"}, "points outside the archive"),
    ({"C:/model.py": "x"}, "points outside the archive"),
    ({"model.py": "x" * 3000}, "unpack to more than"),
    ({f"f{i}.txt": "" for i in range(12)}, "in the zip: 12 members, more than 10"),
    ({"model.py": "x" * 600, "a/model.py": "x" * 600}, "unpack to more than 1000 bytes"),
], ids=["dotdot", "dotdot-inside", "absolute", "backslash", "drive", "too-large", "too-many", "too-large-in-all"])
def test_unsafe_zips_are_refused(tmp_path: Path, monkeypatch, members: dict, says: str) -> None:
    monkeypatch.setattr(entries, "MAX_UNPACKED", 1000)
    monkeypatch.setattr(entries, "MAX_MEMBERS", 10)
    (tmp_path / "subs").mkdir()
    write_zip(tmp_path / "subs" / "x.zip", members)
    calls: list = []
    (row,) = grade_batch(tmp_path / "subs", tmp_path / "grades.csv", grade_fn=fake_grade(calls))
    assert row["state"] == "bad upload" and says in row["notes"], row
    assert not calls and not (tmp_path / "evil.py").exists() and not (tmp_path / "model.py").exists()


def test_symlinks_are_refused_in_zips_and_folders(tmp_path: Path) -> None:
    link = zipfile.ZipInfo("model.py")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    with zipfile.ZipFile(tmp_path / "link.zip", "w") as zf:
        zf.writestr(link, "/etc/passwd")
    with pytest.raises(BadUpload, match="member 'model.py' is a symbolic link"):
        safe_extract(tmp_path / "link.zip", tmp_path / "out")
    subs = tmp_path / "subs"
    (subs / "sam").mkdir(parents=True)
    os.symlink("/etc/passwd", subs / "sam" / "model.py")
    os.symlink("/etc", subs / "sam" / "hw")                        # a linked folder is refused, never entered
    rows = grade_batch(subs, tmp_path / "grades.csv", grade_fn=fake_grade())
    assert [(r["state"], r["notes"]) for r in rows] == [("bad upload", "the folder holds a symlink: hw")]


def test_a_folder_hash_follows_its_files_not_its_hidden_ones(tmp_path: Path) -> None:
    sub = tmp_path / "sub"
    (sub / "minbert").mkdir(parents=True)
    (sub / "minbert" / "model.py").write_text("a")
    first = entries.content_hash(sub)
    (sub / ".DS_Store").write_text("finder")
    (sub / "minbert" / "__pycache__").mkdir()
    (sub / "minbert" / "__pycache__" / "model.pyc").write_bytes(b"\0")
    assert entries.content_hash(sub) == first
    (sub / "minbert" / "model.py").write_text("b")
    assert entries.content_hash(sub) != first
    (sub / "minbert" / "model.py").write_text("a")
    (sub / "minbert" / "model.py").rename(sub / "model.py")      # the same bytes elsewhere: another upload
    assert entries.content_hash(sub) != first


def test_only_the_graded_files_are_unpacked(tmp_path: Path) -> None:
    write_zip(tmp_path / "u.zip", {"me/minbert/model.py": "m", "me/data/big.bin": b"\0" * 5000, "me/README.md": "r",
                                   "__MACOSX/me/minbert/._model.py": "junk", "me/.git/model.py": "old"})
    assert safe_extract(tmp_path / "u.zip", tmp_path / "out", max_bytes=100) == 1   # big.bin is not even read
    write_zip(tmp_path / "dots.zip", {"./": "", "./model.py": "m"})
    assert safe_extract(tmp_path / "dots.zip", tmp_path / "dots") == 1
    assert [p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*") if p.is_file()] == [
        "me/minbert/model.py"]


def test_a_csv_this_command_did_not_write_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / "subs").mkdir()
    (tmp_path / "grades.csv").write_text("student,score\nx,1\n")
    with pytest.raises(ValueError, match="not a grades CSV written by --batch"):
        grade_batch(tmp_path / "subs", tmp_path / "grades.csv", grade_fn=fake_grade())
    assert (tmp_path / "grades.csv").read_text() == "student,score\nx,1\n"


@pytest.mark.parametrize("argv, says", [
    (["--batch", "nowhere"], "--batch nowhere: no such folder"),
    (["sub", "--batch", "."], "give either a submission (sub) or --batch DIR, not both"),
    ([], "give the submission to grade, or --batch DIR"),
    (["sub", "--csv", "g.csv"], "--csv and --regrade go with --batch DIR"),
    (["sub", "--regrade"], "--csv and --regrade go with --batch DIR"),
    (["--batch", ".", "--out", "r.json"], "--out is for one submission"),
    (["--batch", "subs", "--groups", "smart", "--profile", "part1"], "not in the part1 profile: smart"),
    (["--batch", "subs", "--csv", "subs/g.csv"], ("--csv subs/g.csv: inside --batch subs, where a later run would "
                                                  "take it (and g.options.json, g/) for submissions; write it outside")),
    (["--batch", "."], "--csv grades.csv: inside --batch ."),
])
def test_cli_misuse_is_one_line_and_exit_2(tmp_path: Path, monkeypatch, capsys, argv: list, says: str) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "subs").mkdir()
    assert grade_main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and says in err and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["subs"] and not any((tmp_path / "subs").iterdir())


def test_cli_passes_every_grade_option_to_each_submission(tmp_path: Path, monkeypatch, capsys) -> None:
    calls: list = []
    inner = fake_grade(calls)

    def grade_with_seed(submission: Path, timeout: float = 20.0, parts: list | None = None, jobs: int | None = None,
                        groups: tuple = ("core",), hide_hints: bool = False, profile: str = "full",
                        seed: int | None = None) -> dict:
        return inner(submission, timeout=timeout, parts=parts, jobs=jobs, groups=groups, hide_hints=hide_hints,
                     profile=profile, seed=seed)
    monkeypatch.setattr(batch, "grade", grade_with_seed)       # a grade() that has gained a keyword
    monkeypatch.chdir(tmp_path)
    (tmp_path / "subs" / "ann").mkdir(parents=True)
    (tmp_path / "subs" / "ann" / "model.py").write_text("PASS")
    args = ["--batch", "subs", "--csv", "out/g.csv", "--timeout", "7", "--jobs", "2", "--groups", "all",
            "--profile", "part1", "--hide-hints"]
    monkeypatch.delenv("MINBERT_GRADING_SEED", raising=False)
    assert grade_main(args) == 0
    seed = calls[0][1]["seed"]          # none given: one is drawn for the batch and said on the console
    assert isinstance(seed, int) and f"grading seed {seed}" in capsys.readouterr().err
    assert calls == [("ann", {"timeout": 7.0, "parts": None, "jobs": 2, "groups": ["core"], "hide_hints": True,
                              "profile": "part1", "seed": seed})]
    # a flag the parser gains (--seed) reaches grade() once grade() accepts it
    flags = {"submission": None, "batch": "subs", "out": None, "csv": None, "regrade": False, "timeout": 7.0,
             "jobs": None, "groups": ["all"], "profile": "full", "parts": None, "hide_hints": False, "seed": 3,
             "unknown": 1}
    assert batch.grade_options(flags, ["core"]) == {"timeout": 7.0, "parts": None, "jobs": None, "groups": ["core"],
                                                    "hide_hints": False, "profile": "full", "seed": 3}
    assert read_rows(tmp_path / "out" / "g.csv")[0]["score"] == "45"
    assert (tmp_path / "out" / "g" / "ann.json").is_file()
    (tmp_path / "subs" / "ann" / "model.py").write_text("RAISE")
    assert grade_main([*args, "--regrade"]) == 1          # the grader failed on a submission: exit 1


def test_real_grader_on_four_kinds_of_submission(tmp_path: Path, capsys) -> None:
    """End to end on part 1: the reference's files, the unfilled stubs, a nested zip and a hanging attention()."""
    subs = tmp_path / "subs"
    for rel in PART1:
        for name, src in (("reference", ROOT), ("stubs", ROOT / "assignments" / "student")):
            (subs / name / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src / rel, subs / name / rel)
    write_zip(subs / "nested.zip", {f"outer/inner/{rel}": (ROOT / rel).read_text() for rel in PART1})
    shutil.copytree(subs / "reference", subs / "hanging")
    model = subs / "hanging" / "minbert" / "model.py"
    model.write_text(_hang_attention(model.read_text()))
    rows = grade_batch(subs, tmp_path / "grades.csv", grade_fn=grade, groups=("core",), timeout=5.0, jobs=2,
                       as_user=grading_user())
    got = {r["submission"]: r for r in read_rows(tmp_path / "grades.csv")}
    assert list(got) == ["hanging", "nested.zip", "reference", "stubs"] == [r["submission"] for r in rows]
    parts = ["attention", "embeddings", "layer", "model", "adamw", "classifier_head"]
    for name in ("reference", "nested.zip"):
        assert (got[name]["state"], got[name]["score"], got[name]["max"], got[name]["notes"]) == (
            "graded", "100", "100", ""), got[name]
    assert [got["stubs"][p] for p in parts] == ["0"] * 6 and got["stubs"]["score"] == "0"
    assert got["stubs"]["notes"].startswith("not started: " + ", ".join(parts) + " | attention: ")
    hang = got["hanging"]
    assert [hang[p] for p in parts] == ["timeout", "10", "25", "timeout", "20", "10"], hang
    assert hang["score"] == "65" and hang["notes"].startswith("timeout: attention, model | attention: ")
    full = json.loads((tmp_path / "grades" / "nested.zip.json").read_text())
    assert "minbert/model.py: from outer/inner/minbert/model.py" in full["output"]
    assert "graded 4, skipped 0, errors 0, bad uploads 0" in capsys.readouterr().out


def _hang_attention(text: str) -> str:
    """model.py with attention()'s body replaced by one that never returns (asleep: the time limit is on the wall
    clock, and a sleeping part leaves the CPU to the rest of the suite; test_assignments.py's hang spins)."""
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith("def attention("))
    sig_end = next(i for i in range(start, len(lines)) if lines[i].rstrip().endswith(":"))
    end = next(i for i in range(sig_end + 1, len(lines)) if lines[i].strip() and not lines[i].startswith((" ", "\t")))
    return "".join(lines[: sig_end + 1] + ["    while True:\n", "        __import__('time').sleep(1)\n", "\n\n"] + lines[end:])


def test_the_timing_folder_holds_twenty_submissions_and_their_scores(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import grade_batch as bench
    expected = bench.make(tmp_path / "subs")
    entries = sorted(p.name for p in (tmp_path / "subs").iterdir() if not p.name.startswith("."))
    assert entries == sorted(expected) and len(entries) == 20 and sum(e.endswith(".zip") for e in entries) == 7
    assert sorted(expected.values()) == [0] * 5 + [10, 30, 70, 80, 90] + [100] * 10
    assert bench.score({"minbert/model.py"}) == 70      # attention, embeddings, layer and model need model.py alone
    stub = tmp_path / "subs" / "stubs-00" / "minbert" / "model.py"
    assert stub.read_text() == (ROOT / "assignments" / "student" / "minbert" / "model.py").read_text()
    with zipfile.ZipFile(tmp_path / "subs" / "reference-05.zip") as zf:
        assert zf.read("my-minbert/minbert/optim.py").decode() == (ROOT / "minbert" / "optim.py").read_text()


def test_a_csv_inside_the_folder_is_not_taken_for_a_submission(tmp_path: Path) -> None:
    subs = uploads(tmp_path)
    grade_batch(subs, subs / "grades.csv", grade_fn=fake_grade())
    calls: list = []
    rows = grade_batch(subs, subs / "grades.csv", grade_fn=fake_grade(calls))
    assert [c[0] for c in calls] == ["carol"] and len(rows) == 6      # neither grades.csv nor grades/ is a row


def test_a_single_grade_says_the_seed_it_drew_and_that_seed_repeats_it(tmp_path: Path, monkeypatch, capsys) -> None:
    """Without --seed (or its file or variable) a single grade draws one and says it, as a batch does: a disputed grade
    can then be repeated on the same inputs."""
    import re

    from test_assignments import submission_with
    monkeypatch.delenv("MINBERT_GRADING_SEED", raising=False)
    wrong = 'for g in self.param_groups:\n    for p in g["params"]:\n        p.data.add_(0.5)\nreturn None'
    sub = submission_with(tmp_path, {"AdamW.step": wrong})       # its message shows values of the drawn inputs
    argv = [str(sub), "--parts", "adamw", "--as-user", grading_user()]
    assert grade_main([*argv, "--out", str(tmp_path / "a.json")]) == 0
    said = re.search(r"grading seed (\d+) \(drawn for this submission; --seed (\d+) grades it on the same inputs\)",
                     capsys.readouterr().err)
    assert said and said[1] == said[2]
    assert grade_main([*argv, "--seed", said[1], "--out", str(tmp_path / "b.json")]) == 0
    assert "grading seed" not in capsys.readouterr().err                     # given: nothing drawn, nothing said
    assert grade_main([*argv, "--seed", str(int(said[1]) + 1), "--out", str(tmp_path / "c.json")]) == 0
    first, again, other = (json.loads((tmp_path / n).read_text()) for n in ("a.json", "b.json", "c.json"))
    assert first["tests"] == again["tests"] and first["tests"] != other["tests"]    # the inputs are the seed's


def test_a_missing_seed_file_is_named_with_what_to_give(tmp_path: Path, capsys) -> None:
    assert grade_main([str(tmp_path), "--seed-file", str(tmp_path / "nosuch"), "--out", str(tmp_path / "r.json")]) == 2
    assert capsys.readouterr().err == (f"error: {tmp_path / 'nosuch'}: cannot read the grading seed (No such file or "
                                       "directory); give the file that holds it (the one the bundle was made with)\n")


def test_a_rerun_drops_the_rows_of_entries_no_longer_in_the_folder(tmp_path: Path, capsys) -> None:
    """A resubmission replaces submission_102 by submission_202: the old row goes (said on the console), and the
    summary counts the bad uploads it skipped as unchanged."""
    subs, out = uploads(tmp_path), tmp_path / "grades.csv"
    grade_batch(subs, out, grade_fn=fake_grade())
    shutil.rmtree(subs / "bob")
    (subs / "erin.zip").unlink()
    (subs / "bob2").mkdir()
    (subs / "bob2" / "model.py").write_text("PASS")
    capsys.readouterr()
    calls: list = []
    rows = grade_batch(subs, out, grade_fn=fake_grade(calls))
    assert [c[0] for c in calls] == ["bob2", "carol"]
    names = ["alice.zip", "bob2", "carol", "dave.zip", "frank.rar"]
    assert [r["submission"] for r in rows] == names == [r["submission"] for r in read_rows(out)]
    said = capsys.readouterr()
    assert f"2 rows of entries no longer in {subs} dropped: bob, erin.zip" in said.err
    assert said.out.strip().splitlines()[-1].startswith(
        "graded 1, skipped 3, errors 1, bad uploads 1 (1 unchanged, skipped) in ")
    assert (tmp_path / "grades" / "bob.json").is_file()          # its full results stay beside the CSV

