"""A run's relative paths, read from the folder the run started in (its run.json's "cwd"): the data folder and task
files, --after-simcse's directory, a --model that was a local directory, DeeBERT's --from-run, and where the run
writes (--checkpoint, --predictions-dir). Predict, export, ensemble and attention read them so (trained_files, and
a run's trained_checkpoint and prediction_folder); --resume DIR and a run.json given as --config too, when run from
another folder (replayed); a resumed run's checkpoint compares its recorded paths so (same_place, read_as), and tasks.predict
names a labelled file that is not the one the run read (changed_files). A run folder copied with the folder it started
in reads and writes in the copy (copied, located, moved)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Collection
from pathlib import Path
from typing import Any

from minbert.checkpoint import PACKAGED

from .errors import MissingFileError

WRITTEN = ("run.checkpoint", "run.predictions_dir")   # where a run writes: joined to its start whether there yet or not
_started_in: Path | None = None   # the folder the run being resumed started in: its checkpoint's relative paths'
_moved: tuple[Path, Path] | None = None   # (folder copied, its copy) when that folder was copied with the run since
_for_default: set[Path] = set()   # files given now for a task file the run left unset, of the same bytes: other_files
_same_bytes: set[tuple[Path, Path]] = set()   # (a file the run read, a file given now) of the same bytes: same_bytes


def is_path_setting(key: str) -> bool:
    """Whether a dotted setting names a file or folder of the run's data: files.data_dir, files.after_simcse, files.*
    of a split (_train, _dev, _test) or a classifier's *_file."""
    name = key.removeprefix("files.")
    return key.startswith("files.") and (name in ("data_dir", "after_simcse") or
                                         name.endswith(("_train", "_dev", "_test", "_file")))


def _path_values(settings: dict[str, Any]) -> dict[str, str]:
    """{dotted path: value} of a run.json's path settings, relative or absolute: its files, its --checkpoint and
    --predictions-dir, DeeBERT's --from-run, and its --model (a name that may be a local directory; a packaged alias
    such as minilm is never one)."""
    files, training = settings.get("files") or {}, settings.get("training") or {}
    found = {f"files.{k}": v for k, v in (files.items() if isinstance(files, dict) else ())
             if is_path_setting(f"files.{k}") and isinstance(v, str) and v}
    for key in (*WRITTEN, "sweep.from_run"):
        section, name = key.split(".")
        value = settings.get(section).get(name) if isinstance(settings.get(section), dict) else None
        if isinstance(value, str) and value:
            found[key] = value
    model = training.get("model") if isinstance(training, dict) else None
    if isinstance(model, str) and model and model not in PACKAGED:
        found["training.model"] = model
    return found


def relative_paths(settings: dict[str, Any]) -> dict[str, str]:
    """{dotted path: value} of a run.json's relative path settings (_path_values's that are not absolute)."""
    return {k: v for k, v in _path_values(settings).items() if not Path(v).is_absolute()}


def _runs_at(record: dict[str, Any], start: Path, here: Path) -> list[Path]:
    """Where a run.json `record` says its run folder was written (absolute, lexical): its run_dir, its --run-dir joined
    to `start`, or for a record of neither (a default run folder, before run_dir was recorded) start/runs/NAME (or
    under $MINBERT_RUNS)."""
    run = record["settings"].get("run")
    given = run.get("run_dir") if isinstance(run, dict) else None
    found = [Path(os.path.normpath(start / w)) for w in (record.get("run_dir"), given) if isinstance(w, str) and w]
    roots = dict.fromkeys(["runs", os.environ.get("MINBERT_RUNS") or "runs"])
    return found or [Path(os.path.normpath(start / root / here.name)) for root in roots]


def _holds(record: dict[str, Any], start: Path, old: Path, new: Path) -> bool:
    """Whether `new` holds the run's files that lie under `old` (relative ones joined to `start`, absolute ones) at the
    same places: each one `old` holds (where `old` is gone, any one), of the files it reads (of where it writes only if
    it reads none there: a copy may leave out a checkpoint). A copy or renamed `old`, not a folder that merely ends in
    runs/NAME."""
    values = _path_values(record["settings"])
    under = {k: f for k, f in ((k, Path(os.path.normpath(start / v))) for k, v in values.items())
             if f.is_relative_to(old) and f != old}
    inputs = [f for k, f in under.items() if k not in WRITTEN]      # what it reads; where it writes if nothing
    files = inputs or list(under.values())
    if not old.is_dir():
        return any((new / f.relative_to(old)).exists() for f in files)
    there = [f for f in files if f.exists()]
    return bool(there) and all((new / f.relative_to(old)).exists() for f in there)


