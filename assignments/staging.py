"""What the grader takes from a submission: the folder (or zip) it is, each graded file found in it, and the staged
tree those files are laid over (a file that does not compile is not laid: its stub stays, and only the parts that
grade it score 0)."""

from __future__ import annotations

import shutil
import warnings
import zipfile
from pathlib import Path
from typing import NamedTuple

from .make import ROOT, generate, stubbed_files
from .profiles import DEFAULT_PROFILE

SKIP_DIRS = ("__MACOSX", "__pycache__", ".git", ".venv")
MAX_SOURCE = 256 * 1024    # bytes a graded file may have (the reference's largest is ~22 KB): compiling a bigger one
                           # could take the grader's memory (about 400 MiB a MiB of source), and it is never real work


def find_copies(submission: Path, rel: Path, depth: int = 2) -> list[Path]:
    """The submitted copies of rel at the shallowest level that holds one: at rel or by its bare name, in submission
    or up to `depth` folders down; [] when there is none.

    Zipping a folder puts every file one folder down (my-minbert/minbert/model.py), as Gradescope unpacks it.
    In each folder of a level, a full path beats a bare name; one copy from each folder of the level that holds one
    (two are two uploads side by side, draft/ and final/: stage() takes neither unless they are the same bytes). A
    link is never followed (a link to the reference's own file would be graded as the student's): a linked file or
    folder is as good as absent.
    """
    for level in _levels(submission, depth):
        copies = []
        for base in level:
            for cand, inner in ((base / rel, rel.parts[:-1]), (base / rel.name, ())):
                hops = [cand, *(base.joinpath(*inner[:i + 1]) for i in range(len(inner)))]   # rel's folders too
                if cand.is_file() and not any(h.is_symlink() for h in hops):
                    copies.append(cand)
                    break
        if copies:
            return copies
    return []


def _levels(submission: Path, depth: int):
    """The folders of each level, the submission's first, then its subfolders (no link, hidden or skipped one)."""
    level = [submission]
    for _ in range(depth + 1):
        yield level
        level = sorted(d for base in level for d in base.iterdir()
                       if d.is_dir() and not d.is_symlink() and d.name not in SKIP_DIRS and not d.name.startswith("."))


def find_links(submission: Path, rel: Path, depth: int = 2) -> list[Path]:
    """The symbolic links that stood where find_copies() looks for rel, at the shallowest level that holds one: the
    link itself, or a linked folder on rel's path; [] when there is none. Only named, never followed further (a linked
    folder of the level is not entered)."""
    for level in _levels(submission, depth):
        links = []
        for base in level:
            for cand, inner in ((base / rel, rel.parts[:-1]), (base / rel.name, ())):
                hops = [*(base.joinpath(*inner[:i + 1]) for i in range(len(inner))), cand]
                link = next((h for h in hops if h.is_symlink()), None)
                if link is not None and (cand.is_symlink() or cand.is_file()):
                    links.append(link)
                    break
        if links:
            return links
    return []


def find_submitted(submission: Path, rel: Path, depth: int = 2) -> Path | None:
    """The first of find_copies(), or None: where rel is taken from when it is there once."""
    copies = find_copies(submission, rel, depth)
    return copies[0] if copies else None


def same_bytes(paths: list[Path]) -> bool:
    """Whether the files hold the same bytes (each at most MAX_SOURCE: a bigger one is never read)."""
    sizes = {p.stat().st_size for p in paths}
    return len(sizes) == 1 and max(sizes) <= MAX_SOURCE and len({p.read_bytes() for p in paths}) == 1


class Staged(NamedTuple):
    """What stage() laid: one note per file, the files absent, and those not laid (file -> why: it does not parse,
    is too big to read, or is in the submission twice at the same depth): the parts that grade them score 0; and of
    the absent, those submitted as a symbolic link (file -> the link, relative to the submission)."""

    notes: list[str]
    missing: set[str]
    unparsed: dict[str, str]
    linked: dict[str, str]


