"""Write the student tree from the reference code: every solution region becomes its stub.

    python -m assignments.make OUT_DIR      # the whole student tree (code, checker, fixtures, handout, data)
    python -m assignments.make --stubs      # refresh the committed stubs under assignments/student/

A region in the reference code looks like

    ### BEGIN SOLUTION
    ### STUB: what to compute, with shapes (one or more lines)
    ... the reference code ...
    ### END SOLUTION

and becomes, at the same indentation,

    # YOUR CODE HERE
    # what to compute, with shapes
    raise NotImplementedError
"""

from __future__ import annotations

import argparse
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END, STUB = "### BEGIN SOLUTION", "### END SOLUTION", "### STUB:"

# What the student tree holds: these packages (every .py file; regions stubbed), these files of
# assignments/ (the checker and its fixtures, not the generator, the grader or the stubs), and data.
PACKAGES = ("minbert", "tasks")
ASSIGNMENT_FILES = ("__init__.py", "check.py", "checks.py", "checks_multitask.py", "checks_deebert.py",
                    "checks_smart.py", "checks_pals.py", "checks_simcse.py", "common.py", "mistakes.py", "README.md")
ASSIGNMENT_DIRS = ("fixtures",)
STUDENT_REQUIREMENTS = "requirements-student.txt"   # of assignments/; the student tree's requirements.txt
STUDENT_DIR = ROOT / "assignments" / "student"


class RegionError(ValueError):
    """A malformed solution region; the message names the file and line."""


@dataclass
class Region:
    """One solution region: 1-based line numbers of its markers, its stub text and its solution lines."""

    begin: int
    end: int
    indent: str
    stub: list[str]
    solution: list[str]


def find_regions(text: str, name: str = "<text>") -> list[Region]:
    """Parse the regions of one file; unbalanced markers or a region without stub text raise RegionError."""
    regions: list[Region] = []
    current: Region | None = None
    for i, line in enumerate(text.splitlines(), start=1):
        s = line.strip()
        if s.startswith(BEGIN):
            if current is not None:
                raise RegionError(f"{name}:{i}: '{BEGIN}' inside the region opened at line {current.begin}")
            current = Region(i, 0, line[: len(line) - len(line.lstrip())], [], [])
        elif s.startswith(END):
            if current is None:
                raise RegionError(f"{name}:{i}: '{END}' without a '{BEGIN}' before it")
            if not current.stub:
                raise RegionError(f"{name}:{current.begin}: the region has no '{STUB}' lines saying what to compute")
            current.end = i
            regions.append(current)
            current = None
        elif current is not None:
            if s.startswith(STUB):
                if current.solution:
                    raise RegionError(f"{name}:{i}: '{STUB}' lines must come right after '{BEGIN}'")
                current.stub.append(s[len(STUB):].rstrip())
            else:
                current.solution.append(line)
        elif s.startswith(STUB):
            raise RegionError(f"{name}:{i}: '{STUB}' outside a solution region")
    if current is not None:
        raise RegionError(f"{name}:{current.begin}: '{BEGIN}' is never closed by '{END}'")
    return regions