def copied(record: dict[str, Any], directory: str | Path) -> tuple[Path, Path] | None:
    """(the folder copied, its copy) when the run folder `directory` of run.json `record` is no longer where the run
    wrote it but at the same place under another folder that holds the run's files as the first does (cp -r hw hw2, mv
    hw hw2: the run folder or a folder above it, up to the one it shares with where the run started, the nearest that
    fits); None for a run folder where it was written or moved on its own (its recorded paths hold), or a run.json
    without an absolute cwd."""
    cwd, settings = record.get("cwd"), record.get("settings")
    if not isinstance(cwd, str) or not os.path.isabs(cwd) or not isinstance(settings, dict):
        return None                      # no cwd recorded (or a relative one), a malformed run.json: its reader says so
    start, here = Path(os.path.normpath(cwd)), Path(os.path.abspath(directory))
    written = _runs_at(record, start, here)
    if any(w.resolve() == here.resolve() for w in written):
        return None
    for was in written:
        top = Path(os.path.commonpath([start, was]))          # e.g. hw for hw/part1 and hw/runs/r1
        for old in [was, *was.parents]:                       # the run folder itself (--run-dir .), its parents, ...
            tail = was.relative_to(old).parts
            if tail == here.parts[len(here.parts) - len(tail):]:
                new = Path(*here.parts[:len(here.parts) - len(tail)])
                if new != old and _holds(record, start, old, new):
                    return old, new
            if old == top:                                    # ... up to the folder it shares with the start
                break
    return None


def located(record: dict[str, Any], directory: str | Path) -> dict[str, Any]:
    """A run.json `record` read in the run folder `directory`; where its folder was copied with the run (copied), its
    cwd the copy's, and the two folders as moved_from and moved_to, under which its absolute paths are read (moved)."""
    pair = copied(record, directory)
    if pair is None:
        return record
    old, new = pair
    return record | {"cwd": moved(record["cwd"], old, new), "moved_from": str(old), "moved_to": str(new)}


def moved(value: str, old: str | Path | None, new: str | Path | None) -> str:
    """A recorded path, absolute under the folder its run was copied from (`old`, located's moved_from): the same place
    under the copy (`new`); any other path as it is."""
    path = Path(os.path.normpath(value)) if Path(value).is_absolute() else None
    return str(Path(new) / path.relative_to(old)) if old and new and path and path.is_relative_to(old) else value


def _moved_paths(record: dict[str, Any]) -> dict[str, Path]:
    """{dotted path: path} of a run.json's absolute path settings under the folder its run was copied from, under the
    copy (moved)."""
    old, new = record.get("moved_from"), record.get("moved_to")
    return {k: Path(moved(v, old, new)) for k, v in _path_values(record["settings"]).items()
            if Path(v).is_absolute() and moved(v, old, new) != v}


def trained_files(record: dict[str, Any]) -> dict[str, str]:
    """{dotted path: path} of each relative path of a run.json that exists joined to the folder the run started in
    (a --model only as a directory there: otherwise a Hub name; where it writes, WRITTEN, whenever that folder is
    there); one that does not exist there (the run directory moved to another machine, the folder since moved) is left
    out, read from the current folder as a run.json written before the cwd was recorded is. So predict, export,
    ensemble and attention find a run's files from anywhere."""
    cwd, settings = record.get("cwd"), record.get("settings")
    if not isinstance(cwd, str) or not isinstance(settings, dict):
        return {}
    joined = {k: Path(cwd) / v for k, v in relative_paths(settings).items()} | _moved_paths(record)
    return {k: str(p) for k, p in joined.items()
            if (p.is_dir() if k == "training.model" else Path(cwd).is_dir() if k in WRITTEN else p.exists())}


def replayed(record: dict[str, Any], source: str, replaced: Collection[str] = ()) -> dict[str, Any]:
    """A run.json's settings (--resume DIR, --config DIR/run.json) with its relative paths joined to the folder the run
    started in, when that is not this one and they exist there; a task file found neither there nor here is one line
    saying which folder its path is relative to. The settings in `replaced` (dotted; flags given beside it) are left
    out: a file they replace need not exist."""
    cwd, settings = record.get("cwd"), record["settings"]
    if not isinstance(settings, dict):
        return settings
    out = {section: {k: v for k, v in values.items() if f"{section}.{k}" not in replaced}
           if isinstance(values, dict) else values for section, values in settings.items()}
    if not isinstance(cwd, str):
        return out
    joined, moved_alone = trained_files(record), _moved_paths(record)
    here = Path(cwd).resolve() == Path.cwd().resolve()          # from where it started: its absolute paths moved alone
    for key, value in relative_paths(settings).items() if not here else ():
        if key not in joined and key not in replaced and key not in ("training.model", "files.data_dir", *WRITTEN) and \
                not Path(value).exists():
            raise MissingFileError(f"{source}: setting {key!r}: {value}: no such file, relative to {cwd}, where the "
                                   f"run started (nor here, {Path.cwd()}): run from there, or put the file back")
    for key, path in joined.items():
        section, name = key.split(".", 1)
        if key not in replaced and not (here and key not in moved_alone):
            out[section][name] = path
    return out


