"""tasks/'s layers: nothing below a command's entry point takes a Namespace, the core imports no command, the first
exercise does not pull in SMART, PALs or PCGrad, and README.md stays short."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

from audit_tasks import TASKS, below_entry_points, functions
from conftest import ROOT, each_as_main

COMMANDS = ("classifier", "multitask", "deebert", "simcse", "predict", "export", "ensemble", "score", "submit", "curves",
            "attention", "search")


def test_no_function_below_an_entry_point_takes_a_namespace():
    found = functions()
    assert len(found) > 200                                   # the audit read the whole of tasks/
    assert below_entry_points(found) == []


def test_the_core_imports_no_command():
    for path in sorted((TASKS / "core").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:     # relative: within core only, never ..
                assert node.level == 1, f"{path.name} imports {'.' * node.level}{node.module}"
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tasks."):
                assert node.module.startswith("tasks.core"), f"{path.name} imports {node.module}"


def test_the_first_exercise_imports_no_smart_pals_or_pcgrad():
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "tasks.classifier", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    loaded = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert {"minbert.model", "tasks.core.train", "tasks.core.finetune"} <= loaded  # the probe sees the imports
    unwanted = {m for m in loaded if m.startswith(("minbert.smart", "minbert.pals", "minbert.pcgrad", "tasks.multitask",
                                                   "tasks.simcse", "tasks.deebert"))}
    assert unwanted == set()


def test_every_command_runs_as_python_m_and_readme_is_short():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", f"tasks.{COMMANDS[0]}", "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False, env=env)
    assert proc.returncode == 0 and "usage" in proc.stdout, proc.stderr[-500:]
    for name, (code, printed) in each_as_main({name: ["--help"] for name in COMMANDS}, ROOT, env).items():
        assert code == 0 and printed.startswith("usage: "), (name, code, printed[-500:])
    assert len((ROOT / "README.md").read_text().splitlines()) <= 120


def test_the_readmes_steps_without_make_install_and_run_what_make_does():
    """README's `Without make` block: the packages of both make targets' installs (the tests' requirements too: four
    test files import hypothesis or nbclient at the top) and make train's and make test's commands."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("Without make:", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    lines = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    make = (ROOT / "Makefile").read_text()
    for installed in re.findall(r"\$\(PY\) -m pip install -q (.+)", make):
        if not {"ruff", "requirements-dev.txt", "--upgrade"} & set(installed.split()):   # lint's, mutate's; pip
            assert any(installed in line for line in lines), installed
    train = re.search(r"^train: .*\n\t\$\(PY\) -m (.+?) --fine-tune-mode", make, re.MULTILINE).group(1)
    assert any(line.startswith(f"python -m {train} --predictions-dir predictions") for line in lines), train
    test = re.search(r"^test: .*\n\t\$\(PY\) -m (.+)", make, re.MULTILINE).group(1).replace("$(TEST_WORKERS)", "2")
    assert re.search(r"^TEST_WORKERS \?= 2$", make, re.MULTILINE) and f"python -m {test}" in lines
    assert lines.index(f"python -m {test}") > lines.index("pip install -r requirements-test.txt")


def test_every_test_file_has_its_row_in_the_tests_readme():
    table = (ROOT / "tests" / "README.md").read_text()
    rows = [line.split(" | ")[0] for line in table.splitlines() if line.startswith("| `")]      # a row may list several
    assert [p.name for p in sorted((ROOT / "tests").glob("test_*.py")) if not any(f"`{p.name}`" in r for r in rows)] == []


def test_requirements_test_txt_states_no_suite_timing_and_points_to_the_tests_readme():
    """How long the suite takes is kept in tests/README.md alone (it went stale in requirements-test.txt's comment):
    no duration, test count or pass count in requirements-test.txt, and tests/README.md says make test's figure."""
    text = (ROOT / "requirements-test.txt").read_text()
    timing = r"\d+(\.\d+)? ?(min|minutes?|s|sec|seconds?|h|hours?)\b|\d+ (tests|passed|skipped|failed)\b"
    assert [line for line in text.splitlines() if re.search(timing, line)] == []
    comments = " ".join(" ".join(line.lstrip("# ") for line in text.splitlines()).split())
    assert "how long it takes, measured, is in tests/README.md" in comments
    readme = " ".join((ROOT / "tests" / "README.md").read_text().split())
    assert re.search(r"\*\*How long the suite takes\*\* \(this is the one place the figure is kept; "
                     r"requirements-test.txt points here\): at [0-9a-f]{7}, .*?: make test \d+ passed, \d+ skipped in "
                     r"\d+ min \d+ s", readme)


def test_every_core_module_has_its_line_in_the_cores_docstring():
    """tasks/core/__init__.py's table of modules is where a reader starts: every module of the core is in it, and
    nothing that is not one."""
    import tasks.core
    listed = re.findall(r"^    (\w+\.py) ", tasks.core.__doc__, flags=re.MULTILINE)
    modules = sorted(p.name for p in (TASKS / "core").glob("*.py") if p.name != "__init__.py")
    assert sorted(listed) == modules
