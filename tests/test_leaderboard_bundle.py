"""The leaderboard's Gradescope bundle run end to end in a folder laid out as /autograder, the scoreboard on three
uploads, the graders' lock file, and provenance (assignments/bundle.py, scoreboard.py, lockfile.py, provenance.py)."""

from __future__ import annotations

import csv
import importlib.metadata
import io
import json
import shutil
import subprocess
import zipfile

import pytest
from conftest import DATA, ROOT
from leaderboard_fixtures import (
    SALT,
    assert_no_secret,
    autograder_layout,
    dev_labels,
    partial,
    run_autograder,
    visible_text,
    write_gold,
    write_upload,
)

from assignments import bundle, lockfile, scoreboard
from assignments.boards import MULTITASK
from assignments.provenance import provenance, reference_commit
from assignments.standing import Standing
from tasks.submit import make_submission


@pytest.fixture(scope="module")
def lb(tmp_path_factory: pytest.TempPathFactory) -> dict:
    base = tmp_path_factory.mktemp("lb")
    labels = write_gold(base / "gold")
    (base / "salt").write_text(SALT + "\n")
    return {"base": base, "gold_dir": base / "gold", "salt": base / "salt", "labels": labels, "dev": dev_labels()}


def test_the_bundle_grades_end_to_end_in_a_folder_laid_out_as_autograder(lb, tmp_path, capsys):
    out = tmp_path / "leaderboard.zip"
    argv = ["leaderboard", str(out), "--gold", str(lb["gold_dir"]), "--salt-file", str(lb["salt"]),
            "--daily-limit", "3", "--points", "2"]
    assert bundle.main(argv) == 0
    with zipfile.ZipFile(out) as z:
        infos = {i.filename: i for i in z.infolist()}
        commit = z.read("minbert-reference/REFERENCE_COMMIT").decode().strip()
        settings = json.loads(z.read("leaderboard/settings.json"))
    for script in ("setup.sh", "run_autograder"):                         # at the zip's root, executable
        assert (infos[script].external_attr >> 16) & 0o111
    assert {"leaderboard/gold/ids-sst-test.csv", "leaderboard/gold/quora-test.csv", "leaderboard/gold/sts-test.csv",
            "leaderboard/salt", "minbert-reference/assignments/gradescope/requirements-grader.txt",
            "minbert-reference/assignments/leaderboard.py", "minbert-reference/minbert/model.py",
            "minbert-reference/data/sts-dev.csv"} <= set(infos)
    assert not any("__pycache__" in n or n.startswith("minbert-reference/tests/") for n in infos)
    assert {i.date_time for i in infos.values()} == {bundle.STAMP}          # fixed stamps: same inputs, same bytes
    assert commit.removesuffix("-dirty") == subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, text=True,
                                                           capture_output=True, check=True).stdout.strip()
    assert {k: v for k, v in settings.items() if not k.endswith("_sha256")} == {
        "daily_limit": 3, "private_fraction": 0.5, "points": 2.0, "profile": "full"}
    assert set(settings["gold_sha256"]) == {"ids-sst-test.csv", "quora-test.csv", "sts-test.csv"}

    perfect = write_upload(tmp_path / "perfect", lb["labels"], lb["dev"])
    status, results, stdout = run_autograder(autograder_layout(tmp_path, out, perfect, "ok"))
    assert status == 0 and results["score"] == 2.0
    assert [e["value"] for e in results["leaderboard"]] == [1.0, 1.0, 1.0, 1.0]
    assert results["extra_data"]["reference_commit"] == commit
    assert results["extra_data"]["torch"] == importlib.metadata.version("torch")
    for text in (visible_text(results), stdout):
        assert_no_secret(text, lb["gold_dir"], lb["labels"])
        assert "/source/leaderboard" not in text

    bad = shutil.copytree(perfect, tmp_path / "bad")
    lines = (bad / "sts-test-output.csv").read_text().splitlines()
    (bad / "sts-test-output.csv").write_text("\n".join([lines[0], "not-a-row", *lines[1:]]) + "\n")
    status, results, stdout = run_autograder(autograder_layout(tmp_path, out, bad, "bad"))
    assert status == 0 and results["score"] == 0 and "leaderboard" not in results
    assert "sts-test-output.csv:2: expected 'id , value', got 'not-a-row'" in results["output"]
    for text in (visible_text(results), stdout):
        assert_no_secret(text, lb["gold_dir"], lb["labels"])

    broken = autograder_layout(tmp_path, out, perfect, "broken")            # the staff's fault: still a results.json
    (broken / "source" / "leaderboard" / "gold" / "sts-test.csv").unlink()
    status, results, stdout = run_autograder(broken)
    assert status == 2 and results["score"] == 0 and "course staff" in results["output"]
    assert "sts-test.csv: no such file" in stdout                           # the reason, for the instructor only
    assert "sts-test.csv" not in results["output"]


