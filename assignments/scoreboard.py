"""The leaderboard without Gradescope: score a folder of uploads and write the ranked table as CSV and Markdown.

    python -m assignments.scoreboard SUBMISSIONS_DIR --gold GOLD_DIR --salt-file SALT [--data-dir data]
        [--settings leaderboard.zip | --profile full] [--private-fraction 0.5] --csv board.csv --md board.md

Each entry of SUBMISSIONS_DIR is one upload, named by the entry: a zip (tasks.submit's, or any zip of the board's
files) or a folder holding the files (flat, under predictions/, or a folder or two down); any other file is listed as
not valid, saying so. Two entries of one name (good.zip and good/) are named in full. Uploads are checked and
scored as the Gradescope autograder does (assignments.leaderboard), on the same board and salted split: --settings
reads the bundle's profile and private fraction (the bundle's zip or its settings.json; --profile and
--private-fraction, given beside it, must agree with it; the salt and gold must be those whose sha256 it records, and
the zip's own), or they are given (part1's board ranks SST alone; the
default, SST, Quora and STS). The table ranks
the valid ones by the private part's overall score (the final standing) and shows the public part beside it; an
invalid upload is listed, unranked, with its first problems. With --data-dir the dev files are required and checked
too, as on Gradescope; without it only the test files are. One upload that cannot be read never stops the board.
A Gradescope export (SUBMISSIONS_DIR holding submission_metadata.yml) adds each row's students' names, emails and
ids (assignments/export.py), and a warning names the entries of a student (sid or email) in two: each entry is
ranked as it is. A CSV cell a spreadsheet would read as a formula gets a quote before it; the Markdown escapes links,
HTML, code and emphasis. Both files are written atomically. Exit status 2 on an unusable gold, salt or settings.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from tasks.core.evaluation import write_text

from .boards import BOARDS, NAMES, Board
from .bundle_check import check_bundle
from .export import COLUMNS as STUDENTS
from .export import METADATA, SEPARATOR, cells_for, safe_cell, students
from .leaderboard import Settings, chosen_settings, read_settings
from .standing import (
    GoldError,
    GoldSplit,
    Standing,
    load_dev,
    load_gold,
    read_salt,
    score_upload,
    split_gold,
)

PROBLEMS_SHOWN = 3
SKIPPED = ("__MACOSX", METADATA)


@dataclass
class Entry:
    """One upload's row: its name, its standing, its rank among the valid uploads (None when invalid)."""

    name: str
    standing: Standing
    rank: int | None = None
    students: dict[str, str] | None = None      # a Gradescope export's names, emails and sids (export.COLUMNS)


def entries(folder: str | Path) -> list[Path]:
    """The uploads of a folder, by name: every entry but hidden ones, __MACOSX and an export's metadata (a file that
    is not a zip gets an invalid row saying so)."""
    folder = Path(folder)
    return sorted(p for p in folder.iterdir() if not p.name.startswith(".") and p.name not in SKIPPED)


def row_names(paths: list[Path]) -> list[str]:
    """Each entry's row name: a zip's without .zip (in any case), another's as it is; the entry's own name (a
    folder's with a /) where two entries would share one, as good.zip and good/."""
    short = [p.name[:-4] if p.is_file() and p.suffix.lower() == ".zip" else p.name for p in paths]
    return [name if short.count(name) == 1 else p.name + ("/" if p.is_dir() else "") for name, p in zip(short, paths)]


def score_entry(path: Path, tests: GoldSplit, dev: dict | None, name: str | None = None) -> Entry:
    """One upload's entry (named `name`, else by row_names); an error while reading it makes it invalid with the
    error, never stops the board."""
    name = name or row_names([path])[0]
    try:
        return Entry(name, score_upload(path, tests, dev))
    except Exception as e:                       # noqa: BLE001 -- recorded in the row, the board goes on
        return Entry(name, Standing(valid=False, problems=[f"{path.name}: cannot be scored: {type(e).__name__}: {e}"]))


