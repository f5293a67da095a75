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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .errors import ConfigurationError, ResumeError, existing_path, nonnegative_int, positive_int
from .evaluation import write_text
from .resume import before_values
from .settings import build, dump, flatten, parse, read_config, setting
from .step import ATTENTION_KERNELS, READ_EVERY_GPU

RUN_FILE = "run.json"
CHECKPOINT = "checkpoint.pt"
STAGE2 = "stage2.pt"          # a DeeBERT run's trained model (its off-ramps trained): tasks/deebert
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class RunOptions:
    """Where the run writes, what hardware it uses and how it shows progress (a resumed run may change these)."""

    run_dir: str | None = setting(None, metavar="DIR", on_resume="free",
                                  help="the run's directory: run.json, the checkpoint, the curves, predictions/ "
                                       "(none: runs/COMMAND-...-DATE-TIME, or under $MINBERT_RUNS)")
    resume: str | None = setting(None, parse=existing_path, metavar="DIR", on_resume="free", in_config=False,
                                 help="continue the run in this directory (or a checkpoint file written by an older "
                                      "version) with the settings it started with, to the same result as an "
                                      "uninterrupted run; a killed run repeats the epoch in progress")
    checkpoint: str | None = setting(None, metavar="PATH", on_resume="free",
                                     help="the training checkpoint, written after every epoch (none: RUN_DIR/"
                                          "checkpoint.pt)")
    predictions_dir: str | None = setting(None, metavar="DIR", on_resume="free",
                                          help="where the prediction files go (none: RUN_DIR/predictions)")
    raw_outputs: bool = setting(False, on_resume="free",
                                help="also write {task}-{split}-raw.csv beside the prediction files: each example's "
                                     "raw outputs (logits or scores)")
    device: str = setting("auto", choices=("auto", "cpu", "cuda", "mps"), on_resume="free",
                          help="auto picks cuda, then mps, then cpu")
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


def parse_run(cls: type, argv: list[str] | None, prog: str, description: str | None) -> Any:
    """A training command's settings: its defaults < the run directory's run.json (with --resume DIR) < --config
    FILE < the flags given."""
    return parse(cls, argv, prog, description, base=lambda given: resume_base(given.get("run.resume"), cls))


def resume_base(resume: str | None, cls: type) -> dict[str, Any]:
    """The settings to start from when --resume names a run directory: its run.json's (and its run_dir)."""
    if resume is None:
        return {}
    path = Path(resume)
    if path.is_dir():
        if not (path / RUN_FILE).is_file():
            raise ResumeError(f"{path}: not a run directory (no {RUN_FILE}); give the directory a run wrote, or its "
                              "checkpoint file")
        # a setting the run predates: as it ran then (its `before`)
        return before_values(cls) | read_config(path / RUN_FILE, cls) | {"run.run_dir": str(path)}
    if not path.is_file():
        raise ResumeError(f"--resume {resume}: no such run directory or checkpoint file")
    return {}


@dataclass(frozen=True)
class RunPaths:
    """Where one run writes: its directory, run.json, the checkpoint and the predictions."""

    dir: Path
    checkpoint: Path
    predictions: Path
    resume: Path | None       # the checkpoint to continue from, or None for a new run

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
    if resume is None and (directory / RUN_FILE).is_file() and (checkpoint.is_file() or "result" in read_run_json(directory)):
        raise ConfigurationError(f"{directory} holds a run already ({RUN_FILE}): continue it with --resume "
                                 f"{directory}, or give another --run-dir")   # one stopped before a checkpoint: restart
    if resume is not None and resume.is_file():
        start = resume
    elif resume is not None:
        start = checkpoint
        if not start.is_file():
            raise ResumeError(f"{resume}: no checkpoint to continue from ({start} is missing: the run was stopped "
                              "before its first checkpoint; start it again without --resume)")
    else:
        start = None
    predictions = Path(run.predictions_dir) if run.predictions_dir else directory / "predictions"
    return RunPaths(directory, checkpoint, predictions, start)


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
    """run.json: the command as typed, its full settings, the environment, and `extra` (e.g. the result at the end).
    A resumed run keeps the first start's record under "started" and adds one line per resume."""
    paths.dir.mkdir(parents=True, exist_ok=True)
    argv = sys.argv[1:] if argv is None else argv
    record: dict[str, Any] = {"command": command, "argv": f"python -m tasks.{command} {shlex.join(argv)}".strip(),
                              "settings": dump(settings), "environment": environment()}
    if paths.run_json.is_file():
        old = read_run_json(paths.dir)
        record["started"] = old.get("started", {"argv": old.get("argv"), "environment": old.get("environment")})
        record["resumed"] = old.get("resumed", []) + ([{"argv": record["argv"]}] if paths.resume else [])
    write_text(paths.run_json, json.dumps(record | extra, indent=1) + "\n")
    return paths.run_json


def run_settings(cls: type, data: dict, source: str, given: dict[str, Any] | None = None) -> Any:
    """A run's settings as its command's Settings `cls`, from what run.json (or an export) recorded: each setting the
    run predates at its `before`, the rest at the command's defaults, `given` ({dotted path: value}) over them. The
    record is read as written (tasks.core.settings.flatten trusted): the files it names need not exist any more."""
    given = {k: v for k, v in (given or {}).items() if v is not None}
    return build(cls, before_values(cls) | flatten(cls, data, source, trusted=True) | given)


def read_run_json(directory: str | Path) -> dict[str, Any]:
    """A run directory's run.json as a dict (the command, settings, environment, result)."""
    path = Path(directory) / RUN_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigurationError(f"{directory}: not a run directory (no {RUN_FILE})") from None
    except json.JSONDecodeError as e:
        raise ConfigurationError(f"{path}:{e.lineno}:{e.colno}: not valid JSON ({e.msg})") from None


def trained_checkpoint(path: str | Path) -> Path:
    """The checkpoint holding a run's trained model: a checkpoint file itself; a run directory's --checkpoint or
    checkpoint.pt, or for DeeBERT stage 2's (that of the run it loaded with --from-run); a DeeBERT directory written
    before run directories, its stage2.pt."""
    path = Path(path)
    if path.is_file():
        return path
    if not (path / RUN_FILE).is_file():
        return path / STAGE2
    record = read_run_json(path)
    settings = record.get("settings") or {}
    if record.get("command") == "deebert":
        from_run = (settings.get("sweep") or {}).get("from_run")
        return trained_checkpoint(from_run) if from_run else path / STAGE2
    return Path((settings.get("run") or {}).get("checkpoint") or path / CHECKPOINT)
