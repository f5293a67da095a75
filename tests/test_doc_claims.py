"""The figures, defaults and commands the handout (assignments/README.md), the staff guide (assignments/INSTRUCTORS.md),
README.md and docs/*.md state, each read from the page and compared with the code or the
file it comes from: the time limit per graded part, every part's points, the leaderboard's defaults and salt length,
the batch grader's upload limits, the checker's tolerances, the MPS precision table, the leaderboard run's flags,
the first model's epoch times, the flags of the pages' commands; the examples the pages show are run in
test_doc_examples.py."""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import inspect
import io
import json
import re
import shlex
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import torch

from assignments import entries, grade
from assignments.bundle import checks_arguments, leaderboard_arguments
from assignments.checks import PARTS
from assignments.common import ALL_GROUPS, ATOL, MODEL_ATOL, RTOL, compare
from assignments.leaderboard import Settings, rate_limit
from assignments.standing import MIN_SALT, GoldError, read_salt
from tasks.core.errors import ConfigurationError
from tasks.core.precision import PRECISIONS, check_precision, resolve_precision

ROOT = Path(__file__).resolve().parents[1]
HANDOUT = ROOT / "assignments" / "README.md"
GUIDE = ROOT / "assignments" / "INSTRUCTORS.md"
STUDENTS = ROOT / "docs" / "students.md"
MAIN_JOB = ROOT / "tasks" / "multitask" / "main-job.json"


def flat(path: Path) -> str:
    """The page's text with every run of whitespace (line breaks included) as one space."""
    return " ".join(path.read_text().split())


def sci(x: float) -> str:
    """A tolerance as the pages write it: 1e-4, 1e-05 -> 1e-5 (and the value must be one digit times a power of ten)."""
    text = re.sub(r"e([+-])0*(\d)", r"e\1\2", f"{x:.0e}").replace("e+", "e")
    assert float(text) == x, f"{x!r} is not written as {text}"
    return text


# ---------------------------------------------------------------- 1. the time limit per graded part

def test_the_default_time_limit_per_part_is_the_graders() -> None:
    limit = f"{grade.DEFAULT_TIMEOUT:g}"
    assert f"part runs in its own process with a time limit ({limit} s by default)" in flat(HANDOUT)
    shown = re.findall(r"python -m assignments\.grade SUBMISSION [^`]*?\[--timeout (\S+)\]", flat(GUIDE))
    assert shown == [limit]                     # the guide's grading command shows the default in its brackets
    # the grader's function and the Gradescope bundle's flag take that default
    assert inspect.signature(grade.grade).parameters["timeout"].default == grade.DEFAULT_TIMEOUT
    parser = argparse.ArgumentParser()
    checks_arguments(parser)
    assert parser.parse_args(["--seed-file", "seed"]).timeout == grade.DEFAULT_TIMEOUT


# ---------------------------------------------------------------- 2. every part's points

def handout_tables() -> list[tuple[str, dict[str, int]]]:
    """(the heading above it, {part: points}) for each `| part | points | ...` table of the handout."""
    lines, out, heading, i = HANDOUT.read_text().splitlines(), [], "", 0
    while i < len(lines):
        if lines[i].startswith("#"):
            heading = lines[i]
        if lines[i].startswith("| part | points |"):
            rows, i = {}, i + 2                 # past the header and its |---| line
            while i < len(lines) and lines[i].startswith("|"):
                cells = [c.strip() for c in lines[i].strip().strip("|").split("|")]
                assert cells[0] not in rows, cells[0]
                rows[cells[0]] = int(cells[1])
                i += 1
            out.append((heading, rows))
            continue
        i += 1
    return out


