"""What the shared training loop (tasks/core/train.py fit) takes and gives, and the one way to follow it epoch by
epoch.

    result = fit(Work(model, optimizer, epoch_batches, loss_fn, evaluate, metric="accuracy"), settings.recipe,
                 FitOptions(epochs=3, device=device, seed=11711, checkpoint=paths.checkpoint, config=...), terms)

Work is what trains and on what; the Recipe (tasks/core/recipe.py) says how each step is taken (fit reads its
loop fields: precision, warmup_ratio, max_grad_norm, grad_accum, gradual_unfreezing); FitOptions are the run's:
how long, where, what it checkpoints and resumes from, how it shows progress; the TermSet (tasks/core/terms.py) the
run's switched-on extension terms. `watching(watcher)` follows every fit() within a block (the search's pruning,
the tests' interruptions).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from .precision import check_precision
from .step import attention_kernels, read_every


@dataclass
class Work:
    """What trains and on what: the model and its optimiser, the batches, the loss, the dev evaluation.

    batches(epoch) gives that epoch's collated batches, the same on every process (shuffled from the seed and the
    epoch); loss(model, batch) the mean loss of a batch on the device (a batch may name its task, batch["task"], and
    the record then holds each task's mean training loss, train_loss_{task}); evaluate(model) the dev scores, of
    which `metric` picks the best epoch; post_step(model), if given, runs after each optimiser step; prepare(batch),
    if given, runs on each training batch on the CPU before it moves to the device, for what would otherwise make a
    GPU tell the host a size (the multitask command joins a cross-encoder's pairs there; tasks/core/step.py)."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    batches: Callable[[int], Sequence[dict]]
    loss: Callable[[nn.Module, dict], torch.Tensor]
    evaluate: Callable[[nn.Module], dict[str, float]]
    metric: str
    post_step: Callable[[nn.Module], None] | None = None
    prepare: Callable[[dict], dict] | None = None


@dataclass
class FitOptions:
    """The run's options for the loop: how many epochs, on which device from which seed, the checkpoint and what it
    stores, early stopping and how progress shows.

    `config` (tasks.core.resume.resume_config, plain values) is stored in the checkpoint; a resume (`resume`: the
    checkpoint to continue from) whose settings differ by the settings' resume rule is refused. `patience` P (None:
    all `epochs`) ends the run once P evaluations in a row have not improved on the best, resumed runs included.
    `unit` is the log's word for one call of batches(): a command that evaluates every N steps hands fit rounds of N
    batches as its "epochs" and calls them "round"; `part` names the fit where a run has several (DeeBERT's
    "stage 1"): the progress bar and the epoch lines begin with it. Curves (tasks/core/curves.py): each optimiser step's loss and
    each epoch's record go to `curves` (default: beside the checkpoint, CHECKPOINT.curves.jsonl). save_every N > 0
    also checkpoints after every N-th optimiser step within an epoch, and a resume from it goes on exactly as the
    uninterrupted run would. read_every N: the training loss is read back from the device every N optimiser steps
    (None: every step on the CPU, every READ_EVERY_GPU on a GPU; tasks/core/step.py); attention_kernel: the attention kernel
    torch tries first on a GPU (tasks/core/step.py attention_kernels). fixed_epochs: why a resume may not change
    `epochs`, for a run whose run.json could not replay it (None: it may; a schedule is then laid out again and
    recorded, Recipe.earlier_epochs). extended(record), once a resume that changes `epochs` is accepted, before it
    trains on, with the checkpoint's Recipe.earlier_epochs: the command rewrites run.json with the new epochs (and that
    record), so that a plain --resume of a run stopped on the way goes on with them."""

    epochs: int
    device: torch.device
    seed: int = 0
    checkpoint: str | Path | None = None
    resume: str | Path | None = None
    config: dict = field(default_factory=dict)
    patience: int | None = None
    unit: str = "epoch"
    curves: str | Path | None = None
    save_every: int = 0
    progress: bool = True
    log: Callable[[str], None] = print
    read_every: int | None = None
    attention_kernel: str = "auto"
    fixed_epochs: str | None = None
    part: str | None = None
    extended: Callable[[list[str] | None], None] | None = None


@dataclass
class FitResult:
    """What fit() returns: the best epoch (1-based), its dev score and model state, per-epoch records, and the
    record of the schedule laid out again by a resume that changed the epochs (Recipe.earlier_epochs; None: laid out
    once), which run.json keeps (tasks.core.recipe.with_schedule_record)."""

    best_epoch: int
    best_score: float
    best_state: dict[str, torch.Tensor]
    history: list[dict] = field(default_factory=list)
    earlier_epochs: list[str] | None = None


class Interrupted(Exception):
    """Raised by a watcher to stop a run after its checkpoint is written (used to test resuming)."""


Watcher = Callable[[int, dict, str, bool], None]
WATCHERS: list[Watcher] = []


@contextmanager
def watching(watcher: Watcher) -> Iterator[None]:
    """Within the block, every fit() calls watcher(epoch, record, metric, last) after each epoch's evaluation and
    checkpoint; `last` is true for the fit's final epoch (stopping it there would save nothing).

    It lets a caller above a command (tasks.search: report each epoch's dev score, prune a weak trial by raising; a
    test: raise Interrupted to stop a run after an epoch) follow a run without the command taking a callback; an
    exception from the watcher ends fit() there. A resumed fit() first calls it for each epoch its checkpoint holds,
    so that the watcher sees the whole run."""
    WATCHERS.append(watcher)
    try:
        yield
    finally:
        WATCHERS.remove(watcher)


def after_epoch(epoch: int, record: dict, metric: str, last: bool) -> None:
    """Tell every watcher of the block fit() runs in that `epoch` (1-based) ended with `record`."""
    for watcher in WATCHERS:
        watcher(epoch, record, metric, last)


def check_settings(device: torch.device, recipe, options: FitOptions) -> None:
    """Refuse a recipe or options fit() cannot run, before any work (recipe: tasks/core/recipe.py's Recipe)."""
    check_precision(device, recipe.precision)
    if recipe.grad_accum < 1:
        raise ValueError(f"grad_accum must be at least 1, not {recipe.grad_accum}")
    if options.patience is not None and options.patience < 1:
        raise ValueError(f"patience must be at least 1, not {options.patience}")
    if options.save_every < 0:
        raise ValueError(f"save_every must be 0 (off) or a number of optimiser steps, not {options.save_every}")
    read_every(device, options.read_every)   # refuses N < 1
    attention_kernels(device, options.attention_kernel)  # refuses a kernel it does not know
    if recipe.warmup_ratio is not None and not 0 <= recipe.warmup_ratio < 1:
        raise ValueError(f"warmup_ratio must be in [0, 1), not {recipe.warmup_ratio}")
