"""Find solution statements in a student tree: every statement of every solution region, against every line.

A statement is compared in its normalised form: the code without its comment, with all whitespace removed, so that
re-indenting, re-spacing or re-commenting a line does not hide it. Nothing is skipped but empty lines and bare
structural tokens (`else:`, `return`, `)`, ...), which carry no solution. There is no length floor: a short statement
(`return out`) that the tree also carries is reported, wherever it is.

A stub's text is a comment, which `normalise` drops, so the comment lines of each `# YOUR CODE HERE` block are read
apart (stub_leaks): a statement written anywhere in them, in any spacing or case, is reported too. So is one written
in the tree's prose (prose_leaks): its Markdown pages (the handout) and the strings of its assignments/ code (the hints).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from .make import ROOT, find_regions, stubbed_files
from .profiles import imports_in

# Lines made only of these carry no solution: closing brackets, `else:`, a bare return / pass / continue / break.
STRUCTURAL = re.compile(r"^([)\]},:]*|else:|try:|finally:|return|pass|continue|break|[)\]}]+[,:]?)$")
TEXT_SUFFIXES = (".py", ".md", ".txt", ".json", ".ipynb", ".cfg", ".toml", ".yaml", ".yml", ".sh", ".csv",
                 ".gitignore", "")


def normalise(line: str) -> str:
    """A line's code without its comment and with no whitespace at all."""
    return re.sub(r"\s+", "", line.split("#", 1)[0])


def _statements(lines: list[str]) -> set[str]:
    """Each line normalised, and each statement that spans several lines joined into one (the region's own code)."""
    out = {normalise(s) for s in lines}
    import textwrap
    try:
        tree = ast.parse(textwrap.dedent("\n".join(lines)))
    except SyntaxError:
        return out
    flat = textwrap.dedent("\n".join(lines)).splitlines()
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and node.end_lineno and node.end_lineno > node.lineno \
                and not isinstance(node, (ast.If, ast.For, ast.While, ast.With, ast.Try, ast.FunctionDef, ast.ClassDef)):
            out.add("".join(normalise(s) for s in flat[node.lineno - 1: node.end_lineno]))
    return out


def solution_statements(root: Path = ROOT) -> dict[str, str]:
    """Every normalised statement of every solution region of the reference: {statement: 'file:line' of one}."""
    found: dict[str, str] = {}
    for rel in stubbed_files(root):
        text = (root / rel).read_text()
        for r in find_regions(text, str(rel)):
            for s in _statements(r.solution):
                if s and not STRUCTURAL.match(s):
                    found.setdefault(s, f"{rel}:{r.begin}")
    return found


def text_lines(path: Path) -> list[str]:
    """The lines of a text file as a reader sees them: a notebook's cell sources, one line each; else the file's."""
    text = path.read_text(errors="replace")
    if path.suffix == ".ipynb":
        cells = json.loads(text).get("cells", [])
        lines = [line for c in cells for line in "".join(c.get("source", [])).splitlines()]
        return lines + text.splitlines()
    lines = text.splitlines()
    if path.suffix == ".py":
        try:
            tree = ast.parse(text)
        except SyntaxError:
            return lines
        for node in ast.walk(tree):          # a statement over several lines, joined, as _statements joins them
            if isinstance(node, ast.stmt) and node.end_lineno and node.end_lineno > node.lineno:
                lines.append("".join(lines[node.lineno - 1: node.end_lineno]))
    return lines


def is_text(path: Path) -> bool:
    """Whether a file is text (no NUL byte in its first 8 KB): fixtures and data in binary formats are not read."""
    with open(path, "rb") as f:
        return b"\0" not in f.read(8192)


