"""Build a Gradescope autograder zip from this reference tree: python -m assignments.bundle KIND OUT.zip [options]

    python -m assignments.bundle checks OUT.zip --seed-file SEED [--groups core] [--hide-hints] [--timeout 20]
        [--jobs N]
    python -m assignments.bundle leaderboard OUT.zip --gold GOLD_DIR --salt-file SALT [--daily-limit N]
        [--private-fraction 0.5] [--points 1] [--profile full]

Every bundle holds, at the zip's root as Gradescope's specification asks, setup.sh and run_autograder (from
assignments/gradescope/KIND/), and minbert-reference/: the reference's files under minbert/, tasks/, assignments/,
data/, docs/ (a profile ships its pages) and requirements.txt that git tracks, as they are on disk (an uncommitted
edit marks the commit "-dirty"), with REFERENCE_COMMIT naming the commit; an untracked file is left out (a stray
seed or salt never ships), and the console names it. setup.sh installs the exact versions of
assignments/gradescope/requirements-grader.txt. A kind adds its own files: the checks' are grading/seed and
grading/flags (the grader's options); the leaderboard's are leaderboard/gold/
(the labelled test files of the profile's board, checked here against data/'s test ids), leaderboard/salt and
leaderboard/settings.json (with the profile: part1's board ranks SST alone, the others' SST, Quora and STS; and the
sha256 of the salt and of each gold file, which the scoreboard checks).
Another kind is one more entry in KINDS: a function that adds its flags, one that returns its files, and its
folder of scripts. The zip is written atomically, with fixed timestamps: the same inputs give the same bytes.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from tasks.core.errors import nonnegative_float, nonnegative_int, positive_float, positive_int
from tasks.core.evaluation import replacing

from .bundle_check import SALT_MEMBER, SETTINGS_MEMBER, fingerprints, gold_member
from .leaderboard import Settings
from .provenance import COMMIT_FILE
from .standing import GoldError, gold_path, load_gold, read_salt, split_gold

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "assignments" / "gradescope"
LOCK = "assignments/gradescope/requirements-grader.txt"
REFERENCE = "minbert-reference"
TRACKED = ("minbert", "tasks", "assignments", "data", "docs", "requirements.txt")
EXECUTABLE = ("setup.sh", "run_autograder")
STAMP = (1980, 1, 1, 0, 0, 0)
SHOWN = 10              # the untracked files left out, named on the console


class BundleError(ValueError):
    """A bundle that cannot be built from this tree or these inputs; says why."""


def _git(*args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise BundleError(f"git {' '.join(args)} failed in {ROOT}: {proc.stderr.strip()}; a bundle is built from a "
                          "git checkout of the reference")
    return proc.stdout


def reference_files() -> tuple[dict[str, Path], str, list[str]]:
    """minbert-reference/PATH -> the file, for every tracked file of TRACKED; the commit, with "-dirty" when any of
    them differs from it; the untracked files of TRACKED that are not ignored, left out."""
    listed = _git("ls-files", "-z", "--cached", "--", *TRACKED).split("\0")
    files = {f"{REFERENCE}/{rel}": ROOT / rel for rel in sorted(set(listed)) if rel and (ROOT / rel).is_file()}
    if f"{REFERENCE}/{LOCK}" not in files:
        raise BundleError(f"{ROOT / LOCK}: missing, or not tracked by git; write it with python -m assignments.lockfile "
                          "write, and commit it")
    left_out = sorted(rel for rel in _git("ls-files", "-z", "--others", "--exclude-standard", "--", *TRACKED)
                      .split("\0") if rel)
    commit = _git("rev-parse", "HEAD").strip()
    dirty = _git("status", "--porcelain", "--untracked-files=no", "--", *TRACKED).strip()
    return files, commit + ("-dirty" if dirty else ""), left_out


def write_zip(out: Path, entries: dict[str, Path | bytes]) -> Path:
    """The zip of entries (name -> a file or bytes), sorted, fixed timestamps, scripts executable; atomically."""
    with replacing(out, sync=True) as tmp, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for name in sorted(entries):
            info = zipfile.ZipInfo(name, STAMP)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o100755 if name in EXECUTABLE else 0o100644) << 16
            data = entries[name]
            z.writestr(info, data if isinstance(data, bytes) else data.read_bytes())
    return out


def outside_data(path: Path, what: str) -> None:
    """Refuse a secret kept under the reference's data/, which every student tree copies."""
    data = (ROOT / "data").resolve()
    if path.resolve() == data or data in path.resolve().parents:
        raise BundleError(f"{path}: the {what} is under {data}, which python -m assignments.make copies into every "
                          "student tree; keep it outside the repository")


