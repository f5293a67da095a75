"""The leaderboard's standing (assignments/standing.py), pinned where mutation testing found it loose: each figure
against a hand computation on its own part of the ids, the split's dependence on the salt, the bounds of the
fraction, the salt and the gold's size, the gold read strictly, and an upload's notes and warnings kept together
(tests/MUTATION.md: `python tests/mutation.py assignments/standing.py`)."""

from __future__ import annotations

import csv
import random
import re
import shutil
import zipfile

import numpy as np
import pytest
from conftest import DATA
from leaderboard_fixtures import SALT, TASK_NAMES, write_gold, write_upload

from assignments.boards import MULTITASK
from assignments.standing import (
    GoldError,
    check_fraction,
    figures,
    load_gold,
    read_salt,
    score_upload,
    split_gold,
    split_ids,
)
from tasks.core.data import LABEL_COLUMNS


@pytest.fixture(scope="module")
def gold(tmp_path_factory):
    """The labelled test files (the real test ids, random labels) and their split with the test salt."""
    folder = tmp_path_factory.mktemp("gold")
    labels = write_gold(folder)
    return folder, labels, split_gold(load_gold(folder, DATA), SALT, 0.5)


def _noisy(labels: dict[str, dict], seed: int = 3) -> dict[str, dict]:
    """Predictions that are right on about half of each task's ids (classes), or the label plus noise (STS)."""
    rng = random.Random(seed)
    out = {}
    for task, values in labels.items():
        if task == "sts":
            out[task] = {i: round(min(5.0, max(0.0, v + rng.gauss(0, 1.5))), 3) for i, v in values.items()}
        else:
            classes = 5 if task == "sst" else 2
            out[task] = {i: v if rng.random() < 0.5 else (v + 1) % classes for i, v in values.items()}
    return out


def _by_hand(preds: dict, labels: dict, ids: list[str], task: str) -> float:
    """Accuracy, or Pearson r for STS, of the ids alone, with numpy."""
    p, g = np.array([preds[i] for i in ids], float), np.array([labels[i] for i in ids], float)
    return float(np.corrcoef(p, g)[0, 1]) if task == "sts" else float(np.mean(p == g))


def test_each_figure_is_its_tasks_metric_on_its_own_part_of_the_ids(gold, tmp_path):
    _folder, labels, split = gold
    preds = _noisy(labels)
    standing = score_upload(write_upload(tmp_path / "up", preds, {}), split)
    assert standing.valid, standing.problems
    for part, ids in (("public", split.public), ("private", split.private)):
        shown = getattr(standing, part)
        for task in TASK_NAMES:
            assert shown.scores[task] == pytest.approx(_by_hand(preds[task], labels[task], ids[task], task),
                                                       abs=1e-9), (part, task)
            assert shown.counts[task] == len(ids[task])
        assert shown.count_line() == ("ids: " + ", ".join(f"{name} {len(ids[t])}" for t, name in
                                                          zip(TASK_NAMES, ("SST", "Quora", "STS"), strict=True)))
    every = figures(preds, split.gold, MULTITASK)                    # every gold id: neither part's figure
    assert every.counts == {t: len(labels[t]) for t in TASK_NAMES}
    assert every.scores["sst"] != standing.public.scores["sst"] != standing.private.scores["sst"]


def test_the_split_is_the_salts_and_splits_every_task(gold):
    folder, labels, split = gold
    other = split_gold(load_gold(folder, DATA), SALT + "x", 0.5)
    for task in TASK_NAMES:
        assert sorted(split.public[task] + split.private[task]) == sorted(labels[task])
        assert set(split.public[task]).isdisjoint(split.private[task])
        assert split.private[task] != other.private[task]                 # another salt, another split
        assert split.private[task] == split_ids(list(labels[task]), SALT, 0.5)[1]


@pytest.mark.parametrize("fraction", [0, 0.0, 1, 1.0, 1.5, -0.1])
def test_a_private_fraction_outside_0_to_1_is_refused(fraction):
    with pytest.raises(GoldError, match=f"strictly between 0 and 1, not {fraction}$"):
        check_fraction(fraction)
    assert check_fraction(0.001) == 0.001 and check_fraction(0.999) == 0.999


def test_the_salt_needs_16_characters_and_names_an_unreadable_file(tmp_path):
    salt = tmp_path / "salt.txt"
    salt.write_text("s" * 16 + "\n")
    assert read_salt(salt) == "s" * 16
    salt.write_text("s" * 15)
    with pytest.raises(GoldError, match="the salt has 15 characters, fewer than 16"):
        read_salt(salt)
    with pytest.raises(GoldError, match=f"{tmp_path / 'none.txt'}: cannot read the salt file .*token_hex"):
        read_salt(tmp_path / "none.txt")


