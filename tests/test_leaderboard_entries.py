"""Uploads as staff and students hand them in: a zip beside a partial set of loose files, files too deep, a damaged
zip, a .ZIP; the scoreboard's entries that are neither a zip nor a folder, and two entries of one name."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pytest
from conftest import DATA
from leaderboard_fixtures import SALT, dev_labels, write_gold, write_upload

from assignments import scoreboard
from assignments.standing import load_dev, load_gold, score_upload, split_gold
from tasks.submit import make_submission


@pytest.fixture(scope="module")
def lb(tmp_path_factory: pytest.TempPathFactory) -> dict:
    base = tmp_path_factory.mktemp("entries")
    labels = write_gold(base / "gold")
    good = write_upload(base / "good", labels, dev_labels())
    made, problems = make_submission(good, DATA, base / "submission.zip")
    assert problems == []
    return {"base": base, "tests": split_gold(load_gold(base / "gold", DATA), SALT, 0.5), "dev": load_dev(DATA),
            "good": good, "zip": made}


def _problems(lb: dict, upload: Path) -> list[str]:
    standing = score_upload(upload, lb["tests"], lb["dev"])
    assert not standing.valid
    return standing.problems


def test_a_zip_beside_a_partial_set_of_loose_files_is_named_not_five_files_missing(lb, tmp_path):
    folder = tmp_path / "up"
    folder.mkdir()
    shutil.copy(lb["zip"], folder / "submission.zip")
    shutil.copy(lb["good"] / "sst-test-output.csv", folder)
    problems = _problems(lb, folder)
    assert len(problems) == 1 and "not in the upload" not in problems[0], problems
    assert problems[0].startswith("submission.zip not read, because loose prediction files lie beside it "
                                  "(sst-test-output.csv)"), problems


def test_files_too_deep_are_reported_as_too_deep(lb, tmp_path):
    archive = tmp_path / "too_deep.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for path in sorted(lb["good"].iterdir()):
            z.write(path, arcname=f"a/b/c/predictions/{path.name}")
    folder = tmp_path / "folder"
    shutil.copytree(lb["good"], folder / "a" / "b" / "c" / "predictions")
    for upload, label in ((archive, "too_deep.zip"), (folder, "the upload")):
        (problem,) = _problems(lb, upload)
        assert problem.startswith(f"{label}: found ") and "at a/b/c/predictions/ (and 5 more there), more than 3 " \
            "folders down" in problem and "zip the predictions/ folder itself" in problem, problem
        assert "holds no prediction file" not in problem


@pytest.mark.parametrize("name", ["trunc.zip", "trunc.ZIP", "trunc"])
def test_a_damaged_zip_gets_the_zip_readers_reason(lb, tmp_path, name):
    damaged = tmp_path / name
    damaged.write_bytes(lb["zip"].read_bytes()[:3000])
    (problem,) = _problems(lb, damaged)
    assert problem.startswith(f"{name}: not a readable zip file (") and "zip the six files again" in problem, problem


def test_a_zip_named_in_capitals_in_a_folder_is_read(lb, tmp_path):
    folder = tmp_path / "up"
    folder.mkdir()
    shutil.copy(lb["zip"], folder / "SUBMISSION.ZIP")
    assert score_upload(folder, lb["tests"], lb["dev"]).valid


def test_the_scoreboard_lists_every_entry_and_names_two_of_one_name_in_full(lb, tmp_path):
    folder = tmp_path / "uploads"
    folder.mkdir()
    shutil.copy(lb["zip"], folder / "good.zip")
    shutil.copytree(lb["good"], folder / "good")
    shutil.copy(lb["zip"], folder / "team.ZIP")
    (folder / "team2.tar").write_bytes(b"not a zip")
    shutil.copy(lb["good"] / "sst-test-output.csv", folder / "loose.csv")
    rows = {e.name: e for e in scoreboard.scoreboard(folder, lb["tests"], lb["dev"], progress=False)}
    assert sorted(rows) == ["good.zip", "good/", "loose.csv", "team", "team2.tar"]
    assert all(rows[n].standing.valid for n in ("good.zip", "good/", "team"))
    for name in ("team2.tar", "loose.csv"):
        assert rows[name].standing.problems[0].startswith(f"{name}: neither a folder nor a zip file; upload ")


def test_constant_sts_predictions_score_r_0_with_a_note_saying_r_is_undefined(lb, tmp_path):
    labels = write_gold(tmp_path / "gold")                                   # the gold of lb (seed 0)
    labels["sts"] = dict.fromkeys(labels["sts"], 2.5)
    standing = score_upload(write_upload(tmp_path / "up", labels, dev_labels()), lb["tests"], lb["dev"])
    assert standing.valid and standing.public.value("sts") == 0.0
    assert "sts-test-output.csv: every similarity is 2.5, so Pearson r is undefined (a constant correlates with " \
           "nothing); it is scored as r = 0" in standing.notes, standing.notes
