"""Python 3.10, which the tree's README, requirements.txt and notebook and pyproject.toml's requires-python promise:
no file of a student tree, and no module of the reference's package, uses syntax or a name that is Python 3.11's."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch.nn.functional as F

import minbert.multitask
from assignments.check import run_part
from assignments.make import ROOT, generate

# (module, name) pairs that Python 3.11 added, and attributes that only 3.11's objects have
NEW_IN_311 = {("datetime", "UTC"), ("asyncio", "TaskGroup"), ("typing", "Self"), ("typing", "LiteralString"),
              ("typing", "Never"), ("typing", "assert_never"), ("enum", "StrEnum"), ("hashlib", "file_digest"),
              ("operator", "call")}
NEW_MODULES = {"tomllib"}
NEW_BUILTINS = {"ExceptionGroup", "BaseExceptionGroup"}
NEW_ATTRIBUTES = {"add_note"}          # BaseException.add_note


def py311_uses(src: str, name: str) -> list[str]:
    """`name:line: what` for each Python-3.11-only feature in src: its syntax (ast at feature_version 3.10, which
    refuses except* among others) and the names above."""
    try:
        tree = ast.parse(src, name, feature_version=(3, 10))
    except SyntaxError as e:
        return [f"{name}:{e.lineno}: {e.msg}"]
    found = []
    for n in ast.walk(tree):
        line = f"{name}:{getattr(n, 'lineno', '?')}: "
        if isinstance(n, ast.Attribute):
            if n.attr in NEW_ATTRIBUTES:
                found.append(f"{line}.{n.attr}")
            if isinstance(n.value, ast.Name) and (n.value.id, n.attr) in NEW_IN_311:
                found.append(f"{line}{n.value.id}.{n.attr}")
        elif isinstance(n, ast.ImportFrom) and n.module:
            found += [f"{line}from {n.module} import {a.name}" for a in n.names if (n.module, a.name) in NEW_IN_311]
            if n.module.split(".")[0] in NEW_MODULES:
                found.append(f"{line}from {n.module}")
        elif isinstance(n, ast.Import):
            found += [f"{line}import {a.name}" for a in n.names if a.name.split(".")[0] in NEW_MODULES]
        elif isinstance(n, ast.Name) and n.id in NEW_BUILTINS:
            found.append(f"{line}{n.id}")
    return found


def notebook_code(path: Path) -> str:
    """The notebook's code cells as one Python text, shell (!) and magic (%) lines blanked."""
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    lines = "\n".join("".join(c["source"]) for c in cells).splitlines()
    return "\n".join("" if s.lstrip().startswith(("!", "%")) else s for s in lines)


def scan(root: Path, dirs: tuple[str, ...] = ()) -> list[str]:
    """py311_uses over every .py and .ipynb under root (or under root/DIR for each of dirs)."""
    found = []
    for top in [root / d for d in dirs] or [root]:
        for path in sorted(top.rglob("*.py")):
            found += py311_uses(path.read_text(), path.relative_to(root).as_posix())
        for path in sorted(top.rglob("*.ipynb")):
            found += py311_uses(notebook_code(path), path.relative_to(root).as_posix())
    return found


@pytest.mark.parametrize("src", [
    "e.add_note('x')", "import tomllib", "from tomllib import loads", "from datetime import UTC", "datetime.UTC",
    "raise ExceptionGroup('x', [e])", "try:\n    pass\nexcept* ValueError:\n    pass", "asyncio.TaskGroup()",
    "from typing import Self", "typing.LiteralString", "from typing import Never", "typing.assert_never(x)",
    "from enum import StrEnum", "hashlib.file_digest(f, 'sha256')", "operator.call(f)",
])
def test_the_scan_sees_each_feature(src: str) -> None:
    assert py311_uses(src, "x.py"), src


def test_the_scan_passes_their_310_forms() -> None:
    src = ("from datetime import timezone\nUTC = timezone.utc\ne.__notes__ = ['x']\nimport asyncio, typing\n"
           "from typing import NoReturn\nx: typing.TypeVar\n")
    assert py311_uses(src, "x.py") == []


def test_a_full_tree_runs_on_python_310(tmp_path: Path) -> None:
    # the full profile ships every file any profile ships: its .py files and its notebook's code cells
    tree = tmp_path / "st"
    generate(tree, data=False, profile="full")
    assert (tree / "assignments" / "checks_multitask.py").is_file() and list(tree.rglob("*.ipynb"))
    assert scan(tree) == []


def test_the_reference_package_runs_on_python_310() -> None:
    # pyproject.toml's requires-python covers the package (minbert, tasks, assignments), staff-only modules too
    assert 'requires-python = ">=3.10"' in (ROOT / "pyproject.toml").read_text()
    assert scan(ROOT, ("minbert", "tasks", "assignments")) == []


def test_the_paraphrase_loss_hint_reaches_the_student(monkeypatch: pytest.MonkeyPatch) -> None:
    # long labels into F.binary_cross_entropy_with_logits raise; the check's hint (a note on the exception, set
    # without Python 3.11's add_note) follows torch's message
    monkeypatch.setattr(minbert.multitask, "paraphrase_loss",
                        lambda logit, labels: F.binary_cross_entropy_with_logits(logit, labels))
    r = run_part("mt_para_loss")
    assert r["status"] == "error", r
    assert "raised RuntimeError" in r["message"] and "(with labels of dtype long)" in r["message"], r["message"]
    assert r["message"].endswith("convert them with labels.to(logit.dtype) first"), r["message"]
