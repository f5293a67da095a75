"""Multitask fine-tuning on the three CS224N tasks (SST sentiment, Quora paraphrase, STS similarity) at once.

    python -m tasks.multitask --design cross-encoder --schedule round-robin --fine-tune-mode full-model

One encoder, three heads (minbert.multitask). After every epoch it prints each task's training loss and
the dev table: SST accuracy, Quora accuracy, STS Pearson r and the overall score
(SST + Quora + (r + 1) / 2) / 3; the best epoch by overall score is kept, and its predictions are written
as predictions/{sst,para,sts}-{dev,test}-output.csv, the six files of the course leaderboard
(python -m tasks.score and python -m tasks.submit read them). A checkpoint is written after every
epoch; --resume on it continues a killed run to the same result as an uninterrupted one.

Quora here: quora-train.csv and quora-dev.csv are a fixed split of the course's Quora dev file (see
data/README.md), so Quora scores are not comparable with the course leaderboard's.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import torch
from torch import nn

import minbert
from minbert.multitask import MultitaskBert
from minbert.schedules import TaskSchedule

from ..core.batching import batch_indices
from ..core.data import SIMCSE_QUORA_REST, Records, unlabelled
from ..core.distributed import is_main_process
from ..core.errors import ConfigurationError
from ..core.evaluation import (
    DEV_NAMES,
    accuracy,
    in_order,
    overall_score,
    pearson,
    predict_batches,
    prediction_path,
    raw_path,
    write_raw,
    write_text,
)
from ..core.progress import showing
from ..core.recipe import with_schedule_record
from ..core.resume import resume_config
from ..core.runs import RunPaths, parse_run, rewrite_on_extension, run_paths, write_run_json
from ..core.settings import parser_for
from ..core.starter_flags import translate
from ..core.terms import Context, build_terms, check_terms
from ..core.train import FitOptions, FitResult, Work, fit
from ..core.training_setup import start, write_split
from ..core.tree import command, holds
from . import terms as _registered  # noqa: F401  (importing it registers the command's terms)
from .data import Encoded, EpochBatches, collate, load
from .model import model_class, multitask_loss, prepare_inputs
from .settings import METRICS, Settings


def outputs(model: MultitaskBert, data: Encoded, batch_size: int, device: torch.device,
            precision: str = "fp32") -> torch.Tensor:
    """The model's raw output for every record in file order: SST logits (N, C), or one value per pair (N,)."""
    index = batch_indices(data.lengths, batch_size, shuffle=False, bucket=True)
    y = predict_batches(model, (collate(data, i) for i in index),
                        lambda m, batch: m.predict(data.task, batch).float().cpu(), device, precision, len(index))
    return torch.stack(in_order(range(len(data.records)), index, y))             # (N, C) or (N,)


def predict(model: MultitaskBert, data: Encoded, batch_size: int, device: torch.device,
            precision: str = "fp32") -> list[float | int]:
    """Predictions for every record in file order: the SST class, the Quora 0/1, or the STS score."""
    return decide(data.task, outputs(model, data, batch_size, device, precision))


def decide(task: str, y: torch.Tensor) -> list[float | int]:
    """Predictions from raw outputs: the SST class, the Quora 0/1, or the STS score."""
    if task == "sst":
        return y.argmax(-1).tolist()                            # (N, 5) -> class
    if task == "para":
        return (y > 0).long().tolist()                          # logit > 0 <=> sigmoid > 0.5
    return y.tolist()                                           # the 0-5 similarity score


def score(task: str, preds: list, records: Records) -> float:
    labels = [e.label for e in records]
    return pearson(preds, labels) if task == "sts" else accuracy(preds, labels)


def add_pals(model: MultitaskBert, settings: Settings, params: list[nn.Parameter]) -> list[nn.Parameter]:
    """PALs, trained whatever the fine-tune mode: `params` and theirs."""
    pals = settings.pals.config()
    return params + list(model.add_pals(pals).parameters()) if pals is not None else params


def dev_table(scores: dict[str, float]) -> str:
    """One line: each task's dev metric and, with all three, the overall score."""
    return "  ".join(f"{DEV_NAMES[k]} {v:.4f}" for k, v in scores.items())


def after_simcse(settings: Settings) -> Settings:
    """--after-simcse DIR: --model DIR and --para-train DIR/quora-train-rest.csv, checked to exist."""
    if settings.files.after_simcse is None:
        return settings
    d = Path(settings.files.after_simcse)
    missing = [name for name in ("config.json", SIMCSE_QUORA_REST) if not (d / name).is_file()]
    if missing:
        lacks = "" if holds("simcse") else " (this tree holds no tasks/simcse: your SimCSE stage writes the same)"
        raise ConfigurationError(f"--after-simcse {d}: no {' or '.join(missing)} there; write the directory with "
                                 f"{command('simcse')} --out {d}{lacks}")
    if settings.training.model not in ("minilm", str(d)) or settings.files.para_train not in (None, str(d / SIMCSE_QUORA_REST)):
        raise ConfigurationError("--after-simcse sets --model and --para-train itself: give neither with it")
    return replace(settings, training=replace(settings.training, model=str(d)),
                   files=replace(settings.files, para_train=str(d / SIMCSE_QUORA_REST)))


