"""Grade a submission: python -m assignments.grade SUBMISSION --seed-file SEED [--out results.json] [--groups core]

The submission is a student tree (or a folder holding just the files students fill in, e.g. model.py and
optim.py, as Gradescope uploads them; either may sit one or two folders down, as a zipped folder unpacks), or a zip
of either, given as such or alone in a folder (assignments/staging.py). Only the files of the graded groups' parts
are taken from it (part 1, "core", by default: model.py, optim.py, pooling.py, classifier.py; part 2, "multitask":
multitask.py; an extension such as "deebert": its file): they are laid over a fresh student tree of the profile
(--profile, default full) generated from this reference, so that the checks and every other file are the
instructor's; a file that does not compile is not laid, and costs only the parts that grade it. The groups other
than core run through part 1's pool(): they are graded in a tree of their own with the reference's
minbert/pooling.py laid over it (REFERENCE_FOR_OTHERS).

Every input is drawn from the grading seed (--seed, --seed-file, $MINBERT_GRADING_SEED, else a fresh one, said on
stderr) by the reference: the students' fixtures are never used. Each part runs in its own process with a time limit, as another
user when this runs as root (--as-user: nobody by default, refused when that user cannot run this Python; none runs
it as root), and returns only what its code computed, as data (assignments/untrusted.py); this process, which never
imports student code, replays the part's check on the reference and judges it (assignments/hidden.py). Prints a
score table with each group's total and writes results.json in Gradescope's format: {"score", "execution_time",
"extra_data", "tests": [{"name", "score", "max_score", "output", "status"}, ...]}; the score is the sum over the
graded groups. --batch DIR grades a folder of submissions into a CSV (assignments/batch.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from minbert.files import write_text
from tasks.core.errors import positive_float, positive_int

from .check import describe, format_result, format_total, group_totals
from .checks import PARTS, part_sets, parts_of
from .common import GROUPS
from .hidden import grading_seed, read_seed
from .isolation import become_subreaper, children, part_memory, usable_cpus
from .make import ROOT
from .profiles import DEFAULT_PROFILE, PROFILES
from .staging import Opened, open_submission, stage
from .untrusted import STUDENT_USER, judge_part, preload, run_parts, student_account, warm_helper

DEFAULT_TIMEOUT = 20.0
REFERENCE_FOR_OTHERS = ("minbert/pooling.py",)   # part 1's helpers that the other groups' checks run through


HINT_MARK = ". It matches what you get when"


def without_hint(text: str) -> str:
    """A part's output with the hint about which mistake it matches cut off (the rest of the message stays)."""
    return text.split(HINT_MARK, 1)[0] + ("." if HINT_MARK in text else "")


def grade(submission: str | Path, timeout: float = DEFAULT_TIMEOUT, parts: list[str] | None = None,
          jobs: int | None = None, groups: list[str] | tuple[str, ...] = ("core",), hide_hints: bool = False,
          profile: str = DEFAULT_PROFILE, seed: int | None = None, as_user: str | None = STUDENT_USER) -> dict:
    """Grade one submission (a folder or a zip) on the parts of `groups` (or the named parts) of `profile`; returns
    the Gradescope results dict.

    Every part runs on inputs drawn from `seed` (grading_seed) and is judged in this process (assignments/hidden.py).
    Besides Gradescope's keys it holds the per-part results under 'parts' and each group's total under 'groups'.
    hide_hints: each part's output leaves out the mistake it matches; a 0-point test holding the full outputs
    is shown after the due date (Gradescope's "visibility": "after_due_date"). as_user: run as root, the student's
    code runs as this user ("auto": nobody; "none" or None: root); one who cannot run this Python is refused.
    """
    known_parts(parts, profile)
    with tempfile.TemporaryDirectory(prefix="minbert-upload-") as unpacked:
        opened = open_submission(Path(submission), Path(unpacked))
        return _grade(opened, timeout, parts, jobs, groups, hide_hints, profile, seed, as_user)


def known_parts(parts: list[str] | None, profile: str) -> None:
    """Raise ValueError naming each of `parts` that is no part at all (a fixture's name, a typo), and the parts of
    `profile` (the command line's --parts refuses them through its choices; a Python caller gets this)."""
    unknown = [p for p in parts or () if p not in PARTS]
    if unknown:
        own = PROFILES[profile].groups if profile in PROFILES else GROUPS
        raise ValueError(f"unknown part{'s' if len(unknown) > 1 else ''}: {', '.join(map(str, unknown))}; the parts "
                         f"are {', '.join(parts_of(list(own)))}")


