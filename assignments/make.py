"""Write the student tree from the reference code: every solution region becomes its stub.

    python -m assignments.make OUT_DIR [--profile NAME] [--course-url URL]   # a student tree (code, checker,
                                            # fixtures, handout, data/'s files git tracks, notebook)
    python -m assignments.make --stubs      # refresh the committed stubs under assignments/student/

Profiles (assignments/profiles.py): part1 (minBERT alone: a course teaching BERT), default-project (CS224N's
default final project: part 1, the multitask starter, the extensions left for students to build), full (every
extension with its graded stubs; the default).

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
import fnmatch
import json
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from .profiles import DEFAULT_PROFILE, PROFILES, Profile, imported_modules, skeleton_text
from .tree_data import data_files

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END, STUB = "### BEGIN SOLUTION", "### END SOLUTION", "### STUB:"

# What the student tree holds: these packages (the .py files its profile runs; regions stubbed), these files of
# assignments/ (the checker, the checks of the profile's groups and their fixtures, not the generator, the grader
# or the stubs), the handout, tree_files/ (at the tree's root), and data.
PACKAGES = ("minbert", "tasks")
ASSIGNMENT_FILES = ("__init__.py", "adamw_problem.py", "check.py", "checks.py", "common.py", "isolation.py",
                    "record.py")
GROUP_CHECKS = {"multitask": "checks_multitask.py", "deebert": "checks_deebert.py", "smart": "checks_smart.py",
                "pals": "checks_pals.py", "simcse": "checks_simcse.py"}     # each non-core group's checks
HANDOUT = "README.md"                               # of assignments/; its profile sections kept, markers stripped
STUDENT_REQUIREMENTS = "requirements-student.txt"   # of assignments/; the student tree's requirements.txt
TREE_FILES = "tree_files"                           # of assignments/: copied into the tree's root
COURSE_URL = "{{COURSE_URL}}"                       # the notebook's placeholder for the course's copy of the tree
NO_COURSE_URL = "https://COURSE-URL-NOT-SET.invalid/minbert.git"   # its value when make is given no --course-url
NOTEBOOK_PROFILE = "{{PROFILE}}"                     # the notebook's placeholder for the tree's profile, beside it
PROFILE_LINE = 'PROFILE = "reference"'              # tasks/core/tree.py's line, rewritten to name the profile
GITIGNORE = ("runs/", "predictions/", ".venv/", "venv/", "__pycache__/", "*.pyc", "*.zip", ".ipynb_checkpoints/",
             ".DS_Store")
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


def tree_texts(profile: str | Profile = DEFAULT_PROFILE, root: Path = ROOT) -> dict[Path, str]:
    """The profile's minbert/ and tasks/ files as its tree holds them: {path relative to root: text}.

    Regions become stubs, the profile's skeletons lose their bodies, and only the modules its commands import
    (from their import closure, computed on these texts) are kept, with their packages' __init__.py files.
    """
    prof = PROFILES[profile] if isinstance(profile, str) else profile
    texts = {}
    for rel in reference_files(root):
        text = (root / rel).read_text()
        if BEGIN in text:
            text = stub_text(text, str(rel))
        if rel.as_posix() in prof.skeletons:
            text = skeleton_text(text, prof.skeletons[rel.as_posix()], str(rel))
        if rel.as_posix() == "tasks/core/tree.py":
            text = profile_line(text, prof.name)
        texts[rel] = text
    if prof.commands is None:
        return texts
    by_module = {_module_of(rel): rel for rel in texts}
    wanted = {"minbert", "tasks", "tasks.core.tree", "tasks.core.unfinished"} | set(prof.commands)
    seen: set[str] = set()
    while wanted - seen:
        module = min(wanted - seen)
        seen.add(module)
        rel = by_module.get(module)
        if rel is None:
            continue
        wanted |= {m for m in imported_modules(texts[rel], module, str(rel)) if m in by_module}
        parts = module.split(".")
        wanted |= {".".join(parts[:i]) for i in range(1, len(parts))}       # the packages above it
    return {rel: text for rel, text in texts.items() if _module_of(rel) in seen}


def _module_of(rel: Path) -> str:
    parts = rel.with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def profile_line(text: str, name: str) -> str:
    """tasks/core/tree.py's text with its exact line PROFILE = "reference" naming the profile instead."""
    lines = text.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.rstrip("\n") == PROFILE_LINE]
    if len(hits) != 1:
        raise RegionError(f"tasks/core/tree.py: expected the line {PROFILE_LINE!r} once, found it {len(hits)} times")
    lines[hits[0]] = f"PROFILE = {name!r}\n".replace("'", '"')
    return "".join(lines)


