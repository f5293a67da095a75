"""An audit of tasks/ read from its syntax trees: the functions that take an argparse Namespace (only a command's entry
points may: `main`, or a function named in ENTRY_POINTS), and the longest functions.

    python tests/audit_tasks.py            # both lists; exit status 1 if a function below an entry point takes one
    python tests/audit_tasks.py --top 20

A function takes a Namespace when a parameter is annotated `argparse.Namespace` (or `Namespace`), or is named `args`
without an annotation that says otherwise. tests/test_typed_runs.py runs it.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

TASKS = Path(__file__).resolve().parents[1] / "tasks"
ENTRY_POINTS = {"main"}


def takes_namespace(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether one of fn's parameters is an argparse Namespace."""
    params = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
    for a in params:
        text = ast.unparse(a.annotation) if a.annotation is not None else ""
        if "Namespace" in text or (a.arg == "args" and not text):
            return True
    return False


def functions(root: Path = TASKS) -> list[tuple[str, str, int, int, bool]]:
    """(file, qualified name, first line, length in lines, takes a Namespace) of every function under root."""
    out = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        stack: list[tuple[ast.AST, str]] = [(tree, "")]
        while stack:
            node, prefix = stack.pop()
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    name = prefix + child.name
                    out.append((str(path.relative_to(root.parent)), name, child.lineno,
                                child.end_lineno - child.lineno + 1, takes_namespace(child)))
                    stack.append((child, name + "."))
                elif isinstance(child, ast.ClassDef):
                    stack.append((child, prefix + child.name + "."))
    return out


def below_entry_points(found: list[tuple[str, str, int, int, bool]]) -> list[tuple[str, str, int, int, bool]]:
    """The functions that take a Namespace but are not an entry point."""
    return [f for f in found if f[4] and f[1].rsplit(".", 1)[-1] not in ENTRY_POINTS]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--top", type=int, default=10, help="how many of the longest functions to list (default 10)")
    args = p.parse_args(argv)
    found = functions()
    takers = [f for f in found if f[4]]
    bad = below_entry_points(found)
    print(f"functions in tasks/ that take a Namespace: {len(takers)} ({len(bad)} below an entry point)")
    for file, name, line, _, _ in takers:
        print(f"  {file}:{line} {name}{'' if name.rsplit('.', 1)[-1] in ENTRY_POINTS else '   <- below an entry point'}")
    print(f"the {args.top} longest functions:")
    for file, name, line, length, _ in sorted(found, key=lambda f: -f[3])[:args.top]:
        print(f"  {length:4d} lines  {file}:{line} {name}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