def leaderboard_arguments(parser: argparse.ArgumentParser) -> None:
    from .boards import BOARDS
    parser.add_argument("--gold", required=True, help="the labelled test files: ids-sst-test.csv, quora-test.csv, "
                        "sts-test.csv (the dev files' format; ids-sst-test.csv alone for --profile part1); kept "
                        "outside the repository")
    parser.add_argument("--salt-file", required=True, help="the secret that splits the test set into public and "
                        "private parts; keep it with the gold (the scoreboard needs it too)")
    parser.add_argument("--daily-limit", type=nonnegative_int, default=Settings.daily_limit,
                        help=f"uploads graded in any 24 hours (default {Settings.daily_limit}: no limit)")
    parser.add_argument("--private-fraction", type=float, default=Settings.private_fraction,
                        help=f"the private share of test ids (default {Settings.private_fraction:g})")
    parser.add_argument("--points", type=nonnegative_float, default=Settings.points,
                        help=f"a valid upload's points (default {Settings.points:g})")
    parser.add_argument("--profile", choices=list(BOARDS), default=Settings.profile,
                        help="the profile of the tree handed out, whose tasks.submit zip the board ranks: part1's "
                             "sst-{dev,test}-output.csv (SST alone), the others' six files (default: "
                             f"{Settings.profile})")


def leaderboard_files(gold: str, salt_file: str, daily_limit: int, private_fraction: float,
                      points: float, profile: str) -> dict[str, Path | bytes]:
    """leaderboard/gold/ (the board's tasks), leaderboard/salt, leaderboard/settings.json; all checked first."""
    gold_dir, salt_file = Path(gold), Path(salt_file)
    outside_data(gold_dir, "gold")
    outside_data(salt_file, "salt")
    settings = Settings(daily_limit, private_fraction, points, profile)
    salt = read_salt(salt_file)
    board = settings.board
    split_gold(load_gold(gold_dir, ROOT / "data", board), salt, settings.private_fraction, board)
    files: dict[str, Path | bytes] = {gold_member(task): gold_path(gold_dir, task) for task in board.tasks}
    files[SALT_MEMBER] = (salt + "\n").encode()
    recorded = {**asdict(settings), **fingerprints(salt, gold_dir, board)}     # the scoreboard checks them
    files[SETTINGS_MEMBER] = (json.dumps(recorded, indent=2) + "\n").encode()
    return files


def checks_arguments(parser: argparse.ArgumentParser) -> None:
    from .common import ALL_GROUPS
    from .grade import DEFAULT_TIMEOUT
    from .profiles import DEFAULT_PROFILE, PROFILES
    parser.add_argument("--seed-file", required=True, help="a file holding the grading seed the hidden inputs are "
                        "drawn from (make one: python -c 'import secrets; print(secrets.randbits(63))' > seed.txt); "
                        "keep it outside the repository, like the gold")
    parser.add_argument("--groups", nargs="+", choices=[*ALL_GROUPS, "all"], default=["core"],
                        help="the groups graded (default: core, part 1); one Gradescope assignment per group keeps "
                             "each score out of the others' totals")
    parser.add_argument("--profile", choices=list(PROFILES), default=DEFAULT_PROFILE,
                        help=f"the profile of the tree handed out (default: {DEFAULT_PROFILE})")
    parser.add_argument("--timeout", type=positive_float, default=DEFAULT_TIMEOUT, help=f"seconds allowed per part (default: {DEFAULT_TIMEOUT:g})")
    parser.add_argument("--jobs", type=positive_int, help="parts graded at once (default: the grader's, the CPUs the "
                        "container lets it use); set it to the CPUs chosen in Gradescope's container settings")
    parser.add_argument("--hide-hints", action="store_true", help="leave the matched mistake out of each part's "
                        "output until the due date")


CHECKS_LIMIT = 1800     # seconds: the checks' run_autograder stops the grader after these (${CHECKS_TIMEOUT:-1800})


def grading_worst_case(groups: list[str], profile: str, timeout: float, jobs: int | None) -> float:
    """The longest a grading may take under these flags: for each set of parts (part 1's, then the other groups'),
    --timeout times ceil(parts / jobs) plus SET_OVERHEAD; without --jobs, one part at a time (a container may give
    one CPU)."""
    from .checks import part_sets, parts_of
    from .profiles import PROFILES
    from .untrusted import SET_OVERHEAD
    names = parts_of(list(PROFILES[profile].groups) if "all" in groups else groups)
    return sum(timeout * math.ceil(len(s) / (jobs or 1)) + SET_OVERHEAD for s in part_sets(names))


