"""A command a tree lacks, named by a command it has: tasks.multitask's help and --after-simcse error, run in a
default-project tree (no tasks/simcse, tasks/ensemble), name it as the reference repository's; the reference's, not."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import warm

from assignments.make import ROOT, generate

ENV = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dp") / "tree"
    generate(out, data=False, profile="default-project")
    return out


def _run(where: Path, *args: str) -> str:
    """python -m tasks.multitask ARGS in a tree (its root the cwd and the path); stdout and stderr, flattened."""
    proc = warm.run([sys.executable, "-m", "tasks.multitask", *args], cwd=where,
                    env={**ENV, "PYTHONPATH": str(where)}, capture_output=True, text=True, check=False, timeout=120)
    return " ".join((proc.stdout + proc.stderr).split())


def unheld(where: Path, text: str) -> list[str]:
    """The `python -m tasks.X` that text names where the tree lacks tasks/X without saying they are the reference's."""
    return [m.group(0) for m in re.finditer(r"python -m tasks\.(\w+)", text)
            if not ((where / "tasks" / m.group(1)).exists() or (where / "tasks" / f"{m.group(1)}.py").exists())
            and "reference repository's" not in text[max(0, m.start() - 40):m.start()]]


def test_a_default_project_tree_names_the_commands_it_lacks_as_the_reference_repositorys(tree: Path) -> None:
    assert not (tree / "tasks" / "simcse").exists() and (tree / "tasks" / "multitask").is_dir()
    helped = _run(tree, "--help")
    assert "--after-simcse" in helped and "tasks.simcse" in helped
    assert unheld(tree, helped) == []
    said = _run(tree, "--after-simcse", str(tree / "nonexist"), "--epochs", "1")
    assert f"error: --after-simcse {tree / 'nonexist'}: no config.json or quora-train-rest.csv there" in said, said
    assert "the reference repository's python -m tasks.simcse" in said and "this tree holds no tasks/simcse" in said
    assert unheld(tree, said) == [], said


def test_the_reference_names_its_own_commands_plainly() -> None:
    helped = _run(ROOT, "--help")
    assert "python -m tasks.simcse" in helped and "reference repository's python -m tasks" not in helped
    from tasks.core.errors import ConfigurationError
    from tasks.multitask import after_simcse, parse_settings
    with pytest.raises(ConfigurationError, match=r"write the directory with python -m tasks\.simcse --out"):
        after_simcse(parse_settings(["--after-simcse", "/nonexist"]))


def test_a_diverged_run_names_predict_as_the_tree_has_it(tree: Path, tmp_path: Path) -> None:
    """The NaN-loss stop (common with a buggy stub) names tasks.predict, which a default-project tree lacks."""
    (tmp_path / "checkpoint.pt").write_bytes(b"x")
    code = ("from tasks.core.errors import diverged\ntry:\n    diverged(float('nan'), 0, 3, 'sst', 'epoch', "
            f"{str(tmp_path / 'checkpoint.pt')!r}, 1)\nexcept Exception as e:\n    print(e)")
    said = {}
    for where in (tree, ROOT):
        proc = warm.run([sys.executable, "-c", code], cwd=where, env={**ENV, "PYTHONPATH": str(where)},
                        capture_output=True, text=True, check=True, timeout=120)
        said[where] = " ".join(proc.stdout.split())
    assert "the reference repository's python -m tasks.predict can use it" in said[tree], said[tree]
    assert unheld(tree, said[tree]) == []
    assert "(python -m tasks.predict can use it" in said[ROOT]
