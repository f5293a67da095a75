"""Predict with a trained run, no training: write the course's prediction files for the dev or test files given.

    python -m tasks.predict runs/multitask-cross-encoder-round-robin-full-model-DATE-TIME --out predictions
    python -m tasks.predict RUN_DIR --sst-test my-sst.csv --splits test --out new   # a new test file
    python -m tasks.predict runs/classifier-sst-full-model-DATE-TIME --test-file my-sst.csv --out new
    python -m tasks.predict runs/deebert-sst2-DATE-TIME --threshold 0.3 --out new   # DeeBERT at exit threshold S
    python -m tasks.predict exported/ --out new            # a directory written by python -m tasks.export
    python -m tasks.predict checkpoints/sst-full-model.pt --out new                  # a checkpoint of an older run

The run is a run directory (its run.json says which command wrote it), a checkpoint the commands write, or an export
directory; the run's own settings rebuild the model, and its best epoch's weights are loaded. By default the run's own
dev and test files are predicted (the files named at training, or DATA_DIR's; relative ones read from the folder the
run trained in, which run.json records as cwd); give other files with the flags (a flag of another kind of run is
refused). A run none of whose files is found writes nothing and is refused. --kind names the model you expect: another
is refused. Predictions are made at the run's --precision and --eval-batch-size (its run.json's; 128 without one; a
DeeBERT run's exits batch on their own), so they equal its own; a labelled file that is not the one the run read (its
size or sha256 differs from the checkpoint's record) is named in a note. Without --out they go to predictions/, unless it holds prediction files already (those
tasks.submit zips).
"""

from __future__ import annotations

if not __package__:  # run as a file (python tasks/predict.py): this tree is not on the path
    import sys
    print("error: run it as python -m tasks.predict from the tree's root (the folder holding minbert/ and tasks/), "
          "not as a file", file=sys.stderr)
    sys.exit(2)

import argparse
import importlib
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

import minbert

from .core.checkpoints import check_trained, read_trained
from .core.data import files_read, forget_files_read
from .core.distributed import DEVICE_HELP, DEVICES, pick_device
from .core.errors import (
    ConfigurationError,
    MissingFileError,
    directory_to_write,
    nonnegative_float,
    positive_int,
    run_cli,
    user_path,
)
from .core.evaluation import prediction_path, raw_path, write_predictions, write_raw
from .core.exports import EXPORT_ENCODER, EXPORT_SETTINGS, KINDS, load_weights, read_export
from .core.progress import showing
from .core.recipe import autocast
from .core.resume import stored_values
from .core.run_files import changed_files, trained_checkpoint, trained_files
from .core.runs import RUN_FILE, no_checkpoint, read_run_json, run_settings
from .core.settings import build, leaves

DEEBERT_FLAGS = {"sweep.threshold": "--threshold", "sweep.exit": "--exit"}   # predict's own, for DeeBERT runs only


def command(kind: str) -> ModuleType:
    """The command that wrote a run (tasks.classifier, tasks.multitask, ...): its Settings and build_model()."""
    return importlib.import_module(f"tasks.{kind}")


@dataclass
class Run:
    """A trained run as predict and export read it: which command wrote it, its settings as that command's Settings,
    its best epoch's weights, the encoder directory of an export (or None) and, for DeeBERT, the exit setting the run
    chose (or None)."""

    kind: str
    settings: Any
    state: dict[str, torch.Tensor]
    encoder: Path | None = None
    chosen: float | None = None
    data_files: dict | None = None          # the checkpoint's record of the task files the run read (bytes, sha256)
    started_in: str | None = None           # the folder the run started in (run.json's cwd): its record's paths'
    copy: tuple[str, str] | None = None     # the folder copied with the run and its copy (run.json's moved_from, _to)


