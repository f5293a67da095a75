"""What a batch's grades were made with, kept beside its CSV (grades.csv -> grades.options.json) and compared on the
next run, so that a CSV never mixes grades made with other options.

The record holds grade()'s options that change a score or what a row says: the groups and parts, the profile, the
time limit per part, --hide-hints, a hash of the grading seed (never the seed itself), the reference's commit
(assignments/provenance.py) and a hash of the code it grades with (its minbert/, tasks/ and assignments/ files as they
are on disk: an uncommitted change to a check or to the reference changes it); not --jobs nor --as-user. A run with the options of the record grades only what is new
or changed; a run with other options is refused, naming what changed, unless --regrade (then the CSV starts again).
Beside them, not compared, "sources": the folder each row's entry was graded from, so that an entry of another
folder with a row's name is refused rather than put over that row (unless --regrade), and a row whose entry is gone
is dropped by its own folder's run alone (a late folder graded into the same CSV keeps the on-time folder's rows, and
the on-time folder's rerun keeps the late rows). "folders", the batch folders graded into the CSV, is what a record
older than its "sources" has instead: read for its one folder (every row's), and written again only while a row's
folder is not known (one of several), for the note that keeps such a row.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
from pathlib import Path

from tasks.core.evaluation import write_text

RECORDED = ("groups", "parts", "profile", "timeout", "hide_hints", "seed_sha256", "reference_commit", "code_sha256")
CODE_DIRS = ("minbert", "tasks", "assignments")
BESIDE = ("folders", "sources")   # recorded, never compared


def code_digest(root: Path) -> str:
    """A short sha256 of the grading code as it is on disk: every file under root's CODE_DIRS (caches left out), by
    path; the student tree's files are generated from these, and the checks and fixtures are among them."""
    h = hashlib.sha256()
    for path in sorted(p for d in CODE_DIRS for p in (root / d).rglob("*")
                       if p.is_file() and "__pycache__" not in p.parts):
        h.update(f"{path.relative_to(root).as_posix()}\0{path.stat().st_size}\0".encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def options_path(csv_path: Path) -> Path:
    """The record beside the CSV: grades.csv -> grades.options.json."""
    return csv_path.with_name(f"{csv_path.stem if csv_path.suffix else csv_path.name}.options.json")


def seed_digest(seed: int | None) -> str | None:
    """A short sha256 of the grading seed, which tells two seeds apart without saying either; None for no seed."""
    return None if seed is None else hashlib.sha256(f"minbert grading seed {seed}".encode()).hexdigest()[:16]


def record_of(grade_kwargs: dict) -> dict:
    """The record of the options grade() is called with (grade()'s defaults where one is not given)."""
    from .grade import ROOT, grade
    from .hidden import read_seed
    from .provenance import reference_commit
    given = {name: grade_kwargs.get(name, p.default) for name, p in inspect.signature(grade).parameters.items()
             if name != "submission"}
    seed = given["seed"]
    env = os.environ.get("MINBERT_GRADING_SEED", "").strip()
    if seed is None and env:
        seed = read_seed(env, "MINBERT_GRADING_SEED")        # what grade() will draw the inputs from
    return {"groups": sorted(given["groups"]), "parts": sorted(given["parts"]) if given["parts"] else None,
            "profile": given["profile"], "timeout": float(given["timeout"]), "hide_hints": bool(given["hide_hints"]),
            "seed_sha256": seed_digest(seed), "reference_commit": reference_commit(ROOT), "code_sha256": code_digest(ROOT)}


def read_record(path: Path) -> dict | None:
    """The record at path; None when there is none; ValueError when it cannot be read as one."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: cannot read the record of the options the grades were made with ({e}); "
                         "--regrade grades every submission again, or give another --csv") from None
    if not isinstance(data, dict) or not set(RECORDED) <= set(data) <= {*RECORDED, *BESIDE}:
        raise ValueError(f"{path}: not a record of a batch's options (its keys should be {', '.join(RECORDED)}); "
                         "--regrade grades every submission again, or give another --csv")
    return data


def write_record(path: Path, record: dict) -> None:
    """The record, atomically."""
    write_text(path, json.dumps(record, indent=2) + "\n")


def _said(key: str, value: object) -> str:
    """One recorded value in words."""
    if value is None:
        return "(none)"
    if key == "hide_hints":
        return "on" if value else "off"
    if isinstance(value, list):
        return " ".join(value) or "none"
    if isinstance(value, float):
        return f"{value:g} s"
    return str(value)


def changes(old: dict, new: dict) -> list[str]:
    """What differs between two records, in words (the seed's hash is never shown: 'the grading seed')."""
    said = []
    for key in RECORDED:
        if old.get(key) == new.get(key):
            continue
        if key == "seed_sha256":
            said.append("the grading seed" if old.get(key) and new.get(key) else
                        f"the grading seed ({'none' if not old.get(key) else 'one'} before, "
                        f"{'none' if not new.get(key) else 'one'} now)")
        else:
            name = {"hide_hints": "--hide-hints", "reference_commit": "the reference commit",
                    "code_sha256": "the grading code (its files' hash)"}.get(key, f"--{key}")
            said.append(f"{name} {_said(key, old.get(key))} -> {_said(key, new.get(key))}")
    return said


def check_record(csv_path: Path, has_rows: bool, record: dict, regrade: bool) -> bool:
    """True: add to the CSV's grades; False: start it again (regrade); else ValueError, naming what changed."""
    if not has_rows:
        return True
    path = options_path(csv_path)
    try:
        old = read_record(path)
    except ValueError:
        if regrade:
            return False
        raise
    if old is not None and {k: old[k] for k in RECORDED} == {k: record[k] for k in RECORDED}:
        return True
    if regrade:
        return False
    why = (f"no record of the options they were made with ({path.name} is missing)" if old is None
           else f"they were made with other options: {'; '.join(changes(old, record))}")
    raise ValueError(f"{csv_path}: not adding to its grades, {why}; rerun with the options they were made with "
                     f"({path.name} records them, the seed as a hash), --regrade to grade every submission again "
                     "with these, or give another --csv")


def row_sources(record: dict, names: object) -> dict[str, str | None]:
    """The folder each named row was graded from: as the record says, else its one folder (a record older than its
    "sources"), else None (not known)."""
    recorded, folders = record.get("sources") or {}, record.get("folders") or []
    only = folders[0] if len(folders) == 1 else None
    return {name: recorded.get(name, only) for name in names}


def other_folders(taken: dict[str, str | None], shown: int) -> str:
    """Rows and the other folders they came from, in words: 'alice (graded from /x/batch), ...'."""
    said = [f"{name} (graded from {folder or 'a folder the record does not name'})"
            for name, folder in list(taken.items())[:shown]]
    return ", ".join(said) + (f", ... ({len(taken) - shown} more)" if len(taken) > shown else "")


def refuse_other_folders(csv_path: Path, folder: str, taken: dict[str, str | None], shown: int) -> ValueError:
    """The one-line refusal to put folder's entries over the rows of the same names another folder's gave."""
    return ValueError(f"{csv_path}: not replacing grades from another folder with {folder}'s entries of the same name: "
                      f"{other_folders(taken, shown)}; --regrade grades {folder}'s entries over them, or give "
                      "another --csv for this folder")
