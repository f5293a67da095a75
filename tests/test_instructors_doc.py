"""The staff guide's commands are the tools' own: every `python -m assignments.X` line of INSTRUCTORS.md names a module
that exists and only flags (and subcommands) its --help lists."""

from __future__ import annotations

import json
import re
import shlex
import sys

import pytest

from assignments.make import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

import staff_times
from test_doc_claims import help_text, page_commands, sci

GUIDE = ROOT / "assignments" / "INSTRUCTORS.md"
STAFF_TIMES = ROOT / "benchmarks" / "results" / "staff-times.json"


def documented_commands() -> list[tuple[str, list[str]]]:
    """(module, its arguments) for each `python -m assignments.X ...` in the guide's code blocks, continuations joined."""
    return [(module, args) for _, module, args in page_commands({"guide": GUIDE}) if module.startswith("assignments.")]


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
    text = help_text(module, sub)
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
    spread = f"{min(one):.1f}-{max(one):.1f}" if f"{min(one):.1f}" != f"{max(one):.1f}" else f"{min(one):.1f}"
    assert f"Checking one part takes about {spread} s" in handout.replace("\n", " ")
    first = _median("`python -m assignments.check` in a fresh student tree")
    assert f"part 1 about {first:.1f} s" in handout.replace("\n", " ")
    every = [_median(f"`python -m assignments.check all` in {w}") for w in ("the reference tree", "a fresh student tree")]
    assert f"every group about {min(every):.1f}-{max(every):.1f} s" in handout.replace("\n", " ")


def _times() -> tuple[str, dict[str, tuple[str, str]]]:
    """The Times section's first paragraph (one line) and its table: first column -> (median cell, range cell)."""
    section = GUIDE.read_text().split("\n## Times\n", 1)[1].split("\n## ", 1)[0]
    paragraph = next(p for p in section.split("\n\n") if p.strip()).replace("\n", " ")
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines()
            if line.startswith("| `")]
    return paragraph, {label: (median, spread) for label, median, spread in rows}


def test_the_staff_times_script_times_every_row_of_the_guides_table_but_the_batch_row() -> None:
    labels = [label for label in _times()[1] if "--batch" not in label]
    assert [row.label for row in staff_times.ROWS] == labels
    for row in staff_times.ROWS:                       # the command run is the one the label names
        named = shlex.split(re.search(r"`(.*?)`", row.label).group(1))
        assigned = [a for a in named[:2] if "=" in a and not a.startswith("-")]   # VAR=VALUE before the command
        assert tuple(tuple(a.split("=", 1)) for a in assigned) == row.env, row.label
        named = named[len(assigned):]
        run = shlex.split(row.command)
        k = 4 if len(named) > 3 and not named[3].startswith("-") and not named[3].isupper() else 3   # a subcommand, .
        assert run[:k] == named[:k] and {a for a in named if a.startswith("--")} <= set(run), row.label
        assert row.exit == (1 if row.cwd == "$T/st" else 0), row.label    # a stub tree's check fails, nothing else


def test_the_staff_times_scripts_order_cells_and_cpu_name() -> None:
    order = staff_times.schedule(12, 6, seed=3)
    assert order == staff_times.schedule(12, 6, seed=3) != staff_times.schedule(12, 6, seed=4)
    assert all(sorted(r) == list(range(12)) for r in order) and len({tuple(r) for r in order}) > 1
    assert staff_times.cells(1.904, 1.79, 2.1) == ("1.90 s", "1.79-2.10 s")
    row = {"label": "`x`", **staff_times.summary([2.10004, 1.79, 1.90, 1.904, 2.0])}
    assert row["median_s"] == 1.904 and row["runs_s"][0] == 2.1
    assert staff_times.table([row]).splitlines() == ["| command | median | range |", "|---|---:|---:|",
                                                     "| `x` | 1.90 s | 1.79-2.10 s |"]
    assert staff_times.cpu_name({"model": "Intel(R) Xeon(R) Processor", "cores": 2}) == "2-core Intel Xeon"


def test_the_batch_row_is_grade_batch_json() -> None:
    batch = json.loads((ROOT / "benchmarks" / "results" / "grade-batch.json").read_text())
    label, (median, spread) = next((k, v) for k, v in _times()[1].items() if "--batch" in k)
    assert f"on {batch['submissions']} part-1 submissions" in label
    warm, cold = batch["modes"]["warm"], batch["modes"]["cold"]       # the default, and MINBERT_COLD_START=1
    assert (median, spread) == (f"{warm['wall_s']:.1f} s", f"{warm['s_per_submission']:.2f} s each")
    assert f"`MINBERT_COLD_START=1`: {cold['wall_s']:.1f} s, {cold['s_per_submission']:.2f} s each" in label
    guide = " ".join(GUIDE.read_text().split())
    assert f"a batch {cold['wall_s'] / warm['wall_s']:.1f}x" in guide and round(cold["wall_s"] / warm["wall_s"], 2) == \
        batch["cold_over_warm"]


