"""Grade a folder of submissions into one CSV: python -m assignments.grade --batch DIR --csv grades.csv

Each entry of DIR is one submission, a .zip file or a folder, as students upload them (the tree or the bare files
up to two folders down; hidden entries and __MACOSX are ignored). A zip is unpacked into a temporary folder, and
only the files the grader takes (those students fill in, found by name) are written: a member path that leaves the
folder, a symlink, more than MAX_MEMBERS members or more than MAX_UNPACKED bytes of graded files, or a corrupt zip
(assignments/entries.py), makes that row a "bad upload" with the reason. Each submission is graded by grade.grade(); one row per submission:
submission, state (graded, error, bad upload), score, max, a column per part (its points, or "timeout"/"crash" when
the part ran to no verdict), the entry's content hash and short notes; a Gradescope export (DIR holding
submission_metadata.yml, assignments/export.py) adds the students' names, emails and ids after the submission. The CSV
is rewritten atomically after each submission, sorted by name, and each submission's full results go beside it
(grades.csv -> grades/NAME.json), with the options the grades were made with (grades.options.json,
assignments/batch_options.py). A second run with those options skips the rows already graded whose entry is unchanged
(same hash); with other options it is refused, unless --regrade, which grades every one again; the grader's own
errors are always retried. An entry whose name has a row graded from another folder (a late upload graded into the
same CSV) is refused, naming both folders, unless --regrade (the record keeps each row's folder). The rows graded
from DIR whose entries are no longer in it (a resubmission under a new name, an upload taken out) are dropped, said
on the console with their names; their NAME.json stay. Another folder's rows (and those of a record older than its
sources, of two folders) are kept, with a note naming the folders. The summary's bad uploads count those skipped as
unchanged too. The CSV (with its .options.json and results folder) may not lie inside DIR, where a later
run would take them for submissions; nor is an entry holding a Gradescope export (its submission_metadata.yml at its
top or one folder down) graded as one submission: it is a bad upload that names the folder to give --batch. A graded
file found twice at the same depth with other bytes (draft/ and final/) is not guessed at: its parts score 0, naming
both (assignments/staging.py).
"""

from __future__ import annotations

import csv
import inspect
import io
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from tasks.core.evaluation import write_text

from .batch_options import (
    check_record,
    options_path,
    other_folders,
    read_record,
    record_of,
    refuse_other_folders,
    row_sources,
    write_record,
)
from .entries import BadUpload, check_folder, content_hash, one_line, safe_extract, submissions
from .export import COLUMNS as STUDENTS
from .export import cells_for, read_cell, safe_cell, students
from .grade import grade

FIXED = ("submission", "state", "score", "max")      # then a column per part, then TAIL
TAIL = ("hash", "notes")
GRADED, ERROR, BAD_UPLOAD = "graded", "error", "bad upload"
SKIPPABLE = (GRADED, BAD_UPLOAD)  # a row in one of these states, with an unchanged hash, is not graded again
SHOWN = 10                        # the names of the dropped rows said on the console


def notes_of(parts: list[dict]) -> str:
    """The parts that did not pass, by state, and the first one's message: 'fail: layer; timeout: attention | ...'."""
    by_state: dict[str, list[str]] = {}
    for r in parts:
        if r["status"] != "pass":
            by_state.setdefault(r["status"], []).append(r["part"])
    if not by_state:
        return ""
    first = next(r for r in parts if r["status"] != "pass")
    states = "; ".join(f"{s}: {', '.join(names)}" for s, names in by_state.items())
    return f"{states} | {one_line(first['part'] + ': ' + str(first.get('message', '')))}"


def cell(r: dict) -> object:
    """A part's CSV cell: its points, or its state when it ran to no verdict (timeout, crash)."""
    return r["status"] if r["status"] in ("timeout", "crash") else r["score"]


def row_of(name: str, digest: str, res: dict) -> dict:
    """The CSV row of one graded submission, from grade()'s results."""
    parts = res["parts"]
    return {"submission": name, "state": GRADED, "score": res["score"],
            "max": sum(r["max_score"] for r in parts), **{r["part"]: cell(r) for r in parts},
            "hash": digest, "notes": notes_of(parts)}


def failed_row(name: str, digest: str, state: str, why: str) -> dict:
    """The CSV row of a submission that was not graded (state error or bad upload): no score, the reason in notes."""
    return {"submission": name, "state": state, "score": "", "max": "", "hash": digest, "notes": one_line(why)}