def test_the_handout_lists_every_part_with_the_points_its_part_definition_gives() -> None:
    tables = handout_tables()
    assert len(tables) == len(ALL_GROUPS)       # one table per group: part 1, part 2, the four extensions
    listed = [name for _, rows in tables for name in rows]
    assert sorted(listed) == sorted(PARTS) and len(listed) == len(set(listed))
    for heading, rows in tables:
        groups = {PARTS[name].group for name in rows}
        assert len(groups) == 1, (heading, groups)
        group = groups.pop()
        assert rows == {name: p.points for name, p in PARTS.items() if p.group == group}, heading
        # the section's heading names the group and its total: "(100 points)" or ", 30 points"
        assert ALL_GROUPS[group].split()[-1].strip("()") in heading, (heading, group)
        total = sum(rows.values())
        assert re.search(rf"(\({total} points\)|, {total} points)$", heading), (heading, total)


# ---------------------------------------------------------------- 3. the leaderboard's defaults and salt

def test_the_leaderboard_defaults_and_salt_length_are_the_codes(tmp_path: Path) -> None:
    guide, defaults = flat(GUIDE), Settings()
    assert f"earns its points (`--points`, default {defaults.points:g})" in guide
    assert f"is below `--private-fraction` (default {defaults.private_fraction:g})" in guide
    # the bundle's and the scoreboard's commands show the defaults in their brackets
    assert f"[--private-fraction {defaults.private_fraction:g}] [--points {defaults.points:g}]" in guide
    assert re.findall(r"python -m assignments\.scoreboard [^`]*?\[--private-fraction (\S+)\]", guide) == \
        [f"{defaults.private_fraction:g}"]
    parser = argparse.ArgumentParser()
    leaderboard_arguments(parser)
    args = parser.parse_args(["--gold", "g", "--salt-file", "s"])
    assert (args.daily_limit, args.private_fraction, args.points) == \
        (defaults.daily_limit, defaults.private_fraction, defaults.points)
    # "(`--daily-limit N`, 0 = none)": with that N no upload is refused, however many came before it (the guide
    # states no default for it; the code's, Settings.daily_limit, is that no-limit value)
    none = int(re.search(r"\(`--daily-limit N`, (\d+) = none\)", guide).group(1))
    now = datetime(2026, 3, 1, 12, tzinfo=UTC)
    before = [{"submission_time": (now - timedelta(minutes=m)).isoformat()} for m in range(1, 50)]
    busy = {"created_at": now.isoformat(), "previous_submissions": before}
    assert rate_limit(busy, none) is None and rate_limit(busy, none + 3) is not None
    assert rate_limit(busy, defaults.daily_limit) is None
    # the salt: MIN_SALT characters or more, as the guide says, and the check refuses one fewer
    assert f"**The salt** ({MIN_SALT} characters or more:" in guide
    (tmp_path / "short").write_text("s" * (MIN_SALT - 1) + "\n")
    (tmp_path / "enough").write_text("s" * MIN_SALT + "\n")
    with pytest.raises(GoldError, match=f"fewer than {MIN_SALT}"):
        read_salt(tmp_path / "short")
    assert read_salt(tmp_path / "enough") == "s" * MIN_SALT


# ---------------------------------------------------------------- 4. the batch grader's upload limits

def test_the_upload_limits_are_the_batch_graders() -> None:
    assert entries.size(entries.MAX_UNPACKED).endswith(" MiB")
    cap = entries.size(entries.MAX_UNPACKED)
    assert (f"more than {entries.MAX_MEMBERS:,} entries or more than {cap} of graded files makes the row "
            "`bad upload`") in flat(GUIDE)


# ---------------------------------------------------------------- 5. the checker's tolerances