def load_files(settings: Settings, tasks: list[str], tokenizer: minbert.Tokenizer
               ) -> tuple[dict[str, Encoded], dict[str, Encoded], dict[str, Encoded]]:
    """Each task's training, dev and (unless --no-predictions, and where it exists) test file, tokenised."""
    files, tr = settings.files, settings.training
    train = {t: load(t, "train", files.path(t, "train"), tokenizer, tr.max_train_examples, tr.seed) for t in tasks}
    dev = {t: load(t, "dev", files.path(t, "dev"), tokenizer) for t in tasks}
    test = {t: load(t, "test", files.path(t, "test"), tokenizer) for t in tasks
            if settings.run.predictions and files.path(t, "test").is_file()}
    for t in tasks:
        if settings.run.predictions and t not in test and is_main_process():   # as tasks.predict says it
            print(f"{t} test: no file {files.path(t, 'test')}; skipped", file=sys.stderr)
    for t in tasks:
        for data in (train[t], dev[t]):
            if not data.records.labelled:
                raise unlabelled(data.records.path, t)
    return train, dev, test


def build_model(settings: Settings, encoder: str | None = None) -> MultitaskBert:
    """The multitask model the settings describe (heads, PALs; not SMART, which only training adds), on `encoder` or
    the settings' --model."""
    bert = minbert.load_pretrained(encoder or settings.training.model,
                                   attn_implementation=settings.recipe.attn_implementation)
    model = model_class(settings.toolkit.sts_output)(bert, settings.model_config())
    pals = settings.pals.config()
    if pals is not None:
        model.add_pals(pals)
    return model


# The sections of Settings that run() reads itself; every other one is read by a registered term (check_terms).
OWN_SECTIONS = ("design", "fine_tune", "training", "recipe", "pals", "toolkit", "files", "run")


def run(settings: Settings) -> dict:
    """Train the multitask model, select on dev, write the prediction files; returns the scores and history."""
    settings = after_simcse(settings)
    tasks, metric = settings.design.chosen()
    tr, ft, rs = settings.training, settings.fine_tune, settings.run
    check_terms("multitask", settings, own=OWN_SECTIONS)       # each other section is a registered term's
    settings.pals.config()                                                    # the checks, before any work
    mode = ft.mode
    lr = tr.lr if tr.lr is not None else mode.default_lr
    paths = run_paths(rs, "multitask", settings.design.design, settings.design.schedule, ft.fine_tune_mode)
    device, tokenizer, recipe = start(rs.device, rs.threads, tr.seed, tr.model, tr.max_length,
                                      settings.recipe)       # --precision auto resolved, and said once
    settings = replace(settings, recipe=recipe)
    train, dev, test = load_files(settings, tasks, tokenizer)

    bert = minbert.load_pretrained(tr.model, attn_implementation=settings.recipe.attn_implementation)
    model = model_class(settings.toolkit.sts_output)(bert, settings.model_config())
    model.bert.gradient_checkpointing = tr.gradient_checkpointing
    params = mode.setup(model, ft, tr.seed)
    params = add_pals(model, settings, params)
    terms = build_terms("multitask", settings, Context(model, params, device, settings))   # after the parameters
    model.to(device)
    optimizer = settings.recipe.optimizer_for(model, params, lr, tr.weight_decay)
    schedule = TaskSchedule(settings.design.schedule, settings.design.when_exhausted)
    if is_main_process():
        if paths.resume is None:   # a resumed run rewrites run.json once it has finished, its settings accepted
            write_run_json(paths, "multitask", settings)
        sizes = ", ".join(f"{t} {len(train[t].records)}/{len(dev[t].records)}" for t in tasks)
        print(f"multitask {settings.design.design}, {settings.design.schedule}: train/dev examples {sizes}; "
              f"{ft.fine_tune_mode} trains {sum(p.numel() for p in params):,} of "
              f"{sum(p.numel() for p in model.parameters()):,} parameters; lr {lr:g}; device {device}; "
              f"{settings.recipe.precision}; run {paths.dir}", file=sys.stderr)

    def epoch_batches(epoch: int) -> Sequence[dict]:
        return terms.batches(EpochBatches(train, schedule, tr.batch_size, epoch, tr.epochs, tr.seed, tr.bucket,
                                          settings.design.swap_pairs), tr.seed, epoch)

    evaluated: list[dict[str, list]] = []  # the dev predictions of each epoch this process evaluated, in order

    def evaluate(m: nn.Module) -> dict[str, float]:
        evaluated.append({t: predict(m, dev[t], rs.eval_batch_size, device, settings.recipe.precision)
                          for t in tasks})
        scores = {METRICS[t]: score(t, evaluated[-1][t], dev[t].records) for t in tasks}
        if len(tasks) == 3:
            scores["overall"] = overall_score(scores["sst_accuracy"], scores["para_accuracy"], scores["sts_pearson"])
        if is_main_process():
            print(f"  dev: {dev_table(scores)}", file=sys.stderr)
        return scores

    post_step = (lambda m: mode.post_step(m, ft)) if mode.post_step is not None else None
    result = fit(Work(model, optimizer, epoch_batches, multitask_loss(terms, device), evaluate, metric, post_step,
                      prepare=lambda batch: prepare_inputs(model, batch)),
                 settings.recipe,
                 FitOptions(tr.epochs, device, tr.seed, paths.checkpoint, paths.resume,
                            resume_config(settings) | {"training.lr": lr, "command": "multitask"},
                            fixed_epochs=("--schedule annealed draws each epoch's tasks by the number of epochs, "
                                          "so no run.json could replay it" if settings.design.schedule == "annealed"
                                          else None), extended=rewrite_on_extension(paths, "multitask", settings),
                            **rs.loop_options()), terms)
    if not is_main_process():
        return {"best_epoch": result.best_epoch, f"dev_{metric}": result.best_score}

    model.load_state_dict(result.best_state)
    if mode.after_fit is not None:
        mode.after_fit(model, ft, {"model": tr.model, "pooling": tr.pooling, "fine_tune_mode": ft.fine_tune_mode,
                                   "bitfit_terms": ft.bitfit_terms})
    summary: dict = {"tasks": tasks, "best_epoch": result.best_epoch, f"dev_{metric}": result.best_score,
                     "history": result.history, "checkpoint": str(paths.checkpoint), "run_dir": str(paths.dir),
                     "trainable": sum(p.numel() for p in params), "dev": {}, "test": {}}
    summary |= terms.summary(result.history)  # per section, per epoch (before a resume too): what its terms logged
    # The best epoch's dev predictions, made with the weights just loaded, unless it was evaluated before a resume.
    k = result.best_epoch - 1 - (len(result.history) - len(evaluated))
    write_outputs(settings, paths, model, result, dev, test, evaluated[k] if 0 <= k < len(evaluated) else {},
                  summary, device)
    if rs.predictions:
        write_text(paths.predictions / "multitask-summary.json", json.dumps(   # atomic
            summary | {"settings": resume_config(settings) | {"training.lr": lr}}, indent=1))
    settings = with_schedule_record(settings, result.earlier_epochs)     # a resume that changed --epochs: replayable
    write_run_json(paths, "multitask", settings, result={k: v for k, v in summary.items() if k != "history"})
    return summary


