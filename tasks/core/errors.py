"""The error boundary of every CLI: the project's own error types, one message per user error, argparse value types.

A user error (a bad file, a bad flag value, a checkpoint that cannot be read or resumed) is raised as one of
USER_ERRORS with a message that reads `PATH:LINE: what is wrong; what to do`; run_cli prints it as
`error: ...` on stderr and exits 1, without a traceback. So does a student tree's unwritten stub, whatever command
reaches it: its bare NotImplementedError becomes the line naming the function, its file:line and the check to run
(tasks/core/unfinished.py); so does a student's function that returns the wrong shape (minbert.shapes.ShapeError,
raised where the given code calls it). Anything else is a bug in minbert and keeps its traceback. Argument values
are checked at parse time by the type helpers below (argparse exits 2). Ctrl-C prints the command that continues
the run (tasks.core.runs.run_paths notes it).

    if __name__ == "__main__":
        sys.exit(run_cli(main))
"""

from __future__ import annotations

import argparse
import errno
import math
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

from minbert.checkpoint import CheckpointError
from minbert.shapes import ShapeError

from .tree import command
from .unfinished import unfinished_message


class UserError(Exception):
    """A problem with what the user gave (a file, a flag, a checkpoint), not a bug; the message says where and why."""


class ConfigurationError(UserError, ValueError):
    """A combination of settings that cannot run (a device that is absent, flags that contradict each other)."""


class ResumeError(UserError, ValueError):
    """A training checkpoint that cannot be resumed: unreadable, damaged, or written by a different run."""


class MissingFileError(UserError, FileNotFoundError):
    """A file or directory the user named does not exist."""


class TrainingError(UserError, RuntimeError):
    """A run that cannot go on (a NaN or infinite loss); the last good checkpoint is kept."""


class TermError(UserError, TypeError):
    """An extension term (tasks/core/terms.py) that breaks the terms' contract: its build(), loss() or state() gives
    what the loop cannot use; the message names the term and the file:line of its function."""


USER_ERRORS: tuple[type[BaseException], ...] = (UserError, CheckpointError, ShapeError)
EXIT_USER_ERROR = 1
# an OSError about a path the user gave (a file where a folder is needed, a folder not there, no permission):
# run_cli prints `error: PATH: reason` when it names the path, instead of a traceback
PATH_ERRNOS = frozenset({errno.ENOENT, errno.EISDIR, errno.ENOTDIR, errno.EEXIST, errno.EACCES, errno.EPERM,
                         errno.EROFS, errno.ENAMETOOLONG, errno.ELOOP})


def diverged(value: float, epoch: int, step: int, task: str | None, unit: str, checkpoint: str | Path | None,
             finished: int) -> None:
    """Stop a run whose loss became NaN or infinite, naming where; the last checkpoint on disk is left as it is.
    `finished`: the loop's finished epochs (rounds), which say what a checkpoint on disk holds (a --save-every step
    checkpoint of the first holds none, and tasks.predict refuses it)."""
    if checkpoint is None or not Path(checkpoint).is_file():
        kept = "no checkpoint had been written yet"
    elif finished:
        kept = (f"{checkpoint} still holds the last finished {unit} ({command('predict')} can use it; resumed, the run "
                "would diverge again: a resume repeats it exactly)")
    else:
        kept = (f"{checkpoint} holds no finished {unit} (a step checkpoint of {unit} {epoch + 1}: resumed, the run "
                "would diverge again, a resume repeats it exactly)")
    raise TrainingError(f"the training loss is {value} in {unit} {epoch + 1}, optimiser step {step + 1}"
                        f"{f', task {task}' if task else ''}; {kept}. Start a new run with a lower --lr or "
                        "--max-grad-norm, or check the data for extreme labels")


_RUN: dict[str, Path | str] = {}    # the run this process trains (run_paths notes it): what Ctrl-C's line names


def running(command: str, directory: Path, checkpoint: Path, run_json: Path) -> None:
    """Note the run the command trains (tasks.core.runs.run_paths), for the line Ctrl-C prints (run_cli); a command
    that trains runs of its own (tasks.search) has said its own line with on_interrupt, which stays."""
    if "line" not in _RUN:
        _RUN.update(command=command, dir=directory, checkpoint=checkpoint, run_json=run_json)


def on_interrupt(line: str) -> None:
    """The line Ctrl-C prints for this command, whatever runs it trains (a search: run the same command again)."""
    _RUN.clear()
    _RUN["line"] = line


