"""A directory per run: run.json (the command, its full typed settings, minbert's commit, torch and Python, the CPU or
GPU), the training checkpoint, the curves and predictions/. `--resume DIR` continues the run in DIR with the
settings in its run.json (flags given beside it may change only what a resumed run may change); `tasks.predict DIR`
and `tasks.export DIR` read run.json to know which command wrote it.

    runs/classifier-sst-full-model-20261125-153012/
        run.json  checkpoint.pt  checkpoint.curves.jsonl  checkpoint.curves.png  predictions/
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import torch

from .config_files import read_json
from .data import files_read, forget_files_read
from .distributed import DEVICE_HELP, DEVICES
from .errors import (
    ConfigurationError,
    MissingFileError,
    ResumeError,
    directory_to_write,
    existing_path,
    file_to_write,
    nonnegative_int,
    positive_int,
    refuse_another_runs,
    running,
)
from .evaluation import write_text
from .recipe import with_schedule_record
from .resume import before_values
from .run_files import default_file, forget_same_bytes, located, other_files, started_in
from .settings import build, dump, flatten, parse, read_config, setting
from .step import ATTENTION_KERNELS, READ_EVERY_GPU

RUN_FILE = "run.json"
CHECKPOINT = "checkpoint.pt"
STAGE2 = "stage2.pt"          # a DeeBERT run's trained model (its off-ramps trained): tasks/deebert
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class RunOptions:
    """Where the run writes, what hardware it uses and how it shows progress (a resumed run may change these)."""

    run_dir: str | None = setting(None, parse=directory_to_write, metavar="DIR", on_resume="free",
                                  help="the run's directory: run.json, the checkpoint, the curves, predictions/ "
                                       "(none: runs/COMMAND-...-DATE-TIME, or under $MINBERT_RUNS)")
    resume: str | None = setting(None, parse=existing_path, metavar="DIR", on_resume="free", in_config=False,
                                 help="continue the run in this directory (or a checkpoint file written by an older "
                                      "version) with the settings it started with, to the same result as an "
                                      "uninterrupted run; a killed run repeats the epoch in progress; with "
                                      "--save-every N, from its last step checkpoint")
    checkpoint: str | None = setting(None, parse=file_to_write, metavar="PATH", on_resume="free",
                                     help="the training checkpoint, written after every epoch (none: RUN_DIR/"
                                          "checkpoint.pt)")
    predictions_dir: str | None = setting(None, parse=directory_to_write, metavar="DIR", on_resume="free",
                                          help="where the prediction files go (none: RUN_DIR/predictions); not "
                                               "inside another run's directory")
    raw_outputs: bool = setting(False, on_resume="free",
                                help="also write {task}-{split}-raw.csv beside the prediction files: each example's "
                                     "raw outputs (logits or scores)")
    device: str = setting("auto", choices=DEVICES, on_resume="free", help=DEVICE_HELP)
    threads: int | None = setting(None, parse=positive_int, on_resume="free",
                                  help="CPU threads for torch (none: torch's choice); 1 is often faster on a busy "
                                       "shared machine")
    eval_batch_size: int = setting(128, parse=positive_int, on_resume="free",
                                   help="batch size for dev/test prediction")
    progress: bool = setting(True, on_resume="free", help="no tqdm progress bar")
    save_every: int = setting(0, parse=nonnegative_int, on_resume="free", metavar="N",
                              help="also checkpoint after every N-th optimiser step within an epoch, so that a "
                                   "disconnected session (Colab) loses at most N steps; --resume continues from it "
                                   "exactly (0: after each epoch only)")
    read_every: int | None = setting(None, parse=positive_int, on_resume="free", metavar="N",
                                     help="read the training loss back from the device every N optimiser steps, "
                                          "so that a GPU never waits for the host in between (the progress bar and "
                                          "the curves get each step's loss all the same; a diverged loss is named "
                                          f"up to N steps late). none: every step on the CPU, every "
                                          f"{READ_EVERY_GPU} on a GPU")
    attention_kernel: str = setting("auto", choices=ATTENTION_KERNELS, on_resume="free",
                                    help="on a GPU, the attention kernel torch tries first (then the memory-efficient "
                                         "one, then math); auto: the memory-efficient kernel, which takes the padding "
                                         "mask and dropout and builds no plan per shape (cudnn does)")

    def loop_options(self) -> dict:
        """The FitOptions fields these options set: progress, save_every, read_every, attention_kernel."""
        return {"progress": self.progress, "save_every": self.save_every, "read_every": self.read_every,
                "attention_kernel": self.attention_kernel}


def runs_root() -> Path:
    """Where new run directories go: $MINBERT_RUNS, or runs/ in the working directory."""
    return Path(os.environ.get("MINBERT_RUNS") or "runs")


def default_run_dir(*parts: str) -> Path:
    """RUNS/PARTS-YYYYmmdd-HHMMSS, a new name for each run started (a second within one second gets -2, -3, ...)."""
    stem = "-".join(p for p in parts if p) + time.strftime("-%Y%m%d-%H%M%S")
    path, k = runs_root() / stem, 2
    while path.exists():
        path, k = runs_root() / f"{stem}-{k}", k + 1
    return path


def parse_run(cls: type, argv: list[str] | None, prog: str, description: str | None,
              check: Callable[[dict[str, Any]], None] | None = None) -> Any:
    """A training command's settings: its defaults < the run directory's run.json (with --resume DIR) < --config
    FILE < the flags given. A run's run.json given as --config FILE for a new run in another directory leaves out
    where that run wrote (its --checkpoint, --predictions-dir): the new run writes in its own directory. check(values)
    gets {dotted path: value} of the run.json, the --config file and the flags together, before --print-config."""
    given: dict[str, Any] = {}
    argv = list(sys.argv[1:] if argv is None else argv)

    def base(flags: dict[str, Any]) -> dict[str, Any]:
        given.update(flags)
        refuse_other_files(flags.get("run.resume"), flags, cls)
        start = resume_base(flags.get("run.resume"), cls, replaced=set(flags))
        if check is not None:
            config = config_file(argv)
            check(start | (read_config(config, cls, set(flags)) if config is not None else {}) | flags)
        return start

    return parse(cls, argv, prog, description, base=base,
                 finish=lambda settings: own_paths(settings, given, config_file(argv)))


def config_file(argv: list[str]) -> Path | None:
    """The --config FILE of a command line, if any."""
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            return Path(argv[i + 1])
        if arg.startswith("--config="):
            return Path(arg.split("=", 1)[1])
    return None


def own_paths(settings: Any, given: dict[str, Any], config: Path | None) -> Any:
    """`settings` with the --checkpoint and --predictions-dir that a run directory's run.json (the --config file)
    recorded left out when the new run has another directory and the flags did not give them."""
    run = settings.run
    if run.resume is not None or config is None or config.name != RUN_FILE or not config.is_file():
        return settings
    recorded = config.parent
    if run.run_dir is None or Path(run.run_dir).resolve() == recorded.resolve():
        return settings
    dropped = {field: None for field in ("checkpoint", "predictions_dir")
               if f"run.{field}" not in given and getattr(run, field) is not None}
    return replace(settings, run=replace(run, **dropped)) if dropped else settings


def command_of(cls: type) -> str | None:
    """The command whose Settings `cls` is: tasks.classifier's, tasks.multitask.settings' -> classifier, multitask
    (None: a class outside tasks/). A one-file command run as `python -m tasks.classifier` defines its Settings in
    __main__: the module's own name is its spec's."""
    module = cls.__module__
    if module == "__main__":
        spec = getattr(sys.modules.get("__main__"), "__spec__", None)
        module = spec.name if spec is not None else module
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "tasks" else None


def resume_base(resume: str | None, cls: type, replaced: Collection[str] = ()) -> dict[str, Any]:
    """The settings to start from when --resume names a run directory: its run.json's (and its run_dir), but those in
    `replaced` (flags given: refuse_other_files has compared the files among them)."""
    if resume is None:
        return {}
    path = Path(resume)
    if path.is_file() and (path.parent / RUN_FILE).is_file():   # a checkpoint in a run directory: that run
        path = path.parent
    if path.is_dir():
        if not (path / RUN_FILE).is_file():
            raise ResumeError(f"{path}: not a run directory (no {RUN_FILE}); give the directory a run wrote, or its "
                              "checkpoint file")
        kind, own = read_run_json(path).get("command"), command_of(cls)
        if kind and own and kind != own:
            raise ResumeError(f"{path} is a run of tasks.{kind}, not tasks.{own}: python -m tasks.{kind} --resume "
                              f"{shlex.quote(str(path))}")
        # a setting the run predates: as it ran then (its `before`)
        return before_values(cls) | read_config(path / RUN_FILE, cls, replaced) | {"run.run_dir": str(path)}
    if not path.is_file():
        raise ResumeError(f"--resume {resume}: no such run directory or checkpoint file")
    return {}


def refuse_other_files(resume: str | None, flags: dict[str, Any], cls: type | None = None) -> None:
    """--resume DIR with a file flag (or --model) naming another file than its run.json's (a task file it left unset:
    the data folder's file it read, of its settings `cls`): refused before any data is read or model built, unless of
    the same bytes (tasks.core.run_files.other_files)."""
    forget_same_bytes()
    path = Path(resume) if resume is not None else None
    path = path.parent if path is not None and path.is_file() else path
    if path is None or not (path / RUN_FILE).is_file():
        return
    record = read_run_json(path)
    recorded = record.get("settings") if isinstance(record.get("settings"), dict) else {}
    known = {"task": recorded.get("task"), "files.data_dir": (recorded.get("files") or {}).get("data_dir")}
    settings = build(cls, {k: v for k, v in known.items() if isinstance(v, str)}) if cls is not None else None
    defaults = {key: default_file(settings, key) for key in flags} if settings is not None else {}
    differ = other_files(record, flags, {k: v for k, v in defaults.items() if v is not None})
    if differ:
        raise ResumeError(f"{resume}: cannot resume a different run; settings differ: {'; '.join(differ)}: a resumed "
                          f"run reads the files it started with (other files: the same bytes); leave the flag out, or "
                          f"start a new run (--config {path / RUN_FILE} --run-dir NEW)")


@dataclass(frozen=True)
class RunPaths:
    """Where one run writes: its directory, run.json, the checkpoint and the predictions."""

    dir: Path
    checkpoint: Path
    predictions: Path
    resume: Path | None       # the checkpoint to continue from, or None for a new run
    at: str = field(default_factory=lambda: datetime.now().isoformat(timespec="microseconds"))   # when it started

    @property
    def run_json(self) -> Path:
        return self.dir / RUN_FILE


def run_paths(run: RunOptions, *name: str, checkpoint_name: str = CHECKPOINT) -> RunPaths:
    """The run's paths from its options; a new run may not reuse a directory that holds a run already.
    `checkpoint_name`: the checkpoint's file name in the directory when run.checkpoint is not given (a command with
    several checkpoints names the first, the one a resumed run needs)."""
    resume = Path(run.resume) if run.resume is not None else None
    if run.run_dir is not None:
        directory = Path(run.run_dir)
    elif resume is not None and resume.is_dir():
        directory = resume
    elif resume is not None:                                 # an older version's checkpoint file: a run beside it
        directory = resume.parent
    else:
        directory = default_run_dir(*name)
    checkpoint = Path(run.checkpoint) if run.checkpoint else directory / checkpoint_name
    forget_files_read()                       # the task files this run reads, which its checkpoint records
    record = read_run_json(directory) if resume is not None and (directory / RUN_FILE).is_file() else {}
    started_in(record.get("cwd"), record.get("moved_from"), record.get("moved_to"))   # its paths: where it started
    if resume is None and (directory / RUN_FILE).is_file() and (checkpoint.is_file() or "result" in read_run_json(directory)):
        raise ConfigurationError(f"{directory} holds a run already ({RUN_FILE}): continue it with --resume "
                                 f"{shlex.quote(str(directory))}, or give another --run-dir")   # one stopped before a checkpoint: restart
    if resume is None:
        check_new_checkpoint(checkpoint, directory, explicit_dir=run.run_dir is not None)
    if resume is not None and resume.is_file():
        start = resume
    elif resume is not None:
        start = checkpoint
        if not start.is_file():
            raise no_checkpoint(directory, name[0] if name else "COMMAND", start)
    else:
        start = None
    predictions = Path(run.predictions_dir) if run.predictions_dir else directory / "predictions"
    refuse_another_runs(predictions, directory, "--predictions-dir")     # never another run's prediction files
    running(name[0] if name else "COMMAND", directory, checkpoint, directory / RUN_FILE)   # Ctrl-C's line names it
    return RunPaths(directory, checkpoint, predictions, start)


def check_new_checkpoint(checkpoint: Path, directory: Path, explicit_dir: bool) -> None:
    """A new run does not overwrite a checkpoint (or its curves) that another run directory holds, nor, in a run
    directory named by --run-dir, any existing file; a flat --checkpoint outside run directories may be rewritten (a
    course command run again)."""
    from .curves import curves_path
    owner = checkpoint.parent
    if owner.resolve() == directory.resolve():
        # its own directory: refused above when it holds a run, else one stopped before writing; without run.json,
        # a checkpoint left there is no run's to restart, and is not overwritten
        left = [p for p in (checkpoint, curves_path(checkpoint)) if p.exists()]
        if explicit_dir and left and not (directory / RUN_FILE).is_file():
            raise ConfigurationError(f"--run-dir {directory}: {left[0]} is there already, with no {RUN_FILE} to "
                                     f"say which run wrote it, and would be overwritten; move it, or give another "
                                     f"--run-dir")
        return
    other_run = (owner / RUN_FILE).is_file()
    if not (other_run or explicit_dir):
        return
    for path in (checkpoint, curves_path(checkpoint)):
        if path.exists():
            whose = f"run {owner}'s" if other_run else "an existing"
            raise ConfigurationError(f"--checkpoint {checkpoint}: {whose} file {path} would be overwritten; give "
                                     f"--checkpoint a new path (or leave it out: {directory}/{checkpoint.name})"
                                     + (f", or continue that run with --resume {shlex.quote(str(owner))}"
                                        if other_run else ""))


def no_checkpoint(run_dir: str | Path, kind: str, checkpoint: str | Path) -> MissingFileError:
    """The one message for a run directory without its checkpoint (stopped before writing it, or the file moved):
    what starts it again in the same directory (a DeeBERT run with stage 1's checkpoint: --resume), shell-quoted; a
    finished run (run.json has its result, so run_paths refuses a new run there): put the file back, or start the run
    again in a new directory."""
    quoted = shlex.quote(str(run_dir))
    config = shlex.quote(str(Path(run_dir) / RUN_FILE))
    if kind == "deebert" and (Path(run_dir) / "stage1.pt").is_file():
        return MissingFileError(f"{run_dir}: no checkpoint ({checkpoint} is missing: stage 2 did not finish an epoch, "
                                f"or the file was moved); python -m tasks.deebert --resume {quoted} first")
    if (Path(run_dir) / RUN_FILE).is_file() and "result" in read_run_json(run_dir):
        new = next(p for n in range(1, 1000) if not (p := Path(f"{Path(run_dir)}-again{'' if n == 1 else n}")).exists())
        return MissingFileError(f"{run_dir}: no checkpoint ({checkpoint} is missing: the run finished and the file "
                                f"was moved or deleted); put it back there, or start the run again in a new "
                                f"directory: python -m tasks.{kind} --config {config} --run-dir {shlex.quote(str(new))}")
    return MissingFileError(f"{run_dir}: no checkpoint ({checkpoint} is missing: the run stopped before writing it, or "
                            f"the file was moved); start the run again in its directory: python -m tasks.{kind} "
                            f"--config {config} --run-dir {quoted}")


def environment() -> dict[str, Any]:
    """minbert's commit (and whether the tree had changes), torch, Python, the CPU and any GPU."""
    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10,
                                  check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD"), "uncommitted_changes": bool(status) if status is not None else None,
            "torch": torch.__version__, "python": platform.python_version(), "platform": platform.platform(),
            "cpu": cpu, "cpu_count": os.cpu_count(),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def write_run_json(paths: RunPaths, command: str, settings: Any, argv: list[str] | None = None,
                   **extra: Any) -> Path:
    """run.json: the command as typed, its full settings, the environment, the task files read (their bytes and sha256,
    tasks.core.data.files_read, as the checkpoint records them) and `extra` (e.g. the result at the end). A resumed
    run keeps the first start's record under "started" and adds one line per resume (its command and files): once,
    when it is written again by the same resume (rewrite_on_extension's, then at the end)."""
    paths.dir.mkdir(parents=True, exist_ok=True)
    argv = sys.argv[1:] if argv is None else argv
    record: dict[str, Any] = {"command": command, "argv": f"python -m tasks.{command} {shlex.join(argv)}".strip(),
                              "cwd": os.getcwd(),        # the folder its relative files are read from (run_files)
                              "run_dir": os.path.abspath(paths.dir),   # where it is: a copy of both is told (run_files)
                              "settings": dump(settings), "environment": environment(),
                              "data_files": files_read()}   # each task file's bytes and sha256, as the checkpoint's
    old = read_run_json(paths.dir) if paths.run_json.is_file() else None
    if old is not None:
        record["started"] = old.get("started", {"argv": old.get("argv"), "environment": old.get("environment"),
                                                "data_files": old.get("data_files")})
        line = {"argv": record["argv"], "at": paths.at, "data_files": record["data_files"]}
        earlier = [r for r in old.get("resumed", []) if r.get("at") != paths.at]   # written already: on its extension
        record["resumed"] = earlier + ([line] if paths.resume else [])
    write_text(paths.run_json, json.dumps(record | extra, indent=1) + "\n")
    return paths.run_json


def rewrite_on_extension(paths: RunPaths, command: str, settings: Any) -> Callable[[list[str] | None], None] | None:
    """FitOptions.extended for a resumed run (rank 0): run.json rewritten with the new --epochs and the checkpoint's
    schedule record once the resume is accepted, so that a plain --resume of a run stopped on the way goes on with
    them (a resumed run otherwise rewrites run.json when it has finished)."""
    if paths.resume is None:
        return None
    return lambda record: write_run_json(paths, command, with_schedule_record(settings, record))


def run_settings(cls: type, data: dict, source: str, given: dict[str, Any] | None = None) -> Any:
    """A run's settings as its command's Settings `cls`, from what run.json (or an export) recorded: each setting the
    run predates at its `before`, the rest at the command's defaults, `given` ({dotted path: value}) over them. The
    record is read as written (tasks.core.settings.flatten trusted): the files it names need not exist any more."""
    given = {k: v for k, v in (given or {}).items() if v is not None}
    return build(cls, before_values(cls) | flatten(cls, data, source, trusted=True) | given)


def read_run_json(directory: str | Path) -> dict[str, Any]:
    """A run directory's run.json as a dict (the command, settings, environment, result)."""
    path = Path(directory) / RUN_FILE
    if not path.exists():
        raise ConfigurationError(f"{directory}: not a run directory (no {RUN_FILE})")
    record = read_json(path, RUN_FILE)                 # strict: a key given twice or text not UTF-8 is one line
    if not isinstance(record, dict) or not isinstance(record.get("command"), str) or \
            not isinstance(record.get("settings"), dict):
        raise ConfigurationError(f"{path}: not a run's record (a JSON object of command, settings, ...): copy it again "
                                 "from the run, or start a new run")
    return located(record, path.parent)               # its cwd: where its relative paths are read from now
