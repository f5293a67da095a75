"""The staff guide's commands are the tools' own: every `python -m assignments.X` line of INSTRUCTORS.md names a module
that exists and only flags (and subcommands) its --help lists."""

from __future__ import annotations

import contextlib
import importlib
import io
import re
import shlex

import pytest

from assignments.make import ROOT

GUIDE = ROOT / "assignments" / "INSTRUCTORS.md"


def documented_commands() -> list[tuple[str, list[str]]]:
    """(module, its arguments) for each `python -m assignments.X ...` in the guide's code blocks, continuations joined."""
    blocks = re.findall(r"```bash\n(.*?)```", GUIDE.read_text(), flags=re.DOTALL)
    lines = "\n".join(blocks).replace("\\\n", " ").splitlines()
    out = []
    for line in lines:
        for m in re.finditer(r"python -m (assignments\.\w+)([^;&|#)]*)", line):
            out.append((m.group(1), shlex.split(m.group(2).replace("[", " ").replace("]", " "))))
    return out


def _help(module: str, sub: list[str]) -> str:
    main = importlib.import_module(module).main
    text = io.StringIO()
    with contextlib.redirect_stdout(text), pytest.raises(SystemExit) as e:
        main([*sub, "--help"])
    assert e.value.code == 0, module
    return text.getvalue()


def test_the_guide_documents_each_staff_tool() -> None:
    modules = {m for m, _ in documented_commands()}
    assert {"assignments.grade", "assignments.bundle", "assignments.scoreboard", "assignments.make",
            "assignments.lockfile"} <= modules


@pytest.mark.parametrize("module, args", documented_commands(), ids=lambda v: v if isinstance(v, str) else "")
def test_each_documented_command_uses_flags_its_tool_has(module: str, args: list[str]) -> None:
    flags = [a.split("=")[0] for a in args if a.startswith("--")]
    if module == "assignments.make_fixtures":
        assert not flags                                   # it takes none
        return
    sub = [args[0]] if module in ("assignments.bundle", "assignments.lockfile") and args else []
    text = _help(module, sub)
    for flag in flags:
        if flag != "--help":
            assert re.search(rf"{re.escape(flag)}\b", text), f"{module} {' '.join(sub)}: no {flag} in its --help"


def _median(row_start: str) -> float:
    """The median (seconds) of the guide's times-table row that starts with row_start."""
    row = next(line for line in GUIDE.read_text().splitlines() if line.startswith(f"| {row_start}"))
    return float(row.split("|")[2].strip().removesuffix(" s"))


def test_the_handouts_timings_are_the_guides_measured_medians() -> None:
    handout = (ROOT / "assignments" / "README.md").read_text()
    part1 = _median("`python -m assignments.grade . --seed-file seed`")
    every = _median("`python -m assignments.grade . --groups all --seed-file seed`")
    assert f"Grading one submission takes about {round(part1)} s (part 1; {round(every)} s for every group" in handout
    one = [_median(f"`python -m assignments.check adamw` in {w}") for w in ("the reference tree", "a fresh student tree")]
    assert f"Checking one part takes about {min(one):.1f}-{max(one):.1f} s" in handout.replace("\n", " ")
    first = _median("`python -m assignments.check` in a fresh student tree")
    assert f"part 1 about {first:.1f} s" in handout.replace("\n", " ")
    every = [_median(f"`python -m assignments.check all` in {w}") for w in ("the reference tree", "a fresh student tree")]
    assert f"every group about {min(every):.1f}-{max(every):.1f} s" in handout.replace("\n", " ")