HANDOUT_MARK, HANDOUT_END = "<!-- profile:", "<!-- end profile -->"


def handout_text(text: str, profile: str, name: str = "assignments/README.md") -> str:
    """The handout (or data/README.md) for one profile: each `<!-- profile: A B -->` ... `<!-- end profile -->`
    section kept when the profile is among A B (markers dropped), else left out; sections do not nest."""
    out, keep, opened = [], True, 0
    for i, line in enumerate(text.splitlines(keepends=True), start=1):
        s = line.strip()
        if s.startswith(HANDOUT_MARK):
            if opened:
                raise RegionError(f"{name}:{i}: a profile section inside the one opened at line {opened}")
            names = s[len(HANDOUT_MARK):].removesuffix("-->").split()
            unknown = [n for n in names if n not in PROFILES]
            if not names or unknown:
                raise RegionError(f"{name}:{i}: unknown profile(s) {unknown or '(none named)'}; the profiles are "
                                  f"{', '.join(PROFILES)}")
            keep, opened = profile in names, i
        elif s == HANDOUT_END:
            if not opened:
                raise RegionError(f"{name}:{i}: '{HANDOUT_END}' without a section opened before it")
            keep, opened = True, 0
        elif keep:
            out.append(line)
    if opened:
        raise RegionError(f"{name}:{opened}: the profile section is never closed by '{HANDOUT_END}'")
    return re.sub(r"\n{3,}", "\n\n", "".join(out))


