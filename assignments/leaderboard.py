"""The leaderboard's Gradescope autograder: check an upload of prediction files, score it, write results.json.

    python -m assignments.leaderboard SUBMISSION --gold GOLD_DIR --salt-file SALT [--data-dir data]
        [--metadata submission_metadata.json] [--daily-limit N] [--private-fraction 0.5] [--points 1]
        [--profile full] [--settings settings.json] --out results.json

SUBMISSION is a folder (Gradescope's /autograder/submission) or a zip holding the files of the profile's board
(assignments/boards.py): the six files {sst,para,sts}-{dev,test}-output.csv (default-project, full), or the two files
sst-{dev,test}-output.csv (part1); flat, under predictions/ (python -m tasks.submit's zip) or a folder or two down.
Every problem is listed with its file and line; an invalid upload scores 0 and gets no leaderboard entry. A valid
one earns --points and its figures: each task's (SST accuracy, Quora accuracy, STS Pearson r) and the overall score
on the dev set (public labels, for information) and on the two parts of the test set, split by the salt
(--private-fraction of the ids private). The leaderboard shows the public part, and results.json holds no private
figure (so students also see their total score: Gradescope hides it while any test is hidden), except for an upload
made at or before the due date (the metadata's late_due_date if set, else its due_date) and graded at or after it:
a "Regrade all" after the deadline posts the final standing. The metadata carries no student's own due date, so an
upload made after the due date (an extension, or late) is graded as one made before it: the public part, the daily
limit; the final standing for everyone is the staff's python -m assignments.scoreboard, which shows both parts.
--daily-limit N grades N uploads in any 24 hours before the upload's created_at (0: no limit); an upload past the
limit keeps the latest previous upload's result, with a message, unless that result records another answer key (the
gold labels and split it was scored against, results.json's extra_data): then the upload is graded. Exit status 2 on
an unusable gold, salt or setting.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
import zipfile
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timedelta, timezone
from pathlib import Path

from tasks.core.errors import nonnegative_float, nonnegative_int
from tasks.core.evaluation import write_text

from .boards import BOARDS, Board
from .bundle_check import FINGERPRINTS, SETTINGS_MEMBER, check_bundle
from .profiles import DEFAULT_PROFILE
from .provenance import provenance
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

ROOT = Path(__file__).resolve().parents[1]
DAY = timedelta(hours=24)
UTC = timezone.utc                 # datetime.UTC is Python 3.11's; pyproject.toml promises 3.10
MAX_SHOWN = 40                     # problems listed in the top-level output; the upload test lists them all


@dataclass(frozen=True)
class Settings:
    """The instructor's choices: daily limit (0: none), private share, points, profile (its board: the tasks ranked)."""

    daily_limit: int = 0
    private_fraction: float = 0.5
    points: float = 1.0
    profile: str = DEFAULT_PROFILE

    def __post_init__(self) -> None:
        if not isinstance(self.daily_limit, int) or isinstance(self.daily_limit, bool) or self.daily_limit < 0:
            raise GoldError(f"daily_limit must be an integer 0 or more (0: no limit), not {self.daily_limit!r}")
        if not isinstance(self.points, (int, float)) or isinstance(self.points, bool) or not 0 <= self.points < 1e9:
            raise GoldError(f"points must be a number 0 or more, not {self.points!r}")
        if not isinstance(self.private_fraction, (int, float)) or not 0 < self.private_fraction < 1:
            raise GoldError(f"private_fraction must lie strictly between 0 and 1, not {self.private_fraction!r}")
        if not isinstance(self.profile, str) or self.profile not in BOARDS:
            raise GoldError(f"profile must be one of {', '.join(BOARDS)}, not {self.profile!r}")

    @property
    def board(self) -> Board:
        """The profile's leaderboard: the tasks it ranks."""
        return BOARDS[self.profile]