def _value(text: str) -> object:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def fixed(with_students: bool) -> tuple[str, ...]:
    """The first columns: FIXED, with the students' (an export's) after the submission."""
    return (FIXED[0], *STUDENTS, *FIXED[1:]) if with_students else FIXED


def read_csv(path: Path) -> tuple[list[str], dict[str, dict], bool]:
    """(part columns, rows by submission, whether it has the students' columns) of a CSV this module wrote."""
    if not path.exists():
        return [], {}, False
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames or []
        head = fixed(tuple(header[1: 1 + len(STUDENTS)]) == STUDENTS)
        if tuple(header[: len(head)]) != head or tuple(header[-len(TAIL):]) != TAIL:
            raise ValueError(f"{path}: not a grades CSV written by --batch (its columns are {', '.join(header)}); "
                             "give another --csv")
        parts = header[len(head): -len(TAIL)]
        rows = {read_cell(r["submission"]): {k: _value(read_cell(v)) if k in ("score", "max", *parts)
                                             else read_cell(v) for k, v in r.items()} for r in reader}
    return parts, rows, head != FIXED


def write_csv(path: Path, parts: list[str], rows: dict[str, dict], with_students: bool = False) -> None:
    """The CSV, sorted by submission, atomically (tasks.core.evaluation.write_text); a text a spreadsheet would read
    as a formula gets a quote before it (export.safe_cell; read_csv takes it off)."""
    text = io.StringIO(newline="")
    w = csv.DictWriter(text, fieldnames=[*fixed(with_students), *parts, *TAIL], restval="")
    w.writeheader()
    w.writerows({k: safe_cell(v) for k, v in rows[name].items()} for name in sorted(rows))
    write_text(path, text.getvalue())


def results_dir(csv_path: Path) -> Path:
    """The folder of the per-submission results beside the CSV: grades.csv -> grades/."""
    return csv_path.with_suffix("") if csv_path.suffix else csv_path.with_name(csv_path.name + "-results")


def grade_entry(entry: Path, grade_fn: Callable[..., dict], grade_kwargs: dict) -> dict:
    """grade_fn's results for one entry: a folder as it is, a zip unpacked into a temporary folder (BadUpload when
    it is neither, or is refused)."""
    if entry.is_dir():
        check_folder(entry)
        return grade_fn(entry, **grade_kwargs)
    if entry.suffix.lower() != ".zip":
        raise BadUpload("neither a .zip file nor a folder")
    with tempfile.TemporaryDirectory(prefix="minbert-batch-") as tmp:
        upload = Path(tmp) / "upload"
        upload.mkdir()
        safe_extract(entry, upload)
        return grade_fn(upload, **grade_kwargs)


