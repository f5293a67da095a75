"""The graders' lock file: exact versions of every package a Gradescope image installs, and a check of an image.

    python -m assignments.lockfile verify assignments/gradescope/requirements-grader.txt   # exit 1 on a mismatch
    python -m assignments.lockfile write assignments/gradescope/requirements-grader.txt    # from this environment

The lock is a pip requirements file of `name==version` lines. `write` pins the packages in ROOTS and every package
assignments/requirements-student.txt names, with everything they depend on as installed here (a dependency that is not
installed here, one behind an extra or a platform marker, is left out). `verify` compares the installed versions with
the lock, name by name, exactly (torch's local version `+cpu` included): the last line of each bundle's setup.sh.
Imports only the standard library.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "assignments" / "gradescope" / "requirements-grader.txt"
STUDENT_REQUIREMENTS = ROOT / "assignments" / "requirements-student.txt"
ROOTS = ("torch", "numpy", "tokenizers", "safetensors", "tqdm", "matplotlib")
NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


class LockError(ValueError):
    """A lock or requirements file that cannot be read; the message names the file and line."""


def normalise(name: str) -> str:
    """A distribution name as PEP 503 compares them: lower case, runs of -_. as one -."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(path: str | Path) -> list[str]:
    """The distributions a requirements file names (comments, blank lines and pip options skipped), normalised."""
    names = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        match = NAME.match(line)
        if not match:
            raise LockError(f"{path}:{n}: cannot read a package name in {line!r}")
        names.append(normalise(match.group(1)))
    return names


def read_lock(path: str | Path) -> dict[str, str]:
    """name -> exact version from a lock file; every line must be `name==version`."""
    pins: dict[str, str] = {}
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep or not version.strip() or not NAME.fullmatch(name.strip()):
            raise LockError(f"{path}:{n}: expected 'name==version', got {line!r}")
        key = normalise(name.strip())
        if key in pins:
            raise LockError(f"{path}:{n}: {key} is pinned twice")
        pins[key] = version.strip()
    if not pins:
        raise LockError(f"{path}: pins nothing")
    return pins


def installed(name: str) -> str | None:
    """The installed version of a distribution, None when absent."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def mismatches(pins: dict[str, str]) -> list[str]:
    """One line per pinned package whose installed version differs from the lock (or that is absent)."""
    out = []
    for name, version in pins.items():
        have = installed(name)
        if have != version:
            out.append(f"{name}: the lock pins {version}, installed: {have or 'nothing'}")
    return out


def closure(names: list[str]) -> dict[str, str]:
    """The installed versions of names and of everything they depend on (extras left out), as installed here."""
    pins: dict[str, str] = {}
    todo = [normalise(n) for n in names]
    while todo:
        name = todo.pop()
        if name in pins:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue                             # a dependency behind a marker that does not hold here
        pins[name] = dist.version
        for req in dist.requires or []:
            if "extra ==" in req.replace("extra==", "extra =="):
                continue
            match = NAME.match(req)
            if match:
                todo.append(normalise(match.group(1)))
    return pins


def lock_text(pins: dict[str, str], first: str = "torch") -> str:
    """The lock file's text: a header, `first` then the rest by name."""
    order = sorted(pins, key=lambda n: (n != first, n))
    head = ("# The graders' exact package versions (torch from https://download.pytorch.org/whl/cpu), written by\n"
            "#   python -m assignments.lockfile write assignments/gradescope/requirements-grader.txt\n"
            "# from the reference environment; every bundle's setup.sh installs these and verifies them.\n")
    return head + "".join(f"{n}=={pins[n]}\n" for n in order)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m assignments.lockfile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=("verify", "write"), help="verify the installed versions, or write the lock")
    parser.add_argument("lock", nargs="?", default=str(LOCK), help=f"the lock file (default: {LOCK.relative_to(ROOT)})")
    args = parser.parse_args(argv)
    try:
        if args.action == "write":
            names = list(ROOTS) + requirement_names(STUDENT_REQUIREMENTS)
            absent = [n for n in names if installed(n) is None]
            if absent:
                raise LockError(f"not installed here: {', '.join(absent)}; install them first")
            Path(args.lock).write_text(lock_text(closure(names)))
            print(f"wrote {args.lock}")
            return 0
        bad = mismatches(read_lock(args.lock))
    except (LockError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if bad:
        print(f"error: the installed packages differ from {args.lock}:\n  " + "\n  ".join(bad), file=sys.stderr)
        return 1
    print(f"every package of {args.lock} is installed at its locked version")
    return 0


if __name__ == "__main__":
    sys.exit(main())