def interrupted_message() -> str:
    """The line for Ctrl-C: with a run noted, the command that continues it (--resume RUN_DIR once its checkpoint is
    written, else the restart in its directory that runs.no_checkpoint gives), since a rerun of the same command
    starts a new run in a new timestamped directory."""
    if not _RUN:
        return "interrupted (Ctrl-C)"
    if "line" in _RUN:
        return str(_RUN["line"])
    command, directory = _RUN["command"], shlex.quote(str(_RUN["dir"]))
    if Path(_RUN["checkpoint"]).is_file():
        return f"interrupted (Ctrl-C); continue it with: python -m tasks.{command} --resume {directory}"
    if Path(_RUN["run_json"]).is_file():
        return (f"interrupted (Ctrl-C) before the run's first checkpoint; start it again in its directory: "
                f"python -m tasks.{command} --config {shlex.quote(str(_RUN['run_json']))} --run-dir {directory}")
    return f"interrupted (Ctrl-C) before the run {_RUN['dir']} had saved anything; run the command again"


def run_cli(main: Callable[[], int | None]) -> int:
    """Call a CLI's main(); a user error, or a stub not written yet, becomes `error: MESSAGE` on stderr and exit
    status 1, a bug keeps its traceback, Ctrl-C exits 130 with one line (the command that continues the run). An
    OSError naming a path (a full disk, a folder missing, a directory where a file goes: PATH_ERRNOS) is one line
    too: `error: PATH: reason`."""
    _RUN.clear()
    try:
        return main() or 0
    except USER_ERRORS as e:
        sys.stdout.flush()
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    except NotImplementedError as e:
        message = unfinished_message(e)
        if message is None:                         # not a stub of minbert/ or tasks/: keep its traceback
            raise
        sys.stdout.flush()
        print(f"error: {message}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        sys.stdout.flush()
        print(interrupted_message(), file=sys.stderr)
        return 130
    except OSError as e:
        path = e.filename2 if e.filename2 is not None else e.filename   # a rename's: its target, not the temporary
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            sys.stdout.flush()
            print(f"error: {path or 'a file'}: {os.strerror(e.errno)}; every file is written to a temporary "
                  "file and renamed, so the previous version is intact: free some space and run again (a run with a "
                  "checkpoint continues with --resume)", file=sys.stderr)
            return EXIT_USER_ERROR
        if path is None or e.errno not in PATH_ERRNOS:
            raise                                   # anything else may be a bug: keep its traceback
        sys.stdout.flush()
        print(f"error: {path}: {os.strerror(e.errno)}", file=sys.stderr)
        return EXIT_USER_ERROR


def _number(kind: type, text: str) -> float | int:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {'an integer' if kind is int else 'a number'}: {text!r}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, not {text}")
    return value


def finite_float(text: str) -> float:
    """A finite number of either sign (a bias, a tolerance)."""
    return _number(float, text)


def positive_int(text: str) -> int:
    """An integer >= 1 (sizes, counts, epochs)."""
    value = _number(int, text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text}")
    return value


def token_limit(text: str) -> int:
    """A --max-length: an integer >= 3, room for a pair's special tokens ([CLS] a [SEP] b [SEP])."""
    value = _number(int, text)
    if value < 3:
        raise argparse.ArgumentTypeError(f"must be at least 3 ([CLS] a [SEP] b [SEP] take 3), not {text}")
    return value


def nonnegative_int(text: str) -> int:
    """An integer >= 0."""
    value = _number(int, text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {text}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (learning rates, temperatures)."""
    value = _number(float, text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {text}")
    return value


def nonnegative_float(text: str) -> float:
    """A finite number >= 0 (weight decay, loss weights)."""
    value = _number(float, text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {text}")
    return value


def probability(text: str) -> float:
    """A dropout rate or a fraction: a number in [0, 1)."""
    value = _number(float, text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), not {text}")
    return value


def fraction(text: str) -> float:
    """A share or a momentum: a number in [0, 1]."""
    value = _number(float, text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], not {text}")
    return value


def unit_interval(text: str) -> float:
    """A multiplier in (0, 1] (a decay factor; 1: none)."""
    value = _number(float, text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], not {text}")
    return value


def user_path(text: str) -> str:
    """A path with a leading ~ or ~USER expanded (the shell leaves `--flag=~/x`, a config file's and run.json's as
    they are); `~name` of no user stays a relative name, as the shell reads it (os.path.expanduser: pathlib's raises)."""
    return os.path.expanduser(text)


def existing_file(text: str) -> str:
    """A path to a file that exists and can be read (~ expanded, as by every path parser here)."""
    path = Path(user_path(text))
    if not path.is_file():
        why = "is a directory, not a file" if path.is_dir() else "no such file"
        raise argparse.ArgumentTypeError(f"{text}: {why}")
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"{text}: not readable (permissions)")
    return user_path(text)


def existing_path(text: str) -> str:
    """A path to a file or a directory that exists (~ expanded)."""
    if not Path(user_path(text)).exists():
        raise argparse.ArgumentTypeError(f"{text}: no such file or directory")
    return user_path(text)


def existing_dir(text: str) -> str:
    """A path to a directory that exists (~ expanded)."""
    if not Path(user_path(text)).is_dir():
        raise argparse.ArgumentTypeError(f"{text}: no such directory")
    return user_path(text)


def _file_above(path: Path) -> Path | None:
    """The nearest existing folder above `path` when it is not a folder (a file where a folder would be made)."""
    for parent in path.parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


def directory_to_write(text: str) -> str:
    """A directory to write files into: absent (it is made, with any folder above it) or a directory, not an
    existing file, nor under one."""
    path = Path(user_path(text))
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file, not a directory: give a directory to write into")
    above = _file_above(path)
    if above is not None:
        raise argparse.ArgumentTypeError(f"{text}: {above} is a file, not a directory: give a directory to write into")
    return user_path(text)


def file_to_write(text: str) -> str:
    """A file to write: new or an existing file (the folders above it are made), not a directory, nor under a
    file."""
    path = Path(user_path(text))
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty name: give a file name")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory, not a file: give a file name, such as "
                                         f"{Path(text) / 'NAME'}")
    above = _file_above(path)
    if above is not None:
        raise argparse.ArgumentTypeError(f"{text}: {above} is a file, not a directory: give a path in a folder")
    return user_path(text)


def figure_to_write(text: str) -> str:
    """A figure to write (file_to_write): a name without an extension gets .png, which is what matplotlib writes."""
    text = file_to_write(text)
    suffix = Path(text).suffix.lower().lstrip(".")
    if not suffix:
        return f"{text}.png"
    if suffix != "png":
        from matplotlib.backend_bases import FigureCanvasBase
        known = FigureCanvasBase.get_supported_filetypes()
        if suffix not in known:
            raise argparse.ArgumentTypeError(f"{text}: matplotlib writes no .{suffix} figure; end the name with .png "
                                              f"(or {', '.join(f'.{k}' for k in sorted(known) if k != 'png')})")
        if suffix == "pgf":                          # written through a TeX system: refused here, not after the work
            import shutil

            import matplotlib
            tex = matplotlib.rcParams["pgf.texsystem"]
            if shutil.which(tex) is None:
                raise argparse.ArgumentTypeError(f"{text}: matplotlib writes a .pgf figure through {tex}, which is not "
                                                  "installed here: end the name with .png, .pdf or .svg")
    return text


def another_run(path: str | Path, own: str | Path) -> tuple[Path, Path] | None:
    """(run directory, its prediction folder) of another run than `own` whose prediction folder `path` lies in: a
    command writing there would replace that run's files (None: no other run's; a flat run's folder beside it is
    not its prediction folder)."""
    from .runs import RUN_FILE
    own, where = Path(own).resolve(), Path(user_path(str(path))).resolve()
    for folder in (where, *where.parents):
        if folder == own:
            return None
        if (folder / RUN_FILE).is_file():
            preds = _prediction_folder(folder)
            if where == preds or preds in where.parents:
                return folder, preds
    return None


def _prediction_folder(folder: Path) -> Path:
    """Where the run in `folder` writes its prediction files (run_files.prediction_folder; predictions/ for a run.json
    that cannot be read)."""
    from .run_files import prediction_folder
    try:
        return Path(user_path(str(prediction_folder(folder)))).resolve()
    except ConfigurationError:
        return (folder / "predictions").resolve()


def refuse_another_runs(path: str | Path, own: str | Path, flag: str) -> None:
    """Refuse a `flag PATH` to write into that lies in another run's directory (another_run), in one line."""
    found = another_run(path, own)
    if found is not None:
        other, preds = found
        raise ConfigurationError(f"{flag} {path} is inside {preds}, the prediction folder of another run ({other}), "
                                 f"whose files it would replace; leave {flag} out (this run's own: {Path(own)}), or "
                                 "give a folder outside other runs' prediction folders")
