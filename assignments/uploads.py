"""Find a leaderboard's prediction files in an upload, as Gradescope delivers it, and unzip safely.

An upload is a folder (Gradescope's /autograder/submission) or a zip. The board's files (assignments/boards.py: the
multitask one's {sst,para,sts}-{dev,test}-output.csv, part1's sst-{dev,test}-output.csv) may lie flat in it, under
predictions/ (tasks.submit's zip), or a folder or two further down (a zipped folder); a zip uploaded as such is either
unpacked by Gradescope or left as a .zip file in the folder: both are read. A zip is never extracted as it stands:
only members named like one of the board's files are read, each into a file whose name we choose, after checking
every member (no absolute or `..` paths, no links, at most MAX_MEMBERS members and MAX_BYTES bytes in all, counted
as they are read, not as the zip claims).
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from .boards import Board
from .zips import TooLarge, UnsafeZip, checked_members, copy_member

SKIP_DIRS = ("__MACOSX", "__pycache__", ".git")
MAX_DEPTH = 3                      # the files may lie up to this many folders below the upload (a/b/predictions/x.csv)
MAX_MEMBERS = 10_000
MAX_BYTES = 16 * 2**20             # 16 MiB uncompressed in all; the six files of the course are about 0.4 MiB (a
                                   # file of bad or blank lines costs the grader time and memory by the line)


class UploadError(ValueError):
    """An upload that cannot be read as a set of prediction files (a bad zip, an ambiguous set); says why."""


def _too_large(what: str, board: Board) -> UploadError:
    """The error of an upload whose prediction files hold more than MAX_BYTES: what they hold, then the cap."""
    return UploadError(f"{what} (the cap on an upload's prediction files); the {board.count} files of the course "
                       "hold less than 1 MiB")


@dataclass
class Upload:
    """The prediction files found: file name -> local path, and how to name each to the student."""

    files: dict[str, Path] = field(default_factory=dict)
    shown: dict[Path, str] = field(default_factory=dict)      # local path -> the name as in the upload
    notes: list[str] = field(default_factory=list)

    def display(self, text: str) -> str:
        """text with every local path replaced by the upload's own name for the file."""
        for local, name in sorted(self.shown.items(), key=lambda kv: -len(str(kv[0]))):
            text = text.replace(str(local), name)
        return text


def _levels(top: Path, depth: int = MAX_DEPTH) -> list[list[Path]]:
    """The folders under top, level by level (top first) down to `depth`, skipping hidden and tool folders; links
    never followed."""
    levels, level = [], [top]
    for _ in range(depth + 1):
        levels.append(level)
        level = sorted(d for base in level for d in base.iterdir()
                       if d.is_dir() and not d.is_symlink() and d.name not in SKIP_DIRS and not d.name.startswith("."))
    return levels


def _wanted(board: Board) -> str:
    """What to upload, in words."""
    return f"upload {board.wanted}, or the zip that python -m tasks.submit writes"


def _too_deep(found: list[str], label: str) -> str:
    """The message for prediction files found only more than MAX_DEPTH folders down (paths as in the upload)."""
    first = PurePosixPath(found[0])
    more = f" (and {len(found) - 1} more there)" if len(found) > 1 else ""
    return (f"{label}: found {first.name} at {first.parent}/{more}, more than {MAX_DEPTH} folders down, where the "
            f"leaderboard does not look; zip the {first.parent.name}/ folder itself, or the files")


def _find_files(top: Path, label: str, board: Board) -> Upload:
    """The shallowest copy of each of the board's files under top; two copies at the same depth are an error."""
    upload = Upload()
    levels = _levels(top)
    for name in board.files:
        for level in levels:
            hits = [d / name for d in level if (d / name).is_file() and not (d / name).is_symlink()]
            if len(hits) > 1:
                where = ", ".join(f"{label}/{h.relative_to(top).as_posix()}" for h in hits)
                raise UploadError(f"{name} is in the upload twice at the same depth ({where}); upload one copy")
            if hits:
                upload.files[name] = hits[0]
                upload.shown[hits[0]] = f"{label}/{hits[0].relative_to(top).as_posix()}".removeprefix("./")
                break
    total = sum(path.stat().st_size for path in upload.files.values())
    if total > MAX_BYTES:
        raise _too_large(f"the prediction files hold {total / 2**20:.1f} MiB in all, more than {MAX_BYTES // 2**20} MiB",
                         board)
    return upload


def looks_zipped(path: Path) -> bool:
    """Whether a file is meant as a zip: named .zip (in any case) or starting as one does; read as a zip, a damaged
    one is refused with the zip reader's reason."""
    if path.suffix.lower() == ".zip" or zipfile.is_zipfile(path):
        return True
    with open(path, "rb") as f:
        return f.read(2) == b"PK"


def zips_in(top: Path, depth: int = MAX_DEPTH) -> list[Path]:
    """The .zip files (any case) of the shallowest level under top, down to `depth` folders, that holds any."""
    for level in _levels(top, depth):
        found = sorted(f for d in level for f in d.iterdir()
                       if f.suffix.lower() == ".zip" and f.is_file() and not f.is_symlink())
        if found:
            return found
    return []