def compare_tolerances() -> dict[str, set[tuple[str, str]]]:
    """For each function of part 1's checks (assignments/checks.py, and adamw_problem.py's AdamW check): the (rtol,
    atol) each compare() call passes, as source text ('' where the call leaves compare()'s default)."""
    trees = [ast.parse((ROOT / "assignments" / name).read_text()) for name in ("checks.py", "adamw_problem.py")]
    out: dict[str, set[tuple[str, str]]] = {}
    for fn in (n for tree in trees for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        for call in ast.walk(fn):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "compare":
                given = {k.arg: ast.unparse(k.value) for k in call.keywords}
                out.setdefault(fn.name, set()).add((given.get("rtol", ""), given.get("atol", "")))
    return out


def test_the_checkers_tolerances_are_the_handouts() -> None:
    handout = flat(HANDOUT)
    defaults = inspect.signature(compare).parameters
    assert (defaults["rtol"].default, defaults["atol"].default) == (RTOL, ATOL)
    found = compare_tolerances()
    assert found.pop("check_model") == {("", "MODEL_ATOL")}              # MiniLM: compare()'s rtol, MODEL_ATOL
    adamw = found.pop("check_adamw")
    assert len(adamw) == 1
    adamw_rtol, adamw_atol = (float(v) for v in adamw.pop())            # AdamW: one pair of literals
    assert found and set().union(*found.values()) == {("", "")}         # every other check: compare()'s defaults
    assert (f"tolerances are {sci(RTOL)} relative and {sci(ATOL)} absolute ({sci(MODEL_ATOL)} absolute on MiniLM; "
            f"{sci(adamw_rtol)} relative and {sci(adamw_atol)} absolute for AdamW)") in handout


# ---------------------------------------------------------------- 6. the MPS precision table of docs/students.md

def students_precision_table() -> tuple[list[bool], list[tuple[str, list[str]]]]:
    """(for each macOS column: whether it is macOS 14 or newer, [(torch cell, [cell per macOS column])])."""
    lines = STUDENTS.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| torch | macOS"))
    header = [c.strip() for c in lines[start].strip().strip("|").split("|")][1:]
    sonoma = [{"macOS 14 or newer": True, "macOS 13 or older": False}[c] for c in header]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows.append((cells[0], cells[1:]))
    return sonoma, rows


def torch_versions(cell: str) -> list[str]:
    """The torch versions a row stands for, each tried: '2.8 or newer' -> 2.8.0, 2.9.0; '2.6, 2.7'; '2.5 or older'
    -> 2.5.0, 2.4.0 (the parenthesis, the pinned version, left out)."""
    text = re.sub(r"\s*\(.*?\)", "", cell)
    found = [tuple(int(n) for n in v.split(".")) for v in re.findall(r"\d+\.\d+", text)]
    assert found, cell
    if text.endswith("or newer"):
        found.append((found[-1][0], found[-1][1] + 1))
    elif text.endswith("or older"):
        found.append((found[-1][0], found[-1][1] - 1))
    return [f"{major}.{minor}.0" for major, minor in found]


def test_the_students_mps_precision_table_is_the_precision_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    mps = torch.device("mps")
    sonoma, rows = students_precision_table()
    assert len(rows) >= 3 and len(sonoma) == 2
    tried = set()
    for torch_cell, cells in rows:
        for version in torch_versions(torch_cell):
            for on_sonoma, cell in zip(sonoma, cells, strict=True):
                monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
                monkeypatch.setattr(torch.backends.mps, "is_macos_or_newer",
                                    lambda major, minor, s=on_sonoma: s and major <= 14)
                monkeypatch.setattr(torch, "__version__", version)
                items = [c.strip() for c in cell.split(",")]
                said = {c.removesuffix(" (auto)") for c in items}
                autos = [c.removesuffix(" (auto)") for c in items if c.endswith(" (auto)")]
                assert len(autos) == 1 or (not autos and len(items) == 1), cell   # "(auto)" marks a choice of several
                trains = set()
                for precision in PRECISIONS:
                    with contextlib.suppress(ConfigurationError):
                        check_precision(mps, precision)
                        trains.add(precision)
                where = f"torch {version}, macOS {'14 or newer' if on_sonoma else '13 or older'}: {cell!r}"
                assert said == trains, where
                assert resolve_precision(mps, "auto") == (autos or items)[0], where
                tried.add((version, on_sonoma))
    assert len(tried) >= 12
    # the pin the first row names is the one `make install` installs
    pinned = re.search(r"`make install` pins (\S+)\)", rows[0][0]).group(1)
    assert f"pip install -q torch=={pinned}\n" in (ROOT / "Makefile").read_text()
    assert f"pip install torch=={pinned} " in (ROOT / "README.md").read_text()


# ---------------------------------------------------------------- 7. the handout's leaderboard run

def handout_leaderboard_command() -> list[str]:
    """The arguments of the handout's `python -m tasks.multitask ...  # part 2: the leaderboard run`."""
    text = HANDOUT.read_text().replace("\\\n", " ")
    line = next(line for line in text.splitlines()
                if line.startswith("python -m tasks.multitask ") and "# part 2: the leaderboard run" in line)
    return shlex.split(line.removeprefix("python -m tasks.multitask "), comments=True)


def test_the_handouts_leaderboard_run_is_main_job_json() -> None:
    from tasks import multitask
    from tasks.core.settings import leaves

    handout = flat(HANDOUT)
    assert ("The multitask command is the reference's leaderboard recipe (also in `tasks/multitask/main-job.json`: "
            "`--config tasks/multitask/main-job.json`)") in handout
    argv = handout_leaderboard_command()
    given = leaves(multitask.parse_settings(argv))
    config = leaves(multitask.parse_settings(["--config", str(MAIN_JOB)]))
    actions = multitask.build_parser()._option_string_actions
    flags = [a for a in argv if a.startswith("--")]
    assert len(flags) >= 10 and "--lr" in flags and "--sts-head-bias" in flags
    where = {"--predictions-dir"}              # where the run writes, which a config leaves to the command line
    for flag in flags:
        assert flag in actions, flag
        if flag not in where:
            dest = actions[flag].dest
            assert given[dest] == config[dest], (flag, given[dest], config[dest])
    # and the flags the command leaves out are main-job.json's too (the optimiser and attention left to the tree's
    # defaults by both: test_student_path checks that in a student tree): only where it writes differs
    differ = {k for k in given if given[k] != config[k]}
    assert differ == {actions[f].dest for f in where}


# ---------------------------------------------------------------- 8. the first model's epoch times

def test_the_first_models_epoch_times_are_the_measured_ones() -> None:
    measured = json.loads((ROOT / "benchmarks" / "results" / "first-model.json").read_text())
    seconds = [e["train_seconds"] for e in measured["epochs"]]
    assert len(seconds) == 3 and "--epochs 3" in measured["command"]
    assert (f"{round(min(seconds))}-{round(max(seconds))} s an epoch (measured with the reference's code, "
            "`benchmarks/results/first-model.json`") in flat(HANDOUT)


# ---------------------------------------------------------------- 9. the pages' commands use flags their tools have

PAGES = {path.relative_to(ROOT).as_posix(): path
         for path in [ROOT / "README.md", HANDOUT, *sorted((ROOT / "docs").glob("*.md"))]}   # INSTRUCTORS.md: its own test


def page_commands(pages: dict[str, Path] = PAGES) -> list[tuple[str, str, list[str]]]:
    """(page, module, its arguments) for each `python -m tasks.X` / `python -m assignments.X` (or `torchrun ... -m`)
    in a page's bash blocks, continuations joined, up to a comment, a redirection or the next command."""
    out = []
    for page, path in pages.items():
        blocks = re.findall(r"```bash\n(.*?)```", path.read_text(), flags=re.DOTALL)
        for line in "\n".join(blocks).replace("\\\n", " ").splitlines():
            for m in re.finditer(r"(?:python3?|torchrun\b[^\n;&|#]*?) -m ((?:tasks|assignments)\.\w+)([^;&|#>)]*)",
                                 line):
                out.append((page, m.group(1), shlex.split(m.group(2).replace("[", " ").replace("]", " "))))
    return out


def help_text(module: str, sub: list[str]) -> str:
    """What `python -m MODULE SUB --help` prints, run in this process."""
    main = importlib.import_module(module).main
    text = io.StringIO()
    with contextlib.redirect_stdout(text), pytest.raises(SystemExit) as e:
        main([*sub, "--help"])
    assert e.value.code == 0, module
    return text.getvalue()


def test_the_pages_show_commands_of_every_kind() -> None:
    found = {(page, module) for page, module, _ in page_commands()}
    assert {("README.md", "tasks.classifier"), ("README.md", "tasks.multitask"), ("README.md", "tasks.predict"),
            ("README.md", "tasks.search"), ("docs/assignments.md", "assignments.grade"),
            ("docs/assignments.md", "assignments.bundle"), ("docs/assignments.md", "assignments.scoreboard"),
            ("docs/students.md", "tasks.multitask")} <= found


@pytest.mark.parametrize("page, module, args", page_commands(),
                         ids=lambda v: v if isinstance(v, str) else " ".join(a for a in v if a.startswith("--")))
def test_each_page_command_uses_flags_its_tool_has(page: str, module: str, args: list[str]) -> None:
    flags = [a.split("=")[0] for a in args if a.startswith("--")]
    builder = getattr(importlib.import_module(module), "build_parser", None)
    if builder is not None:                      # the typed commands: their parser's own option strings
        known = set(builder()._option_string_actions)
        assert [f for f in flags if f not in known] == [], f"{page}: {module}"
        return
    sub = [args[0]] if module in ("assignments.bundle", "assignments.lockfile") and args else []
    text = help_text(module, sub)
    for flag in flags:
        assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text), \
            f"{page}: {module} {' '.join(sub)}: no {flag} in its --help"