def test_the_guides_times_are_staff_times_json() -> None:
    if not STAFF_TIMES.exists():
        pytest.skip(f"{STAFF_TIMES.relative_to(ROOT)} not written yet: python benchmarks/staff_times.py writes it")
    data = json.loads(STAFF_TIMES.read_text())
    assert not data["quick"], "a --quick run checks the plumbing; the table needs a full run"
    assert not data["dirty"], "measured with uncommitted changes to tracked files: the commit is not the code"
    paragraph, table = _times()
    for row in data["rows"]:
        assert len(row["runs_s"]) == data["runs"], f"{row['label']}: a run stopped after {len(row['runs_s'])} rounds"
        assert table[row["label"]] == staff_times.cells(row["median_s"], row["min_s"], row["max_s"]), row["label"]
    cpu, torch = data["cpu"], "torch {}.{}".format(*data["torch"].split(".")[:2])
    for said in (f"at commit {data['commit']} ", f"the median of {data['runs']} runs after one warm-up",
                 staff_times.cpu_name(cpu), torch, *([f"code ran as `{data['code_user']}`"] if data["root"] else [])):
        assert said in paragraph, f"the guide's Times paragraph does not say {said!r}"
    assert ("avx512_bf16" in paragraph, "AMX" in paragraph) == (cpu["avx512_bf16"], cpu["amx_bf16"]), cpu
    assert ("The grader ran as root" in paragraph) == data["root"], f"root: {data['root']}"
    every = {r["label"].split("`")[1]: r["median_s"] for r in data["rows"] if "--groups all --seed-file" in r["label"]}
    ratio = every["MINBERT_COLD_START=1 python -m assignments.grade . --groups all --seed-file seed"] / \
        every["python -m assignments.grade . --groups all --seed-file seed"]
    assert f"grading every group takes {ratio:.2f}x as long" in " ".join(GUIDE.read_text().split())


def _settings_section() -> str:
    """The guide's section on Gradescope's autograder settings."""
    return GUIDE.read_text().split("\n### Gradescope's autograder settings\n", 1)[1].split("\n## ", 1)[0]


def test_the_guides_points_per_group_are_the_checks() -> None:
    from assignments.checks import PARTS
    from assignments.common import ALL_GROUPS
    rows = [[c.strip().strip("`") for c in line.strip().strip("|").split("|")]
            for line in _settings_section().splitlines() if line.strip().startswith("| `")]
    table = {group: (int(points), int(parts)) for group, points, parts in rows}
    code = {g: (sum(p.points for p in PARTS.values() if p.group == g), sum(p.group == g for p in PARTS.values()))
            for g in ALL_GROUPS}
    assert table == code


def test_the_guides_autograder_limits_are_the_scripts_and_the_graders() -> None:
    from assignments.grade import DEFAULT_TIMEOUT
    from assignments.isolation import MEMORY_LIMIT
    text = " ".join(_settings_section().split())
    scripts = ROOT / "assignments" / "gradescope"
    checks = re.search(r"\$\{CHECKS_TIMEOUT:-(\d+)\}", (scripts / "checks" / "run_autograder").read_text())[1]
    board = re.search(r"\$\{LEADERBOARD_TIMEOUT:-(\d+)\}", (scripts / "leaderboard" / "run_autograder").read_text())[1]
    assert f"more than {checks} s for the checks and more than {board} s for the leaderboard" in text
    assert f"the grader after {checks} s (the leaderboard's after {board} s)" in text
    assert f"`--timeout` ({DEFAULT_TIMEOUT:g} s)" in text and f"far less than {checks} s" in text
    from assignments.bundle import grading_worst_case
    worst = grading_worst_case(["all"], "full", DEFAULT_TIMEOUT, None)
    assert f"far less than {checks} s ({worst:.0f} s for every group of the full profile at the default" in text
    assert f"at its `--jobs` or else one part at a time, reaches {checks} s" in text
    assert MEMORY_LIMIT % 2**30 == 0 and f"may map {MEMORY_LIMIT // 2**30} GiB beyond" in text
    assert f"jobs x {MEMORY_LIMIT // 2**30} GiB" in text


def test_the_guides_memory_figures_are_grade_memory_json() -> None:
    data = json.loads((ROOT / "benchmarks" / "results" / "grade-memory.json").read_text())
    from assignments.checks import PARTS
    rows = {r["jobs"]: r for r in data["rows"]}
    full = sum(p.points for p in PARTS.values())                     # the reference graded on every group
    assert sorted(rows) == [1, 2, 4, 8] and all(r["exit"] == 0 and r["score"] == full for r in rows.values())
    assert data["peak_pss_mib"] == max(r["peak_pss_mib"] for r in rows.values())
    text = " ".join(GUIDE.read_text().split())
    assert (f"peaked at {data['peak_pss_mib']:.0f} MiB" in text
            and f"from {rows[1]['peak_pss_mib']:.0f} MiB at 1 to {rows[8]['peak_pss_mib']:.0f} MiB at 8" in text)
    assert data["peak_pss_mib"] < 2000 * 0.5                         # "2 GB leaves room to spare"
    index = (ROOT / "benchmarks" / "README.md").read_text()
    figures = ", ".join(f"{rows[j]['peak_pss_mib']:.0f}" for j in (1, 2, 4, 8))
    assert f"**{figures} MiB**" in index
    rss = [rows[j]["peak_rss_mib"] for j in (1, 2, 4, 8)]
    assert f"{min(rss):.0f}-{max(rss):.0f} MiB)" in index
    cpu = data["cpu"]                                # benchmarks/README.md's machines: A, B (AMD EPYC), C (AMX)
    machine = "C" if cpu.get("amx_bf16") else "B" if cpu.get("avx512_bf16") else "A"
    assert f"| {machine} | {data['commit']} | `python benchmarks/grade_memory.py` |" in index


