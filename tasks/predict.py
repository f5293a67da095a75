"""Predict with a trained run, no training: write the course's prediction files for the dev or test files given.

    python -m tasks.predict runs/multitask-cross-encoder-round-robin-full-model-DATE-TIME --out predictions
    python -m tasks.predict RUN_DIR --sst-test my-sst.csv --splits test --out new   # a new test file
    python -m tasks.predict runs/classifier-sst-full-model-DATE-TIME --test-file my-sst.csv --out new
    python -m tasks.predict runs/deebert-sst2-DATE-TIME --threshold 0.3 --out new   # DeeBERT at exit threshold S
    python -m tasks.predict exported/ --out new            # a directory written by python -m tasks.export
    python -m tasks.predict checkpoints/sst-full-model.pt --out new                  # a checkpoint of an older run

The run is a run directory (its run.json says which command wrote it), a checkpoint the commands write, or an export
directory; the run's own settings rebuild the model, and its best epoch's weights are loaded. By default the run's own dev and test files are predicted (the files named at training, or
DATA_DIR's); give other files with the flags. --kind names the model you expect: another is refused. Predictions
are made at the run's --precision and with --eval-batch-size 128 (the CLIs' default), so that they equal the run's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

import minbert
from minbert.multitask import MultitaskBert

from .core.checkpoints import load_checkpoint
from .core.cli import DEVICES
from .core.data import TASKS
from .core.distributed import pick_device
from .core.errors import ConfigurationError, run_cli
from .core.evaluation import prediction_path, raw_path, write_predictions, write_raw
from .core.recipe import ATTN_IMPLEMENTATION, Recipe, autocast
from .core.resume import before_values, from_flat_names
from .core.runs import CHECKPOINT, RUN_FILE, read_run_json
from .core.settings import build

KINDS = ("classifier", "multitask", "deebert")
EXPORT_SETTINGS = "multitask.json"   # an export directory's settings (tasks/export.py)
EXPORT_HEADS = "heads.pt"            # its weights outside the encoder: the heads, PALs
EXPORT_ENCODER = "encoder"           # its encoder, a Hugging Face directory


def kind_of(config: dict) -> str | None:
    """Which CLI wrote a checkpoint, from its stored run settings."""
    if "ramp_pooler" in config:
        return "deebert"
    if "design" in config and "schedule" in config:
        return "multitask"
    if config.get("task") in ("sst", "cfimdb") and "pooling" in config:
        return "classifier"
    return None


def from_run_json(directory: Path) -> tuple[str, dict, Path]:
    """(the command, its settings under their plain field names, the checkpoint) of a run directory's run.json."""
    record = read_run_json(directory)
    flat = {path.rsplit(".", 1)[-1]: value for path, value in _leaves_of(record["settings"])}
    run = record["settings"].get("run", {})
    if record["command"] == "deebert":   # its model: stage 2's checkpoint, or that of the run it loaded (--from-run)
        from .deebert import trained_checkpoint
        result = record.get("result") or {}
        return "deebert", flat | {"prediction_setting": result.get("prediction_setting")}, trained_checkpoint(directory)
    return record["command"], flat, Path(run["checkpoint"]) if run.get("checkpoint") else directory / CHECKPOINT


def _leaves_of(data: dict, prefix: str = "") -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    for k, v in data.items():
        out += _leaves_of(v, f"{prefix}{k}.") if isinstance(v, dict) else [(prefix + k, v)]
    return out


