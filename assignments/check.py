"""Check your code against the reference: python -m assignments.check [all | GROUP or PART ...]  (from the tree's root).

With no argument it checks the first group of your tree, in order (core, multitask, then the extensions your
tree has), that is not complete yet: its parts, its total, and which group comes next. `all` checks every group;
a group (core, multitask, deebert, smart, pals, simcse) stands for all its parts. Each part prints PASS, "not
started" (your function still raises NotImplementedError), or what differs: the function, the first mismatching
index, the two values there and the max abs diff. Each group's points are totalled on their own.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

ROOT = Path(__file__).resolve().parents[1]
CODE_DIRS = ("minbert", "tasks")


def _student_frame(tb: TracebackType | None) -> tuple[str, str, int] | None:
    """(qualified function name, file relative to ROOT, line) of the innermost frame in minbert/ or tasks/."""
    found = None
    while tb is not None:
        code = tb.tb_frame.f_code
        path = Path(code.co_filename).resolve()
        if ROOT in path.parents and path.relative_to(ROOT).parts[0] in CODE_DIRS:
            name = getattr(code, "co_qualname", code.co_name)
            found = (name if "." in name else f"{name}()", path.relative_to(ROOT).as_posix(), tb.tb_lineno)
        tb = tb.tb_next
    return found


def _shape_error(e: BaseException) -> bool:
    """Whether e is minbert/shapes.py's ShapeError: the given code's word that a function students write returned
    the wrong shape."""
    shapes = sys.modules.get("minbert.shapes")
    return shapes is not None and isinstance(e, getattr(shapes, "ShapeError", ()))


def _describe_error(e: BaseException, part: str = "") -> tuple[str, str]:
    """(status, message) for an exception raised by a check (of `part`, when given)."""
    from .common import Fail
    if isinstance(e, Fail):
        return "fail", str(e)
    if _shape_error(e):     # raised in the given shapes.py, about the student's function, which its message names
        message = str(e)
        rerun = f"; python -m assignments.check {part}"
        if part and message.endswith(rerun):     # the command that is running: no news
            message = message[:-len(rerun)]
        return "fail", message
    where = _student_frame(e.__traceback__)
    if isinstance(e, NotImplementedError):
        if where is not None:
            return "not started", f"{where[0]} in {where[1]} still raises NotImplementedError"
        return "not started", f"NotImplementedError: {e}"
    if isinstance(e, SyntaxError) and e.filename:
        path = Path(e.filename).resolve()
        name = path.relative_to(ROOT).as_posix() if ROOT in path.parents else e.filename
        return "error", f"{name}:{e.lineno}: does not parse: {e.msg}"
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    what = "raised " + (f"{type(e).__name__}: {text}" if text else type(e).__name__)
    notes = " ".join(str(n) for n in getattr(e, "__notes__", ()))    # a check's hint about this error
    if notes:
        what += f". {notes}"
    if isinstance(e, SystemExit):
        what = f"called sys.exit({e.code!r})"
    if where is not None:
        return "error", f"{where[0]} ({where[1]}:{where[2]}) {what}"
    return "error", what


def find_tree(start: Path) -> Path | None:
    """The nearest directory at or above start that holds both minbert/ and assignments/ (a tree's root)."""
    for d in (start, *start.parents):
        if (d / "minbert" / "__init__.py").is_file() and (d / "assignments" / "__init__.py").is_file():
            return d
    return None


def foreign_modules() -> list[str]:
    """The loaded modules of minbert/, tasks/ and assignments/ whose file is not under ROOT (another tree's)."""
    out = []
    for name, mod in list(sys.modules.items()):
        file = getattr(mod, "__file__", None)
        if name.split(".")[0] in (*CODE_DIRS, "assignments") and file and ROOT not in Path(file).resolve().parents:
            out.append(f"{name} from {file}")
    return out


def tree_guard(cwd: Path | None = None) -> str | None:
    """None when this run checks the tree it is run in; else what is wrong and the fix.

    An editable install of the reference (pip install -e) or a run from outside the tree's root would
    otherwise check some other tree's code and report its score as yours.
    """
    import importlib.util
    here = find_tree((cwd or Path.cwd()).resolve())
    spec = importlib.util.find_spec("minbert")           # finds it without importing it (or torch)
    origin = Path(spec.origin).resolve().parents[1] if spec and spec.origin else None
    fix = (f"run it from your tree's root:  cd {here or 'YOUR_TREE'} && python -m assignments.check; if it still "
           "comes from elsewhere, an installed minbert shadows your tree: pip uninstall minbert")
    if here is None:
        return f"not inside a minbert tree (no minbert/ and assignments/ at or above {cwd or Path.cwd()}); {fix}"
    if here != ROOT:
        return f"you are in the tree {here}, but this checker is the one of {ROOT}; {fix}"
    if spec is None:                # run as a file (python check.py, python assignments/check.py): no tree on the path
        return f"run it as python -m assignments.check from the tree's root (cd {ROOT}), not as a file"
    if origin != ROOT:
        return f"minbert would be imported from {origin}, not from this tree {ROOT}; {fix}"
    return None


def run_part(name: str) -> dict:
    """Run one part's check in this process: {"part", "status", "message", "score", "max_score", "seconds"}."""
    from .checks import PARTS
    part = PARTS[name]
    t0 = time.perf_counter()
    status, message = "pass", ""
    try:
        import minbert
        here = Path(minbert.__file__).resolve().parents[1]
        if here != ROOT:
            raise RuntimeError(f"imported minbert from {here}, not from this tree {ROOT}; run from {ROOT}")
        part.check()
        foreign = foreign_modules()
        if foreign:
            raise RuntimeError(f"code from another tree was imported: {'; '.join(foreign[:3])}; run from {ROOT} "
                               "and pip uninstall minbert")
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - every failure of the student's code becomes this part's message
        status, message = _describe_error(e, name)
    return {"part": name, "status": status, "message": message, "score": part.points if status == "pass" else 0,
            "max_score": part.points, "seconds": round(time.perf_counter() - t0, 3)}


def describe(r: dict) -> str:
    """PASS, or the status (not started / FAIL / ERROR / TIMEOUT / CRASH) with its message."""
    if r["status"] == "pass":
        return "PASS"
    label = {"not started": "not started", "fail": "FAIL", "error": "ERROR"}.get(r["status"], r["status"].upper())
    return f"{label}: {r['message']}"


def format_result(r: dict) -> str:
    """One line: the part, its score, and describe(r)."""
    return f"{r['part']:<16}{r['score']:>3}/{r['max_score']:<3} {describe(r)}"


def group_totals(results: list[dict]) -> list[dict]:
    """Per group with parts among the results: {"group", "label", "passed", "parts", "score", "max_score"}."""
    from .checks import PARTS
    from .common import GROUPS
    totals = []
    for group, label in GROUPS.items():
        rs = [r for r in results if PARTS[r["part"]].group == group]
        if rs:
            totals.append({"group": group, "label": label, "passed": sum(r["status"] == "pass" for r in rs),
                           "parts": len(rs), "score": sum(r["score"] for r in rs),
                           "max_score": sum(r["max_score"] for r in rs)})
    return totals


def format_total(t: dict) -> str:
    """One line per group, e.g. "part 2 (multitask): 5/7 parts pass; 70/100 points"."""
    return f"{t['label']}: {t['passed']}/{t['parts']} parts pass; {t['score']}/{t['max_score']} points"


def expand(names: list[str]) -> list[str]:
    """Part names, with each group name replaced by its parts; order kept, duplicates dropped."""
    from .checks import PARTS, parts_of
    from .common import GROUPS
    out: list[str] = []
    for name in names:
        for part in parts_of([name]) if name in GROUPS else [name] if name in PARTS else []:
            if part not in out:
                out.append(part)
    return out


def tree_groups() -> list[str]:
    """The groups this tree's checker lists (checks.PARTS), in GROUPS order: core, multitask, the extensions."""
    from .checks import PARTS
    from .common import GROUPS
    present = {p.group for p in PARTS.values()}
    return [g for g in GROUPS if g in present]


def _check(names: list[str], args: argparse.Namespace, echo: bool) -> list[dict]:
    """Run these parts (each in its own process with --timeout), printing a line per part when echo."""
    if args.timeout is not None:
        from .isolation import run_isolated
        with tempfile.TemporaryDirectory(prefix="minbert-check-") as tmp:
            results = run_isolated(names, args.timeout, max(1, args.jobs), Path(tmp),
                                   Path(args.record) if args.record else None)
        if echo:
            for r in results:
                print(format_result(r), flush=True)
        return results
    results = []
    for name in names:
        results.append(run_part(name))
        if echo:
            print(format_result(results[-1]), flush=True)
    return results


def check_next_group(args: argparse.Namespace) -> list[dict]:
    """The no-argument check: each group in turn until the first one not complete, whose parts are printed.

    A complete group before it prints its total alone; the last line says which group comes next.
    """
    from .checks import parts_of
    from .common import GROUPS
    groups, results = tree_groups(), []
    for i, group in enumerate(groups):
        rs = _check(parts_of([group]), args, echo=False)
        results += rs
        total = group_totals(rs)[0]
        if all(r["status"] == "pass" for r in rs):
            print(f"{format_total(total)}: complete", flush=True)
            continue
        for r in rs:
            print(format_result(r), flush=True)
        print(format_total(total))
        after = (f"next: {GROUPS[groups[i + 1]]} (python -m assignments.check {groups[i + 1]}), once this group "
                 "passes" if i + 1 < len(groups) else "this is your tree's last group")
        print(f"{after}; python -m assignments.check all checks every group")
        return results
    print(f"every group of your tree is complete: {', '.join(GROUPS[g] for g in groups)}")
    return results


def result_file(text: str) -> str:
    """--result FILE: a file to write (its folders are made), not a directory, nor under a file: refused before any
    check runs. The checker's own (not tasks.core.errors.file_to_write): it runs when the student's minbert, which
    tasks.core imports, does not."""
    path = Path(os.path.expanduser(text))   # ~name of no user stays a name (pathlib's expanduser raises)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory, not a file: give a file name, such as "
                                         f"{Path(text) / 'results.json'}")
    above = next((p for p in path.parents if p.exists()), None)
    if above is not None and not above.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: {above} is a file, not a directory: give a path in a folder")
    return text


