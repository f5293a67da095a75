"""The scaffold every task CLI stands on: the common flags declared once (a CLI changes a flag's default or help
text, never declares it again), list flags that take `a,b,c` and `a b c`, the set-up (device, threads, seed,
tokenizer), the run settings stored in a checkpoint, one seeded reader of a task's split, one writer of a split's
prediction file, and an atomic text-file writer.

    p = argparse.ArgumentParser(...)
    add_common_arguments(p, epochs={"default": 3, "help": "training epochs (default 3)"})
    args = p.parse_args()
    device, tokenizer = setup(args)
    train = load_split("train", path, "sst", tokenizer, args.max_train_examples, args.seed)
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

import minbert
from minbert.pooling import POOLINGS

from .data import TASKS, Records, token_lengths
from .distributed import is_main_process
from .errors import existing_file, nonnegative_float, positive_float, positive_int, probability
from .evaluation import write_predictions
from .precision import resolve_precision
from .recipe import add_loop_arguments
from .settings import ListAction, setting
from .train import pick_device, seed_everything

DEVICES = ("auto", "cpu", "cuda", "mps")
# Settings that say where a run writes, how it shows progress or what hardware it uses, not what it computes:
# left out of the run settings, so a resumed run may change them.
NOT_SETTINGS = ("progress", "threads", "eval_batch_size", "checkpoint", "resume", "predictions_dir", "device",
                "raw_outputs", "predictions", "out")


ListFlag = ListAction   # `--f a,b,c`, `--f a b c`; joined=True keeps the items as one comma-joined string


@dataclass
class Training:
    """The model, the training sample and the loop's size (each command may redeclare a field's default)."""

    model: str = setting("minilm", help="checkpoint: 'minilm' (the offline default), a Hub name such as "
                                        "bert-base-uncased, or a local directory with config.json and weights")
    epochs: int = setting(3, parse=positive_int, on_resume="free", help="training epochs")
    lr: float | None = setting(None, parse=positive_float, help="learning rate (none: the fine-tune mode's own)")
    batch_size: int = setting(32, parse=positive_int, help="training batch size")
    weight_decay: float = setting(0.0, parse=nonnegative_float, help="AdamW's decoupled weight decay")
    dropout: float | None = setting(None, parse=probability,
                                    help="dropout before the head (none: the model's hidden dropout, 0.1)")
    pooling: str = setting("mean", choices=POOLINGS, help="sentence vector: the mean of the real tokens' final "
                                                         "states, the [CLS] state, or the pooler output")
    max_length: int | None = setting(None, parse=positive_int,
                                     help="truncate inputs to this many tokens (none: the model's limit, 512)")
    seed: int = setting(11711, parse=int, help="random seed for initialisation, order and dropout")
    max_train_examples: int | None = setting(None, parse=positive_int,
                                             help="train on a random sample of N examples, drawn with --seed "
                                                  "(quick runs; none: all)")
    bucket: bool = setting(True, help="batch training examples in random order instead of by similar length")


def add_common_arguments(p: argparse.ArgumentParser, **changes: dict) -> None:
    """The flags every training CLI has, then the training recipe's (tasks/recipe.py); changes[dest] updates that
    flag's keywords (a CLI's own default, help text or type)."""
    def kw(name: str, **defaults) -> dict:
        return defaults | changes.get(name, {})

    p.add_argument("--model", **kw("model", default="minilm", help="checkpoint: 'minilm' (offline), a Hub name, "
                                                                   "or a directory"))
    p.add_argument("--epochs", **kw("epochs", type=positive_int, default=3, help="training epochs (default 3)"))
    p.add_argument("--lr", **kw("lr", type=positive_float, default=None,
                                help="learning rate (default: the fine-tune mode's own)"))
    p.add_argument("--batch-size", **kw("batch_size", type=positive_int, default=32,
                                        help="training batch size (default 32)"))
    p.add_argument("--eval-batch-size", **kw("eval_batch_size", type=positive_int, default=128,
                                             help="batch size for dev/test prediction"))
    p.add_argument("--pooling", **kw("pooling", default="mean", help="sentence vector"))
    p.add_argument("--max-length", **kw("max_length", type=positive_int, default=None,
                                        help="truncate inputs to this many tokens (default: the model's limit, 512)"))
    p.add_argument("--seed", **kw("seed", type=int, default=11711,
                                  help="random seed for initialisation, order and dropout"))
    p.add_argument("--device", **kw("device", choices=DEVICES, default="auto",
                                    help="auto picks cuda, then mps, then cpu"))
    p.add_argument("--threads", **kw("threads", type=positive_int, default=None,
                                     help="CPU threads for torch (default: torch's choice); 1 is often faster on a "
                                          "busy shared machine"))
    p.add_argument("--max-train-examples", **kw("max_train_examples", type=positive_int, default=None,
                                                help="train on a random sample of N examples, drawn with --seed "
                                                     "(quick runs)"))
    p.add_argument("--data-dir", **kw("data_dir", default="data",
                                      help="where the default task files live (default: data)"))
    p.add_argument("--resume", **kw("resume", default=None, type=existing_file, metavar="PATH",
                                    help="continue the run saved in this checkpoint (written after each epoch; a run "
                                         "killed mid-epoch repeats that epoch) to the same result as an "
                                         "uninterrupted run"))
    p.add_argument("--no-progress", **kw("progress", dest="progress", action="store_false",
                                         help="no tqdm progress bar"))
    add_loop_arguments(p)


def setup(args: argparse.Namespace) -> tuple[torch.device, minbert.Tokenizer]:
    """The device (--device), torch's threads (--threads), the seed (--seed) and --model's tokenizer;
    --precision auto becomes the device's choice, so that the run's settings say what it trained in."""
    device, tokenizer = start(args.device, args.threads, args.seed, args.model, args.max_length)
    args.precision = resolve_precision(device, args.precision)
    return device, tokenizer


def start(device: str, threads: int | None, seed: int, model: str,
          max_length: int | None) -> tuple[torch.device, minbert.Tokenizer]:
    """The device, torch's threads, the seed and the model's tokenizer."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    picked = pick_device(device)
    if threads is not None:
        torch.set_num_threads(threads)
    seed_everything(seed)
    return picked, minbert.Tokenizer.from_pretrained(model, max_length=max_length)