def load_run(path: str | Path) -> tuple[str, dict, dict[str, torch.Tensor], Path | None]:
    """(kind, run settings, the best epoch's weights, the encoder directory of an export or None) of a run: a run
    directory (its run.json says which command wrote it), its checkpoint, an export directory, or a checkpoint written
    before run directories (its kind read from the settings it stores)."""
    path = Path(path)
    given = path if path.is_file() else None
    if path.is_file() and (path.parent / RUN_FILE).is_file():
        path = path.parent
    if path.is_dir() and (path / RUN_FILE).is_file():
        kind, settings, checkpoint = from_run_json(path)
        if kind not in KINDS:
            raise ConfigurationError(f"{path}: a run of python -m tasks.{kind}, which has no model to predict with")
        state = load_checkpoint(given or checkpoint)
        if kind == "deebert" and state.get("config", {}).get("stage") != 2:
            raise ConfigurationError(f"{given}: a DeeBERT stage-1 checkpoint, whose off-ramps are not trained: give "
                                     "the run's directory or its stage2.pt")
        settings["lr"] = state.get("config", {}).get("training.lr", settings.get("lr"))
        return kind, settings, state["best_state"], None
    if path.is_dir() and (path / EXPORT_SETTINGS).is_file():
        meta = json.loads((path / EXPORT_SETTINGS).read_text())
        heads = torch.load(path / EXPORT_HEADS, map_location="cpu", weights_only=True)
        return meta["kind"], meta["settings"], heads, path / EXPORT_ENCODER
    if path.is_dir():
        if not (path / "stage2.pt").is_file():
            raise ConfigurationError(f"{path}: a directory with neither {EXPORT_SETTINGS} (python -m tasks.export) nor "
                             "stage2.pt (python -m tasks.deebert --out)")
        path = path / "stage2.pt"
    state = load_checkpoint(path)
    config = state.get("config", {})
    if any("." in k for k in config):        # typed settings: {dotted path: value}, and the command that wrote it
        config = {k.rsplit(".", 1)[-1]: v for k, v in config.items()}
    kind = config.get("command") or kind_of(config)
    if kind is None:
        raise ConfigurationError(f"{path}: not a checkpoint of tasks.classifier, tasks.multitask or tasks.deebert (its "
                         f"settings: {', '.join(sorted(config)) or 'none'}); nothing to predict with")
    if kind == "deebert" and config.get("stage") != 2:
        raise ConfigurationError(f"{path}: a DeeBERT stage-{config.get('stage')} checkpoint, whose off-ramps are not trained: "
                         "give stage2.pt or the run's --out directory")
    return kind, config, state["best_state"], None


def load_weights(model: torch.nn.Module, state: dict[str, torch.Tensor], path: str | Path, strict: bool = True) -> None:
    """load_state_dict, its mismatch reported as a refusal that names the checkpoint."""
    state = {k: v for k, v in state.items() if not k.startswith("smart.")}   # SMART's Bregman copy: training only
    try:
        missing, unexpected = model.load_state_dict(state, strict=strict)
    except RuntimeError as e:
        raise ConfigurationError(f"{path}: its weights do not fit the model its settings describe: {e}") from None
    outside = [k for k in missing if not k.startswith("bert.")]  # without strict: the encoder comes from elsewhere
    if unexpected or outside:
        raise ConfigurationError(f"{path}: weights unexpected {unexpected[:5]}, missing {outside[:5]}")


def build_multitask(settings: dict, encoder: str | Path | None = None) -> MultitaskBert:  # or a subclass
    """The multitask model a run's settings describe (heads, PALs), on the encoder `encoder` or the run's --model;
    `settings` under their plain field names, each absent one at its default (tasks/multitask/settings.py)."""
    from .multitask import build_model
    from .multitask.settings import Settings
    return build_model(build(Settings, from_flat_names(Settings, as_it_ran(settings))), str(encoder) if encoder else None)


def as_it_ran(settings: dict) -> dict:
    """A run's settings under their plain names, with --attention at what a run that predates it ran with (fused)."""
    return {"attention": before_values(Recipe)["attention"]} | settings


@dataclass(frozen=True)
class Request:
    """What to predict: the run, where the files go, which splits and files, the device (from the command line)."""

    checkpoint: str
    kind: str | None = None
    out: str = "predictions"
    splits: tuple[str, ...] = ("dev", "test")
    data_dir: str | None = None
    files: dict[str, str | None] = field(default_factory=dict)   # sst_dev, ..., dev_file, test_file: None = the run's
    threshold: float | None = None
    exit: str | None = None
    raw_outputs: bool = False
    eval_batch_size: int = 128
    device: str = "auto"


