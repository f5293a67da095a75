"""Reading a student's zip safely, for the batch grader and the leaderboard: every member checked before anything is
written (no path that leaves the folder, no link, not too many members), and bytes counted as they are read, not as
the zip claims."""

from __future__ import annotations

import stat
import zipfile
from pathlib import Path, PurePosixPath

CHUNK = 1 << 20


class UnsafeZip(ValueError):
    """A zip refused before anything was written; the message names the member and why."""


class TooLarge(UnsafeZip):
    """The members read so far hold more bytes than allowed; the caller says how much is allowed."""


def checked_members(zf: zipfile.ZipFile, max_members: int) -> list[tuple[zipfile.ZipInfo, PurePosixPath]]:
    """Every member with its path, once none is a link or leaves the folder (absolute, a drive, `..`) and there are
    at most max_members of them; else UnsafeZip."""
    infos = zf.infolist()
    if len(infos) > max_members:
        raise UnsafeZip(f"{len(infos)} members, more than {max_members}")
    members = []
    for info in infos:
        name = info.filename.replace("\\", "/")
        path = PurePosixPath(name)
        if not name or path.is_absolute() or ".." in path.parts or ":" in (path.parts or ("",))[0]:
            raise UnsafeZip(f"member {info.filename!r} points outside the archive")
        if stat.S_ISLNK(info.external_attr >> 16):
            raise UnsafeZip(f"member {info.filename!r} is a symbolic link")
        members.append((info, path))
    return members


def copy_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path, budget: list[int]) -> None:
    """Write one member to target, taking its bytes from budget[0] as they are read; TooLarge when it runs out."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with zf.open(info) as src, open(target, "wb") as dst:
        while chunk := src.read(CHUNK):
            budget[0] -= len(chunk)
            if budget[0] < 0:
                raise TooLarge(info.filename)
            dst.write(chunk)