def run_settings(args: argparse.Namespace, excluded: Sequence[str] = (), **extra) -> dict:
    """The flags that define the experiment (plain values; not NOT_SETTINGS nor `excluded`), updated by `extra`:
    stored in every checkpoint, and a resumed run must agree with them."""
    leave = set(NOT_SETTINGS) | set(excluded)
    return {k: v for k, v in vars(args).items() if k not in leave and isinstance(
        v, (str, int, float, bool, type(None), list, tuple))} | extra


def seeded_sample(n: int, limit: int | None, seed: int | str) -> list[int] | None:
    """A random `limit` of range(n), drawn from `seed` alone and sorted (file order); None when all n are kept."""
    if limit is None or limit >= n:
        return None
    return sorted(random.Random(seed).sample(range(n), limit))


def read_records(path: str | Path, task: str, limit: int | None = None, seed: int | str = 0,
                 convert: Callable[[Records], Records] | None = None) -> Records:
    """A task's file, its summary on stderr, `convert`ed, and with `limit` a seeded random sample of that many rows
    (files are often sorted by label)."""
    records = TASKS[task].read(path)
    if is_main_process():
        print(records.summary(), file=sys.stderr)
    if convert is not None:
        records = convert(records)
    keep = seeded_sample(len(records), limit, seed)
    if keep is not None:
        records = Records([records[i] for i in keep], records.path, records.labelled, records.skipped)
    if not records:
        raise SystemExit(f"{path}: no examples to use")
    return records


@dataclass
class Split:
    """One loaded file with its token lengths (for bucketing)."""

    name: str
    records: Records
    lengths: list[int]


def load_split(name: str, path: str | Path, task: str, tokenizer: minbert.Tokenizer, limit: int | None = None,
               seed: int | str = 0, convert: Callable[[Records], Records] | None = None) -> Split:
    """read_records, with each record's token length."""
    records = read_records(path, task, limit, seed, convert)
    return Split(name, records, token_lengths(records, tokenizer))


def write_split(path: str | Path, board: str, records: Records, preds: list, metric: str,
                quality: Callable[[list, list], float], what: str = "", after: str = "", sep: str = "; ") -> float | None:
    """Write a split's prediction file in the course's format (`board` names it), print one line saying so, and
    return its quality against the labels (None for an unlabelled file)."""
    path = write_predictions(path, board, [e.id for e in records], preds)
    line = f"wrote {path} ({what}{len(preds)} rows){after}"
    value = quality(preds, [e.label for e in records]) if records.labelled else None
    if value is not None:
        line += f"{sep}{metric} {value:.4f}"
    print(line)
    return value
