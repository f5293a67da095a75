"""Writing a file atomically: a temporary file beside it, renamed over it when whole, removed when the write fails.

The library's and the commands' writers go through `replacing` (checkpoints, save_pretrained, BitFit task files,
prediction files, reports, zips, figures, the grader's results.json), so a crash, a full disk or an error half-way
keeps the previous file and leaves no temporary behind, and two writers into one folder never share a temporary's
name.
"""

from __future__ import annotations

import errno
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
            fsync_file(tmp)
        os.chmod(tmp, new_file_mode())
        os.replace(tmp, path)
    except Exception as e:
        named = os_error_of(e, path)                 # asked before the temporary goes: it may be what filled the disk
        os.unlink(tmp)
        if named is None:
            raise
        raise named from e
    except BaseException:
        os.unlink(tmp)
        raise


DISK_FULL_TEXTS = ("No space left on device", "os error 28")   # safetensors' SafetensorError says the errno in words


def os_error_of(e: Exception, path: Path) -> OSError | None:
    """What a failed write of `path` says to a user (None: keep `e` as it is, a bug keeps its traceback): an OSError
    that names no file gets `path` (a write() or flush() names none); an error of another type from a serialiser
    (safetensors' SafetensorError, torch.save's RuntimeError) on a full disk becomes the OSError ENOSPC that names
    `path` -- a full disk told by the error's text, or (those two types) by the disk having under 1 MiB left."""
    if isinstance(e, OSError):
        if e.filename is None and e.errno is not None:
            return OSError(e.errno, e.strerror or os.strerror(e.errno), str(path))
        return None
    serialiser = isinstance(e, RuntimeError) or type(e).__name__ == "SafetensorError"
    if any(t in str(e) for t in DISK_FULL_TEXTS) or (serialiser and _nearly_full(path.parent)):
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    return None


def _nearly_full(folder: Path) -> bool:
    """Whether the file system of `folder` has under 1 MiB left for this process (False where it cannot say)."""
    try:
        st = os.statvfs(folder)
    except (OSError, AttributeError):                 # AttributeError: no statvfs (Windows)
        return False
    return st.f_bavail * st.f_frsize < 2 ** 20


def fsync_file(path: str | Path) -> None:
    """Flush a written file's bytes to the disk (a full disk says so here, if not at the write)."""
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def write_text(path: str | Path, text: str) -> Path:
    """Write a text file atomically (replacing): fsynced before the rename, so a crash or a full disk keeps the
    previous file."""
    with replacing(path) as tmp, open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    return Path(path)