def read_settings(path: str | Path) -> Settings:
    """Settings from a JSON object of any of daily_limit, private_fraction, points, profile, or from a bundle's zip."""
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as z:
                data = json.loads(z.read(SETTINGS_MEMBER))
        else:
            data = json.loads(Path(path).read_text())
    except KeyError:
        raise GoldError(f"{path}: a zip without {SETTINGS_MEMBER}, so not a leaderboard bundle") from None
    except OSError as e:
        raise GoldError(f"{path}: cannot read the settings ({e.strerror}): give the leaderboard bundle's zip, or "
                        f"the {SETTINGS_MEMBER} it holds") from None
    except (ValueError, zipfile.BadZipFile) as e:
        raise GoldError(f"{path}: cannot read the settings as JSON ({e})") from None
    known = {f.name for f in fields(Settings)}
    if not isinstance(data, dict) or set(data) - known - set(FINGERPRINTS):
        raise GoldError(f"{path}: expected a JSON object with keys among {', '.join(sorted(known))}")
    try:
        return Settings(**{k: v for k, v in data.items() if k in known})
    except GoldError as e:
        raise GoldError(f"{path}: {e}") from None


def chosen_settings(path: str | Path | None, **given: object) -> Settings:
    """The settings of a settings file or bundle (the defaults without one), each given value not None over them."""
    settings = read_settings(path) if path else Settings()
    return Settings(**{**asdict(settings), **{k: v for k, v in given.items() if v is not None}})


