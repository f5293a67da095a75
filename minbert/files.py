"""Writing a file atomically: a temporary file beside it, renamed over it when whole, removed when the write fails.

The library's and the commands' writers go through `replacing` (checkpoints, save_pretrained, BitFit task files,
prediction files, reports, zips, figures, the grader's results.json), so a crash, a full disk or an error half-way
keeps the previous file and leaves no temporary behind, and two writers into one folder never share a temporary's
name.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def new_file_mode() -> int:
    """The mode open() gives a new file under this process's umask (0o644 under the usual 022)."""
    try:                                     # Linux says it (4.7 and newer) without changing it
        line = next(ln for ln in Path("/proc/self/status").read_text().splitlines() if ln.startswith("Umask:"))
        umask = int(line.split()[1], 8)
    except (OSError, StopIteration, ValueError, IndexError):
        umask = os.umask(0o022)              # elsewhere, read by setting it (os has no getter): 022 meanwhile
        os.umask(umask)
    return 0o666 & ~umask


@contextmanager
def replacing(path: str | Path, *, sync: bool = False) -> Iterator[Path]:
    """A temporary file beside `path` for the block to write; when the block ends it replaces `path` in one rename
    (with the mode a new file gets, new_file_mode: mkstemp's files are private), and when the block fails it is
    removed, `path` left as it was. sync=True fsyncs the temporary before the rename (for data: a crash or a full
    disk then keeps the previous file, never an empty one); a writer that holds the file open may fsync it itself."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    try:
        yield Path(tmp)
        if sync:
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
        os.chmod(tmp, new_file_mode())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_text(path: str | Path, text: str) -> Path:
    """Write a text file atomically (replacing): fsynced before the rename, so a crash or a full disk keeps the
    previous file."""
    with replacing(path) as tmp, open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    return Path(path)