def extract_predictions(archive: Path, out: Path, label: str, board: Board) -> Upload:
    """Check every member of archive, then copy the board's files it holds into out (one folder per depth)."""
    try:
        with zipfile.ZipFile(archive) as z:
            members = checked_members(z, MAX_MEMBERS)
            infos = [info for info, _ in members]
            wanted = [(info, path) for info, path in members if not info.is_dir() and path.name in board.files
                      and not any(p in SKIP_DIRS for p in path.parts) and len(path.parts) <= MAX_DEPTH + 1]
            budget = [MAX_BYTES]
            upload = Upload()
            by_depth: dict[str, list[tuple[int, zipfile.ZipInfo, PurePosixPath]]] = {}
            for info, path in wanted:
                by_depth.setdefault(path.name, []).append((len(path.parts), info, path))
            for name, hits in sorted(by_depth.items()):
                depth = min(d for d, _, _ in hits)
                top = [(info, path) for d, info, path in hits if d == depth]
                if len(top) > 1:
                    raise UploadError(f"{name} is in {label} twice at the same depth "
                                      f"({', '.join(str(p) for _, p in top)}); zip one copy")
                info, path = top[0]
                local = out / name
                copy_member(z, info, local, budget)
                upload.files[name] = local
                upload.shown[local] = f"{label}:{path}"
            deep = [str(path) for info, path in members if not info.is_dir() and path.name in board.files
                    and path.name not in upload.files and len(path.parts) > MAX_DEPTH + 1]
            if not upload.files and deep:
                raise UploadError(_too_deep(deep, label))
            if not upload.files:
                raise UploadError(f"{label} holds no prediction file (it holds: {_listing(i.filename for i in infos)}); "
                                  f"{_wanted(board)}")
            if deep:
                upload.notes.append(_too_deep(deep, label))
            return upload
    except TooLarge:
        raise _too_large(f"{label}: the prediction files hold more than {MAX_BYTES // 2**20} MiB uncompressed",
                         board) from None
    except UnsafeZip as e:
        raise UploadError(f"{label}: {e}; zip the {board.count} files themselves") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError) as e:
        raise UploadError(f"{label}: not a readable zip file ({e}); zip the {board.count} files again") from None
    except (OSError, RuntimeError) as e:          # RuntimeError: an encrypted member
        raise UploadError(f"{label}: cannot read the zip ({e}); zip the {board.count} files without a "
                          "password") from None


def find_upload(submission: str | Path, work: str | Path, board: Board) -> Upload:
    """The board's prediction files in an upload (a folder or a zip); zips are read into work. An upload without any
    is an error that lists what it holds; the caller reports each file missing from a partial set."""
    submission, work = Path(submission), Path(work)
    if submission.is_file():
        if not looks_zipped(submission):
            raise UploadError(f"{submission.name}: neither a folder nor a zip file; {_wanted(board)}")
        return extract_predictions(submission, work / "zip0", submission.name, board)   # a damaged zip: its reason
    if not submission.is_dir():
        raise UploadError(f"{submission}: no such file or folder")
    upload = _find_files(submission, ".", board)
    zips = zips_in(submission)
    if upload.files and zips and len(upload.files) < len(board.files):
        names = ", ".join(z.relative_to(submission).as_posix() for z in zips)
        raise UploadError(f"{names} not read, because loose prediction files lie beside it ("
                          f"{', '.join(sorted(upload.files))}); upload the zip alone, or the {board.count} files alone")
    deep = [p.relative_to(submission).as_posix() for name in board.files if name not in upload.files
            for p in sorted(submission.rglob(name)) if p.is_file() and len(p.relative_to(submission).parts) > MAX_DEPTH + 1]
    if upload.files:
        upload.notes += [_too_deep(deep, "the upload")] if deep else []
        return upload
    if deep and not zips:
        raise UploadError(_too_deep(deep, "the upload"))
    if len(zips) > 1:
        names = ", ".join(z.relative_to(submission).as_posix() for z in zips)
        raise UploadError(f"the upload holds several zip files ({names}) and no prediction file; upload one")
    if not zips:
        found = (p.relative_to(submission).as_posix() for p in sorted(submission.rglob("*")) if p.is_file())
        raise UploadError(f"no prediction file in the upload (it holds: {_listing(found)}); {_wanted(board)}")
    upload = extract_predictions(zips[0], work / "zip0", zips[0].relative_to(submission).as_posix(), board)
    upload.notes.append(f"read the prediction files from {zips[0].relative_to(submission).as_posix()}")
    return upload


def _listing(names: Iterable[str], shown: int = 10) -> str:
    """The first few names of a listing, and how many more."""
    names = list(names)
    more = f", ... ({len(names) - shown} more)" if len(names) > shown else ""
    return (", ".join(names[:shown]) or "nothing") + more