def started_in(folder: str | Path | None, moved_from: str | Path | None = None,
               moved_to: str | Path | None = None) -> None:
    """The folder the run being resumed started in (its run.json's cwd; None: this one), which same_place reads the
    checkpoint's relative paths from, and the folder copied with the run and its copy (located's moved_from and
    moved_to), under which the checkpoint's absolute paths are read (moved)."""
    global _started_in, _moved
    _started_in = Path(folder) if folder else None
    _moved = (Path(moved_from), Path(moved_to)) if moved_from and moved_to else None


def _recorded(was: str, start: str | Path | None) -> Path:
    """The file a checkpoint's recorded path `was` names now: relative to `start` (else started_in's folder); an
    absolute one under the folder copied with the run, under its copy (started_in's)."""
    path = Path(moved(was, *_moved) if _moved else was)
    return ((Path(start) if start else started_from()) / path).resolve()


def started_from() -> Path:
    """The folder the run being resumed started in (started_in's; this one if none was given)."""
    return _started_in or Path.cwd()


def same_place(was: Any, now: Any, start: str | Path | None = None) -> bool:
    """Whether a path a run recorded (`was`, relative to the folder it started in: `start`, else started_in's) and
    one given now (relative to this folder) name the same file or folder, or files a resume took as the same bytes
    (same_bytes)."""
    if was is None and isinstance(now, str) and now and Path(now).resolve() in _for_default:
        return True
    if not isinstance(was, str) or not isinstance(now, str) or not was or not now:
        return was == now
    pair = _recorded(was, start), Path(now).resolve()
    return was == now or pair[0] == pair[1] or pair in _same_bytes


def same_bytes(key: str, was: Any, now: Any, record: dict[str, Any]) -> bool:
    """Whether a resumed run's file setting `key` (a task file, or the data folder), `was` in its run.json `record`
    and `now` on the command line, reads labelled files of the bytes the record's data_files say the run read (size and
    sha256; under another folder, the same names); then same_place takes each such pair as the same file, for the
    checkpoint's checks, until forget_same_bytes."""
    if not isinstance(was, str) or not isinstance(now, str) or key in ("files.after_simcse", "training.model"):
        return False
    cwd = Path(record.get("cwd") or ".")
    old_root, new_root = (cwd / was).resolve(), Path(now).resolve()
    pairs, compared = {(old_root, new_root)}, 0
    for f, mark in (record.get("data_files") or {}).items():
        old = (cwd / f).resolve()
        if not mark.get("labelled", True) or not (old == old_root or (key == "files.data_dir"
                                                                     and old.is_relative_to(old_root))):
            continue
        new = new_root / old.relative_to(old_root) if old != old_root else new_root
        data = new.read_bytes() if new.is_file() else None
        if data is None or (len(data), hashlib.sha256(data).hexdigest()) != (mark.get("bytes"), mark.get("sha256")):
            return False
        pairs.add((old, new))
        compared += 1
    if not compared:                                      # no labelled file of the record: nothing to compare
        return False
    _same_bytes.update(pairs)
    return True


def default_file(settings: Any, key: str) -> str | None:
    """The data folder's file a run read for the task file setting `key` left unset (files.train_file, files.para_dev,
    ...): its `files.path(task, split)`, of the run's `settings` object; None for another setting."""
    files, name = getattr(settings, "files", None), key.removeprefix("files.")
    if not key.startswith("files.") or not hasattr(files, "path"):
        return None
    task, split = (getattr(settings, "task", None), name[:-5]) if name.endswith("_file") else name.partition("_")[::2]
    return str(files.path(task, split)) if task and split in ("train", "dev", "test") else None