def multitask_files(args: Request, settings: dict, task: str, split: str) -> Path:
    given = args.files.get(f"{task}_{split}") or settings.get(f"{task}_{split}")
    return Path(given) if given else TASKS[task].path(args.data_dir or settings.get("data_dir", "data"), split)


def predict_multitask(args: Request, settings: dict, state: dict, encoder: Path | None,
                      device: torch.device) -> list[Path]:
    from .multitask import decide, load, outputs
    model = build_multitask(settings, encoder)
    load_weights(model, state, args.checkpoint, strict=encoder is None)
    model.to(device).eval()
    tokenizer = minbert.Tokenizer.from_pretrained(str(encoder or settings.get("model", "minilm")),
                                                  max_length=settings.get("max_length"))
    tasks = [t for t in ("sst", "para", "sts") if t in settings.get("tasks", "sst,para,sts").split(",")]
    written = []
    for split in args.splits:
        for t in tasks:
            path = multitask_files(args, settings, t, split)
            if not path.is_file():
                print(f"{t} {split}: no file {path}; skipped", file=sys.stderr)
                continue
            data = load(t, split, path, tokenizer)
            y = outputs(model, data, args.eval_batch_size, device, settings.get("precision", "fp32"))
            ids = [e.id for e in data.records]
            written.append(write_predictions(prediction_path(args.out, t, split), t, ids, decide(t, y)))
            if args.raw_outputs:
                written.append(write_raw(raw_path(args.out, t, split), ids, y))
    return written


def single_files(args: Request, settings: dict, task: str, split: str) -> Path:
    given = args.files.get(f"{split}_file") or settings.get(f"{split}_file")
    return Path(given) if given else TASKS[task].path(args.data_dir or settings.get("data_dir", "data"), split)


def predict_classifier(args: Request, settings: dict, state: dict, device: torch.device) -> list[Path]:
    from .classifier import NUM_LABELS, SentimentClassifier, load_split, logits_of
    task = settings["task"]
    bert = minbert.load_pretrained(settings.get("model", "minilm"),
                                   attn_implementation=ATTN_IMPLEMENTATION[as_it_ran(settings)["attention"]])
    model = SentimentClassifier(bert, NUM_LABELS[task], settings.get("dropout"), settings.get("pooling", "mean"))
    load_weights(model, state, args.checkpoint)
    model.to(device).eval()
    tokenizer = minbert.Tokenizer.from_pretrained(settings.get("model", "minilm"), max_length=settings.get("max_length"))
    written = []
    for split in args.splits:
        s = load_split(split, single_files(args, settings, task, split), task, tokenizer)
        with autocast(device, settings.get("precision", "fp32")):
            logits = logits_of(model, s, args.eval_batch_size, device)   # (N, C)
        ids = [e.id for e in s.records]
        written.append(write_predictions(prediction_path(args.out, task, split), task, ids, logits.argmax(-1).tolist()))
        if args.raw_outputs:
            written.append(write_raw(raw_path(args.out, task, split), ids, logits))
    return written


