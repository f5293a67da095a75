"""Synthetic leaderboard gold and uploads for the leaderboard tests: the real test-student ids with random labels."""

from __future__ import annotations

import csv
import io
import json
import os
import random
import re
import shutil
import subprocess
import sys
import zipfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from conftest import DATA

from assignments.standing import GOLD_NAMES
from tasks.core.data import TASKS
from tasks.core.evaluation import prediction_path, write_predictions

TASK_NAMES = ("sst", "para", "sts")
LABEL_COLUMN = {"sst": "sentiment", "para": "is_duplicate", "sts": "similarity"}
SALT = "a-test-salt-0f6b3c2e9d41a7"
VISIBILITIES = {"hidden", "after_due_date", "after_published", "visible"}
TOP_KEYS = {"score", "execution_time", "output", "output_format", "test_output_format", "test_name_format",
            "visibility", "stdout_visibility", "extra_data", "tests", "leaderboard"}
TEST_KEYS = {"score", "max_score", "status", "name", "name_format", "number", "output", "output_format", "tags",
             "visibility", "extra_data"}


def _label(task: str, rng: random.Random) -> float | int:
    if task == "sst":
        return rng.randrange(5)
    if task == "para":
        return float(rng.randrange(2))
    while True:                                  # 7 decimals, so that each label's text is findable in any output
        value = round(rng.uniform(0.1, 4.9), 7)
        if len(repr(value).split(".")[1]) == 7:
            return value


def write_gold(gold_dir: Path, seed: int = 0, tasks: tuple[str, ...] = TASK_NAMES) -> dict[str, dict[str, float | int]]:
    """The labelled test files of tasks (the students' test files with a label column); task -> id -> label."""
    rng = random.Random(seed)
    gold_dir.mkdir(parents=True, exist_ok=True)
    labels: dict[str, dict[str, float | int]] = {}
    for task in tasks:
        rows = list(csv.reader(io.StringIO(TASKS[task].path(DATA, "test").read_text(), newline=""), delimiter="\t"))
        out = io.StringIO()
        writer = csv.writer(out, delimiter="\t", lineterminator="\n")
        writer.writerow(rows[0] + [LABEL_COLUMN[task]])
        labels[task] = {}
        for row in rows[1:]:
            value = _label(task, rng)
            labels[task][row[rows[0].index("id")]] = value
            writer.writerow(row + [value])
        (gold_dir / GOLD_NAMES[task][0]).write_text(out.getvalue())
    return labels


def dev_labels() -> dict[str, dict[str, float | int]]:
    return {t: {e.id: e.label for e in TASKS[t].read(TASKS[t].path(DATA, "dev"))} for t in TASK_NAMES}


def write_upload(folder: Path, test: dict[str, dict], dev: dict[str, dict]) -> Path:
    """The prediction files of the maps' tasks (the six files for the three), flat in folder, from id -> value maps."""
    for split, values in (("test", test), ("dev", dev)):
        for task in values:
            ids = list(values[task])
            write_predictions(prediction_path(folder, task, split), task, ids, [values[task][i] for i in ids])
    return folder


def partial(test: dict[str, dict], seed: int = 1) -> dict[str, dict]:
    """The gold with SST's predictions drawn at random: public and private figures then differ."""
    rng = random.Random(seed)
    return {**test, "sst": {i: rng.randrange(5) for i in test["sst"]}}


def visible_text(results: dict) -> str:
    """What a student sees before the due date: the top-level output, the visible tests, the leaderboard."""
    tests = [t for t in results.get("tests", []) if t.get("visibility", results.get("visibility", "visible")) == "visible"]
    return "\n".join([results.get("output", ""), json.dumps(tests), json.dumps(results.get("leaderboard", []))])


def figure_texts(value: float) -> list[str]:
    """The ways a figure may be printed: 4 places, 6 places (the leaderboard), repr."""
    return [f"{value:.4f}", f"{round(value, 6)}", repr(value)]


def assert_results_format(results: dict) -> None:
    """results.json as Gradescope's specification describes it."""
    assert set(results) <= TOP_KEYS, set(results) - TOP_KEYS
    assert isinstance(results["score"], (int, float)) and not isinstance(results["score"], bool)
    assert isinstance(results.get("tests", []), list)
    for test in results.get("tests", []):
        assert isinstance(test, dict) and set(test) <= TEST_KEYS, test
        assert test.get("visibility", "visible") in VISIBILITIES
        assert test.get("status", "passed") in ("passed", "failed")
        for key in ("score", "max_score"):
            assert isinstance(test.get(key, 0), (int, float))
    for entry in results.get("leaderboard", []):
        assert set(entry) <= {"name", "value", "order"} and isinstance(entry["name"], str)
        assert isinstance(entry["value"], (int, float, str)) and entry.get("order", "desc") in ("asc", "desc")
    json.dumps(results)


def assert_no_secret(text: str, gold_dir: Path, gold: dict[str, dict]) -> None:
    """No gold location, salt or STS gold label (7-decimal numbers, unique to the gold) in text."""
    assert str(gold_dir) not in text and SALT not in text
    for name in (n for names in GOLD_NAMES.values() for n in names if "student" not in n):
        assert name not in text, name
    numbers = set(re.findall(r"\d+\.\d+", text))
    assert not numbers & {repr(v) for v in gold.get("sts", {}).values()}


def metadata(created: str, due: str | None, previous: list[dict] | None = None, late: str | None = None) -> dict:
    return {"id": 1, "created_at": created, "assignment": {"due_date": due, "late_due_date": late, "title": "lb"},
            "submission_method": "upload", "users": [], "previous_submissions": previous or []}


def copy_tree(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def run_autograder(layout: Path) -> tuple[int, dict, str]:
    """source/run_autograder in a folder laid out as /autograder, with this Python: (status, results, stdout)."""
    env = {**os.environ, "AUTOGRADER_ROOT": str(layout), "AUTOGRADER_PYTHON": sys.executable, "PYTHONPATH": ""}
    proc = subprocess.run(["bash", str(layout / "source" / "run_autograder")], cwd=layout, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    results = json.loads((layout / "results" / "results.json").read_text())
    assert_results_format(results)
    return proc.returncode, results, proc.stdout + proc.stderr


def autograder_layout(tmp_path: Path, built: Path, upload: Path, name: str, due: str | None = None,
                      created: str | None = None) -> Path:
    """/autograder: source/ (the bundle, modes kept), submission/, metadata created now (or at created), due in a
    week (or at due)."""
    layout = tmp_path / name
    with zipfile.ZipFile(built) as z:
        z.extractall(layout / "source")
        for info in z.infolist():
            os.chmod(layout / "source" / info.filename, (info.external_attr >> 16) & 0o777)
    shutil.copytree(upload, layout / "submission")
    now = datetime.now(UTC)
    meta = metadata(created or now.isoformat(), due or (now + timedelta(days=7)).isoformat(), [])
    (layout / "submission_metadata.json").write_text(json.dumps(meta))
    return layout