def notebook_text(text: str, profile: str, name: str) -> str:
    """A notebook (.ipynb text) for one profile: its markdown cells' profile sections kept or left out as the
    handout's are (handout_text), the markers dropped, and its code's quoted NOTEBOOK_PROFILE the profile's name
    (the set-up cell compares it with a tree's tasks/core/tree.py PROFILE); a notebook without either is returned as
    it is."""
    if HANDOUT_MARK not in text and NOTEBOOK_PROFILE not in text:
        return text
    nb = json.loads(text)
    for cell in nb["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "markdown" and HANDOUT_MARK in source:
            cell["source"] = handout_text(source, profile, name).splitlines(keepends=True)
        elif cell["cell_type"] == "code" and NOTEBOOK_PROFILE in source:
            source = source.replace(f'"{NOTEBOOK_PROFILE}"', json.dumps(profile))
            cell["source"] = source.splitlines(keepends=True)
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"     # as Jupyter writes it


def with_course_url(text: str, url: str) -> str:
    """A notebook (.ipynb text) with COURSE_URL replaced by url in its parsed cells: in code, its quoted placeholder
    becomes a Python literal (json.dumps: a backslash or quote in the URL is escaped), so that any URL leaves valid
    JSON and valid Python; in markdown, the URL as it is."""
    nb = json.loads(text)
    for cell in nb["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if COURSE_URL in source:
            if cell["cell_type"] == "code":
                source = source.replace(f'"{COURSE_URL}"', json.dumps(url))
            cell["source"] = source.replace(COURSE_URL, url).splitlines(keepends=True)
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"     # as Jupyter writes it


def tree_readme(profile: Profile) -> str:
    """The README.md at the student tree's root: which profile it is, where the handout is."""
    about = profile.help.removesuffix(" (the default)")          # the generator's default, not the student's concern
    return (f"# minBERT\n\nThis tree is the `{profile.name}` profile: {about}.\n\n"
            "The handout is [assignments/README.md](assignments/README.md): set-up (Python >= 3.10, or Colab with "
            "`minbert.ipynb`), what to write, how to check it and how to train. Check your work with "
            "`python -m assignments.check`, run from this directory.\n")


def generate(out_dir: str | Path, root: Path = ROOT, data: bool = True, force: bool = False,
             profile: str = DEFAULT_PROFILE, course_url: str | None = None) -> list[Path]:
    """Write the student tree of `profile` into out_dir; returns its stubbed files.

    A non-empty out_dir (a student's work, perhaps) is refused with FileExistsError; with force it is first
    moved aside to backup_path(out_dir), never overwritten.
    """
    prof = PROFILES[profile]
    out = Path(out_dir)
    where, ref = out.resolve(), root.resolve()
    if where == ref or where in ref.parents or ref in where.parents:     # --force would move reference code aside
        how = "over" if where == ref else "around" if where in ref.parents else "inside"
        raise ValueError(f"{out}: refusing to write the student tree {how} the reference code ({ref}); give a "
                         "folder outside it")
    texts = tree_texts(prof, root)          # before anything is moved: a malformed region writes nothing
    tracked, left_out = data_files(root) if data else ([], [])        # git's data files alone: never a gold file
    handout = handout_text((root / "assignments" / HANDOUT).read_text(), prof.name)
    pages = {path.name: handout_text(path.read_text(), prof.name, f"data/{path.name}")     # data/README.md's sections
             for path in tracked if path.suffix == ".md"}
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if not force:
            raise FileExistsError(f"{out} exists and is not empty (a student's work?); nothing was written. Give "
                                  "an empty or new directory, or --force to move it aside to a backup first")
        from tasks.export import backup_path  # the backup names tasks.export --force gives
        backup = backup_path(out)
        shutil.move(str(out), str(backup))
        print(f"moved the existing {out} to {backup}", file=sys.stderr)
    for rel, text in texts.items():
        _write(out / rel, text)
    stubbed = [rel for rel in texts if BEGIN in (root / rel).read_text() and rel.as_posix() not in prof.skeletons]
    configs = prof.configs if prof.configs is not None else sorted(
        p.relative_to(root).as_posix() for p in (root / "tasks").rglob("*.json"))
    for rel in (*configs, *prof.docs):
        _write(out / rel, (root / rel).read_text())
    for name in (*ASSIGNMENT_FILES, *(GROUP_CHECKS[g] for g in prof.groups if g in GROUP_CHECKS)):
        _write(out / "assignments" / name, (root / "assignments" / name).read_text())
    _write(out / "assignments" / HANDOUT, handout)
    for path in sorted((root / "assignments" / "fixtures").iterdir()):
        if path.is_file() and prof.carries_fixture(path.name):
            (out / "assignments" / "fixtures").mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, out / "assignments" / "fixtures" / path.name)
    shutil.copy2(root / "assignments" / STUDENT_REQUIREMENTS, out / "requirements.txt")
    _write(out / "README.md", tree_readme(prof))
    _write(out / ".gitignore", "".join(f"{line}\n" for line in GITIGNORE))
    extra = root / "assignments" / TREE_FILES
    if extra.is_dir():
        for path in sorted(p for p in extra.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            dest = out / path.relative_to(extra)
            if path.suffix == ".ipynb":
                text = notebook_text(path.read_text(), prof.name, path.relative_to(root).as_posix())
                _write(dest, with_course_url(text, course_url or NO_COURSE_URL))
            else:
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, dest)
    if data:
        (out / "data").mkdir(parents=True, exist_ok=True)
        for path in tracked:
            if any(fnmatch.fnmatch(path.name, g) for g in prof.data):
                if path.name in pages:
                    _write(out / "data" / path.name, pages[path.name])
                else:
                    shutil.copy2(path, out / "data" / path.name)
        if left_out:
            print(f"note: left out of the tree's data/, as git does not track them (a gold or salt never ships): "
                  f"{', '.join(left_out)}", file=sys.stderr)
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
    ap = argparse.ArgumentParser(prog="python -m assignments.make", description=__doc__.split("\n")[0],
                                 epilog="profiles: " + "; ".join(f"{p.name}: {p.help}" for p in PROFILES.values()))
    ap.add_argument("out_dir", nargs="?", help="where to write the student tree")
    ap.add_argument("--profile", choices=list(PROFILES), default=DEFAULT_PROFILE,
                    help=f"what the tree holds (default: {DEFAULT_PROFILE}); see the profiles below")
    ap.add_argument("--course-url", metavar="URL",
                    help="the git URL of the course's copy of the tree, which the notebook clones on Colab (default: "
                         "a placeholder that the notebook explains)")
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
            stubbed = generate(args.out_dir, data=not args.no_data, force=args.force, profile=args.profile,
                               course_url=args.course_url)
            print(f"wrote the {args.profile} student tree to {args.out_dir}; stubbed: {', '.join(map(str, stubbed))}")
    except (RegionError, FileExistsError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    from tasks.core.errors import run_cli
    sys.exit(run_cli(main))