def predict_deebert(args: Request, settings: dict, state: dict, device: torch.device) -> list[Path]:
    """At --threshold (default: the setting the run chose, from its run.json), with the run's exit rule; the files
    named {task}-{split}-output.csv as the run's own."""
    from minbert.deebert import DeeBert

    from .deebert import BOARD, SOURCE, exit_predictions, load_split
    from .deebert.settings import Settings, Sweep
    stored = build(Settings, from_flat_names(Settings, as_it_ran(settings)))   # each absent setting at its default
    task = stored.task
    value = args.threshold if args.threshold is not None else settings.get("prediction_setting")
    if value is None:
        raise ConfigurationError("a DeeBERT run: give the exit setting, --threshold S (entropy) or P (with --exit "
                                 "patience)")
    sweep = Sweep(exit=args.exit or stored.sweep.exit, normalize_entropy=stored.sweep.normalize_entropy,
                  change_threshold=stored.sweep.change_threshold).resolved(task)
    bert = minbert.load_pretrained(stored.training.model, attn_implementation=stored.recipe.attn_implementation)
    model = DeeBert(bert, stored.ramp_config())
    load_weights(model, state, args.checkpoint)
    model.to(device).eval()
    tokenizer = minbert.Tokenizer.from_pretrained(stored.training.model, max_length=stored.training.max_length)
    written = []
    for split in args.splits:
        s = load_split(split, single_files(args, settings, SOURCE[task], split), task, tokenizer)
        with autocast(device, stored.recipe.precision):                 # as the run predicted
            preds, _, logits = exit_predictions(model, task, s, sweep.rule(value), device)
        ids = [e.id for e in s.records]
        written.append(write_predictions(prediction_path(args.out, task, split), BOARD[task], ids, preds))
        if args.raw_outputs:
            written.append(write_raw(raw_path(args.out, task, split), ids, logits))
    return written


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tasks.predict", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", help="a run directory (its run.json), a CLI's checkpoint (.pt), a DeeBERT --out "
                                      "directory, or a tasks.export directory")
    p.add_argument("--kind", choices=KINDS, default=None, help="the model you expect; a checkpoint of another is refused")
    p.add_argument("--out", default="predictions", help="where the prediction files go (default: predictions)")
    p.add_argument("--splits", type=lambda s: [x for x in s.split(",") if x], default=["dev", "test"],
                   help="which files to predict, comma-separated (default dev,test)")
    p.add_argument("--data-dir", default=None, help="where the default files live (default: the run's own)")
    for t in ("sst", "para", "sts"):
        for split in ("dev", "test"):
            p.add_argument(f"--{t}-{split}", dest=f"{t}_{split}", default=None, metavar="PATH",
                           help=f"multitask runs: the {t} {split} file (default: the run's own)")
    p.add_argument("--dev-file", default=None, help="classifier/DeeBERT runs: the dev file (default: the run's own)")
    p.add_argument("--test-file", default=None, help="classifier/DeeBERT runs: the test file (default: the run's own)")
    p.add_argument("--threshold", type=float, default=None, help="DeeBERT: the exit setting, S (entropy) or P (patience) "
                   "(default: the one the run chose, from its run.json)")
    p.add_argument("--exit", choices=("entropy", "patience"), default=None,
                   help="DeeBERT: the exit rule (default: the run's; entropy, patience for sts)")
    p.add_argument("--raw-outputs", action="store_true",
                   help="also write {task}-{split}-raw.csv, the raw outputs, for python -m tasks.ensemble")
    p.add_argument("--eval-batch-size", type=int, default=128, help="prediction batch size (default 128)")
    p.add_argument("--device", choices=DEVICES, default="auto")
    return p


def request(argv: list[str] | None = None) -> Request:
    """The command line as a Request."""
    given = vars(build_parser().parse_args(argv))
    names = [f"{t}_{split}" for t in ("sst", "para", "sts") for split in ("dev", "test")] + ["dev_file", "test_file"]
    return Request(files={k: given.pop(k) for k in names}, splits=tuple(given.pop("splits")), **given)


def main(argv: list[str] | None = None) -> int:
    args = request(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    kind, settings, state, encoder = load_run(args.checkpoint)
    if args.kind is not None and args.kind != kind:
        raise ConfigurationError(f"{args.checkpoint}: a {kind} checkpoint (written by python -m tasks.{kind}), not a "
                                 f"{args.kind} one")
    unknown = [s for s in args.splits if s not in ("dev", "test")]
    if unknown:
        raise ConfigurationError(f"--splits: dev and/or test, not {', '.join(unknown)}")
    device = pick_device(args.device)
    if kind == "multitask":
        written = predict_multitask(args, settings, state, encoder, device)
    elif kind == "classifier":
        written = predict_classifier(args, settings, state, device)
    else:
        written = predict_deebert(args, settings, state, device)
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