def rank(rows: list[Entry]) -> list[Entry]:
    """Valid entries by private overall, best first (equal scores share a rank), then the invalid ones, by name."""
    valid = sorted((e for e in rows if e.standing.valid), key=lambda e: (-e.standing.private.overall, e.name))
    for i, entry in enumerate(valid):
        same = i > 0 and entry.standing.private.overall == valid[i - 1].standing.private.overall
        entry.rank = valid[i - 1].rank if same else i + 1
    return valid + sorted((e for e in rows if not e.standing.valid), key=lambda e: e.name)


def columns(board: Board, with_students: bool = False) -> tuple[str, ...]:
    """The table's columns: rank, name (then a Gradescope export's students), the public then the private overall and
    task figures, valid, problems."""
    names = ("overall", *(NAMES[t] for t in board.tasks))
    figures = [f"{part} {name}" for part in ("public", "private") for name in names]
    return ("rank", "submission", *(STUDENTS if with_students else ()), *figures, "valid", "problems")


def cells(entry: Entry, board: Board, with_students: bool = False) -> list[str]:
    """The row of columns(board, with_students) for one entry (figures to 4 places; blank where invalid)."""
    s = entry.standing
    keys = ("overall", *board.tasks)
    figures = []
    for part in (s.public, s.private):
        figures += [f"{part.value(k):.4f}" for k in keys] if part else [""] * len(keys)
    problems = "; ".join(s.problems[:PROBLEMS_SHOWN])
    if len(s.problems) > PROBLEMS_SHOWN:
        problems += f"; ... ({len(s.problems) - PROBLEMS_SHOWN} more)"
    who = [(entry.students or {}).get(c, "") for c in STUDENTS] if with_students else []
    return [str(entry.rank or ""), entry.name, *who, *figures, "yes" if s.valid else "no", problems]


def from_export(rows: list[Entry]) -> bool:
    """Whether the rows come from a Gradescope export (their students are known)."""
    return any(e.students is not None for e in rows)


def board_csv(rows: list[Entry], board: Board) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    who = from_export(rows)
    writer.writerow(columns(board, who))
    writer.writerows([safe_cell(c) for c in cells(e, board, who)] for e in rows)
    return out.getvalue()


MARKDOWN = re.compile(r"[\\|\[\]<>`*~]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")


def _md(text: str) -> str:
    """A cell as Markdown text, on one line: a backslash before \\ | [ ] < > ` * ~ and an underscore at a word's edge
    (no link, HTML, code, emphasis or strike-through from a name; submission_201 stays as it is)."""
    return MARKDOWN.sub(lambda m: "\\" + m.group(0), " ".join(text.splitlines()))


def board_md(rows: list[Entry], board: Board) -> str:
    """The ranked table of the valid uploads, then the invalid ones with their first problems."""
    who = from_export(rows)
    head = columns(board, who)[:-1]
    lines = ["# Leaderboard: the final standing (ranked by the private part's overall score)", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_md(c) for c in cells(e, board, who)[:len(head)]) + " |"
              for e in rows if e.standing.valid]
    invalid = [e for e in rows if not e.standing.valid]
    if invalid:
        lines += ["", f"## Not valid ({len(invalid)}): no score", ""]
        named = {e.name: f" ({_md(e.students['names'])})" if who and e.students else "" for e in invalid}
        lines += [f"- **{_md(e.name)}**{named[e.name]}: {_md(cells(e, board)[-1])}" for e in invalid]
    return "\n".join(lines) + "\n"


def scoreboard(folder: str | Path, tests: GoldSplit, dev: dict | None = None, progress: bool = True) -> list[Entry]:
    """Score every upload of folder and rank them; an export's rows carry their students (export.students)."""
    paths, by_name = entries(folder), students(folder)
    rows = [score_entry(p, tests, dev, name) for p, name in
            tqdm(list(zip(paths, row_names(paths), strict=True)), desc="scoring", unit="upload", disable=not progress)]
    for path, entry in zip(paths, rows, strict=True):
        entry.students = None if by_name is None else cells_for(by_name, path.name)
    return rank(rows)


