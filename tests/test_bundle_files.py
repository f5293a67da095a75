"""The reference files a Gradescope bundle ships (assignments/bundle.py): git's tracked files only, as the guide says;
an untracked file (a stray salt.txt) is left out and named on the console."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import pytest

from assignments import bundle

LOCK = "assignments/gradescope/requirements-grader.txt"


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=root,
                          check=True, capture_output=True, text=True).stdout


@pytest.fixture
def reference(tmp_path: Path, monkeypatch) -> Path:
    """A git checkout standing in for the reference: two tracked files, then untracked and ignored ones."""
    root = tmp_path / "ref"
    for rel, text in (("minbert/model.py", "x = 1\n"), (LOCK, "torch==2.0\n"), (".gitignore", "*.log\n")):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "reference")
    (root / "assignments" / "salt.txt").write_text("a secret\n")          # untracked, not ignored
    (root / "minbert" / "notes.txt").write_text("notes\n")
    (root / "minbert" / "run.log").write_text("ignored\n")
    monkeypatch.setattr(bundle, "ROOT", root)
    return root


def build(tmp_path: Path, capsys) -> tuple[list[str], str, str]:
    """The zip's members, the console's stdout and stderr of a checks bundle built from the stand-in."""
    (tmp_path / "seed.txt").write_text("12345\n")
    out = tmp_path / "checks.zip"
    assert bundle.main(["checks", str(out), "--seed-file", str(tmp_path / "seed.txt")]) == 0
    said = capsys.readouterr()
    with zipfile.ZipFile(out) as z:
        return z.namelist(), said.out, said.err


def test_untracked_files_are_left_out_and_named(reference: Path, tmp_path: Path, capsys) -> None:
    names, out, err = build(tmp_path, capsys)
    assert f"{bundle.REFERENCE}/minbert/model.py" in names and f"{bundle.REFERENCE}/{LOCK}" in names
    assert not [n for n in names if n.endswith(("salt.txt", "notes.txt", "run.log"))], names
    commit = git(reference, "rev-parse", "HEAD").strip()
    assert out.strip().endswith(f"reference {commit}")                  # what it ships is the commit: not dirty
    said = ("note: 2 untracked files of the reference left out of the bundle (it ships tracked files only; git add "
            "and commit one to ship it): assignments/salt.txt, minbert/notes.txt")
    assert err.strip().splitlines() == [said]


def test_uncommitted_edits_to_tracked_files_ship_and_are_said(reference: Path, tmp_path: Path, capsys) -> None:
    (reference / "minbert" / "model.py").write_text("x = 2\n")
    (reference / "assignments" / "salt.txt").unlink()
    (reference / "minbert" / "notes.txt").unlink()
    _, out, err = build(tmp_path, capsys)
    with zipfile.ZipFile(tmp_path / "checks.zip") as z:
        assert z.read(f"{bundle.REFERENCE}/minbert/model.py") == b"x = 2\n"
    assert out.strip().endswith("-dirty")
    said = "note: the reference has uncommitted changes to tracked files, which the bundle includes; commit them to name them"
    assert err.strip().splitlines() == [said]