def main(argv: list[str] | None = None) -> int:
    if not __package__:        # run as a file (python check.py): `-m` from the root puts this tree first on the path
        print(f"error: run it as python -m assignments.check from the tree's root (cd {ROOT}), not as a file",
              file=sys.stderr)
        return 2
    problem = tree_guard()     # before anything heavy is imported: a refusal is quick
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    # minbert from this tree (checked above) refuses a Python older than 3.10 in one line; a file of the student's
    # that does not import is left for each part to name
    with contextlib.suppress(Exception):
        import minbert  # noqa: F401

    from .checks import PARTS
    groups = tree_groups()
    ap = argparse.ArgumentParser(prog="python -m assignments.check", description=__doc__.split("\n")[0])
    ap.add_argument("parts", nargs="*", metavar="PART",
                    help=f"all (every group), groups ({', '.join(groups)}) or parts ({', '.join(PARTS)}); default: "
                         "the first group, in that order, that is not complete yet")
    ap.add_argument("--result", metavar="FILE", type=result_file,
                    help="also write the results as JSON (used by the grader)")
    ap.add_argument("--timeout", type=float, metavar="S",
                    help="run each part in its own process, stopped after S seconds (used by the grader)")
    ap.add_argument("--jobs", type=int, default=1, help="with --timeout: parts run at once (default 1)")
    ap.add_argument("--record", metavar="DIR", help=argparse.SUPPRESS)   # the grader's: results as data into DIR
    ap.add_argument("--inputs", metavar="DIR", help=argparse.SUPPRESS)   # the grader's: the hidden inputs
    args = ap.parse_args(argv)
    unknown = [p for p in args.parts if p not in PARTS and p not in groups and p != "all"]
    if unknown:
        ap.error(f"unknown part(s) {', '.join(unknown)}; the groups are {', '.join(groups)} (or all), "
                 f"the parts {', '.join(PARTS)}")
    if bool(args.record) != bool(args.inputs) or (args.record and args.timeout is None):
        ap.error("--record and --inputs go together, with --timeout (the grader's options)")
    if args.inputs:
        from . import isolation
        os.environ[isolation.RECORD_INPUTS] = str(Path(args.inputs).resolve())
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    print(f"checking the tree at {ROOT}", flush=True)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch
    torch.set_num_threads(1)
    if args.parts:
        results = _check(list(PARTS) if "all" in args.parts else expand(args.parts), args, echo=True)
        for t in group_totals(results):
            print(format_total(t))
    else:
        results = check_next_group(args)
    if args.result:
        Path(args.result).parent.mkdir(parents=True, exist_ok=True)
        Path(args.result).write_text(json.dumps(results))
    return 0 if all(r["status"] == "pass" for r in results) else 1


if __name__ == "__main__":
    if not __package__:        # run as a file: main() says how to run it, before another tree's code is imported
        sys.exit(main())
    try:
        from tasks.core.errors import run_cli
    except Exception:  # noqa: BLE001 - the student's minbert does not import: check anyway, each part says where
        sys.exit(main())
    sys.exit(run_cli(main))