def read_metadata(path: str | Path) -> dict:
    """Gradescope's submission_metadata.json as a dict."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise GoldError(f"{path}: cannot read the submission metadata as JSON ({e})") from None
    if not isinstance(data, dict):
        raise GoldError(f"{path}: expected a JSON object")
    return data


def parse_time(text: object, what: str) -> datetime:
    """An ISO 8601 time with its offset (Gradescope's format); a time without an offset is read as UTC."""
    try:
        moment = datetime.fromisoformat(str(text))
    except ValueError:
        raise GoldError(f"submission metadata: {what} is not an ISO 8601 time: {text!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def due_date(metadata: dict | None) -> datetime | None:
    """The assignment's last deadline: late_due_date when set, else due_date; None without either."""
    assignment = (metadata or {}).get("assignment") or {}
    for key in ("late_due_date", "due_date"):
        if assignment.get(key):
            return parse_time(assignment[key], f"assignment.{key}")
    return None


def is_final(metadata: dict | None, now: datetime) -> bool:
    """Whether an upload is graded for the final standing (its private part shown): graded at or after the due date,
    made at or before it (created_at; without it, the grading time). An upload made after it (an extension: the
    metadata names no student's own due date) is graded as one before it."""
    due = due_date(metadata)
    if due is None or now < due:
        return False
    created = (metadata or {}).get("created_at")
    return (parse_time(created, "created_at") if created else now) <= due


def shown_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M %Z").strip()


def rate_limit(metadata: dict, limit: int, now: datetime | None = None) -> str | None:
    """The message for an upload past the limit (None when it is within it): `limit` uploads are graded in the 24
    hours before created_at (without it, now: the grading time); uploads that failed on Gradescope's side do not count."""
    if limit <= 0:
        return None
    given = metadata.get("created_at")
    created = parse_time(given, "created_at") if given else now or datetime.now(UTC)
    times = sorted(t for t in (parse_time(p.get("submission_time"), "previous_submissions[].submission_time")
                               for p in metadata.get("previous_submissions") or [] if not p.get("autograder_error"))
                   if created - DAY < t < created)
    if len(times) < limit:
        return None
    moments = times + [created]              # this upload counts towards the next one's limit too
    next_time = moments[len(moments) - limit] + DAY
    return (f"Daily limit reached: {limit} graded upload{'s' if limit > 1 else ''} in any 24 hours, and you made "
            f"{len(times)} in the 24 hours before this one ({shown_time(created)}), so this upload was not graded. "
            f"An upload made after {shown_time(next_time)} is graded (uploads before then count too).")


KEPT = ("Below is the result of your previous upload, which the leaderboard keeps. Gradescope makes this upload your "
        "active submission: to be ranked on the earlier one, activate it under Submission History.")


RESCORED = ("This upload is past the daily limit, but your previous result was graded against test labels or a split "
            "that the staff have since changed, so this upload is graded (it counts towards the limit).")


def limited_results(metadata: dict, message: str, answer_key: str | None = None) -> dict | None:
    """The latest previous upload's results (by submission_time; Gradescope sends them for the latest) under the
    message; score 0 and the message when there are none; None when they record another answer_key (graded against
    labels or a split the staff have since changed: this upload is graded instead)."""
    previous = [p for p in metadata.get("previous_submissions") or [] if isinstance(p.get("results"), dict)]
    if not previous:
        return {"score": 0.0, "output": f"{message}\nThere is no previous result to keep: this upload scores 0.",
                "tests": [], "extra_data": {"rate_limited": True}}
    latest = max(previous, key=lambda p: parse_time(p.get("submission_time"), "previous_submissions[].submission_time"))
    results = copy.deepcopy(latest["results"])
    extra = results.get("extra_data") if isinstance(results.get("extra_data"), dict) else {}
    if answer_key is not None and extra.get("answer_key") not in (None, answer_key):   # None: graded before keys
        return None
    base = extra.get("graded_output", results.get("output", ""))
    results["output"] = f"{message}\n{KEPT}\n\n{base}"
    results["extra_data"] = {**extra, "rate_limited": True}
    return results


def _test(name: str, output: str, visibility: str = "visible", score: float = 0.0, max_score: float = 0.0,
          passed: bool = True) -> dict:
    return {"name": name, "score": score, "max_score": max_score, "status": "passed" if passed else "failed",
            "output": output, "visibility": visibility}


def results_for(standing: Standing, settings: Settings, final: bool, due: datetime | None,
                after_due: bool = False) -> dict:
    """results.json for a graded upload: final=True (is_final) posts the private figures to the leaderboard;
    after_due: a public-part upload graded past the due date (made after it: an extension)."""
    points = settings.points if standing.valid else 0.0
    board = settings.board
    upload_test = f"Upload: the {board.count} prediction files, complete and valid"
    files = "Files read: " + (", ".join(standing.files) or "none")
    notes = "".join(f"\nnote: {n}" for n in standing.notes) + "".join(f"\nwarning: {w}" for w in standing.warnings)
    if not standing.valid:
        listed = "\n".join(f"  {p}" for p in standing.problems)
        shown = "\n".join(f"  {p}" for p in standing.problems[:MAX_SHOWN])
        more = f"\n  ... and {len(standing.problems) - MAX_SHOWN} more (see the test below)" \
            if len(standing.problems) > MAX_SHOWN else ""
        head = "This upload is not valid, so it scores 0 and has no leaderboard entry. Fix these problems and upload again:"
        return {"score": 0.0, "output": f"{head}\n{shown}{more}{notes}",
                "tests": [_test(upload_test, f"{files}\n{listed}{notes}", score=0.0, max_score=settings.points,
                                passed=False)]}
    assert standing.public is not None and standing.private is not None
    when = f"the due date ({shown_time(due)})" if due else "the due date (none set)"
    share = round(100 * (1 - settings.private_fraction))
    board_figures = standing.private if final else standing.public
    lines = [f"Valid upload: {points:g} point{'s' if points != 1 else ''}.",
             f"Test set, public part: {standing.public.line()}"]
    if final:
        lines.append(f"Test set, private part (the final standing): {standing.private.line()}")
    if standing.dev is not None:
        lines.append(f"Dev set (public labels): {standing.dev.line()}")
    if final:
        lines.append(f"Past {when}: the leaderboard shows the final standing, on the private part of the test set.")
    elif after_due:
        lines.append(f"This upload was made after {when} (an extension): it is graded as one made before it, on the "
                     f"public part of the test set (about {share}% of its ids), within the daily limit; the final "
                     "standing, on the other part, is the staff's.")
    else:
        lines.append(f"Until {when} the leaderboard shows the public part of the test set (about {share}% of its ids, "
                     "the same for everyone); the final standing, posted after it, uses the other part.")
    tests = [_test(upload_test, files + notes, score=points, max_score=settings.points)]
    if standing.dev is not None:
        tests.append(_test("Dev set (public labels)", standing.dev.line()))
    tests.append(_test("Test set, public part", f"{standing.public.line()}\n{standing.public.count_line()}"))
    if final:        # before the due date results.json holds no private figure at all (staff: the scoreboard)
        tests.append(_test("Test set, private part (the final standing)",
                           f"{standing.private.line()}\n{standing.private.count_line()}"))
    entries = [{"name": name, "value": round(board_figures.value(key), 6), "order": "desc"}
               for name, key in board.columns]
    return {"score": points, "output": "\n".join(lines) + notes, "tests": tests, "leaderboard": entries}


def grade(submission: str | Path, tests: GoldSplit, settings: Settings, dev: dict | None = None,
          metadata: dict | None = None, now: datetime | None = None) -> dict:
    """results.json's object for one upload: graded, or past the daily limit (never for the final standing)."""
    if tests.board != settings.board:
        raise GoldError(f"the gold was split for the {tests.board.name} board, the settings name {settings.profile}'s")
    start = time.monotonic()
    now = now or datetime.now(UTC)
    due = due_date(metadata)
    final = is_final(metadata, now)
    message = rate_limit(metadata, settings.daily_limit, now) if metadata is not None and not final else None
    kept = limited_results(metadata, message, tests.answer_key()) if message is not None else None
    if kept is not None:
        results = kept
    else:
        after_due = due is not None and now >= due and not final
        results = results_for(score_upload(submission, tests, dev), settings, final, due, after_due)
        results["extra_data"] = {"graded_output": results["output"], "phase": "final" if final else "public",
                                 "answer_key": tests.answer_key()}
        if message is not None:
            results["output"] = f"{RESCORED}\n\n{results['output']}"
    results["extra_data"] = {**results.get("extra_data", {}), **provenance(ROOT), "settings": asdict(settings)}
    results["execution_time"] = round(time.monotonic() - start, 3)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m assignments.leaderboard", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("submission", help="the upload: a folder (Gradescope's /autograder/submission) or a zip")
    parser.add_argument("--gold", required=True, help="the instructor's folder of labelled test files: ids-sst-test.csv, "
                        "quora-test.csv, sts-test.csv (the dev files' format; ids-sst-test.csv alone for part1)")
    parser.add_argument("--salt-file", required=True, help="the secret salt that splits the test set (kept beside the "
                        "gold; 16 characters or more)")
    parser.add_argument("--data-dir", default=str(ROOT / "data"), help="the public data folder: its dev files are the "
                        "dev gold, its *-test-student.csv files must carry the gold's ids (default: the reference's data/)")
    parser.add_argument("--metadata", help="Gradescope's submission_metadata.json: due dates, created_at, previous "
                        "submissions (without it: no daily limit, and the leaderboard shows the public part)")
    parser.add_argument("--settings", help="a JSON of daily_limit, private_fraction, points and profile (a bundle's "
                        "settings.json, or the bundle's zip; the salt and gold must be those it records); the flags "
                        "below override it")
    parser.add_argument("--daily-limit", type=nonnegative_int, help="uploads graded in any 24 hours "
                        f"(default {Settings.daily_limit}: no limit)")
    parser.add_argument("--private-fraction", type=float, help="the share of test ids in the private "
                        f"part (default {Settings.private_fraction:g})")
    parser.add_argument("--points", type=nonnegative_float, help="a valid, complete upload's points "
                        f"(default {Settings.points:g})")
    parser.add_argument("--profile", choices=list(BOARDS), help="the profile of the tree handed out: part1's board "
                        f"ranks SST alone, the others' SST, Quora and STS (default {Settings.profile})")
    parser.add_argument("--out", required=True, help="where to write results.json")
    args = parser.parse_args(argv)
    start = time.monotonic()
    try:
        if not Path(args.submission).exists():
            raise GoldError(f"{args.submission}: no such file or folder; name the upload's folder or zip")
        settings = chosen_settings(args.settings, daily_limit=args.daily_limit, points=args.points,
                                   private_fraction=args.private_fraction, profile=args.profile)
        board = settings.board
        if args.settings:                   # the scoreboard's check: the salt and gold are the bundle's
            note = check_bundle(args.settings, args.salt_file, args.gold, board)
            if note:
                print(f"note: {note}", file=sys.stderr)
        tests = split_gold(load_gold(args.gold, args.data_dir, board), read_salt(args.salt_file),
                           settings.private_fraction, board)
        dev = load_dev(args.data_dir, board)
        metadata = read_metadata(args.metadata) if args.metadata else None
        results = grade(args.submission, tests, settings, dev, metadata)
    except GoldError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    results["execution_time"] = round(time.monotonic() - start, 3)       # reading the gold included
    write_text(args.out, json.dumps(results, indent=2) + "\n")
    print(results["output"])
    print(f"wrote {args.out}: score {results['score']:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
