"""A student tree's data/ is the reference's data files that git tracks: a labelled test file (the leaderboard's
gold) or a salt dropped into data/ is left out, and named."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from assignments.make import ROOT, data_files, generate

GOLD = "\tid\tsentence\tsentiment\n0\tabc\ta sentence\t3\n"


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clone of the reference (its tracked files) with a labelled gold file and a salt dropped into data/."""
    clone = tmp_path_factory.mktemp("ref") / "minbert"
    subprocess.run(["git", "clone", "-q", "--shared", str(ROOT), str(clone)], check=True, timeout=120)
    (clone / "data" / "ids-sst-test.csv").write_text(GOLD)
    (clone / "data" / "salt.txt").write_text("s" * 64 + "\n")
    return clone


def test_a_gold_file_in_data_is_never_shipped_and_is_named(reference, tmp_path, capsys):
    tracked, left_out = data_files(reference)
    assert left_out == ["ids-sst-test.csv", "salt.txt"]
    assert {p.name for p in tracked} == {p.name for p in (ROOT / "data").iterdir()} - {"ids-sst-test.csv", "salt.txt"}
    generate(tmp_path / "tree", root=reference, profile="part1")
    shipped = sorted(p.name for p in (tmp_path / "tree" / "data").iterdir())
    assert "ids-sst-test.csv" not in shipped and "salt.txt" not in shipped and "ids-sst-test-student.csv" in shipped
    assert "note: left out of the tree's data/, as git does not track them (a gold or salt never ships): " \
           "ids-sst-test.csv, salt.txt" in capsys.readouterr().err


def test_without_git_the_tree_is_refused_before_anything_is_written(tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "data", copy / "data")
    with pytest.raises(ValueError, match="cannot ask git which data files it tracks"):
        data_files(copy)


def test_a_tracked_data_file_written_over_is_refused_by_name(reference):
    student = reference / "data" / "ids-sst-test-student.csv"
    committed = student.read_text()
    student.write_text(GOLD)                                       # labels saved over a tracked name
    try:
        with pytest.raises(ValueError, match=r"ids-sst-test-student.csv differs from the commit .*git restore data"):
            data_files(reference)
    finally:
        student.write_text(committed)
    data_files(reference)                                          # restored: accepted again


def test_a_copy_inside_another_repository_is_refused_naming_gits_top_level(tmp_path):
    outer = tmp_path / "course"
    subprocess.run(["git", "init", "-q", str(outer)], check=True, timeout=60)
    copy = outer / "build" / "minbert"
    shutil.copytree(ROOT / "data", copy / "data")
    with pytest.raises(ValueError, match=f"is not a git checkout of its own .git's top level here is {outer}"):
        data_files(copy)