def _grade(opened: Opened, timeout: float, parts: list[str] | None, jobs: int | None,
           groups: list[str] | tuple[str, ...], hide_hints: bool, profile: str, seed: int | None,
           as_user: str | None) -> dict:
    """grade() on the folder open_submission found."""
    from .hidden import hidden_fixture, write_inputs
    known_parts(parts, profile)
    own = PROFILES[profile].groups
    unknown = [g for g in groups if g not in own] + [p for p in parts or () if PARTS[p].group not in own]
    if unknown:
        raise ValueError(f"not in the {profile} profile: {', '.join(unknown)}; its groups are {', '.join(own)}")
    account = student_account(as_user)
    helper = warm_helper()        # its import of torch runs beside the reference's preload and the hidden fixtures
    t0 = time.perf_counter()
    names = parts or parts_of(groups)
    seed = grading_seed(seed)
    wanted = sorted({f for n in names for f in PARTS[n].fixtures})
    preload()
    fixtures = {f: hidden_fixture(f, seed) for f in wanted}        # by the reference, before any student code runs
    become_subreaper()
    spare = frozenset(children())              # the caller's own processes: never the submission's
    spare -= {helper.proc.pid} if helper else set()   # spared by run_parts while it lives, not after
    by_tree = part_sets(names)
    notes, missing, linked, results, unrun = list(opened.notes), set(), {}, {}, set()
    with tempfile.TemporaryDirectory(prefix="minbert-grade-") as tmp:
        os.chmod(tmp, 0o755)              # the student's user reads the staged tree (and nothing of this process)
        for i, batch in enumerate(by_tree):                     # part 1, then the others on the reference's pool()
            files = sorted({f for n in batch for f in PARTS[n].files})
            reference = REFERENCE_FOR_OTHERS if PARTS[batch[0]].group != "core" else ()
            staging = Path(tmp) / f"tree{i}"
            staged = stage(opened.folder, staging, files, profile, reference)
            notes += [n for n in staged.notes if n not in notes]
            missing |= staged.missing
            linked.update(staged.linked)
            for n in batch:               # a file that does not parse: its parts score 0 unrun, the others run
                unparsed = [staged.unparsed[f] for f in PARTS[n].files if f in staged.unparsed]
                if unparsed:
                    results[n] = {"part": n, "score": 0, "max_score": PARTS[n].points, "status": "error",
                                  "message": "; ".join(unparsed), "seconds": 0.0, "log": ""}
                    unrun.add(n)
            run = [n for n in batch if n not in unrun]
            if run:
                write_inputs(staging / ".grading" / "inputs", {f: fixtures[f] for n in run for f in PARTS[n].fixtures})
                n_jobs = jobs or max(1, min(len(run), usable_cpus()))
                said = run_parts(staging, run, timeout, n_jobs, account, spare)
                results.update({n: judge_part(n, staging, said[n], fixtures) for n in run})
    results = [results[n] for n in names]
    for r in results:                # a part whose file was not submitted says so in its own output
        absent = [f for f in PARTS[r["part"]].files if f in missing]
        if absent and r["status"] != "pass" and r["part"] not in unrun:
            r["message"] = f"{absent_files(absent, linked, opened.looked)} {r['message']}"
    elapsed = round(time.perf_counter() - t0, 2)
    tests = [{"name": f"{r['part']}: {PARTS[r['part']].functions}", "score": r["score"],
              "max_score": r["max_score"], "status": "passed" if r["status"] == "pass" else "failed",
              "output": describe(r) + (f"\n\nlast output:\n{r['log']}" if r["status"] in ("crash", "timeout")
                                       and r.get("log") else "")} for r in results]
    if hide_hints:
        full = "\n\n".join(f"{t['name']}\n{t['output']}" for t in tests if t["status"] == "failed")
        for t in tests:
            t["output"] = without_hint(t["output"])
        tests.append({"name": "hints: what each failing part's result matches (shown after the due date)",
                      "score": 0, "max_score": 0, "status": "passed", "visibility": "after_due_date",
                      "output": full or "every part passes"})
    totals = group_totals(results)
    from .provenance import provenance
    return {"score": sum(r["score"] for r in results), "execution_time": elapsed, "extra_data": provenance(ROOT),
            "output": "\n".join(notes + [format_total(t) for t in totals]),
            "stdout_visibility": "after_due_date" if hide_hints else "visible",
            "tests": tests, "parts": results, "groups": totals}


def absent_files(absent: list[str], linked: dict[str, str], looked: str) -> str:
    """Why a part ran the unfilled stub of these files: each is a symbolic link (never followed), or not there."""
    gone = [f for f in absent if f not in linked]
    said = [f"{f} is a symbolic link in the submission ({linked[f]}), which the grader does not follow; upload the "
            "file itself" for f in absent if f in linked]
    if gone:
        said.append(f"{', '.join(gone)} {'is' if len(gone) == 1 else 'are'} not in the submission ({looked})")
    if len(said) == 1 and gone:
        return f"{said[0]}, so this part ran the unfilled stub:"
    return ". ".join(said) + ". This part ran the unfilled stub:"


def grader_guard(cwd: Path | None = None) -> str | None:
    """None when this grader is the reference's own; else why not (e.g. run inside a student tree, found elsewhere)."""
    from .check import find_tree
    here = find_tree((cwd or Path.cwd()).resolve())
    if here is not None and here != ROOT and not (here / "assignments" / "grade.py").is_file():
        return (f"{here} is a student tree, which has no grader; this is the grader of {ROOT}, found through an "
                "installed minbert (pip uninstall minbert). Students check their work with  python -m "
                "assignments.check; instructors grade from the reference tree:  python -m assignments.grade "
                f"{here}")
    return None