def kind_of(config: dict) -> str | None:
    """Which CLI wrote a checkpoint, from its stored run settings (their last names)."""
    names = {k.rsplit(".", 1)[-1] for k in config}
    if "ramp_pooler" in names:
        return "deebert"
    if "design" in names and "schedule" in names:
        return "multitask"
    if config.get("task") in ("sst", "cfimdb") and "pooling" in names:
        return "classifier"
    return None


def from_run_json(directory: Path, given: dict[str, Any] | None = None) -> tuple[str, Any, Path]:
    """(the command, its settings as the command's Settings, the checkpoint) of a run directory's run.json; `given`
    ({dotted path: value}) overrides what it recorded (other files to predict)."""
    record = read_run_json(directory)
    kind = record["command"]
    given = trained_files(record) | {k: v for k, v in (given or {}).items() if v is not None}   # the flags' first
    settings = run_settings(command(kind).Settings, record["settings"], str(directory / RUN_FILE), given)
    return kind, settings, trained_checkpoint(directory)   # DeeBERT's: stage 2's, or that of the run it loaded


def load_run(path: str | Path, given: dict[str, Any] | None = None) -> Run:
    """A run: a run directory (its run.json says which command wrote it), its checkpoint, an export directory, or a
    checkpoint written before run directories (its kind read from the settings it stores). `given`: settings over
    the run's own (by dotted path; one the command does not have is refused: own_settings)."""
    path = Path(path)
    given_file = path if path.is_file() else None
    if path.is_file() and (path.parent / RUN_FILE).is_file():
        path = path.parent
    if path.is_dir() and (path / RUN_FILE).is_file():
        kind = read_run_json(path)["command"]
        if kind not in KINDS:
            raise ConfigurationError(f"{path}: a run of python -m tasks.{kind}, which has no model to predict with")
        kind, settings, checkpoint = from_run_json(path, own_settings(kind, given))
        if not (given_file or checkpoint).is_file():
            raise no_checkpoint(path, kind, given_file or checkpoint)
        state = check_trained(read_trained(given_file or checkpoint), given_file or checkpoint, path, kind)
        if kind == "deebert" and state.get("config", {}).get("stage") != 2:
            raise ConfigurationError(f"{given_file}: a DeeBERT stage-1 checkpoint, whose off-ramps are not trained: "
                                     "give the run's directory or its stage2.pt")
        record = read_run_json(path)
        chosen = (record.get("result") or {}).get("prediction_setting") if kind == "deebert" else None
        copy = (record["moved_from"], record["moved_to"]) if "moved_from" in record else None
        return Run(kind, settings, state["best_state"], None, chosen, state.get("data_files"), record.get("cwd"), copy)
    if path.is_dir() and (path / EXPORT_SETTINGS).is_file():
        kind, stored, heads = read_export(path)
        cls = command(kind).Settings
        settings = (run_settings(cls, stored, str(path / EXPORT_SETTINGS), own_settings(kind, given))
                    if any(isinstance(v, dict) for v in stored.values())     # as dump() writes it; older: flat names
                    else build(cls, stored_values(cls, stored) | own_settings(kind, given)))
        return Run(kind, settings, heads, path / EXPORT_ENCODER)
    if path.is_dir():
        if not (path / "stage2.pt").is_file():
            raise ConfigurationError(f"{path}: a directory with neither {EXPORT_SETTINGS} (python -m tasks.export) nor "
                                     "stage2.pt (python -m tasks.deebert --out)")
        path = path / "stage2.pt"
    state = read_trained(path)
    config = state.get("config", {})
    kind = config.get("command") or kind_of(config)
    check_trained(state, path, kind=kind if kind in KINDS else None)
    if kind not in KINDS:
        raise ConfigurationError(f"{path}: not a checkpoint of tasks.classifier, tasks.multitask or tasks.deebert (its "
                                 f"settings: {', '.join(sorted(config)) or 'none'}); nothing to predict with")
    if kind == "deebert" and config.get("stage") != 2:
        raise ConfigurationError(f"{path}: a DeeBERT stage-{config.get('stage')} checkpoint, whose off-ramps are not "
                                 "trained: give stage2.pt or the run's --out directory")
    cls = command(kind).Settings
    return Run(kind, build(cls, stored_values(cls, config) | own_settings(kind, given)), state["best_state"],
               data_files=state.get("data_files"))


