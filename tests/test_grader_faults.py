"""The grader survives a student part that allocates without bound or segfaults: that part fails with a reason; as
root, a user who cannot run its Python is refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import grading_user
from test_assignments import submission_with

from assignments import untrusted
from assignments.checks import PARTS
from assignments.grade import grade
from assignments.grade import main as grade_main


def test_memory_bomb_and_segfault_fail_their_own_part_only(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MINBERT_PART_MEMORY", str(1 << 30))   # 1 GiB above what the checker had mapped
    sub = submission_with(tmp_path, {
        "attention": "hog = []\nwhile True:\n    hog.append(bytearray(1 << 26))",   # 64 MiB at a time, forever
        "AdamW.step": "import ctypes\nctypes.string_at(0)",                           # reads address 0: SIGSEGV
    }, flat=True)
    res = grade(sub, timeout=20.0, parts=["attention", "adamw", "embeddings"], as_user=grading_user())
    parts = {r["part"]: r for r in res["parts"]}
    assert parts["attention"]["status"] == "error" and "MemoryError" in parts["attention"]["message"], parts
    assert parts["adamw"]["status"] == "crash" and "SIGSEGV" in parts["adamw"]["message"], parts["adamw"]
    assert parts["attention"]["seconds"] < 15     # stopped by the memory limit, not by the time limit
    passed = {"embeddings"}   # calls neither function: graded as usual
    assert {p for p, r in parts.items() if r["status"] == "pass"} == passed
    assert res["score"] == sum(PARTS[p].points for p in passed)


def test_as_root_a_user_who_cannot_run_this_python_is_refused_not_replaced_by_root(tmp_path: Path, monkeypatch,
                                                                                   capsys) -> None:
    monkeypatch.setattr(untrusted, "_can_run", lambda account: False)     # as nobody cannot here (a venv under /work)
    sub = submission_with(tmp_path, {})
    says = f"nobody cannot run {untrusted.sys.executable} and find torch: make the interpreter and its packages " \
           "readable to nobody, name a user who can with --as-user USER, or accept running the submission's " \
           "code as root with --as-user none"
    with monkeypatch.context() as m:
        m.setattr(os, "geteuid", lambda: 0)                                  # as root, wherever the tests run
        with pytest.raises(ValueError) as e:
            grade(sub, parts=["adamw"])                                      # --as-user auto, the default
        assert str(e.value) == says
        for argv in ([str(sub), "--parts", "adamw", "--out", str(tmp_path / "r.json")],
                     ["--batch", str(tmp_path), "--csv", str(tmp_path / "g.csv")]):
            assert grade_main(argv) == 2
            assert capsys.readouterr().err == f"error: {says}\n"
        assert not (tmp_path / "r.json").exists() and not (tmp_path / "g.csv").exists()
    res = grade(sub, parts=["adamw"], as_user="none")                       # said: the code runs as root (as root)
    assert [(r["part"], r["status"]) for r in res["parts"]] == [("adamw", "pass")]
    assert untrusted.student_account("none") is None
