"""A student tree's data/ is the reference's data files that git tracks: a labelled test file (the leaderboard's
gold) or a salt dropped into data/ is left out, and named."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import warm

from assignments.make import ROOT, data_files, generate
from assignments.profiles import PROFILES
from tasks.core.data import read_sentences

ENV = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}

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


def test_each_trees_data_readme_names_only_the_data_files_it_ships(tmp_path):
    """A tree's data/README.md is the page's text for its profile (assignments.make, the handout's profile sections):
    every course data file it names is in that tree's data/, and no profile marker is left in it."""
    course = {p.name for p in (ROOT / "data").iterdir()}
    for name in PROFILES:
        generate(tmp_path / name, profile=name)
        page = (tmp_path / name / "data" / "README.md").read_text(encoding="utf-8")
        named = set(re.findall(r"[\w.-]+\.csv", page)) & course
        shipped = {p.name for p in (tmp_path / name / "data").iterdir()}
        assert named - shipped == set(), name
        assert "<!--" not in page, name
    assert {"quora-train.csv", "sts-train.csv"} <= named          # the full tree's page lists every file


def test_the_part1_trees_join_example_runs_there_and_its_classifier_command_takes_the_file(tmp_path):
    """A part1 tree's data/README.md "Training on more data": its bash block run in the tree as written joins a
    student's SST rows (CRLF, no last line end) to data/ids-sst-train.csv, header once, and the classifier command
    it gives reads the joined file (its flags parsed by the tree's own tasks.classifier, --print-config)."""
    tree = tmp_path / "part1"
    generate(tree, profile="part1")
    page = (tree / "data" / "README.md").read_text(encoding="utf-8")
    section = page[page.index("## Training on more data"):]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)[1]
    mine, joined = re.fullmatch(r"awk 'FNR > 1 \|\| NR == 1' data/ids-sst-train.csv (\S+) > (\S+)\n", block).groups()
    (tree / mine).write_bytes(b"\tid\tsentence\tsentiment\r\n0\tmine-1\tA fine, long film.\t4\r\n1\tmine-2\tDull\t1")
    subprocess.run(["bash", "-c", block], cwd=tree, check=True, timeout=60)
    records = read_sentences(tree / joined)
    course = read_sentences(tree / "data" / "ids-sst-train.csv")
    assert (len(records), records.skipped) == (len(course) + 2, [])
    assert [(r.id, r.sentence, r.label) for r in records[-2:]] == [("mine-1", "A fine, long film.", 4),
                                                                   ("mine-2", "Dull", 1)]
    command = re.search(r"`python (-m tasks\.classifier [^`]*)`", section)[1].split()
    assert command[command.index("--train-file") + 1] == joined
    proc = warm.run([sys.executable, *command, "--print-config"], cwd=tree, env={**ENV, "PYTHONPATH": str(tree)},
                    capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert Path(json.loads(proc.stdout)["files"]["train_file"]).name == joined