def grade_batch(folder: str | Path, csv_path: str | Path, *, regrade: bool = False,
                grade_fn: Callable[..., dict] | None = None, **grade_kwargs: object) -> list[dict]:
    """Grade every submission in folder with grade_fn (grade.grade) into csv_path; returns the CSV's rows, sorted.

    One submission's failure is its own row (error, bad upload); the CSV is rewritten after each submission. Rows
    already graded whose entry is unchanged are skipped unless regrade; a row graded from another folder with the name
    of an entry of this one is refused (ValueError) unless regrade, which grades the entry over it; the rows graded from
    folder whose entries are gone are dropped (said on stderr; their NAME.json stay), another folder's (or an unknown
    one's) kept with a note. grade_kwargs go to each grade_fn call; a CSV whose grades were made with other ones is
    refused (ValueError) unless regrade, which starts it again.
    """
    from tqdm.auto import tqdm
    folder, csv_path, grade_fn = Path(folder), Path(csv_path), grade_fn or grade
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such folder of submissions")
    out_dir = results_dir(csv_path)
    parts, rows, with_students = read_csv(csv_path)
    record = record_of(grade_kwargs)
    if not check_record(csv_path, bool(rows), record, regrade):
        parts, rows = [], {}
        write_csv(csv_path, parts, rows, with_students)     # the grades made with other options go before any new one
    here = str(folder.resolve())
    old = (read_record(options_path(csv_path)) or {}) if rows else {}
    entries = submissions(folder, exclude=(csv_path, out_dir, options_path(csv_path)))
    names = {e.name for e in entries}
    sources = row_sources(old, rows)
    taken = {name: sources[name] for name in sorted(names & set(rows)) if sources[name] != here}
    if taken and not regrade:                      # never put one folder's upload over another's grade unasked
        raise refuse_other_folders(csv_path, here, taken, SHOWN)
    if taken:
        print(f"note: --regrade: {other_folders(taken, SHOWN)} graded again from {here}", file=sys.stderr)
    gone = sorted(set(rows) - names)
    dropped = [name for name in gone if sources[name] == here]    # this folder's: a resubmission, an upload taken out
    kept = [name for name in gone if sources[name] != here]       # another folder's (or not known): left to that one
    unknown = [name for name in kept if sources[name] is None]    # a record older than "sources" names two folders
    legacy = old.get("folders") if unknown else None              # kept only while a row's folder is one of these
    known = {name: src for name, src in sources.items() if src is not None and name not in dropped}
    write_record(options_path(csv_path), {**record, **({"folders": legacy} if legacy else {}),
                                          "sources": dict(sorted({**known, **dict.fromkeys(names, here)}.items()))})
    by_name = students(folder)                     # a Gradescope export's students, by submission; else None
    with_students = with_students or by_name is not None
    for name, row in rows.items() if by_name is not None else ():
        row.update(cells_for(by_name, name))
    out_dir.mkdir(parents=True, exist_ok=True)
    if kept:                                       # they are their own folder's to drop, when it is graded
        whose = sorted({sources[name] for name in kept if sources[name] is not None}
                       | {f for f in legacy or [] if f != here}) or ["folders the CSV's record does not name"]
        print(f"note: {len(kept)} row{'s' if len(kept) > 1 else ''} of entries not in {folder} kept: the CSV also "
              f"holds grades from {', '.join(whose)}", file=sys.stderr)
    if dropped:
        for name in dropped:
            del rows[name]
        write_csv(csv_path, parts, rows, with_students)
        more = f", ... ({len(dropped) - SHOWN} more)" if len(dropped) > SHOWN else ""
        print(f"{len(dropped)} row{'s' if len(dropped) > 1 else ''} of entries no longer in {folder} dropped: "
              f"{', '.join(dropped[:SHOWN])}{more} (their results stay in {out_dir}/)", file=sys.stderr)
    counts = dict.fromkeys(("graded", "skipped", "errors", "bad uploads", "bad uploads skipped"), 0)
    t0 = time.perf_counter()
    with tqdm(total=len(entries), unit="submission", desc="grading", file=sys.stderr, dynamic_ncols=True) as bar:
        for entry in entries:
            name = entry.name
            bar.set_postfix_str(name)
            done = visit(entry, rows.get(name), regrade, grade_fn, grade_kwargs)
            if done is None:
                counts["skipped"] += 1
                if rows[name]["state"] == BAD_UPLOAD:          # still one: counted with the new ones
                    counts["bad uploads"] += 1
                    counts["bad uploads skipped"] += 1
                bar.update(1)
                continue
            row, full = done
            counts[{GRADED: "graded", ERROR: "errors", BAD_UPLOAD: "bad uploads"}[row["state"]]] += 1
            if row["state"] != GRADED:
                bar.write(f"{name}: {row['state']}: {row['notes']}")
            parts += [p for p in row if p not in (*FIXED, *TAIL, *parts)]
            write_text(out_dir / f"{name}.json", json.dumps(full, indent=2, default=str) + "\n")
            if with_students:                      # an export's: from its metadata, else as they were
                old = rows.get(name, {})
                row = {**(cells_for(by_name, name) if by_name is not None else {k: old.get(k, "") for k in STUDENTS}),
                       **row}
            rows[name] = row
            write_csv(csv_path, parts, rows, with_students)
            bar.update(1)
    wall = time.perf_counter() - t0
    if not csv_path.exists() or by_name is not None:
        write_csv(csv_path, parts, rows, with_students)    # an export's: the students of the rows left as they were
    unchanged = f" ({counts['bad uploads skipped']} unchanged, skipped)" if counts["bad uploads skipped"] else ""
    print(f"graded {counts['graded']}, skipped {counts['skipped']}, errors {counts['errors']}, bad uploads "
          f"{counts['bad uploads']}{unchanged} in {wall:.1f} s; wrote {csv_path} and {out_dir}/")
    return [rows[name] for name in sorted(rows)]