# ---------------------------------------------------------------- 10. the search page's committed space

def test_the_search_page_describes_the_committed_space_and_its_trials_times() -> None:
    """docs/search.md on tasks/search/main-job-space.json: what it samples, at what sample and epochs, and the
    complete trials' minutes as benchmarks/search/trials.csv records them."""
    import csv
    page = flat(ROOT / "docs" / "search.md")
    space = json.loads((ROOT / "tasks" / "search" / "main-job-space.json").read_text())
    words = {"training.lr": "learning rate", "recipe.layer_decay": "layer-wise decay",
             "recipe.head_lr_scale": "the heads' learning-rate multiplier", "recipe.warmup_ratio": "warm-up",
             "training.weight_decay": "weight decay", "design.sts_head_bias": "STS head bias",
             "training.batch_size": "batch size"}
    assert set(space["params"]) == set(words)
    said = page.split("searches the main job's ", 1)[1].split(", at ", 1)[0]
    assert said == ", ".join(words[k] for k in space["params"]).replace(", batch size", " and batch size"), said
    fixed = space["fixed"]
    assert (f"at {fixed['training.max_train_examples']} training examples per task and "
            f"{fixed['training.epochs']} epochs") in page
    with open(ROOT / "benchmarks" / "search" / "trials.csv", encoding="utf-8") as f:
        seconds = [float(r["seconds"]) for r in csv.DictReader(f) if r["state"] == "COMPLETE"]
    assert (f"took {min(seconds) / 60:.0f}-{max(seconds) / 60:.0f} minutes on machine A "
            f"({min(seconds):.0f}-{max(seconds):.0f} s in benchmarks/search/trials.csv") in page


def test_the_tree_notebook_and_data_readme_state_the_sst_files_size() -> None:
    with open(ROOT / "data" / "ids-sst-train.csv", encoding="utf-8") as f:
        rows = sum(1 for _ in f) - 1                                       # the header
    assert f"(SST has {rows})" in (ROOT / "assignments" / "tree_files" / "minbert.ipynb").read_text()
    assert f"| ids-sst-train.csv | {rows} |" in (ROOT / "data" / "README.md").read_text()
