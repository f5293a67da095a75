"""What a student tree holds, per profile: part 1 alone, the default final project, or everything.

A profile names the commands its tree runs (their modules and everything those import are copied), the
extension modules that those commands import but that students build themselves (skeletonised: every function's
body becomes `raise NotImplementedError`, its signature and docstring kept; dataclass settings kept whole so that
the commands' flags still parse), the check groups it grades, the config files and data its commands read, and
the handout sections it keeps.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

# The extensions' modules a default-project tree skeletonises (students build them): {module: names kept whole}.
# Kept are what the given commands call with the extension's flags off (flag parsing, a constant's helpers).
BITFIT_SKELETONS = {"minbert/bitfit.py": ("parse_terms", "TERMS"), "minbert/bitfit_controls.py": (),
                    "minbert/bitfit_tasks.py": ()}
EXTENSION_SKELETONS = {**BITFIT_SKELETONS, "minbert/smart.py": (), "minbert/pals.py": (), "minbert/simcse.py": (),
                       "minbert/pcgrad.py": (), "minbert/sentence_losses.py": ()}
FIXTURE_GROUPS = {"multitask": "multitask", "deebert": "deebert", "smart": "smart", "pals": "pals",
                  "simcse": "simcse"}   # a fixture whose name starts with a key belongs to that group; else core


@dataclass(frozen=True)
class Profile:
    """One kind of student tree."""

    name: str
    help: str
    groups: tuple[str, ...]                        # the check groups it carries and grades (keys of common.GROUPS)
    commands: tuple[str, ...] | None               # the modules it runs (None: every module of minbert/ and tasks/)
    skeletons: dict[str, tuple[str, ...]] = field(default_factory=dict)   # {file: names kept whole}
    configs: tuple[str, ...] | None = None         # the tasks/**/*.json its commands read (None: all of them)
    data: tuple[str, ...] = ("*",)                 # globs of data/ files it ships
    docs: tuple[str, ...] = ()                     # pages of docs/ it ships (the extension path, for the projects)

    def carries_fixture(self, name: str) -> bool:
        """Whether the tree ships the fixture of this file name (its group's checks are shipped)."""
        group = next((g for prefix, g in FIXTURE_GROUPS.items() if name.startswith(prefix)), "core")
        return group in self.groups


PART1_COMMANDS = ("tasks.classifier", "tasks.score", "tasks.submit", "tasks.curves", "tasks.attention")
PROFILES = {
    "part1": Profile(
        "part1", "part 1 alone: minBERT (attention, embeddings, layer, AdamW, the classifier head) and the "
        "sentiment classifier on SST and CFIMDB; for a course teaching BERT alone",
        ("core",), PART1_COMMANDS, dict(BITFIT_SKELETONS), (),
        ("README.md", "ids-sst-*", "ids-cfimdb-*")),
    "default-project": Profile(
        "default-project", "CS224N's default final project: part 1, the multitask starter (part 2), and the "
        "extensions (BitFit, SMART, PALs, SimCSE, DeeBERT, PCGrad, ensembles, the search) left for students to "
        "build: their modules skeletonised or absent, their checks kept for staff",
        ("core", "multitask"), (*PART1_COMMANDS, "tasks.multitask", "tasks.multitask.__main__"),
        dict(EXTENSION_SKELETONS), ("tasks/multitask/main-job.json",), docs=("docs/extensions.md",)),
    "full": Profile(
        "full", "everything: part 1, part 2 and every extension with its graded stubs; for a course that grades "
        "the extensions' stubs (the default)",
        ("core", "multitask", "deebert", "smart", "pals", "simcse"), None, docs=("docs/extensions.md",)),
}
DEFAULT_PROFILE = "full"


def skeleton_text(text: str, keep: tuple[str, ...] = (), name: str = "<text>") -> str:
    """text with every function's body replaced by `raise NotImplementedError` (signature and docstring kept).

    Kept whole: the functions and classes named in keep (qualified, e.g. 'Smart.update'), dataclasses (settings
    that must still parse), and one-line functions. Module-level code, imports and class attributes stay.
    """
    tree = ast.parse(text, name)
    lines = text.splitlines(keepends=True)
    cuts: list[tuple[int, int, str]] = []         # (first line, last line, indentation) of a body, 1-based

    def is_dataclass(node: ast.ClassDef) -> bool:
        return any("dataclass" in ast.unparse(d) for d in node.decorator_list)

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            qual = prefix + getattr(node, "name", "")
            if isinstance(node, ast.ClassDef) and qual not in keep and not is_dataclass(node):
                visit(node.body, qual + ".")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and qual not in keep:
                first = node.body[0]
                has_doc = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str)
                start = (first.end_lineno or first.lineno) + 1 if has_doc else first.lineno
                if first.lineno == node.lineno:   # def f(): return x
                    continue
                indent = lines[first.lineno - 1][: len(lines[first.lineno - 1]) - len(lines[first.lineno - 1].lstrip())]
                cuts.append((start, node.end_lineno or start, indent))

    visit(tree.body, "")
    for start, end, indent in sorted(cuts, reverse=True):
        lines[start - 1: end] = [f"{indent}raise NotImplementedError\n"]
    return "".join(lines)


def imports_in(text: str, module: str, is_package: bool, name: str = "<text>") -> tuple[set[str], set[str]]:
    """(modules, names) a module's text imports, anywhere in it (inside functions too), relative ones resolved:
    `import a.b` and `from a.b import c` give the module a.b, the latter also the name a.b.c (a submodule or not)."""
    package = module if is_package else module.rpartition(".")[0]
    modules, names = set(), set()
    for node in ast.walk(ast.parse(text, name)):
        if isinstance(node, ast.Import):
            modules |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            modules.add(base)
            names |= {f"{base}.{a.name}" for a in node.names}
    return modules, names


def imported_modules(text: str, module: str, name: str = "<text>") -> set[str]:
    """The dotted names of minbert/ and tasks/ modules (or packages) a module's text imports, anywhere in it."""
    modules, names = imports_in(text, module, name.endswith("__init__.py"), name)
    return {m for m in modules | names if m.split(".")[0] in ("minbert", "tasks")}   # names: from pkg import submodule