def test_the_bundle_refuses_gold_that_a_student_tree_would_copy(lb, tmp_path, capsys):
    argv = ["leaderboard", str(tmp_path / "b.zip"), "--gold", str(DATA), "--salt-file", str(lb["salt"])]
    assert bundle.main(argv) == 2
    assert "copies into every student tree" in capsys.readouterr().err and not (tmp_path / "b.zip").exists()


def test_the_scoreboard_ranks_by_the_private_part_and_lists_invalid_uploads(lb, tmp_path, capsys, monkeypatch):
    folder = tmp_path / "uploads"
    folder.mkdir()
    perfect = write_upload(tmp_path / "perfect", lb["labels"], lb["dev"])
    assert make_submission(perfect, DATA, folder / "alice.zip")[1] == []
    write_upload(folder / "bob" / "project" / "predictions", partial(lb["labels"]), lb["dev"])
    carol = shutil.copytree(perfect, folder / "carol")
    (carol / "para-test-output.csv").write_text((carol / "para-test-output.csv").read_text() + "x , 9\n")
    (folder / "notes.txt").write_text("not an upload")                    # listed, not valid: never dropped silently
    argv = [str(folder), "--gold", str(lb["gold_dir"]), "--salt-file", str(lb["salt"]), "--data-dir", str(DATA),
            "--csv", str(tmp_path / "board.csv"), "--md", str(tmp_path / "board.md")]
    assert scoreboard.main(argv) == 0
    assert "scored 4 uploads (2 valid, 2 not)" in capsys.readouterr().out
    rows = list(csv.DictReader(io.StringIO((tmp_path / "board.csv").read_text())))
    assert list(rows[0]) == list(scoreboard.columns(MULTITASK))
    assert [(r["rank"], r["submission"], r["valid"]) for r in rows] == [("1", "alice", "yes"), ("2", "bob", "yes"),
                                                                          ("", "carol", "no"), ("", "notes.txt", "no")]
    assert rows[0]["private overall"] == rows[0]["public overall"] == "1.0000"
    assert float(rows[1]["private SST"]) < 0.5 and rows[1]["private Quora"] == "1.0000"
    assert rows[1]["private SST"] != rows[1]["public SST"]
    assert rows[2]["private overall"] == "" and "para-test-output.csv:2002: id x: value '9' out of range" in rows[2]["problems"]
    md = (tmp_path / "board.md").read_text()
    assert "| 1 | alice | 1.0000 |" in md and "| 2 | bob |" in md
    assert "## Not valid (2): no score" in md and "- **carol**: para-test-output.csv:2002" in md
    assert rows[3]["problems"].startswith("notes.txt: neither a folder nor a zip file")

    def explode(path, tests, dev):
        raise RuntimeError("a reader bug")
    monkeypatch.setattr(scoreboard, "score_upload", explode)               # one bad upload never stops the board
    entry = scoreboard.score_entry(folder / "alice.zip", None, None)
    assert entry.name == "alice" and not entry.standing.valid
    assert "cannot be scored: RuntimeError: a reader bug" in entry.standing.problems[0]
    ranked = scoreboard.rank([entry, scoreboard.Entry("zed", Standing(valid=False))])
    assert [e.rank for e in ranked] == [None, None]


def test_the_lock_pins_the_reference_venv_and_names_every_student_requirement():
    pins = lockfile.read_lock(lockfile.LOCK)
    for name, version in pins.items():
        assert importlib.metadata.version(name) == version, name
    wanted = set(lockfile.ROOTS) | set(lockfile.requirement_names(lockfile.STUDENT_REQUIREMENTS))
    assert {lockfile.normalise(n) for n in wanted} <= set(pins)
    assert {"torch", "huggingface-hub", "matplotlib"} <= set(pins) and pins["torch"].startswith("2.")
    assert lockfile.mismatches(pins) == [] and lockfile.main(["verify"]) == 0
    numpy = importlib.metadata.version("numpy")
    assert lockfile.mismatches({"numpy": "0.0.1"}) == [f"numpy: the lock pins 0.0.1, installed: {numpy}"]
    setup = (ROOT / "assignments" / "gradescope" / "leaderboard" / "setup.sh").read_text()
    install = (ROOT / "assignments" / "gradescope" / "install.sh").read_text()     # both bundles' setup.sh source it
    assert "set -euo pipefail" in setup and 'source "$reference/assignments/gradescope/install.sh"' in setup
    assert "https://download.pytorch.org/whl/cpu" in install
    assert "-r \"$lock\"" in install and "requirements-grader.txt" in install
    assert "assignments.lockfile verify" in setup.strip().splitlines()[-1]


def test_provenance_names_the_versions_and_the_commit(tmp_path, monkeypatch):
    info = provenance(ROOT)
    assert set(info) == {"python", "torch", "numpy", "tokenizers", "safetensors", "reference_commit"}
    assert info["numpy"] == importlib.metadata.version("numpy") and len(info["reference_commit"]) == 40
    (tmp_path / "REFERENCE_COMMIT").write_text("abc123-dirty\n")
    assert reference_commit(tmp_path) == "abc123-dirty"
    bare = tmp_path / "bare"
    bare.mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))       # git looks no further up than tmp_path
    assert reference_commit(bare) is None