def shared_students(rows: list[Entry]) -> list[str]:
    """Warnings for each student (an export's sid, or email in any case) in more than one entry, naming the entries,
    then one saying the policy: every entry is ranked as it is; none when no student is in two entries."""
    found: dict[tuple[str, str], dict[str, str]] = {}             # (sid|email, value) -> entry -> the name given
    for entry in rows:
        who = entry.students or {}
        columns_of = [who.get(c, "").split(SEPARATOR) for c in ("names", "sids", "emails")]
        if len({len(c) for c in columns_of}) != 1:                # a separator inside a name: not split reliably
            continue
        for name, sid, email in zip(*columns_of, strict=True):
            for key in (("sid", sid.strip()), ("email", email.strip().lower())):
                if key[1]:
                    found.setdefault(key, {}).setdefault(entry.name, name.strip())
    said = [f"{kind} {value} ({next(iter(named.values()))}) is in {len(named)} entries: {', '.join(sorted(named))}"
            for (kind, value), named in sorted(found.items(), key=lambda kv: (sorted(kv[1]), kv[0][0] != "sid"))
            if len(named) > 1]
    if said:
        said.append("each entry is ranked as it is, one row each: on Gradescope only a student's active submission "
                    "counts; drop the others from the folder to rank that one alone")
    return said


def board_settings(path: str | None, profile: str | None, private_fraction: float | None) -> Settings:
    """The bundle's settings (or the defaults), with the values given; GoldError when a given one differs from the
    bundle's: a board split or scored otherwise than the leaderboard would rank uploads otherwise."""
    if path is not None:
        bundled = read_settings(path)
        for flag, given, theirs in (("--profile", profile, bundled.profile),
                                    ("--private-fraction", private_fraction, bundled.private_fraction)):
            if given is not None and given != theirs:
                shown = f"{given:g} differs from {theirs:g}" if isinstance(given, float) else \
                    f"{given} differs from {theirs}"
                raise GoldError(f"{flag} {shown} in {path}, the leaderboard's: leave {flag} out to use the bundle's")
    return chosen_settings(path, profile=profile, private_fraction=private_fraction)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m assignments.scoreboard", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("submissions", help="a folder with one zip or folder per upload, named by the entry")
    parser.add_argument("--gold", required=True, help="the labelled test files (as for assignments.leaderboard)")
    parser.add_argument("--salt-file", required=True, help="the salt that splits the test set (Gradescope's bundle's)")
    parser.add_argument("--data-dir", help="the public data folder: require and check the dev files too, and check "
                        "that its test files carry the gold's ids")
    parser.add_argument("--settings", help="the leaderboard bundle's zip (or its leaderboard/settings.json): its "
                        "profile and private fraction")
    parser.add_argument("--profile", choices=list(BOARDS), help="the profile of the tree handed out, as in the bundle: "
                        f"part1's board ranks SST alone (default: --settings', else {Settings.profile}); refused "
                        "when --settings differs")
    parser.add_argument("--private-fraction", type=float, help="the private share of test ids, as in the bundle "
                        f"(default: --settings', else {Settings.private_fraction:g}); refused when --settings "
                        "differs")
    parser.add_argument("--csv", required=True, help="the ranked table as CSV")
    parser.add_argument("--md", required=True, help="the ranked table as Markdown")
    args = parser.parse_args(argv)
    try:
        if not Path(args.submissions).is_dir():
            raise GoldError(f"{args.submissions}: not a folder of uploads")
        settings = board_settings(args.settings, args.profile, args.private_fraction)
        board = settings.board
        if args.settings:
            note = check_bundle(args.settings, args.salt_file, args.gold, board)
            if note:
                print(f"note: {note}", file=sys.stderr)
        else:
            print(f"note: no --settings: the board is {settings.profile}'s with private fraction "
                  f"{settings.private_fraction:g}; give the leaderboard bundle to be sure they are the leaderboard's",
                  file=sys.stderr)
        tests = split_gold(load_gold(args.gold, args.data_dir, board), read_salt(args.salt_file),
                           settings.private_fraction, board)
        dev = load_dev(args.data_dir, board) if args.data_dir else None
    except GoldError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rows = scoreboard(args.submissions, tests, dev)
    for warning in shared_students(rows):
        print(f"warning: {warning}", file=sys.stderr)
    write_text(args.csv, board_csv(rows, board))
    write_text(args.md, board_md(rows, board))
    n_valid = sum(e.standing.valid for e in rows)
    print(f"scored {len(rows)} uploads ({n_valid} valid, {len(rows) - n_valid} not): wrote {args.csv} and {args.md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