def own_settings(kind: str, given: dict[str, Any] | None) -> dict[str, Any]:
    """The settings of `given` that were given (not None), DEEBERT_FLAGS left out; one that the run's command lacks
    (--sst-test on a classifier run, --threshold on a multitask run) is refused, naming the flag the run takes."""
    known = set(leaves(command(kind).Settings()))
    given = {k: v for k, v in (given or {}).items() if v is not None}
    for key in given:
        name, flag = key.rsplit(".", 1)[-1], DEEBERT_FLAGS.get(key) or "--" + key.rsplit(".", 1)[-1].replace("_", "-")
        if key in DEEBERT_FLAGS and kind != "deebert":
            raise ConfigurationError(f"{flag} is for DeeBERT runs; this is a {kind} run, which has no exit rule")
        if key in known or key in DEEBERT_FLAGS:
            continue
        split = name.rsplit("_", 1)[-1].removesuffix("file") or name.removesuffix("_file")
        if kind == "multitask":
            use = f"--sst-{split}, --para-{split} or --sts-{split}"
            raise ConfigurationError(f"{flag} is for classifier and DeeBERT runs; this is a multitask run: use {use}")
        raise ConfigurationError(f"{flag} is for multitask runs; this is a {kind} run: use --{split}-file")
    return {k: v for k, v in given.items() if k not in DEEBERT_FLAGS}


@dataclass(frozen=True)
class Request:
    """What to predict: the run, where the files go, which splits and files, the device (from the command line)."""

    checkpoint: str
    kind: str | None = None
    out: str | None = None          # None: predictions/, unless it holds prediction files already
    splits: tuple[str, ...] = ("dev", "test")
    data_dir: str | None = None
    files: dict[str, str | None] = field(default_factory=dict)   # sst_dev, ..., dev_file, test_file: None = the run's
    threshold: float | None = None
    exit: str | None = None
    raw_outputs: bool = False
    eval_batch_size: int | None = None     # None: the run's own (its settings' run.eval_batch_size)
    device: str = "auto"


def predict_multitask(args: Request, run: Run, device: torch.device) -> list[Path]:
    """Each of the run's tasks' files (its own, or those given), with the model tasks.multitask.build_model builds."""
    from .multitask import build_model, decide, load, outputs
    s = run.settings
    model = build_model(s, str(run.encoder) if run.encoder else None)
    load_weights(model, run.state, args.checkpoint, strict=run.encoder is None)
    model.to(device).eval()
    tokenizer = minbert.Tokenizer.from_pretrained(str(run.encoder or s.training.model),
                                                  max_length=s.training.max_length)
    written = []
    for split in args.splits:
        for t in s.design.chosen()[0]:
            path = s.files.path(t, split)
            if not path.is_file():
                print(f"{t} {split}: no file {path}; skipped", file=sys.stderr)
                continue
            data = load(t, split, path, tokenizer)
            with showing(split):                                       # a progress bar over its batches
                y = outputs(model, data, args.eval_batch_size, device, s.recipe.precision)
            ids = [e.id for e in data.records]
            written.append(write_predictions(prediction_path(args.out, t, split), t, ids, decide(t, y)))
            if args.raw_outputs:
                written.append(write_raw(raw_path(args.out, t, split), ids, y))
    return written


