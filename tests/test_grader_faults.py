"""The grader survives a student part that allocates without bound or segfaults: that part fails with a reason."""

from __future__ import annotations

from pathlib import Path

from test_assignments import submission_with

from assignments.checks import PARTS
from assignments.grade import grade


def test_memory_bomb_and_segfault_fail_their_own_part_only(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MINBERT_PART_MEMORY", str(1 << 30))   # 1 GiB above what the checker had mapped
    sub = submission_with(tmp_path, {
        "attention": "hog = []\nwhile True:\n    hog.append(bytearray(1 << 26))",   # 64 MiB at a time, forever
        "AdamW.step": "import ctypes\nctypes.string_at(0)",                           # reads address 0: SIGSEGV
    }, flat=True)
    res = grade(sub, timeout=20.0, parts=["attention", "adamw", "embeddings"])
    parts = {r["part"]: r for r in res["parts"]}
    assert parts["attention"]["status"] == "error" and "MemoryError" in parts["attention"]["message"], parts
    assert parts["adamw"]["status"] == "crash" and "SIGSEGV" in parts["adamw"]["message"], parts["adamw"]
    assert parts["attention"]["seconds"] < 15     # stopped by the memory limit, not by the time limit
    passed = {"embeddings"}   # calls neither function: graded as usual
    assert {p for p, r in parts.items() if r["status"] == "pass"} == passed
    assert res["score"] == sum(PARTS[p].points for p in passed)
