"""The data files a student tree ships: those git tracks in the reference's data/, as committed (assignments/make.py).

A labelled test file (the leaderboard's gold) or a salt dropped into data/ is untracked: left out and named. A tracked
file written over, or a reference copied inside another repository (whose git would answer for it), is refused.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def data_files(root: Path = ROOT) -> tuple[list[Path], list[str]]:
    """The files directly in data/ that git tracks (those a tree ships), and the others there, ignored ones too (a
    labelled test file or a salt dropped in data/), by name: they are left out. Refused: a root that is not git's top
    level (a copy inside another repository), and tracked data files that differ from the commit."""
    def listed(*args: str) -> list[str]:
        out = _git(root, "ls-files", "-z", *args, "--", "data")
        return sorted(rel.removeprefix("data/") for rel in out.split("\0") if rel.count("/") == 1)
    top = _git(root, "rev-parse", "--show-toplevel").strip()
    if Path(top).resolve() != root.resolve():      # a copy inside another repository: that one's files would be asked
        raise ValueError(f"{root / 'data'}: {root} is not a git checkout of its own (git's top level here is {top}); "
                         "the tree ships the data files git tracks: make it from a git checkout of the reference, "
                         "or give --no-data")
    changed = sorted(rel.removeprefix("data/") for rel in _git(root, "diff", "HEAD", "--name-only", "-z", "--",
                                                                 "data").split("\0") if rel.count("/") == 1)
    if changed:                                    # a tracked name written over (labels saved into a test file, say)
        raise ValueError(f"{root / 'data'}: {', '.join(changed)} differ{'s' if len(changed) == 1 else ''} from the "
                         "commit (git diff HEAD -- data); the tree ships the data files as committed: commit the "
                         "change or restore the files (git restore data), then make the tree again")
    tracked = [root / "data" / name for name in listed("--cached") if (root / "data" / name).is_file()]
    return tracked, listed("--others")


def _git(root: Path, *args: str) -> str:
    """git's output for args run in root; ValueError naming root's data folder and git's own words when it fails."""
    try:
        proc = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        proc = subprocess.CompletedProcess([], 1, "", str(e))
    if proc.returncode != 0:
        raise ValueError(f"{root / 'data'}: cannot ask git which data files it tracks ({proc.stderr.strip()}); "
                         "the tree ships tracked files only: run it in a git checkout of the reference, or give "
                         "--no-data")
    return proc.stdout
