"""The kit as students and instructors meet it: the tree checked is the tree run in, make keeps student work, the
grader finds an upload one or two folders down or in a zip, and hides hints on request."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import warm
from conftest import grading_user

from assignments import make
from assignments.entries import BadUpload
from assignments.grade import grade, without_hint
from assignments.grade import main as grade_main
from assignments.make import ROOT, find_regions, generate, regions_by_function, stub_text
from assignments.staging import LOOKED, find_submitted, open_submission, stage

PARTIAL = {"minbert/model.py": {"attention"}, "minbert/optim.py": {"AdamW.step"}}   # two parts of six done


def _partly_done(text: str, done: set[str], name: str) -> str:
    """The student version of one reference file with the regions of the `done` functions written (the reference's)."""
    lines = text.splitlines(keepends=True)
    keep = {r.begin for f, r in regions_by_function(text, name).items() if f in done}
    for r in sorted(find_regions(text, name), key=lambda r: -r.begin):
        if r.begin in keep:
            lines[r.begin - 1: r.end] = [s + "\n" for s in r.solution]
    return stub_text("".join(lines), name)


@pytest.fixture(scope="module")
def two_parts_done(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = tmp_path_factory.mktemp("student") / "tree"
    generate(tree, data=False)
    for rel, done in PARTIAL.items():
        (tree / rel).write_text(_partly_done((ROOT / rel).read_text(), done, rel))
    return tree


@pytest.fixture(scope="module")
def editable_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment in which the reference is installed editable, with setuptools' own finder (pip install -e .)."""
    from setuptools.command.editable_wheel import _finder_template
    site = tmp_path_factory.mktemp("site")
    mapping = {name: str(ROOT / name) for name in ("minbert", "tasks", "assignments")}
    (site / "__editable___minbert_finder.py").write_text(_finder_template("minbert", mapping, {}))
    (site / "sitecustomize.py").write_text("import __editable___minbert_finder\n"
                                           "__editable___minbert_finder.install()\n")
    return {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def make_install_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment in which the reference is installed as make install does: a plain .pth line naming its root."""
    site = tmp_path_factory.mktemp("pth-site")
    (site / "packages").mkdir()
    (site / "packages" / "minbert-reference.pth").write_text(f"{ROOT}\n")
    (site / "sitecustomize.py").write_text(f"import site\nsite.addsitedir({str(site / 'packages')!r})\n")
    return {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return warm.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, check=False,
                    timeout=300)


def test_editable_reference_does_not_shadow_a_student_tree(two_parts_done: Path, editable_env: dict[str, str]) -> None:
    env = editable_env
    probe = _run(["-c", "import minbert.optim, assignments.make; print(minbert.optim.__file__)"], ROOT.parent, env)
    assert probe.stdout.strip() == str(ROOT / "minbert" / "optim.py"), probe.stderr   # the install is in force
    proc = _run(["-m", "assignments.check", "attention", "embeddings", "adamw"], two_parts_done, env)
    assert proc.stdout.splitlines()[0] == f"checking the tree at {two_parts_done}", proc.stdout + proc.stderr
    status = {line.split()[0]: line.split()[2] for line in proc.stdout.splitlines()[1:4]}
    assert status == {"attention": "PASS", "embeddings": "not", "adamw": "PASS"}, proc.stdout
    assert "part 1 (minBERT): 2/3 parts pass; 45/55 points" in proc.stdout
    # from a folder inside the tree, the editable reference would answer: the checker refuses, with the fix
    inside = _run(["-m", "assignments.check", "core"], two_parts_done / "minbert", env)
    assert inside.returncode == 2 and "PASS" not in inside.stdout
    assert f"cd {two_parts_done} && python -m assignments.check" in inside.stderr, inside.stderr
    # a student's Python (nothing of the reference installed; -S: no site-packages) finds no checker in a subfolder,
    # as the handout says
    bare = subprocess.run([sys.executable, "-S", "-m", "assignments.check"], cwd=two_parts_done / "minbert",
                          env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=False, timeout=60)
    assert bare.returncode == 1 and "No module named 'assignments'" in bare.stderr, bare.stderr
    assert "Python itself stops with `No module named 'assignments'`" in " ".join(
        (ROOT / "assignments" / "README.md").read_text().split())
    # the grader is not in the student tree: the reference's must not grade from there silently; an editable
    # install's finder reaches it, and it refuses, naming the reference
    graded = _run(["-m", "assignments.grade", "."], two_parts_done, env)
    assert graded.returncode == 2 and "score" not in graded.stdout
    assert f"{two_parts_done} is a student tree, which has no grader; this is the grader of {ROOT}" in graded.stderr


def test_the_grader_run_in_a_student_tree_stops_as_the_guide_says(two_parts_done: Path,
                                                                   make_install_env: dict[str, str]) -> None:
    """With the reference installed as make install does (a .pth line), the tree's own assignments package comes first:
    Python stops with 'No module named assignments.grade', and INSTRUCTORS.md says that, not the grader's refusal."""
    probe = _run(["-c", "import assignments.make; print(assignments.make.__file__)"], ROOT.parent, make_install_env)
    assert (Path(probe.stdout.strip()).parent / "grade.py").is_file(), probe.stderr    # a reference's, installed
    graded = _run(["-m", "assignments.grade", "."], two_parts_done, make_install_env)
    assert graded.returncode == 1 and "score" not in graded.stdout
    assert graded.stderr.strip().endswith("No module named assignments.grade"), graded.stderr
    guide = " ".join((ROOT / "assignments" / "INSTRUCTORS.md").read_text().split())
    assert ("with the reference installed by `make install` (or not installed), the tree's own `assignments` package "
            "comes first on the path, and Python itself stops with `No module named assignments.grade`") in guide
    assert "refuses too, naming the reference to grade from when the reference is installed (`make install`)" not in guide


def test_make_refuses_a_tree_with_work_and_force_keeps_a_backup(two_parts_done: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    tree = tmp_path / "mine"
    shutil.copytree(two_parts_done, tree)
    work = (tree / "minbert" / "optim.py").read_text()
    assert "raise NotImplementedError" not in work.split("def step", 1)[1]
    assert make.main([str(tree), "--no-data"]) == 2
    assert "not empty" in capsys.readouterr().err
    assert (tree / "minbert" / "optim.py").read_text() == work          # untouched
    assert make.main([str(tree), "--no-data", "--force"]) == 0
    backups = list(tmp_path.glob("mine.backup-*"))
    assert len(backups) == 1 and str(backups[0]) in capsys.readouterr().err   # named
    assert (backups[0] / "minbert" / "optim.py").read_text() == work
    assert "raise NotImplementedError" in (tree / "minbert" / "optim.py").read_text().split("def step", 1)[1]


def test_make_refuses_a_folder_inside_or_around_the_reference(capsys: pytest.CaptureFixture[str]) -> None:
    """Neither form is given --force here: if the check were gone, nothing of the reference could be moved aside."""
    new = ROOT / "student-tree-from-test"
    try:
        for out, how in ((new, "inside"), (ROOT.parent, "around"), (ROOT, "over")):
            assert make.main([str(out), "--no-data"]) == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert err == [(f"error: {out}: refusing to write the student tree {how} the reference code ({ROOT}); "
                            "give a folder outside it")], err
        assert not new.exists()
    finally:
        shutil.rmtree(new, ignore_errors=True)


def test_an_upload_one_or_two_folders_down_grades_as_a_flat_one(two_parts_done: Path, tmp_path: Path) -> None:
    # what is graded is the staged tree: the same files staged from each layout give the same grade
    files = ["minbert/model.py", "minbert/optim.py", "minbert/pooling.py", "tasks/classifier.py"]
    layouts = {"flat": (tmp_path / "flat", tmp_path / "flat"),
               "tree-one-down": (tmp_path / "zip1", tmp_path / "zip1" / "my-minbert"),
               "files-two-down": (tmp_path / "zip2", tmp_path / "zip2" / "hw" / "src")}
    for rel in files:
        for name, (_, base) in layouts.items():
            dest = base / (rel if name == "tree-one-down" else Path(rel).name)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(two_parts_done / rel, dest)
    (tmp_path / "zip2" / "__MACOSX" / "hw").mkdir(parents=True)    # what macOS adds to a zip
    (tmp_path / "zip2" / "__MACOSX" / "hw" / "model.py").write_text("garbage")
    for name, (upload, _) in layouts.items():
        notes, missing, *_ = stage(upload, tmp_path / f"staged-{name}", files)
        assert not missing, (name, notes)
        for rel in files:
            assert (tmp_path / f"staged-{name}" / rel).read_text() == (two_parts_done / rel).read_text(), (name, rel)
    one_down = layouts["tree-one-down"][1]
    assert find_submitted(tmp_path / "zip1", Path("minbert/optim.py")) == one_down / "minbert/optim.py"
    assert find_submitted(tmp_path / "zip2" / "hw", Path("x/nothing.py")) is None
    # graded: the two parts done pass from one folder down; a part whose file is absent says so in its own output
    (layouts["tree-one-down"][1] / "tasks" / "classifier.py").unlink()
    res = grade(tmp_path / "zip1", parts=["attention", "adamw", "classifier_head"], hide_hints=True,
                as_user=grading_user())
    assert [(r["part"], r["status"], r["score"]) for r in res["parts"]] == [
        ("attention", "pass", 25), ("adamw", "pass", 20), ("classifier_head", "not started", 0)]
    assert "minbert/optim.py: from my-minbert/minbert/optim.py" in res["output"]
    head = next(t for t in res["tests"] if t["name"].startswith("classifier_head"))
    assert head["output"].startswith("not started: tasks/classifier.py is not in the submission"), head
    hidden = res["tests"][-1]
    assert hidden["visibility"] == "after_due_date" and hidden["max_score"] == 0
    json.dumps(res)


def _zip(path: Path, files: dict[str, str | bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


def test_a_zip_is_graded_given_as_such_or_alone_in_the_folder(tmp_path: Path, capsys) -> None:
    """python -m assignments.grade SUB.zip, and a folder holding only the zip (as Gradescope keeps a zip uploaded as
    such): the zip's graded files are read, with the batch's limits."""
    part1 = ["minbert/model.py", "minbert/optim.py", "minbert/pooling.py", "tasks/classifier.py"]
    zipped = _zip(tmp_path / "sub.zip", {f"my-minbert/{rel}": (ROOT / rel).read_text() for rel in part1})
    out = tmp_path / "r.json"
    assert grade_main([str(zipped), "--parts", "attention", "adamw", "--out", str(out),
                       "--as-user", grading_user()]) == 0, capsys.readouterr().err
    res = json.loads(out.read_text())
    assert res["score"] == 45 and "read the graded files from sub.zip" in res["output"], res
    shutil.copyfile(zipped, _zip(tmp_path / "upload" / "my-minbert.zip", {}))
    res = grade(tmp_path / "upload", parts=["adamw"], as_user=grading_user())
    assert [(r["part"], r["status"]) for r in res["parts"]] == [("adamw", "pass")], res["parts"]
    assert "read the graded files from my-minbert.zip" in res["output"]
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "my-minbert.zip").write_bytes(b"PK\x03\x04 not a zip")
    res = grade(tmp_path / "broken", parts=["adamw"], as_user=grading_user())
    (r,) = res["parts"]
    assert r["score"] == 0 and r["message"].startswith(f"minbert/optim.py is not in the submission ({LOOKED}; "
                                                       "my-minbert.zip: cannot unpack the zip: BadZipFile"), r


def test_what_is_neither_a_folder_nor_a_zip_is_refused_with_what_was_expected(tmp_path: Path, capsys) -> None:
    work = tmp_path / "work"
    (tmp_path / "model.py").write_text("x = 1\n")
    with pytest.raises(ValueError, match="model.py: neither a folder nor a .zip file; give the submitted tree, a "
                                         "folder of the submitted files, or a zip of either"):
        open_submission(tmp_path / "model.py", work)
    assert grade_main([str(tmp_path / "model.py"), "--as-user", "none"]) == 2
    assert "neither a folder nor a .zip file" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError, match="nowhere: no such folder or .zip file"):
        open_submission(tmp_path / "nowhere", work)
    (tmp_path / "bad.zip").write_bytes(b"not a zip")
    with pytest.raises(BadUpload, match="bad.zip: cannot unpack the zip"):
        open_submission(tmp_path / "bad.zip", work)
    with pytest.raises(BadUpload, match="points outside the archive"):
        open_submission(_zip(tmp_path / "slip.zip", {"../model.py": "x = 1"}), work)
    two = tmp_path / "two"
    _zip(two / "a.zip", {"model.py": "x = 1"}), _zip(two / "b.zip", {"optim.py": "x = 1"})
    opened = open_submission(two, work)
    assert opened.folder == two and "several zip files (a.zip, b.zip)" in opened.looked, opened
    _zip(tmp_path / "mixed" / "old.zip", {"model.py": "x = 1"})
    (tmp_path / "mixed" / "optim.py").write_text("x = 1\n")              # a graded file: the folder is graded
    said = "old.zip was not read: the folder also holds graded files"    # said, and in a missing file's message
    assert open_submission(tmp_path / "mixed", work) == (tmp_path / "mixed", [said], f"{LOOKED}; {said}")
    assert not work.exists() or not any(work.iterdir())


def test_a_file_uploaded_twice_at_the_same_depth_is_not_guessed(tmp_path: Path) -> None:
    """draft/ (the stubs) and final/ (the work) side by side: which model.py is meant is not ours to guess. Its parts
    score 0 naming both copies; a file whose copies are the same bytes is graded; a zip beside graded files is said."""
    part1 = ["minbert/model.py", "minbert/optim.py", "minbert/pooling.py", "tasks/classifier.py"]
    up = tmp_path / "twice"
    for name, src in (("draft", ROOT / "assignments" / "student"), ("final", ROOT)):
        for rel in part1:
            (up / name / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile((src if rel.startswith("minbert/model") else ROOT) / rel, up / name / rel)
    _zip(up / "submission.zip", {rel: (ROOT / rel).read_text() for rel in part1})
    twice = ("minbert/model.py is in the submission twice at the same depth (draft/minbert/model.py, "
             "final/minbert/model.py); upload one copy")
    staged = stage(up, tmp_path / "staged", part1)
    assert staged.unparsed == {"minbert/model.py": twice} and not staged.missing, staged
    assert (tmp_path / "staged" / "minbert/model.py").read_text() == \
        (ROOT / "assignments" / "student" / "minbert/model.py").read_text()       # the stub stays
    assert "minbert/optim.py: from draft/minbert/optim.py" in staged.notes         # the same bytes twice: graded
    res = grade(up, parts=["attention", "adamw"], as_user=grading_user())
    assert [(r["part"], r["status"], r["score"]) for r in res["parts"]] == [("attention", "error", 0),
                                                                            ("adamw", "pass", 20)], res["parts"]
    assert res["parts"][0]["message"] == twice
    assert "submission.zip was not read: the folder also holds graded files" in res["output"]


def test_hidden_hints_cut_only_the_matched_mistake() -> None:
    msg = ("f differs at index (0,): got 1, expected 2; max abs diff 1 (1 of 3 values off). "
           "It matches what you get when x")
    assert without_hint(msg) == "f differs at index (0,): got 1, expected 2; max abs diff 1 (1 of 3 values off)."
    assert without_hint("PASS") == "PASS"


def test_the_student_tree_is_self_contained_and_carries_no_instructor_text(tmp_path: Path) -> None:
    tree = tmp_path / "st"
    generate(tree, data=False)
    handout = (tree / "assignments" / "README.md").read_text()
    instructors = (ROOT / "assignments" / "INSTRUCTORS.md").read_text()
    for instructor_only in ("assignments.make", "assignments.grade", "make_fixtures", "make install", "--seed-file",
                            "grades.csv", "--as-user"):      # the staff's commands and files, as INSTRUCTORS.md has them
        assert instructor_only in instructors and instructor_only not in handout, instructor_only
    for student in ("tasks.submit", "tasks.score", "--symmetric-pairs", "pip install -r requirements.txt"):
        assert student in handout, student
    assert not (tree / "assignments" / "INSTRUCTORS.md").exists() and not (tree / "Makefile").exists()
    requirements = (tree / "requirements.txt").read_text()
    assert "make install" not in requirements and "download.pytorch.org/whl/cpu" in requirements
    assert instructors.count("assignments.grade") >= 2


@pytest.mark.parametrize("profile", ["part1", "default-project", "full"])
def test_the_student_tree_carries_no_module_that_computes_an_answer(tmp_path: Path, profile: str) -> None:
    # mistakes.py's functions with their defaults are the right attention, layer, embeddings and AdamW step: a student
    # could call them and score full marks. The checks read the mistakes' outputs from the fixtures instead.
    from assignments.leaks import ANSWER_MODULES, answer_modules, public_assignment_files, unshipped_imports
    tree = tmp_path / "st"
    generate(tree, data=False, profile=profile)
    assert not answer_modules(tree)
    assert not [n for n in make.ASSIGNMENT_FILES if n not in public_assignment_files()], ANSWER_MODULES
    # every import of the tree's checks (anywhere in them, lazy ones too) is of a file the tree carries, and of
    # assignments/ only the public files
    assert not unshipped_imports(tree)
    assert (tree / "assignments" / "checks.py").is_file() and not (tree / "assignments" / "mistakes.py").exists()


def test_the_answer_module_scan_sees_a_stray_import(tmp_path: Path) -> None:
    from assignments.leaks import answer_modules, unshipped_imports
    tree = tmp_path / "st"
    generate(tree, data=False, profile="part1")
    (tree / "assignments" / "common.py").write_text((tree / "assignments" / "common.py").read_text()
                                                    + "\n\ndef f():\n    from .make_fixtures import adamw_fixture\n")
    assert unshipped_imports(tree) == ["assignments/common.py: assignments.make_fixtures (no such file in the tree)"]
    (tree / "assignments" / "grader_mistakes.py").write_text("x = 1\n")
    assert answer_modules(tree) == ["assignments/grader_mistakes.py"]