def checks_files(seed_file: str, groups: list[str], profile: str, timeout: float, hide_hints: bool,
                 jobs: int | None = None) -> dict[str, Path | bytes]:
    """grading/seed (checked to be an integer) and grading/flags (the grader's options, its groups checked to be
    the profile's, so that a bad pairing fails here rather than in Gradescope's image build)."""
    from .grade import read_seed
    from .profiles import PROFILES
    own = PROFILES[profile].groups
    if [g for g in groups if g not in own and g != "all"]:
        raise BundleError(f"--groups {' '.join(groups)}: not all in the {profile} profile, whose groups are "
                          f"{', '.join(own)}")
    worst = grading_worst_case(groups, profile, timeout, jobs)
    if worst >= CHECKS_LIMIT:
        at = f"--jobs {jobs}" if jobs else "one part at a time (no --jobs: the container may give one CPU)"
        raise BundleError(f"--timeout {timeout:g}: grading could take {worst:.0f} s at {at}, past the "
                          f"{CHECKS_LIMIT} s after which run_autograder stops it and sends the student to the staff; "
                          f"lower --timeout, or give --jobs N with as many CPUs in Gradescope's container settings")
    seed_file = Path(seed_file)
    outside_data(seed_file, "grading seed")
    try:
        seed = read_seed(seed_file.read_text(), str(seed_file))
    except OSError as e:
        raise BundleError(f"{seed_file}: cannot read the grading seed ({e.strerror})") from None
    except ValueError as e:
        raise BundleError(str(e)) from None
    flags = ["--groups", *groups, "--profile", profile, "--timeout", f"{timeout:g}"]
    flags += ["--hide-hints"] if hide_hints else []
    flags += ["--jobs", str(jobs)] if jobs else []
    return {"grading/seed": f"{seed}\n".encode(), "grading/flags": (" ".join(flags) + "\n").encode()}


@dataclass(frozen=True)
class Kind:
    """One kind of bundle: its help, its flags, its own files, and its folder of setup.sh and run_autograder."""

    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    files: Callable[..., dict[str, Path | bytes]]     # called with the kind's flags as keywords
    scripts: Path


KINDS = {
    "checks": Kind("the checks: grades a submission's code on inputs drawn from the instructor's seed",
                   checks_arguments, checks_files, SCRIPTS / "checks"),
    "leaderboard": Kind("the leaderboard: checks and scores uploads of prediction files against the held-out gold",
                        leaderboard_arguments, leaderboard_files, SCRIPTS / "leaderboard"),
}


def build(kind: str, out: str | Path, options: dict[str, object]) -> tuple[Path, str, list[str]]:
    """Write the bundle of a kind, its own files from its options (its flags, by name); (the zip, the commit, the
    untracked files left out)."""
    spec = KINDS[kind]
    entries: dict[str, Path | bytes] = {name: spec.scripts / name for name in EXECUTABLE}
    missing = [str(p) for p in entries.values() if isinstance(p, Path) and not p.is_file()]
    if missing:
        raise BundleError(f"{', '.join(missing)}: missing")
    files, commit, left_out = reference_files()
    entries.update(files)
    entries[f"{REFERENCE}/{COMMIT_FILE}"] = (commit + "\n").encode()
    entries.update(spec.files(**options))
    return write_zip(Path(out), entries), commit, left_out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m assignments.bundle", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    kinds = parser.add_subparsers(dest="kind", required=True, metavar="KIND")
    for name, spec in KINDS.items():
        sub = kinds.add_parser(name, help=spec.help, description=spec.help)
        sub.add_argument("out", help="the zip to write (upload it on Gradescope's Configure Autograder page)")
        spec.arguments(sub)
    args = parser.parse_args(argv)
    try:
        out, commit, left_out = build(args.kind, args.out, {k: v for k, v in vars(args).items() if k not in ("kind", "out")})
    except (BundleError, GoldError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    with zipfile.ZipFile(out) as z:
        count = len(z.namelist())
    print(f"wrote {out}: {args.kind} bundle, {count} files, reference {commit}")
    if commit.endswith("-dirty"):
        print("note: the reference has uncommitted changes to tracked files, which the bundle includes; commit them "
              "to name them", file=sys.stderr)
    if left_out:
        more = f", ... ({len(left_out) - SHOWN} more)" if len(left_out) > SHOWN else ""
        print(f"note: {len(left_out)} untracked file{'s' if len(left_out) > 1 else ''} of the reference left out of "
              "the bundle (it ships tracked files only; git add and commit one to ship it): "
              f"{', '.join(left_out[:SHOWN])}{more}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
