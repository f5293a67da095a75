"""What every training command shares below its settings: the Training section (the model, the sample, the loop's
size; a command redeclares a field to change its default), the set-up (device, threads, seed, tokenizer), one seeded
reader of a task's split (tokenised once) and one writer of a split's prediction file.

    device, tokenizer, recipe = start(run.device, run.threads, training.seed, training.model, training.max_length,
                                      recipe)
    train = load_split("train", path, "sst", tokenizer, training.max_train_examples, training.seed)
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch

import minbert
from minbert.pooling import POOLINGS

from .batching import Split, tokenise
from .data import TASKS, Records
from .distributed import is_main_process, pick_device
from .errors import (
    ConfigurationError,
    nonnegative_float,
    positive_float,
    positive_int,
    probability,
    token_limit,
    user_path,
)
from .evaluation import write_predictions
from .graphs import check_graphs_device
from .precision import resolve_precision
from .recipe import Recipe
from .settings import setting
from .train import seed_everything


@dataclass
class Training:
    """The model, the training sample and the loop's size (each command may redeclare a field's default)."""

    model: str = setting("minilm", parse=user_path, help="checkpoint: 'minilm' (the offline default), a Hub name such as "
                                        "bert-base-uncased, or a local directory with config.json and weights")
    epochs: int = setting(3, parse=positive_int, on_resume="free", help="training epochs")
    lr: float | None = setting(None, parse=positive_float, help="learning rate (none: the fine-tune mode's own)")
    batch_size: int = setting(32, parse=positive_int, help="training batch size")
    weight_decay: float = setting(0.0, parse=nonnegative_float, help="AdamW's decoupled weight decay")
    dropout: float | None = setting(None, parse=probability,
                                    help="dropout before the head (none: the model's hidden dropout, 0.1)")
    pooling: str = setting("mean", choices=POOLINGS, help="sentence vector: the mean of the real tokens' final "
                                                         "states, the [CLS] state, or the pooler output")
    max_length: int | None = setting(None, parse=token_limit,
                                     help="truncate inputs to this many tokens (none: the model's limit, 512)")
    seed: int = setting(11711, parse=int, help="random seed for initialisation, order and dropout")
    max_train_examples: int | None = setting(None, parse=positive_int,
                                             help="train on a random sample of N examples, drawn with --seed "
                                                  "(quick runs; none: all)")
    bucket: bool = setting(True, help="batch training examples in random order instead of by similar length")
    gradient_checkpointing: bool = setting(False, on_resume="free",
                                           help="recompute each encoder layer in the backward pass instead of keeping "
                                                "its activations: the same gradients, less memory, a slower step "
                                                "(the reference repository's benchmarks/training.md)")


def start(device: str, threads: int | None, seed: int, model: str, max_length: int | None,
          recipe: Recipe) -> tuple[torch.device, minbert.Tokenizer, Recipe]:
    """The device, torch's threads, the seed, the model's tokenizer and the recipe as this device runs it (settle)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    picked = pick_device(device)
    recipe = settle(picked, recipe)
    if threads is not None:
        torch.set_num_threads(threads)
    seed_everything(seed)
    return picked, minbert.Tokenizer.from_pretrained(model, max_length=max_length), recipe


def settle(device: torch.device, recipe: Recipe) -> Recipe:
    """The recipe's device checks, before any data or model is loaded or any file written: --cuda-graphs needs a
    CUDA device; --precision is one the device trains in, and auto becomes the device's fastest safe one, said once
    on stderr (`--precision auto: fp16 on cuda`)."""
    if recipe.cuda_graphs:
        check_graphs_device(device)
    precision = resolve_precision(device, recipe.precision)
    if recipe.precision == "auto" and is_main_process():
        print(f"--precision auto: {precision} on {device}", file=sys.stderr)
    return replace(recipe, precision=precision)


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
        raise ConfigurationError(f"{path}: no examples to use")
    return records


def load_split(name: str, path: str | Path, task: str, tokenizer: minbert.Tokenizer, limit: int | None = None,
               seed: int | str = 0, convert: Callable[[Records], Records] | None = None) -> Split:
    """read_records, tokenised once (tokenise): the split's batches are all cut from its token ids."""
    records = read_records(path, task, limit, seed, convert)
    return tokenise(name, records, tokenizer, float_labels=TASKS[task].label.kind == "float")


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