def leaks(tree: Path, statements: dict[str, str] | None = None) -> list[str]:
    """'file:line: statement (from file:line)' for each line of the tree that is a solution statement."""
    statements = solution_statements() if statements is None else statements
    out = []
    for path in sorted(p for p in tree.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        if path.parts[len(tree.parts)] == "data" or not is_text(path):
            continue
        for i, line in enumerate(text_lines(path), 1):
            s = normalise(line)
            if s in statements:
                out.append(f"{path.relative_to(tree)}:{i}: {line.strip()}   (the solution at {statements[s]})")
    seen = {message.split(": ", 1)[0] for message in out}        # a line the line scan named is named once
    prose = [m for m in prose_leaks(tree, statements) if m.split(": ", 1)[0] not in seen]
    return out + stub_leaks(tree, statements) + prose


# ---------------------------------------------------------------- solution statements in a stub's text

STUB_HEAD = "# YOUR CODE HERE"          # make.stub_text's first line of a stub; its comment lines follow it
# The one allow-rule for stub text: a statement or value that is one name, attribute or number, or an item of one by a
# constant key, returned or not (`return out`, `return pooler_output`, `state["step"]`), is not looked for there, as
# a specification must name the value it gives or uses.
TRIVIAL = re.compile(r"^(return)?[\w.]+(\[(\d+|\"\w+\"|'\w+')\])*$")
# An assignment, plain or augmented, normalised: its targets (names, attributes, items, tuples of these), then E.
ASSIGNMENT = re.compile(r"^[\w.,\[\]'\"]+(?:\*\*|//|>>|<<|[-+*/@%&|^])?=(?!=)(?P<value>.+)$")


def in_prose(statement: str) -> re.Pattern[str]:
    """A pattern finding a normalised statement in comment text: any whitespace between its characters, any case
    (`Return f(x)` opens a sentence), and not as the middle of a longer name."""
    body = r"\s*".join(re.escape(c) for c in statement)
    before = r"(?<![\w.])" if re.match(r"\w", statement) else ""
    after = r"(?!\w)" if re.search(r"\w$", statement) else ""
    return re.compile(before + body + after, re.IGNORECASE)


def prose_patterns(statements: dict[str, str], values: bool = False) -> dict[str, list[re.Pattern[str]]]:
    """{statement: its patterns} for the statements looked for in stub text: the statement, and for a `return E` also
    E (a stub that shows E has shown the line), with values also the E of an assignment `x = E` or `x += E` (so for
    the same reason), less the trivial forms (TRIVIAL)."""
    out = {}
    for s in statements:
        forms = [s]
        if s.startswith("return") and not re.match(r"return[\w.]*=(?!=)", s):   # not `returned = ...`
            forms.append(s[len("return"):])
        elif values and (m := ASSIGNMENT.match(s)):
            forms.append(m.group("value"))
        patterns = [in_prose(f) for f in forms if f and not TRIVIAL.match(f)]
        if patterns:
            out[s] = patterns
    return out


def stub_blocks(lines: list[str]) -> list[list[tuple[int, str]]]:
    """The comment lines (1-based line, text after '#') of each YOUR CODE HERE block of a Python file's lines."""
    blocks: list[list[tuple[int, str]]] = []
    current: list[tuple[int, str]] | None = None
    for i, line in enumerate(lines, 1):
        s = line.strip()
        if s == STUB_HEAD:
            current = []
            blocks.append(current)
        elif current is not None and s.startswith("#"):
            current.append((i, s[1:]))
        else:
            current = None
    return blocks


def stub_leaks(tree: Path, statements: dict[str, str] | None = None) -> list[str]:
    """'file:line: statement (from file:line)' for each solution statement that a stub's comment text shows: the
    comment lines of every YOUR CODE HERE block of the tree's .py files, joined, so a statement may span lines; an
    assignment's value shown without its target counts too (prose_patterns' values)."""
    statements = solution_statements() if statements is None else statements
    patterns = prose_patterns(statements, values=True)
    out = []
    for path in sorted(p for p in tree.rglob("*.py") if p.is_file() and "__pycache__" not in p.parts):
        if path.parts[len(tree.parts)] == "data":
            continue
        found: list[tuple[int, str]] = []
        for block in stub_blocks(path.read_text(errors="replace").splitlines()):
            text = "\n".join(t for _, t in block)
            for s, forms in patterns.items():
                m = next((m for m in (f.search(text) for f in forms) if m), None)
                if m:
                    line = block[text.count("\n", 0, m.start())][0]
                    shown = " ".join(m.group(0).split())
                    where = f"in the stub's text; the solution at {statements[s]}"
                    found.append((line, f"{path.relative_to(tree)}:{line}: {shown}   ({where})"))
        out += [message for _, message in sorted(found)]
    return out


def _strings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of each string constant of a Python file (a hint's implicitly joined parts are one constant)."""
    try:
        tree = ast.parse(path.read_text(errors="replace"))
    except SyntaxError:
        return []
    return [(n.lineno, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def prose_leaks(tree: Path, statements: dict[str, str] | None = None) -> list[str]:
    """'file:line: statement (...)' for each solution statement that the tree's prose shows: its Markdown pages (the
    handout) and the string constants of its assignments/ code (the checks' hints), in any spacing or case."""
    statements = solution_statements() if statements is None else statements
    patterns = prose_patterns(statements)
    texts: list[tuple[Path, int, str]] = []
    for path in sorted(p for p in tree.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        top = path.parts[len(tree.parts)]
        if top == "data":
            continue
        if path.suffix == ".md":
            texts.append((path, 1, path.read_text(errors="replace")))
        elif path.suffix == ".py" and top == "assignments":
            texts += [(path, line, text) for line, text in _strings(path)]
    out = []
    for path, first, text in texts:
        for s, forms in patterns.items():
            m = next((m for m in (f.search(text) for f in forms) if m), None)
            if m:
                line = first + text.count("\n", 0, m.start())
                shown = " ".join(m.group(0).split())
                out.append(f"{path.relative_to(tree)}:{line}: {shown}   (in its prose; the solution at {statements[s]})")
    return out


# ---------------------------------------------------------------- modules that compute a graded part's answer

# Names of the reference's modules that compute graded answers and stay out of every student tree: mistakes.py (its
# functions with their defaults are the right attention, layer, embeddings and AdamW) and the fixture generators.
ANSWER_MODULES = ("*mistake*", "make_fixtures*", "hidden.py")


def answer_modules(tree: Path) -> list[str]:
    """The tree's files (relative paths) named like a module that computes a graded part's answer."""
    import fnmatch
    return sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and "data" != p.relative_to(tree).parts[0]
                  and any(fnmatch.fnmatch(p.name.lower(), g) for g in ANSWER_MODULES))


def public_assignment_files() -> set[str]:
    """The files of assignments/ that a student tree may carry: make.ASSIGNMENT_FILES and the groups' checks, less any
    named like an answer module (ANSWER_MODULES)."""
    import fnmatch

    from .make import ASSIGNMENT_FILES, GROUP_CHECKS
    return {name for name in (*ASSIGNMENT_FILES, *GROUP_CHECKS.values())
            if not any(fnmatch.fnmatch(name.lower(), g) for g in ANSWER_MODULES)}


def unshipped_imports(tree: Path) -> list[str]:
    """'file: module (why)' for each import, by the tree's assignments/ code, of a minbert, tasks or assignments
    module that is not a file of the tree, or of an assignments module off the public list (public_assignment_files).
    A check that imported the reference's mistakes.py (or any instructor module), even inside a function, is here."""
    public = public_assignment_files()

    def file_of(name: str) -> Path | None:
        parts = name.split(".")
        for path in (tree.joinpath(*parts).with_suffix(".py"), tree.joinpath(*parts) / "__init__.py"):
            if path.is_file():
                return path
        return None

    out = []
    for path in sorted((tree / "assignments").rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        rel = path.relative_to(tree)
        is_package = path.name == "__init__.py"
        module = ".".join(rel.parent.parts if is_package else rel.with_suffix("").parts)
        modules, names = imports_in(path.read_text(), module, is_package)
        for name in sorted(modules | {n for n in names if file_of(n) is not None}):
            if name.split(".")[0] not in ("assignments", "minbert", "tasks"):
                continue
            found = file_of(name)
            if found is None:
                out.append(f"{rel}: {name} (no such file in the tree)")
            elif found.parent == tree / "assignments" and found.name not in public:
                out.append(f"{rel}: {name} (not among the student tree's public files of assignments/)")
    return out