def regions_by_function(text: str, name: str = "<text>") -> dict[str, Region]:
    """The regions of one file keyed by the qualified name of the function holding each, e.g. 'BertLayer.forward'."""
    import ast
    owners: list[tuple[int, int, str]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                qual = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    owners.append((child.lineno, child.end_lineno or child.lineno, qual))
                visit(child, qual + ".")

    visit(ast.parse(text, name), "")
    found = {}
    for r in find_regions(text, name):
        inner = [o for o in owners if o[0] <= r.begin <= o[1]]   # END may sit after the last statement
        if not inner:
            raise RegionError(f"{name}:{r.begin}: the region is not inside a function")
        found[max(inner, key=lambda o: o[0])[2]] = r
    return found


def stub_text(text: str, name: str = "<text>") -> str:
    """The student version of one file: each region replaced by its YOUR CODE HERE comment and a raise."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    last = 0
    for r in find_regions(text, name):
        out.extend(lines[last: r.begin - 1])
        out.append(f"{r.indent}# YOUR CODE HERE\n")
        out.extend(f"{r.indent}#{s}\n" if s else f"{r.indent}#\n" for s in r.stub)
        out.append(f"{r.indent}raise NotImplementedError\n")
        last = r.end
    out.extend(lines[last:])
    return "".join(out)


def reference_files(root: Path = ROOT) -> list[Path]:
    """The Python files of the student packages, relative to root, in a fixed order."""
    return sorted(p.relative_to(root) for pkg in PACKAGES for p in (root / pkg).rglob("*.py")
                  if "__pycache__" not in p.parts)


def stubbed_files(root: Path = ROOT) -> list[Path]:
    """The files that carry solution regions (those students fill in), relative to root."""
    return [rel for rel in reference_files(root) if BEGIN in (root / rel).read_text()]


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def backup_path(out: Path) -> Path:
    """A free name beside out for its backup: OUT.backup-YYYYmmdd-HHMMSS (with -2, -3, ... when taken)."""
    import time
    base = out.with_name(f"{out.name}.backup-{time.strftime('%Y%m%d-%H%M%S')}")
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def generate(out_dir: str | Path, root: Path = ROOT, data: bool = True, force: bool = False) -> list[Path]:
    """Write the student tree into out_dir; returns the stubbed files.

    A non-empty out_dir (a student's work, perhaps) is refused with FileExistsError; with force it is first
    moved aside to backup_path(out_dir), never overwritten.
    """
    out = Path(out_dir)
    if out.resolve() == root.resolve():
        raise ValueError(f"{out}: refusing to write the student tree over the reference code")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if not force:
            raise FileExistsError(f"{out} exists and is not empty (a student's work?); nothing was written. Give "
                                  "an empty or new directory, or --force to move it aside to a backup first")
        backup = backup_path(out)
        shutil.move(str(out), str(backup))
        print(f"moved the existing {out} to {backup}", file=sys.stderr)
    stubbed = []
    for rel in reference_files(root):
        text = (root / rel).read_text()
        if BEGIN in text:
            text = stub_text(text, str(rel))
            stubbed.append(rel)
        _write(out / rel, text)
    for name in ASSIGNMENT_FILES:
        _write(out / "assignments" / name, (root / "assignments" / name).read_text())
    for name in ASSIGNMENT_DIRS:
        shutil.copytree(root / "assignments" / name, out / "assignments" / name, dirs_exist_ok=True)
    shutil.copy2(root / "assignments" / STUDENT_REQUIREMENTS, out / "requirements.txt")
    _write(out / "README.md", "# minBERT\n\nThe assignment's handout is [assignments/README.md](assignments/README.md).\n"
           "Check your work with `python -m assignments.check`, run from this directory.\n")
    if data:
        shutil.copytree(root / "data", out / "data", dirs_exist_ok=True)
    return stubbed


def update_committed_stubs(root: Path = ROOT) -> list[Path]:
    """Rewrite assignments/student/ to hold exactly the stubbed files of a fresh generation."""
    student = root / "assignments" / "student"
    if student.exists():
        shutil.rmtree(student)
    rels = stubbed_files(root)
    for rel in rels:
        _write(student / rel, stub_text((root / rel).read_text(), str(rel)))
    return rels


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m assignments.make", description=__doc__.split("\n")[0])
    ap.add_argument("out_dir", nargs="?", help="where to write the student tree")
    ap.add_argument("--stubs", action="store_true", help="refresh the committed stubs under assignments/student/")
    ap.add_argument("--no-data", action="store_true", help="leave data/ out of the student tree")
    ap.add_argument("--force", action="store_true",
                    help="write even if OUT_DIR is not empty, after moving it aside to OUT_DIR.backup-TIME")
    args = ap.parse_args(argv)
    if not args.stubs and not args.out_dir:
        ap.error("give OUT_DIR, or --stubs")
    try:
        if args.stubs:
            for rel in update_committed_stubs():
                print(f"wrote assignments/student/{rel}")
        if args.out_dir:
            stubbed = generate(args.out_dir, data=not args.no_data, force=args.force)
            print(f"wrote the student tree to {args.out_dir}; stubbed: {', '.join(map(str, stubbed))}")
    except (RegionError, FileExistsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    from tasks.core.errors import run_cli
    sys.exit(run_cli(main))