def predict_classifier(args: Request, run: Run, device: torch.device) -> list[Path]:
    """The run's task's files, with the model tasks.classifier.build_model builds."""
    from .classifier import build_model, load_split, logits_of
    s = run.settings
    model = build_model(s)
    load_weights(model, run.state, args.checkpoint)
    model.to(device).eval()
    tokenizer = minbert.Tokenizer.from_pretrained(s.training.model, max_length=s.training.max_length)
    written = []
    for split in args.splits:
        data = load_split(split, s.files.path(s.task, split), s.task, tokenizer)
        with autocast(device, s.recipe.precision), showing(split):
            logits = logits_of(model, data, args.eval_batch_size, device)   # (N, C)
        ids = [e.id for e in data.records]
        written.append(write_predictions(prediction_path(args.out, s.task, split), s.task, ids,
                                         logits.argmax(-1).tolist()))
        if args.raw_outputs:
            written.append(write_raw(raw_path(args.out, s.task, split), ids, logits))
    return written


def predict_deebert(args: Request, run: Run, device: torch.device) -> list[Path]:
    """At --threshold (default: the setting the run chose, from its run.json), with the run's exit rule; the files
    named {task}-{split}-output.csv as the run's own; the model tasks.deebert.build_model builds."""
    from .deebert import BOARD, build_model, exit_predictions, load_split
    from .deebert.settings import Sweep
    s = run.settings
    task = s.task
    value = args.threshold if args.threshold is not None else run.chosen
    if value is None:
        raise ConfigurationError("a DeeBERT run: give the exit setting, --threshold S (entropy) or P (with --exit "
                                 "patience)")
    sweep = Sweep(exit=args.exit or s.sweep.exit, normalize_entropy=s.sweep.normalize_entropy,
                  change_threshold=s.sweep.change_threshold).resolved(task)
    if sweep.exit == "patience" and (value < 1 or value != int(value)):
        given = f"--threshold {value:g}" if args.threshold is not None else f"the run chose {value:g} (its exit rule's)"
        raise ConfigurationError(f"{given}: with the patience exit the setting is P, a whole number of layers (1 or "
                                 "more): give --threshold P")
    model = build_model(s)
    load_weights(model, run.state, args.checkpoint)
    model.to(device).eval()
    tokenizer = minbert.Tokenizer.from_pretrained(s.training.model, max_length=s.training.max_length)
    written = []
    for split in args.splits:
        data = load_split(split, s.files.path(task, split), task, tokenizer)
        with autocast(device, s.recipe.precision), showing(split):  # as the run predicted; a progress bar
            preds, _, logits = exit_predictions(model, task, data, sweep.rule(value), device)
        ids = [e.id for e in data.records]
        written.append(write_predictions(prediction_path(args.out, task, split), BOARD[task], ids, preds))
        if args.raw_outputs:
            written.append(write_raw(raw_path(args.out, task, split), ids, logits))
    return written


def splits(text: str) -> list[str]:
    """--splits: dev, test or dev,test."""
    chosen = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [x for x in chosen if x not in ("dev", "test")]
    if not chosen or unknown:
        raise argparse.ArgumentTypeError(f"give dev, test or dev,test, not {text!r}")
    return chosen


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tasks.predict", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", type=user_path, help="a run directory (its run.json), a CLI's checkpoint (.pt), a DeeBERT --out "
                                      "directory, or a tasks.export directory")
    p.add_argument("--kind", choices=KINDS, default=None, help="the model you expect; a checkpoint of another is refused")
    p.add_argument("--out", default=None, type=directory_to_write,
                   help="the directory the prediction files go to (default: predictions, where the training "
                        "commands write and tasks.submit zips from; refused when it holds prediction files "
                        "already, so that another run's files never replace them unasked: give --out)")
    p.add_argument("--splits", type=splits, default=["dev", "test"],
                   help="which files to predict, comma-separated (default dev,test)")
    p.add_argument("--data-dir", default=None, type=user_path, help="where the default files live (default: the run's own)")
    for t in ("sst", "para", "sts"):
        for split in ("dev", "test"):
            p.add_argument(f"--{t}-{split}", dest=f"{t}_{split}", default=None, metavar="PATH", type=user_path,
                           help=f"multitask runs: the {t} {split} file (default: the run's own)")
    p.add_argument("--dev-file", default=None, type=user_path, help="classifier/DeeBERT runs: the dev file (default: the run's own)")
    p.add_argument("--test-file", default=None, type=user_path, help="classifier/DeeBERT runs: the test file (default: the run's own)")
    p.add_argument("--threshold", type=nonnegative_float, default=None, help="DeeBERT: the exit setting, S (entropy) or P (patience) "
                   "(default: the one the run chose, from its run.json)")
    p.add_argument("--exit", choices=("entropy", "patience"), default=None,
                   help="DeeBERT: the exit rule (default: the run's; entropy, patience for sts)")
    p.add_argument("--raw-outputs", action="store_true",
                   help="also write {task}-{split}-raw.csv, the raw outputs, for python -m tasks.ensemble")
    p.add_argument("--eval-batch-size", type=positive_int, default=None,
                   help="prediction batch size (default: the run's own, so that its predictions are the run's)")
    p.add_argument("--device", choices=DEVICES, default="auto", help=f"{DEVICE_HELP} (default: auto)")
    return p