def parse_error(source: bytes, rel: str) -> str | None:
    """None when source compiles (never run); else the checker's "minbert/model.py:359: does not parse: MSG"."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")          # a SyntaxWarning is no parse error
            compile(source, rel, "exec", dont_inherit=True)
    except SyntaxError as e:
        return f"{rel}{f':{e.lineno}' if e.lineno else ''}: does not parse: {e.msg}"
    except Exception as e:  # noqa: BLE001 -- odd input: null bytes (ValueError), nesting (MemoryError, RecursionError)
        return f"{rel}: does not parse: {type(e).__name__}{f': {e}' if str(e) else ''}"
    return None


def stage(submission: Path, staging: Path, files: list[str] | None = None, profile: str = DEFAULT_PROFILE,
          reference: tuple[str, ...] = ()) -> Staged:
    """A fresh student tree of `profile` in staging with the submission's files laid over it.

    files (relative to the root) are the ones taken from the submission, by default every file students fill in;
    the others stay the unfilled stubs, which import. A submitted file that does not compile is not laid (its stub
    stays, so that it costs only the parts that grade it), nor is one found twice at the same depth with other bytes
    (find_copies: which one is meant is not guessed). reference: files laid from this reference tree instead.
    """
    generate(staging, data=False, profile=profile)
    staged = Staged([], set(), {}, {})
    wanted = None if files is None else set(files)
    for rel in stubbed_files(ROOT):
        if wanted is not None and rel.as_posix() not in wanted:
            continue
        copies = find_copies(submission, rel)
        if not copies:
            links = find_links(submission, rel)
            if links:
                link = links[0].relative_to(submission).as_posix()
                staged.linked[rel.as_posix()] = link
                staged.notes.append(f"{rel}: {link} is a symbolic link, which the grader does not follow; upload the "
                                    "file itself (graded as the unfilled stub)")
            else:
                staged.notes.append(f"{rel}: not in the submission; graded as the unfilled stub")
            staged.missing.add(rel.as_posix())
            continue
        found = copies[0]
        if len(copies) > 1 and not same_bytes(copies):
            where = ", ".join(c.relative_to(submission).as_posix() for c in copies)
            times = "twice" if len(copies) == 2 else f"{len(copies)} times"
            problem = f"{rel} is in the submission {times} at the same depth ({where}); upload one copy"
            staged.unparsed[rel.as_posix()] = problem
            staged.notes.append(f"{problem}: the parts that grade it score 0, the other parts ran with the unfilled "
                                "stub in its place")
            continue
        size = found.stat().st_size
        source = found.read_bytes() if size <= MAX_SOURCE else b""   # read once: the bytes compiled are those laid
        problem = parse_error(source, rel.as_posix()) if size <= MAX_SOURCE else \
            f"{rel}: {size:,} bytes, over the {MAX_SOURCE:,} a graded file may have: not read"
        if problem is not None:
            staged.unparsed[rel.as_posix()] = problem
            staged.notes.append(f"{problem} (from {found.relative_to(submission)}); the parts that grade it score 0, "
                                "the other parts ran with the unfilled stub in its place")
            continue
        (staging / rel).write_bytes(source)
        staged.notes.append(f"{rel}: from {found.relative_to(submission)}")
    for rel in reference:
        shutil.copyfile(ROOT / rel, staging / rel)
    return staged


LOOKED = "looked at its top and up to two folders down"


class Opened(NamedTuple):
    """The folder graded for a submission, the notes on how it was found, and where a part's file was looked for."""

    folder: Path
    notes: list[str]
    looked: str


def open_submission(submission: Path, work: Path) -> Opened:
    """The folder to grade: submission, or its zip's graded files unpacked into work (a .zip, or one alone in it)."""
    # A path neither a folder nor a zip is refused (FileNotFoundError, ValueError), as is a zip given that cannot be
    # unpacked, and a Gradescope export (entries.BadUpload); a zip in a folder that cannot be unpacked, or that is not
    # read because the folder holds graded files, is said in the notes and in a missing file's parts' messages.
    from .entries import BadUpload, check_not_export, safe_extract
    from .uploads import zips_in
    if submission.is_file():
        if submission.suffix.lower() != ".zip" and not zipfile.is_zipfile(submission):
            raise ValueError(f"{submission}: neither a folder nor a .zip file; give the submitted tree, a folder of "
                             "the submitted files, or a zip of either")
        try:
            safe_extract(submission, work)
        except BadUpload as e:
            raise BadUpload(f"{submission}: {e}") from None
        return Opened(work, [f"read the graded files from {submission.name}"],
                      f"looked in {submission.name}, at its top and up to two folders down")
    if not submission.is_dir():
        raise FileNotFoundError(f"{submission}: no such folder or .zip file")
    try:
        check_not_export(submission)
    except BadUpload as e:
        raise BadUpload(f"{submission}: {e}") from None
    zips = zips_in(submission, depth=2)
    names = ", ".join(z.relative_to(submission).as_posix() for z in zips)
    if any(find_submitted(submission, rel) for rel in stubbed_files(ROOT)):
        if not zips:
            return Opened(submission, [], LOOKED)
        why = f"{names} {'was' if len(zips) == 1 else 'were'} not read: the folder also holds graded files"
        return Opened(submission, [why], f"{LOOKED}; {why}")
    if not zips:
        return Opened(submission, [], LOOKED)
    if len(zips) > 1:
        why = f"it holds several zip files ({names}) and none of the graded files; upload one"
    else:
        try:
            safe_extract(zips[0], work)
        except BadUpload as e:
            why = f"{names}: {e}"
        else:
            return Opened(work, [f"read the graded files from {names}"],
                          f"looked in {names}, at its top and up to two folders down")
    return Opened(submission, [f"not graded from a zip: {why}"], f"{LOOKED}; {why}")