def other_files(record: dict[str, Any], flags: dict[str, Any], defaults: dict[str, str] | None = None) -> list[str]:
    """'path: run.json X, now Y' for each file flag (or --model) given to resume the run of run.json `record` that names
    another file than the record's (a relative one read from the folder the run started in; for a task file the run
    left unset, the data folder's file it read, `defaults`, default_file) and is not of the same bytes (same_bytes)."""
    differ = []
    for key, now in flags.items():
        if now is None or not (is_path_setting(key) or key == "training.model"):
            continue
        section, name = key.split(".", 1)
        values = record["settings"].get(section)
        was = values.get(name) if isinstance(values, dict) else None
        read = (defaults or {}).get(key) if was is None else was      # the file the run read
        if same_place(read, now, record.get("cwd")) or same_bytes(key, read, now, record):
            if was is None and read is not None:          # the data folder's file, named now: the checkpoint's None
                _for_default.add(Path(now).resolve())
            continue
        notes = [f"the data folder's {read}"] if read is not None and read != was else []
        if record.get("cwd") and isinstance(read, str) and not Path(read).is_absolute():
            notes.append(f"relative to {record['cwd']}, where the run started")
        differ.append(f"{key}: run.json {was!r}" + (f" ({', '.join(notes)})" if notes else "") + f", now {now!r}")
    return differ


def read_as(recorded: str, read: Collection[str], start: str | Path | None = None) -> str | None:
    """Which of the files `read` now is the file a checkpoint `recorded` (relative to `start`, else started_in's): the
    same place (same_place), the same name under a folder a resume took as the same bytes (same_bytes), or, its start
    folder's file gone, the same path read from here; None if none is."""
    found = next((r for r in read if same_place(recorded, r, start)), None)
    if found is not None:
        return found
    old = _recorded(recorded, start)
    mapped = {new / old.relative_to(was) for was, new in _same_bytes if old.is_relative_to(was) and old != was}
    if not old.exists():
        mapped.add(Path(recorded).resolve())
    return next((r for r in read if Path(r).resolve() in mapped), None)


def forget_same_bytes() -> None:
    """Start a command's parse with no files taken as the same bytes (same_bytes, other_files)."""
    _same_bytes.clear()
    _for_default.clear()


def changed_files(recorded: dict | None, read: dict[str, dict], start: str | Path | None,
                  copy: tuple[str, str] | None = None) -> list[str]:
    """Each labelled file of `read` ({path as read now: {"bytes", "sha256", "labelled"}}, tasks.core.data.files_read)
    whose bytes or sha256 differ from what a checkpoint `recorded` of the same file (its paths relative to `start`,
    the folder the run started in; absolute ones under the folder copied with the run, `copy`'s first, under its
    second: located's moved_from and moved_to)."""
    recorded = {moved(f, *copy) if copy else f: mark for f, mark in (recorded or {}).items()}
    changed = []
    for path, now in read.items():
        if not now.get("labelled", True):
            continue
        was = next((mark for f, mark in (recorded or {}).items() if same_place(f, path, start or Path.cwd())), None)
        if was is not None and (was.get("bytes"), was.get("sha256")) != (now.get("bytes"), now.get("sha256")):
            changed.append(path)
    return changed


def prediction_folder(directory: str | Path) -> Path:
    """Where the run in `directory` wrote its prediction files: the --predictions-dir its run.json records (a relative
    one from the folder the run was started in, run.json's cwd; the current folder for a record without it), else
    DIRECTORY/predictions."""
    from .runs import read_run_json
    record = read_run_json(directory)
    run = record["settings"].get("run")
    given = run.get("predictions_dir") if isinstance(run, dict) else None
    if not given:
        return Path(directory) / "predictions"
    return Path(record.get("cwd") or ".") / moved(given, record.get("moved_from"), record.get("moved_to"))


def trained_checkpoint(path: str | Path) -> Path:
    """The checkpoint holding a run's trained model: a checkpoint file itself; a run directory's --checkpoint (a
    relative one from the folder the run started in, as trained_files joins it) or checkpoint.pt, or for DeeBERT stage
    2's (that of the run it loaded with --from-run); a DeeBERT directory written before run directories, its
    stage2.pt."""
    from .runs import CHECKPOINT, RUN_FILE, STAGE2, read_run_json
    path = Path(path)
    if path.is_file():
        return path
    if not (path / RUN_FILE).is_file():
        return path / STAGE2
    record = read_run_json(path)
    settings, joined = record.get("settings") or {}, trained_files(record)
    if record.get("command") == "deebert":
        from_run = joined.get("sweep.from_run") or (settings.get("sweep") or {}).get("from_run")
        return trained_checkpoint(from_run) if from_run else path / STAGE2
    return Path(joined.get("run.checkpoint") or (settings.get("run") or {}).get("checkpoint") or path / CHECKPOINT)