def print_table(res: dict) -> None:
    labels = {format_total(t) for t in res["groups"]}
    print("\n".join(line for line in res["output"].splitlines() if line not in labels))
    print(f"{'part':<16}{'score':>7}  result")
    for r in res["parts"]:
        print(format_result(r))
        if r["status"] in ("crash", "timeout") and r.get("log", "").strip():
            print("    last output: " + r["log"].strip().splitlines()[-1][:200])
    for t in res["groups"]:
        print(format_total(t))
    total = sum(r["max_score"] for r in res["parts"])
    print(f"{'score':<16}{res['score']:>3}/{total:<3}  (results.json; graded in {res['execution_time']:.1f} s)")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m assignments.grade", description=__doc__.split("\n")[0])
    ap.add_argument("submission", nargs="?", help="the submitted tree, a folder of submitted files, or a zip of either")
    ap.add_argument("--out", help="where to write Gradescope's results.json (default: results.json)")
    ap.add_argument("--batch", metavar="DIR", help="grade every submission in DIR (each a .zip or a folder) into "
                    "--csv, each with the options below (assignments/batch.py)")
    ap.add_argument("--csv", help="with --batch: the CSV of grades, one row per submission (default: grades.csv), "
                    "outside DIR; each one's full results go beside it (grades/NAME.json); a rerun drops the rows it "
                    "graded from DIR whose entries are gone from it")
    ap.add_argument("--regrade", action="store_true",
                    help="with --batch: grade again the submissions already in the CSV whose entry is unchanged; "
                         "the CSV starts again when its grades were made with other options")
    ap.add_argument("--timeout", type=positive_float, default=DEFAULT_TIMEOUT, help=f"seconds allowed per part (default: {DEFAULT_TIMEOUT:g})")
    ap.add_argument("--jobs", type=positive_int, default=None, help="parts graded at once (default: the CPUs this "
                    "process may use, its affinity mask and cgroup quota, at most the parts)")
    ap.add_argument("--groups", nargs="+", choices=[*GROUPS, "all"], default=["core"],
                    help="the groups graded, each totalled on its own; the score is their sum (default: core, "
                         "part 1; all: every group of the profile)")
    ap.add_argument("--profile", choices=list(PROFILES), default=DEFAULT_PROFILE,
                    help=f"the profile of the tree handed out, whose groups can be graded (default: {DEFAULT_PROFILE})")
    ap.add_argument("--parts", nargs="+", choices=list(PARTS), metavar="PART",
                    help=f"grade only these parts: {', '.join(PARTS)}")
    ap.add_argument("--hide-hints", action="store_true",
                    help="leave the matched mistake out of each part's output; show it after the due date")
    seed = ap.add_mutually_exclusive_group()
    seed.add_argument("--seed", type=int, help="the grading seed the hidden inputs are drawn from (keep it from "
                      "students; default: --seed-file, else $MINBERT_GRADING_SEED, else a fresh random seed)")
    seed.add_argument("--seed-file", metavar="FILE", help="a file holding the grading seed (the Gradescope bundle's)")
    ap.add_argument("--as-user", default=STUDENT_USER, metavar="USER",
                    help="run as root, the submission's code runs as USER (default: auto, nobody; refused when USER "
                         "cannot run this Python and find torch; none: root; the Gradescope bundle's: student)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .batch import grade_options, run_batch, usage_error
    problem = grader_guard() or usage_error(args.submission, args.batch, out=args.out, csv_path=args.csv,
                                            regrade=args.regrade)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    groups = list(PROFILES[args.profile].groups) if "all" in args.groups else args.groups
    try:
        part_memory()                                                # a bad $MINBERT_PART_MEMORY: here, not in a part
        if args.seed_file:
            args.seed = read_seed(Path(args.seed_file).read_text(), args.seed_file)
            student_account(args.as_user, (Path(args.seed_file),))   # may that user read it? before any grading
    except OSError as e:
        print(f"error: {args.seed_file}: cannot read the grading seed ({e.strerror}); give the file that holds it "
              f"(the one the bundle was made with)", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.batch is not None:
        return run_batch(args.batch, args.csv, args.regrade, grade_options(vars(args), groups))
    if args.seed is None and not os.environ.get("MINBERT_GRADING_SEED", "").strip():
        args.seed = grading_seed(None)       # said, so that a disputed grade can be repeated on the same inputs
        print(f"grading seed {args.seed} (drawn for this submission; --seed {args.seed} grades it on the same inputs)",
              file=sys.stderr)
    try:
        res = grade(args.submission, args.timeout, args.parts, args.jobs, groups, args.hide_hints, args.profile,
                    args.seed, args.as_user)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print_table(res)
    out = write_text(args.out or "results.json",           # atomic: a kill or a full disk keeps the previous file
                     json.dumps({k: v for k, v in res.items() if k not in ("parts", "groups")}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    from tasks.core.errors import run_cli
    sys.exit(run_cli(main))
