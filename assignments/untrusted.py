"""Running a submission's code for the grader: as whom, in which folders, and reading back only its data.

run_parts runs the staged tree's checker in record mode (assignments/record.py), as another user when the grader
runs as root; judge_part then reads each part's record (files the student's user could write are read only when
they are plain files, after every process of the submission is gone) and replays its check on the reference in
this process (assignments/hidden.py). preload imports, beforehand, every reference module a replay may need.
"""

from __future__ import annotations

import functools
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

from .checks import PARTS
from .common import GROUPS
from .isolation import MEMORY_ENV, part_memory, sweep
from .warmstart import KEPT_ENV, Helper, available, student_env  # noqa: F401 (KEPT_ENV: tests)

SET_OVERHEAD = 60        # seconds a set of parts may take beyond its parts' time limits before it is stopped
STUDENT_USER = "auto"    # run as root: "nobody", refused when that user cannot run this Python (--as-user)


REFERENCE_ROOT = Path(__file__).resolve().parents[1]
CODE_SUFFIXES = (".py", ".pyc", ".ipynb")


def solution_paths() -> list[Path]:
    """The reference's files a submission must not read: all of its code (the graded files, and others that compute
    graded answers: assignments/mistakes.py, the tests), their compiled copies and notebooks, and the repository's
    history (.git/HEAD, .git/objects); not a virtual environment (a folder with pyvenv.cfg: the Python the
    submission runs) nor any other hidden folder."""
    paths = []
    for folder, dirs, files in os.walk(REFERENCE_ROOT):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not (Path(folder, d) / "pyvenv.cfg").exists())
        paths += [Path(folder, f) for f in sorted(files) if f.endswith(CODE_SUFFIXES)]
    git = REFERENCE_ROOT / ".git"
    return paths + [p for p in (git / "HEAD", git / "objects") if p.exists()]