def request(argv: list[str] | None = None) -> Request:
    """The command line as a Request."""
    given = vars(build_parser().parse_args(argv))
    names = [f"{t}_{split}" for t in ("sst", "para", "sts") for split in ("dev", "test")] + ["dev_file", "test_file"]
    return Request(files={k: given.pop(k) for k in names}, splits=tuple(given.pop("splits")), **given)


def overrides(args: Request) -> dict[str, Any]:
    """The run's settings the command line replaces: its data directory and files (by each command's dotted path)."""
    files = {f"files.{k}": v for k, v in args.files.items()}
    return files | {"files.data_dir": args.data_dir, "sweep.threshold": args.threshold, "sweep.exit": args.exit}


DEFAULT_OUT = "predictions"


def default_out(args: Request) -> Request:
    """`args` with --out resolved: predictions/, refused when it holds prediction files (the leaderboard's, which
    tasks.submit zips) that another run's predictions would replace without being asked to."""
    if args.out is not None:
        return args
    held = sorted(p.name for p in Path(DEFAULT_OUT).glob("*-output.csv"))
    if held:
        raise ConfigurationError(f"{DEFAULT_OUT}/ holds prediction files already ({', '.join(held[:3])}"
                                 f"{', ...' if len(held) > 3 else ''}: the files tasks.submit zips); give --out DIR "
                                 f"for this run's predictions, or --out {DEFAULT_OUT} to replace them")
    return replace(args, out=DEFAULT_OUT)


def main(argv: list[str] | None = None) -> int:
    args = request(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    run = load_run(args.checkpoint, overrides(args))
    if args.kind is not None and args.kind != run.kind:
        raise ConfigurationError(f"{args.checkpoint}: a {run.kind} checkpoint (written by python -m tasks.{run.kind}), "
                                 f"not a {args.kind} one")
    args = default_out(args)
    if run.kind == "deebert" and args.eval_batch_size is not None:
        raise ConfigurationError("--eval-batch-size is for classifier and multitask runs; a DeeBERT run's exits "
                                 "predict in batches of their own (tasks.deebert's, as its own files were made)")
    if args.eval_batch_size is None:          # the run's, as its own predictions were made
        args = replace(args, eval_batch_size=run.settings.run.eval_batch_size)
    device = pick_device(args.device)
    predictors = {"multitask": predict_multitask, "classifier": predict_classifier, "deebert": predict_deebert}
    forget_files_read()                                    # the files this prediction reads, against the run's record
    written = predictors[run.kind](args, run, device)
    for path in changed_files(run.data_files, files_read(), run.started_in, run.copy):
        print(f"note: {path} differs from the file the run read (its size or sha256 is not the checkpoint's "
              "record): its scores here are not the run's own", file=sys.stderr)
    if not written:
        raise MissingFileError(f"{args.checkpoint}: none of the run's {'/'.join(args.splits)} files found in its data "
                               f"folder {run.settings.files.data_dir}, so nothing was written: pass --data-dir DIR "
                               "(or the files' own flags)")
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
