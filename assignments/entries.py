"""A batch's entries, each one submission as uploaded (a .zip or a folder): listing them, hashing them, unpacking a
zip's graded files safely, and refusing what cannot be graded as one submission (BadUpload: a corrupt or unsafe zip,
a symlink, a Gradescope export given one folder too high). assignments/batch.py grades them; assignments/staging.py
refuses the same for a single grade."""

from __future__ import annotations

import errno
import hashlib
import os
import zipfile
import zlib
from functools import cache
from pathlib import Path

from .export import METADATA
from .zips import TooLarge, UnsafeZip, checked_members, copy_member

MAX_MEMBERS = 100_000             # entries in a zip's directory
MAX_UNPACKED = 64 * 2**20         # bytes of graded files written from one zip
IGNORED_DIRS = ("__MACOSX", "__pycache__")
EXPORT_DEPTH = 1                  # an entry holding an export's METADATA this deep is refused (its files lie deeper)
NOTE_CHARS = 200                  # a note or a reason on one line, cut to this


class BadUpload(ValueError):
    """A submission that cannot be graded as uploaded: its row's state is "bad upload", with this reason (grade()
    refuses a zip given to it that way)."""


@cache
def graded_names() -> frozenset[str]:
    """The file names the grader takes from a submission (staging.find_submitted matches them by name)."""
    from .make import ROOT, stubbed_files
    return frozenset(rel.name for rel in stubbed_files(ROOT))


def ignored(parts: tuple[str, ...]) -> bool:
    """Whether a path (its parts) lies in a hidden entry or a folder the grader ignores (__MACOSX, __pycache__)."""
    return any(p.startswith(".") or p in IGNORED_DIRS for p in parts)


def submissions(folder: Path, exclude: tuple[Path, ...] = ()) -> list[Path]:
    """The entries of folder graded, by name: all but hidden ones, __MACOSX, an export's METADATA and `exclude`."""
    skip = {p.resolve() for p in exclude}
    return sorted((e for e in folder.iterdir() if not ignored((e.name,)) and e.resolve() not in skip
                   and not (e.name == METADATA and e.is_file())), key=lambda e: e.name)


def walk(folder: Path) -> list[Path]:
    """The files and symlinks in folder, relative to it, sorted; hidden entries and __MACOSX left out, links not
    followed."""
    found = []
    for top, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not ignored((d,))]       # symlinked folders are listed, never entered
        found += [Path(top, n).relative_to(folder) for n in files + [d for d in dirs if Path(top, d).is_symlink()]
                  if not ignored((n,))]
    return sorted(found)


def content_hash(entry: Path) -> str:
    """A short sha256 of a zip's bytes, or of a folder's paths and file contents (hidden entries left out)."""
    h = hashlib.sha256()
    if entry.is_dir():
        for rel in walk(entry):
            path = entry / rel
            h.update(rel.as_posix().encode() + b"\0")
            if path.is_symlink():
                h.update(b"symlink " + os.readlink(path).encode())
            else:
                _update(h, path)
            h.update(b"\0")
    else:
        _update(h, entry)
    return h.hexdigest()[:16]


def _update(h: hashlib._Hash, path: Path) -> None:
    """Feed a file's bytes to the hash, a MiB at a time."""
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)


def safe_extract(zip_path: Path, dest: Path, max_bytes: int | None = None, max_members: int | None = None) -> int:
    """Unpack the graded files of zip_path into dest (the others are skipped); returns the files written.

    Refuses with BadUpload: a corrupt or encrypted zip, a member path outside dest, a symlink, more than max_members
    members, more than max_bytes of graded files (by default MAX_MEMBERS and MAX_UNPACKED), a Gradescope export
    (its METADATA at the top or up to EXPORT_DEPTH folders down: its submissions' files would be graded as one).
    """
    max_bytes = MAX_UNPACKED if max_bytes is None else max_bytes
    max_members = MAX_MEMBERS if max_members is None else max_members
    try:
        with zipfile.ZipFile(zip_path) as zf:
            members = checked_members(zf, max_members)
            export = next((path for info, path in members if path.name == METADATA and not info.is_dir()
                           and not ignored(path.parts) and len(path.parts) <= EXPORT_DEPTH + 1), None)
            if export is not None:
                raise BadUpload(f"a zip of a Gradescope export, not one submission (it holds {export}): unzip it "
                                f"and give --batch the folder that holds {METADATA}")
            wanted = [(info, path) for info, path in members
                      if not info.is_dir() and not ignored(path.parts) and path.name in graded_names()]
            budget = [max_bytes]
            for info, path in wanted:
                copy_member(zf, info, dest / path, budget)
            return len(wanted)
    except BadUpload:
        raise
    except TooLarge:
        raise BadUpload(f"the zip's graded files unpack to more than {size(max_bytes)}") from None
    except UnsafeZip as e:
        raise BadUpload(f"in the zip: {e}") from None
    except (zipfile.BadZipFile, zlib.error, EOFError, RuntimeError, NotImplementedError, ValueError) as e:
        raise BadUpload(f"cannot unpack the zip: {one_line(e)}") from e
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise                        # our disk, not the student's upload
        raise BadUpload(f"cannot unpack the zip: {one_line(e)}") from e


def size(n: int) -> str:
    """n bytes for a reader: '64 MiB', '1000 bytes'."""
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n} bytes"


def check_folder(folder: Path) -> None:
    """Refuse a submitted folder holding a symlink (as a zip would be refused), or a Gradescope export, with
    BadUpload."""
    check_not_export(folder)
    for rel in walk(folder):
        if (folder / rel).is_symlink():
            raise BadUpload(f"the folder holds a symlink: {rel}")


def check_not_export(folder: Path, depth: int = EXPORT_DEPTH) -> None:
    """Refuse a folder that is a Gradescope export, or holds one up to `depth` folders down (its METADATA there),
    with BadUpload naming the folder to give --batch: graded as one submission, the first of its submissions' files
    would be taken as one student's (the grader looks two folders down)."""
    level = [folder]
    for _ in range(depth + 1):
        for base in level:
            meta = base / METADATA
            if meta.is_file() and not meta.is_symlink():
                raise BadUpload(f"a Gradescope export, not one submission (it holds "
                                f"{meta.relative_to(folder).as_posix()}): give --batch {base}")
        level = sorted(d for base in level for d in base.iterdir()
                       if d.is_dir() and not d.is_symlink() and not ignored((d.name,)))


def one_line(e: BaseException | str) -> str:
    """An exception (as "Type: message") or a text on one line, cut to NOTE_CHARS characters."""
    text = e if isinstance(e, str) else f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    text = " ".join(text.split())
    return text if len(text) <= NOTE_CHARS else text[: NOTE_CHARS - 3] + "..."