def readable_to(account: tuple[int, int], paths: list[Path]) -> list[Path]:
    """Those of `paths` the user `account` (its own group, no other) can read (a folder: enter), asked of the system
    as that user."""
    if not paths:
        return []
    probe = ('for p do if [ -d "$p" ]; then [ -x "$p" ] && printf "%s\\n" "$p"; '   # a folder: can it be entered
             'else [ -r "$p" ] && printf "%s\\n" "$p"; fi; done; exit 0')
    try:
        out = subprocess.run(["/bin/sh", "-c", probe, "sh", *map(str, paths)], check=True, capture_output=True,
                             text=True, user=account[0], group=account[1], extra_groups=[], cwd="/", timeout=60,
                             stdin=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin"}).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise ValueError(f"could not ask whether user {account[0]} can read the reference's files: {e}") from None
    return [Path(line) for line in out.splitlines() if line]


class CannotRun(ValueError):
    """The user named to run the submission's code cannot run this Python (or does not exist)."""


def student_account(user: str | None, secrets: tuple[Path, ...] = ()) -> tuple[int, int] | None:
    """(uid, gid) the student's code runs as (root only; "auto": nobody), None: as this one; ValueError if unable, or
    if that user can read the reference's solutions or `secrets` (the seed file)."""
    if not user or user == "none" or not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    import pwd
    name = "nobody" if user == "auto" else user
    as_root = "or accept running the submission's code as root with --as-user none"
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise CannotRun(f"no user {name!r} to run the submission's code as: name another with --as-user USER, "
                         f"{as_root}") from None
    account = entry.pw_uid, entry.pw_gid
    if not _can_run(account):
        raise CannotRun(f"{name} cannot run {sys.executable} and find torch: make the interpreter and its packages "
                         f"readable to {name}, name a user who can with --as-user USER, {as_root}")
    private = [Path(p).resolve() for p in secrets]
    seen = readable_to(account, solution_paths() + private)
    if seen:
        shown = ", ".join(map(str, seen[:3])) + (f" and {len(seen) - 3} more" if len(seen) > 3 else "")
        closed = sorted({str(p if p in private or REFERENCE_ROOT not in p.parents
                             else REFERENCE_ROOT / p.relative_to(REFERENCE_ROOT).parts[0]) for p in seen})
        raise ValueError(f"{name} can read {shown}: a submission run as {name} could run the reference's solutions "
                         f"or read the grading seed. Close them to {name} (chmod -R o= {' '.join(closed)}; it still "
                         f"needs to read the Python it runs), name a user who cannot read them with --as-user USER, "
                         f"{as_root}")
    return account


@functools.cache
def _can_run(account: tuple[int, int]) -> bool:
    try:
        probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"   # finds, no import
        return subprocess.run([sys.executable, "-c", probe], check=False, user=account[0], group=account[1],
                              extra_groups=[], cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=120).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


_helper: Helper | None = None


def warm_helper() -> Helper | None:
    """This process's warm interpreter for the checker (assignments/warmstart.py: started at the first call, its
    import of torch running beside the caller's own work), or None where the checker starts cold."""
    global _helper
    if not available():
        return None
    if _helper is None or not _helper.alive:
        try:
            _helper = Helper()
        except OSError as e:                         # no process or pipe to spare: cold, as without a helper
            print(f"note: no warm interpreter ({e}); the checker starts cold", file=sys.stderr)
            return None
    return _helper


def _hand_over(path: Path, account: tuple[int, int] | None) -> None:
    """Make path (a directory the student's process writes in) its own when it runs as another user."""
    path.mkdir(parents=True, exist_ok=True)
    if account is not None:
        os.chown(path, *account)


def run_parts(staging: Path, names: list[str], timeout: float, jobs: int, account: tuple[int, int] | None = None,
              spare: frozenset[int] = frozenset()) -> dict[str, dict]:
    """Run the staged tree's checker in record mode, each part in its own forked process with the time limit.

    Returns what that process said of each part (untrusted: only a failed part's status and message are used);
    the parts' results, as data, are in staging/.grading/records. Every other child of this process is killed
    after it, but those in `spare` (the caller's own, from before the grading).
    """
    work = staging / ".grading"              # this process's; the student's user writes in records/ and out/ alone
    result_file, log_file = work / "out" / "results.json", work / "check-log.txt"
    for d in ("records", "out"):
        _hand_over(work / d, account)
    env = student_env(PYTHONPATH=str(staging), PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1",
                      TOKENIZERS_PARALLELISM="false", HOME=str(work / "out"), TMPDIR=str(work / "out"),
                      **{MEMORY_ENV: str(part_memory())})     # the grader's setting, checked here
    cmd = [sys.executable, "-m", "assignments.check", *names, "--timeout", str(timeout), "--jobs", str(jobs),
           "--result", str(result_file), "--record", str(work / "records"), "--inputs", str(work / "inputs")]
    overall = timeout * math.ceil(len(names) / jobs) + SET_OVERHEAD   # the checker enforces each part's limit itself
    helper, returncode = warm_helper(), None
    if helper is not None:                   # the same command, forked from an interpreter that has imported torch
        log_file.write_bytes(b"")
        try:
            _, code = helper.run({"kind": "m", "target": cmd[2], "args": cmd[3:], "warnings": [], "unbuffered": False,
                                  "env": env, "cwd": str(staging), "stdout": str(log_file), "stderr": str(log_file),
                                  "new_session": True, "kill_group": True, "user": account and account[0],
                                  "group": account and account[1]}, overall)
            returncode = -signal.SIGKILL if code is None else code
            spare = spare | {helper.proc.pid}
        except (RuntimeError, TimeoutError, OSError, ValueError) as e:   # the helper died or hung: start it cold
            print(f"note: the warm interpreter failed ({e}); this submission's checker starts cold", file=sys.stderr)
            spare = spare - {helper.proc.pid}    # gone: its pid may be anyone's now
            sweep(keep=spare)
            for d in ("records", "out"):         # nothing the first attempt wrote is read: set aside whole, as it is
                os.rename(work / d, work / f"{d}.failed-warm")
                _hand_over(work / d, account)
    if returncode is None:
        who = {} if account is None else {"user": account[0], "group": account[1], "extra_groups": []}
        with open(log_file, "wb") as log:
            proc = subprocess.Popen(cmd, cwd=staging, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True, **who)
            try:
                proc.wait(timeout=overall)
            except subprocess.TimeoutExpired:
                pass
            _kill_group(proc.pid)
            returncode = proc.wait()
    sweep(keep=spare)
    said: dict[str, dict] = {}
    try:                                     # read after every process of the submission is gone: no race
        if _plain_file(result_file) and result_file.stat().st_size < 1 << 20:
            said = {r["part"]: r for r in json.loads(result_file.read_text()) if isinstance(r, dict)
                    and isinstance(r.get("part"), str)}
    except (OSError, ValueError, TypeError):
        pass
    tail = log_file.read_bytes()[-2000:].decode("utf-8", errors="replace")
    return {n: said.get(n) or {"status": "crash", "message": "the checker stopped before reporting "
                               f"(exit code {returncode})", "log": tail} for n in names}


def _plain_file(path: Path) -> bool:
    """A regular file, not a link: what the student's process left is read only if it is its own data."""
    import stat
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def judge_part(name: str, staging: Path, said: dict, fixtures: dict[str, dict]) -> dict:
    """One part's result: its record replayed on the reference and judged here, or 0 with why there is none."""
    from .hidden import BadRecord, read_record, replay
    part = PARTS[name]
    seconds = said.get("seconds")                 # what the part's process said: shown, never trusted for a score
    base = {"part": name, "score": 0, "max_score": part.points,
            "seconds": float(seconds) if isinstance(seconds, (int, float)) else 0.0,
            "log": str(said.get("log", ""))[-2000:]}
    path = staging / ".grading" / "records" / f"{name}.safetensors"
    if _plain_file(path):
        try:
            status, message = replay(name, {f: fixtures[f] for f in part.fixtures}, read_record(path))
        except BadRecord as e:
            status, message = "error", str(e)
        return {**base, "status": status, "message": message, "score": part.points if status == "pass" else 0}
    status = said.get("status")
    if status not in ("timeout", "crash", "error", "not started", "fail"):   # no record: never a pass
        status, message = "crash", "the part's process ended without returning its results"
    else:
        message = str(said.get("message", ""))[:4000]
    return {**base, "status": status, "message": message}


def preload() -> None:
    """Import now every reference module a replay may need, so that nothing is read from disk after student code ran."""
    import importlib
    import pkgutil

    import minbert
    for mod in pkgutil.iter_modules(minbert.__path__):
        importlib.import_module(f"minbert.{mod.name}")
    for name in ("tasks.classifier", "assignments.mistakes", "assignments.hidden", "assignments.make_fixtures",
                 "assignments.make_fixtures_ext", *(f"assignments.checks_{g}" for g in GROUPS if g != "core")):
        importlib.import_module(name)
    from tasks.core.step import optimizers_without_dynamo
    optimizers_without_dynamo()           # the reference's fixtures build optimisers; grading compiles nothing