def _gold_rows(path) -> tuple[list[str], list[list[str]]]:
    """A gold file's header and rows, read as the tab-separated file it is (quoted fields may hold newlines)."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f, delimiter="\t"))
    return rows[0], rows[1:]


def _write_rows(path, header: list[str], rows: list[list[str]]) -> None:
    with open(path, "w", newline="") as f:
        csv.writer(f, delimiter="\t", lineterminator="\n").writerows([header, *rows])


def _sst_gold(tmp_path) -> tuple:
    """A gold folder, its SST file, that file's header and rows, and the id column's index."""
    folder = tmp_path / "gold"
    write_gold(folder)
    sst = folder / "ids-sst-test.csv"
    header, rows = _gold_rows(sst)
    return folder, sst, header, rows, header.index("id")


def test_a_split_needs_2_ids_in_each_part_and_a_gold_2_rows(tmp_path):
    """The gold with 2 labelled rows is read; 1 is refused; a part left with under 2 ids names the part and task."""
    folder, sst, header, rows, column = _sst_gold(tmp_path)
    public, private = split_ids([r[column] for r in rows], SALT, 0.5)
    kept = [r for r in rows if r[column] in public[:2] + private[:2]]
    _write_rows(sst, header, kept)
    split = split_gold(load_gold(folder, None), SALT, 0.5)
    assert (len(split.public["sst"]), len(split.private["sst"])) == (2, 2)
    _write_rows(sst, header, [r for r in kept if r[column] != private[0]])
    with pytest.raises(GoldError, match=r"ids-sst-test.csv: the split leaves 1 ids in the private part of sst; use "
                                        r"more test rows or a private fraction nearer 0.5$"):
        split_gold(load_gold(folder, None), SALT, 0.5)
    _write_rows(sst, header, kept[:1])
    with pytest.raises(GoldError, match=r"ids-sst-test.csv: 1 labelled rows; a gold file needs at least 2$"):
        load_gold(folder, None)


def test_a_malformed_gold_row_stops_the_gold_naming_its_line(tmp_path):
    """The gold is read strictly: a row with a bad label is an error at its line, not a row skipped."""
    folder, sst, header, rows, _column = _sst_gold(tmp_path)
    rows[0][-1] = "nine"
    _write_rows(sst, header, rows)
    with pytest.raises(GoldError, match=r"^gold: .*ids-sst-test.csv:2: "):
        load_gold(folder, None)


def test_an_uploads_warnings_and_notes_add_up_and_a_constant_class_file_gets_no_r_note(gold, tmp_path):
    """Every file's warnings are kept (not the last file's alone), each led by its file; the upload's own note (the
    zip it was read from) beside the constant-STS note, which an SST file of one class (a constant too) does not
    get."""
    _folder, labels, split = gold
    preds = {**labels, "sst": dict.fromkeys(labels["sst"], 2), "sts": dict.fromkeys(labels["sts"], 2.5)}
    files = write_upload(tmp_path / "files", preds, {})
    for task in ("sst", "para"):                                  # no header line: a warning each
        path = files / f"{task}-test-output.csv"
        path.write_text("".join(path.read_text().splitlines(keepends=True)[1:]))
    (tmp_path / "up").mkdir()
    with zipfile.ZipFile(tmp_path / "up" / "submission.zip", "w") as z:
        for path in sorted(files.iterdir()):
            z.write(path, path.name)
    standing = score_upload(tmp_path / "up", split)
    assert standing.valid, standing.problems
    assert [w.split(":1:")[0] for w in standing.warnings] == ["submission.zip:sst-test-output.csv",
                                                              "submission.zip:para-test-output.csv"], standing.warnings
    assert all("no header line" in w for w in standing.warnings)
    assert standing.notes[0] == "read the prediction files from submission.zip"
    assert len(standing.notes) == 2 and standing.notes[1].startswith(
        "submission.zip:sts-test-output.csv: every similarity is 2.5, so Pearson r is undefined"), standing.notes


def test_a_missing_or_unlabelled_gold_file_is_named_with_what_it_must_be(tmp_path):
    folder = tmp_path / "gold"
    write_gold(folder)
    (folder / "quora-test.csv").unlink()
    with pytest.raises(GoldError, match=r"^" + re.escape(
            f"{folder / 'quora-test.csv'}: no such file; the gold folder needs quora-test.csv (or "
            "quora-test-student.csv with its label column): the labelled test file, in the dev file's format") + "$"):
        load_gold(folder, None)
    write_gold(folder)
    shutil.copy(DATA / "sts-test-student.csv", folder / "sts-test.csv")      # the students' file: no label column
    with pytest.raises(GoldError, match=r"^" + re.escape(
            f"{folder / 'sts-test.csv'}:1: no label column ({' / '.join(LABEL_COLUMNS)}); the gold must be the "
            "labelled test file, in the dev file's format") + "$"):
        load_gold(folder, None)


def test_a_gold_of_2_rows_is_read_and_a_public_part_of_1_is_named(tmp_path):
    folder, sst, header, rows, column = _sst_gold(tmp_path)
    public, private = split_ids([r[column] for r in rows], SALT, 0.5)
    _write_rows(sst, header, [r for r in rows if r[column] in public[:1] + private[:1]])
    assert len(load_gold(folder, None)["sst"]) == 2                      # 2 rows: read (the split refuses it)
    _write_rows(sst, header, [r for r in rows if r[column] in public[:1] + private[:3]])
    with pytest.raises(GoldError, match=r"the split leaves 1 ids in the public part of sst"):
        split_gold(load_gold(folder, None), SALT, 0.5)


def test_a_missing_file_does_not_stop_the_other_files_being_checked(gold, tmp_path):
    """An upload without SST's test file and with a malformed Quora file: both are reported."""
    _folder, labels, split = gold
    files = write_upload(tmp_path / "up", labels, {})
    (files / "sst-test-output.csv").unlink()
    para = files / "para-test-output.csv"
    lines = para.read_text().splitlines(keepends=True)
    para.write_text(lines[0] + "not-an-id\t1\n" + "".join(lines[2:]))
    standing = score_upload(files, split)
    assert not standing.valid
    assert standing.problems[0].startswith("sst-test-output.csv: not in the upload")
    assert any(p.startswith("para-test-output.csv") and "not-an-id" in p for p in standing.problems), standing.problems