def visit(entry: Path, old: dict | None, regrade: bool, grade_fn: Callable[..., dict],
          grade_kwargs: dict) -> tuple[dict, dict] | None:
    """(the CSV row, the full results) of one entry, or None when its row stands (graded, entry unchanged)."""
    try:
        digest = content_hash(entry)
    except OSError as e:
        row = failed_row(entry.name, "", ERROR, f"cannot read it: {one_line(e)}")
        return row, {**row}
    if not regrade and old is not None and old["state"] in SKIPPABLE and old["hash"] == digest:
        return None
    return grade_row(entry, digest, grade_fn, grade_kwargs)


def grade_row(entry: Path, digest: str, grade_fn: Callable[..., dict], grade_kwargs: dict) -> tuple[dict, dict]:
    """(the CSV row, the full results written as NAME.json) of one entry; never raises but for Ctrl-C."""
    name = entry.name
    try:
        res = grade_entry(entry, grade_fn, grade_kwargs)
        return row_of(name, digest, res), {"submission": name, "hash": digest, **res}
    except BadUpload as e:
        row = failed_row(name, digest, BAD_UPLOAD, str(e))
        return row, {**row, "notes": str(e)}
    except Exception as e:  # noqa: BLE001 -- the grader's own failure: this row only; retried by the next run
        row = failed_row(name, digest, ERROR, one_line(e))
        return row, {**row, "traceback": traceback.format_exc()}


# ---------------------------------------------------------------- the command line (grade.main dispatches here)

def usage_error(submission: str | None, batch: str | None, *, out: str | None = None, csv_path: str | None = None,
                regrade: bool = False) -> str | None:
    """Why grade's arguments (a submission or --batch DIR, and --out, --csv, --regrade) do not go together, or None."""
    if batch is None:
        if submission is None:
            return "give the submission to grade, or --batch DIR to grade every submission in DIR"
        if csv_path is not None or regrade:
            return "--csv and --regrade go with --batch DIR"
        return None
    if submission is not None:
        return f"give either a submission ({submission}) or --batch DIR, not both"
    if out is not None:
        return "--out is for one submission; with --batch each one's results go beside the CSV (grades/NAME.json)"
    if not Path(batch).is_dir():
        return f"--batch {batch}: " + ("a file, not a folder of submissions" if Path(batch).exists()
                                      else "no such folder")
    csv_file = Path(csv_path or "grades.csv")
    if csv_file.is_dir():
        return f"--csv {csv_file}: a folder; give the CSV file to write"
    if csv_file.resolve().is_relative_to(Path(batch).resolve()):
        return (f"--csv {csv_file}: inside --batch {batch}, where a later run would take it (and "
                f"{options_path(csv_file).name}, {results_dir(csv_file).name}/) for submissions; write it outside "
                f"{batch}")
    return None


def grade_options(flags: dict[str, object], groups: list[str]) -> dict:
    """grade()'s keyword arguments from the parsed flags (vars(args)): every one grade() accepts, groups expanded."""
    accepted = [p for p in inspect.signature(grade).parameters if p != "submission"]
    return {**{p: flags[p] for p in accepted if p in flags}, "groups": groups}


def run_batch(folder: str, csv_path: str | None, regrade: bool, options: dict) -> int:
    """grade --batch: grade the folder into the CSV with grade(**options); 0, 1 when the grader itself failed on a
    submission, 2 when the options or the CSV are refused."""
    from .checks import PARTS
    from .profiles import DEFAULT_PROFILE, PROFILES
    profile = str(options.get("profile", DEFAULT_PROFILE))
    own = PROFILES[profile].groups          # grade() would refuse each submission alike: say it once, up front
    unknown = ([g for g in options.get("groups", ()) if g not in own]
               + [p for p in options.get("parts") or () if PARTS[p].group not in own])
    if unknown:
        print(f"error: not in the {profile} profile: {', '.join(unknown)}; its groups are {', '.join(own)}",
              file=sys.stderr)
        return 2
    if "as_user" in options:                 # a user who cannot run this Python: refused once, not every submission
        from .untrusted import student_account
        try:
            student_account(options["as_user"])
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    if "seed" in options and options["seed"] is None and not os.environ.get("MINBERT_GRADING_SEED", "").strip():
        from .grade import grading_seed
        options = {**options, "seed": grading_seed(None)}   # one seed for the batch: every submission, the same inputs
        print(f"grading seed {options['seed']} (drawn for this batch; --seed {options['seed']} grades on the same "
              "inputs)", file=sys.stderr)
    try:
        rows = grade_batch(folder, csv_path or "grades.csv", regrade=regrade, **options)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 1 if any(r["state"] == ERROR for r in rows) else 0