def test_the_guides_stated_defaults_are_the_tools() -> None:
    """Each default the guide states in words is the tool's argparse default (or the Gradescope script's)."""
    import argparse

    from assignments import bundle, grade, untrusted
    text = " ".join(GUIDE.read_text().split())

    def defaults(add) -> dict:
        parser = argparse.ArgumentParser()
        add(parser)
        return {a.dest: a.default for a in parser._actions}
    graded = {a.dest: a.default for a in grade.build_parser()._actions}
    checks, board = defaults(bundle.checks_arguments), defaults(bundle.leaderboard_arguments)
    assert graded["groups"] == checks["groups"] == ["core"] and "`core` (part 1, the default)" in text
    assert graded["profile"] == checks["profile"] == "full" and "(every group of `--profile`, default `full`;" in text
    assert graded["timeout"] == checks["timeout"] and f"`--timeout` ({graded['timeout']:g} s)" in text
    assert graded["as_user"] == untrusted.STUDENT_USER == "auto"             # auto: nobody (student_account)
    assert "`--as-user USER`, by default `nobody`; the Gradescope bundle uses the user `student`" in text
    scripts = ROOT / "assignments" / "gradescope" / "checks"
    assert 'user="${AUTOGRADER_USER:-student}"' in (scripts / "run_autograder").read_text()
    assert "--as-user student" in (scripts / "setup.sh").read_text()
    assert board["profile"] == "full" and "(`--profile`, default `full`) decides the leaderboard's tasks" in text
    assert f"`--private-fraction` (default {board['private_fraction']:g})" in text
    assert f"(`--points`, default {board['points']:g})" in text
    assert f"[--private-fraction {board['private_fraction']:g}] [--points {board['points']:g}]" in text


def six_files_bytes(tmp_path) -> int:
    """The course's six prediction files (SST, Quora, STS; dev and test) as tasks.predict writes them: the writer,
    the real ids of data/'s files, STS scores as a model's float32 outputs in [0, 5] (their reprs set the length)."""
    import torch

    from tasks.core.evaluation import gold_records, prediction_path, write_predictions
    total = 0
    for task in ("sst", "para", "sts"):
        for split in ("dev", "test"):
            ids = [e.id for e in gold_records(ROOT / "data", task, split)]
            values = (torch.rand(len(ids), generator=torch.Generator().manual_seed(0)) * 5).tolist() if task == "sts" \
                else [1] * len(ids)
            total += write_predictions(prediction_path(tmp_path, task, split), task, ids, values).stat().st_size
    return total


def test_the_guides_upload_caps_are_the_codes(tmp_path) -> None:
    from assignments.uploads import MAX_BYTES
    from tasks.core.evaluation import MAX_LINE_ERRORS, MAX_QUOTED
    text = " ".join(GUIDE.read_text().split())
    page = " ".join((ROOT / "docs" / "leaderboard.md").read_text().split())
    assert MAX_BYTES % 2**20 == 0
    six = six_files_bytes(tmp_path) / 2**20
    assert (f"more than {MAX_BYTES >> 20} MiB (uncompressed, in all; the course's six files hold about {six:.1f} MiB) is "
            f"refused, naming the cap; each file's first {MAX_LINE_ERRORS} bad lines are listed (a line quoted to "
            f"{MAX_QUOTED} characters), then one line counting the rest") in text
    assert (f"more than {MAX_BYTES >> 20} MiB uncompressed, and lists each file's first {MAX_LINE_ERRORS} bad lines"
            in page)


def test_the_guides_fixture_rounding_is_make_fixtures() -> None:
    """The tolerance within which make_fixtures keeps a committed fixture (another CPU's rounding; no measurement of
    how far another CPU's sums land is recorded, so the guide states the tolerance, which test_kit_cli exercises)."""
    from assignments.make_fixtures import ROUNDING
    text = " ".join(GUIDE.read_text().split())
    assert ROUNDING["atol"] == ROUNDING["rtol"]
    assert (f"the committed ones up to float rounding (within {sci(ROUNDING['atol'])}, absolute and relative: another "
            "CPU's sums round differently), so that running it on an unchanged reference leaves git clean") in text
