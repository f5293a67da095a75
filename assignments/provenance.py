"""What graded a submission: the Python and package versions, and the reference's commit, for results.json's extra_data.

    provenance(root) -> {"python": "3.11.7", "torch": "2.13.0+cpu", "numpy": ..., "tokenizers": ...,
                         "safetensors": ..., "reference_commit": "c07c0ba..." or None}

A package that is not installed is None. The commit is read from root/REFERENCE_COMMIT (written into a Gradescope
bundle by assignments.bundle, where there is no .git), else from `git rev-parse HEAD` in root, else None.
Imports nothing beyond the standard library, so that any grader can call it first.
"""

from __future__ import annotations

import importlib.metadata
import platform
import subprocess
from pathlib import Path

PACKAGES = ("torch", "numpy", "tokenizers", "safetensors")
COMMIT_FILE = "REFERENCE_COMMIT"


def package_version(name: str) -> str | None:
    """The installed version of a distribution, None when it is not installed."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def reference_commit(root: str | Path) -> str | None:
    """root/REFERENCE_COMMIT's first line, else `git rev-parse HEAD` run in root, else None."""
    root = Path(root)
    try:
        text = (root / COMMIT_FILE).read_text().strip()
        if text:
            return text.splitlines()[0].strip()
    except OSError:
        pass                                    # no file: a git checkout, or nothing to say
    try:
        proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    commit = proc.stdout.strip()
    return commit if proc.returncode == 0 and commit else None


def provenance(root: str | Path) -> dict[str, str | None]:
    """The Python version, the versions of torch, numpy, tokenizers and safetensors (None if absent), the commit."""
    return {"python": platform.python_version(), **{name: package_version(name) for name in PACKAGES},
            "reference_commit": reference_commit(root)}