def write_outputs(settings: Settings, paths: RunPaths, model: MultitaskBert, result: FitResult,
                  dev: dict[str, Encoded], test: dict[str, Encoded], best_dev: dict[str, list], summary: dict,
                  device: torch.device) -> None:
    """The six prediction files (and with --raw-outputs the raw outputs) and their scores into `summary`; with
    --no-predictions the best epoch's own dev scores."""
    rs, precision = settings.run, settings.recipe.precision
    if not rs.predictions:  # the best epoch's own dev evaluation
        best = result.history[result.best_epoch - 1]
        summary["dev"] = {k[len("dev_"):]: v for k, v in best.items() if k.startswith("dev_")}
    for split, data in (("dev", dev if rs.predictions else {}), ("test", test)):
        with showing(split, rs.progress):   # a progress bar over each file's batches
            for t, d in data.items():
                if rs.raw_outputs:  # the raw outputs beside the course file, and the predictions made from them
                    y = outputs(model, d, rs.eval_batch_size, device, precision)
                    preds = decide(t, y)
                    write_raw(raw_path(paths.predictions, t, split), [e.id for e in d.records], y)
                else:
                    preds = best_dev[t] if split == "dev" and t in best_dev else predict(
                        model, d, rs.eval_batch_size, device, precision)
                value = write_split(prediction_path(paths.predictions, t, split), t, d.records, preds,
                                    f"{split} {METRICS[t]}", lambda p, _, t=t, d=d: score(t, p, d.records))
                if value is not None:
                    summary[split][METRICS[t]] = value
    if len(summary["tasks"]) == 3 and rs.predictions:
        d = summary["dev"]
        d["overall"] = overall_score(d["sst_accuracy"], d["para_accuracy"], d["sts_pearson"])
    print(f"best epoch {result.best_epoch}; dev {dev_table(summary['dev'])}")


def build_parser() -> argparse.ArgumentParser:
    """The command line: Settings' flags, --config and --print-config."""
    return parser_for(Settings, "python -m tasks.multitask", __doc__)


def parse_settings(argv: list[str] | None = None) -> Settings:
    """The settings from the command line (the course's starter spellings too), --config and --resume DIR."""
    return parse_run(Settings, translate(argv, "multitask"), "python -m tasks.multitask", __doc__)


def main(argv: list[str] | None = None) -> int:
    settings = parse_settings(argv)
    run(settings)
    return 0

