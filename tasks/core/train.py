"""The training loop every task CLI shares: devices, seeding, epochs with a progress bar, dev selection, early
stopping, and a checkpoint after every epoch (tasks/core/checkpoints.py) that a killed run resumes from to the same
result as an uninterrupted one; the recipe (mixed precision, warm-up and decay, clipping, accumulation; its pieces,
flags and defaults in tasks/core/recipe.py) and data parallelism through torchrun (tasks/core/distributed.py).

The recipe: precision "bf16" or "fp16" runs the loss and the evaluation under torch.autocast (fp16 with a gradient
scaler; which precision trains on which device, and what "auto" picks: tasks/core/precision.py); warmup_ratio (None: a
constant learning rate) warms the learning rate up linearly over that fraction of the optimiser steps of all
epochs, then decays it linearly to 0; gradual_unfreezing U lets the heads train alone first and the encoder join a
depth at a time from the top over the first U of the steps (no step for a parameter before its turn); max_grad_norm clips the gradients' total norm; grad_accum sums the gradients
of that many consecutive batches, weighted by their sizes, into one optimiser step, as if they were one batch.

Under torchrun (WORLD_SIZE > 1) each process takes its rows of every batch, DDP averages the gradients (each loss
weighted so that the step equals one process's on the whole batch), every process evaluates the whole dev set
(the same numbers as one process), and rank 0 alone logs, shows the progress bar and writes the checkpoint, which
holds every rank's RNG state for an exact resume.

On a GPU the step reads nothing back to the host (tasks/core/step.py): Work.prepare shapes each batch on the CPU, the
batch is pinned and copied without blocking, and the losses stay on the device until options.read_every steps have
been taken (every step on the CPU); recipe.compile runs the loss through torch.compile on sequences padded to a
multiple of PAD_MULTIPLE, recipe.cuda_graphs replays each padded shape's whole step as a CUDA graph
(tasks/core/graphs.py), and options.attention_kernel picks the attention kernel torch tries first.

Each epoch's batch order is drawn from (seed, epoch) alone, so restoring the RNG states, the optimiser and the
step count is enough to continue exactly where an uninterrupted run would be. A term's batches() may draw from the
global RNGs: a resume within an epoch calls it from their states at the epoch's start (the checkpoint keeps them), takes
the batches done again without training, then restores the checkpoint's. Every checkpoint keeps the terms' state().

fit(work, recipe, options, terms) takes what trains (Work), the recipe (tasks/core/recipe.py), the run's options
(FitOptions) and its extension terms (tasks/core/loop.py) and reads top to bottom as: check the settings, restore
(or seed), then per epoch: train one epoch, evaluate, keep the best, save, tell the watchers. Under torchrun it writes
its files only where tasks.core.distributed.is_main_process().
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from tqdm import tqdm

from . import distributed as dp
from .batching import pad_lengths, position_limit, step_groups, to_device
from .checkpoints import KILL_AT_STEP, maybe_kill, rng_state, set_rng_state
from .curves import Curves, curves_path
from .data import files_read
from .distributed import is_main_process, rank, world_size
from .errors import diverged
from .evaluation import evaluating
from .graphs import StepGraphs, check_graphs
from .loop import FitOptions, FitResult, Interrupted, Work, after_epoch, check_settings, watching  # noqa: F401 - fit()'s surface
from .loop_checkpoint import LoopCheckpoint
from .precision import cpu_has_bf16, resolve_precision
from .progress import progress_bar, showing
from .recipe import LinearSchedule, Recipe, autocast, earlier_plans, planned_epochs, unfreezing
from .step import PAD_MULTIPLE, LossReads, Taken, attention_kernels, compiled, read_every
from .terms import TermSet


def seed_everything(seed: int) -> None:
    """Seed python's random, numpy and torch (every device)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def cpu_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """A copy of the model's state dict on the CPU (for keeping the best epoch)."""
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


def fit(work: Work, recipe: Recipe, options: FitOptions, terms: TermSet | None = None) -> FitResult:
    """Train `work` for options.epochs epochs by `recipe`'s loop fields; after each, evaluate on dev, keep the best
    state by work.metric, checkpoint, and tell the watchers (tasks/core/loop.py). `terms`: the run's switched-on
    extension terms (tasks/core/terms.py); the loop calls their after_step() after each optimiser step and
    post_step, and adds what they logged over the epoch to its record."""
    loop = _Loop(work, recipe, options, terms or TermSet())
    epochs, metric, unit, patience = options.epochs, work.metric, options.unit, options.patience
    if options.resume is not None:
        loop.restore(options.resume)
        for record in loop.history:                  # the watchers see the epochs restored, as if run here
            after_epoch(record["epoch"], record, metric, record["epoch"] == epochs)
    else:
        seed_everything(options.seed)
    checkpoint = options.checkpoint
    log_path = (options.curves if options.curves is not None else curves_path(checkpoint) if checkpoint is not None
                else None)
    loop.curve = (Curves(log_path, keep_epochs=loop.start, keep_steps=loop.step if loop.within else None)
                  if loop.main and log_path is not None else None)
    for epoch in range(loop.start, epochs):
        if patience is not None and epoch - loop.best.best_epoch >= patience:
            loop.say(f"{loop.label}stopping early: dev {metric} has not improved for {patience} {unit}s "
                     f"(best: {unit} {loop.best.best_epoch})")
            break
        with attention_kernels(options.device, options.attention_kernel):
            total, per_task, train_time = loop.train_epoch(epoch)
            record = loop.evaluate(epoch, total, per_task, train_time, loop.terms.epoch_end())
        if checkpoint is not None:
            loop.save(epoch)
        after_epoch(epoch + 1, record, metric, epoch + 1 == epochs)
    loop.best.history, loop.best.earlier_epochs = loop.history, loop.earlier_epochs or None
    if loop.curve is not None:
        loop.curve.close()
    return loop.best


class _Loop(LoopCheckpoint):
    """fit()'s parts and the state they share: the step count, the history, the best epoch, the scaler, the
    schedule; everything a checkpoint holds besides the model and the optimiser."""

    def __init__(self, work: Work, recipe: Recipe, options: FitOptions, terms: TermSet):
        model, optimizer, device = work.model, work.optimizer, options.device
        asked, recipe = recipe.precision, replace(recipe, precision=resolve_precision(device, recipe.precision))
        check_settings(device, recipe, options)
        self.work, self.options, self.terms = work, options, terms
        self.model, self.optimizer, self.device, self.recipe = model, optimizer, device, recipe
        self.metric, self.unit, self.progress = work.metric, options.unit, options.progress
        self.label = f"{options.part} " if options.part else ""   # what the bar and the epoch lines begin with
        model.to(device)
        self.parallel = dp.init_distributed(device)
        self.me, self.world, self.main = rank(), world_size(), is_main_process()
        self.say = options.log if self.main else (lambda message: None)
        if asked == "auto":
            self.say(f"--precision auto: {recipe.precision} on {device}")
        if recipe.precision == "bf16" and device.type == "cpu" and not cpu_has_bf16():
            self.say("warning: this CPU has neither avx512_bf16 nor AMX: bf16 autocast will be slower than fp32 here")
        if self.parallel:
            self.say(f"data parallel: {self.world} processes ({dist.get_backend()}), each takes 1/{self.world} of "
                     "every batch")
        self.start, self.history, self.step = 0, [], 0
        self.within: dict | None = None      # a mid-epoch checkpoint's place: groups done, the loss sums, seconds
        self.best = FitResult(0, float("-inf"), cpu_state(model))
        self.scaler = torch.amp.GradScaler(device.type, enabled=recipe.precision == "fp16")
        self.base_lrs = [float(group["lr"]) for group in optimizer.param_groups]   # not a graph's lr tensor
        self.compute = compiled(dp.data_parallel(model, work.loss, device) if self.parallel else (
            lambda batch: work.loss(model, batch)), recipe.compile)
        self.reads = LossReads(read_every(device, options.read_every))  # the losses still on the device
        if recipe.cuda_graphs:
            check_graphs(device, recipe, optimizer, self.parallel, bool(terms.active), work.post_step is not None,
                         any(getattr(m, "checkpointing", False) for m in model.modules()))
        self.graphs = StepGraphs(device, optimizer) if recipe.cuda_graphs else None
        self.max_tokens = position_limit(model)      # padding to PAD_MULTIPLE stops at the model's positions
        self.params = [p for group in optimizer.param_groups for p in group["params"]]
        self.schedule: LinearSchedule | None = None
        self.total: int | None = None                # optimiser steps of the whole run, once known
        self.per_epoch: int | None = None            # optimiser steps of the epoch in progress (a schedule's unit)
        self.laid_for: int | None = None             # the epochs the schedule is laid out over now
        self.earlier_epochs = list(recipe.earlier_epochs or [])   # where a resume laid it out again (restore adds)
        self.earlier = earlier_plans(self.earlier_epochs)
        self.unfreeze_at: list[int] | None = None    # per parameter of self.params: its first optimiser step
        self.curve: Curves | None = None
        self.epoch_rng: dict | None = None          # the RNG states at the epoch's start (batches() drew from them)
        self.data_files = files_read()               # the task files read for this run: what the checkpoint records

    def train_epoch(self, epoch: int) -> tuple[float, dict[str, list[float]], float]:
        """One epoch of optimiser steps: (the mean training loss, per task [loss sum, batches], seconds)."""
        epochs, checkpoint = self.options.epochs, self.options.checkpoint
        self.model.train()
        t0, sums = time.perf_counter(), {"total": 0.0, "n": 0, "shown": [0.0, 0]}
        per_task: dict[str, list[float]] = {}  # task -> [loss sum, batches]
        within, self.within, resumed_rng = self.within, None, None
        if within is not None and "epoch_rng" in within:   # the RNG states batches() saw before the interruption
            resumed_rng = rng_state()
            set_rng_state(within["epoch_rng"])
        self.epoch_rng = rng_state()                 # a read: the run draws nothing more or less for it
        batches = self.work.batches(epoch)
        self._schedule(batches)
        bar = progress_bar(f"{self.label}{self.unit} {epoch + 1}/{epochs}",
                           len(batches) if hasattr(batches, "__len__") else None, self.progress and self.main)
        done = 0                                     # optimiser steps of this epoch a mid-epoch checkpoint took
        if within is not None:                       # resumed from one: its sums, then skip what it had done
            done, sums, per_task = within["groups"], within["sums"], within["per_task"]
            t0 -= within["seconds"]
        if self.graphs is not None:
            self.graphs.ready()
        with self.graphs.on_stream() if self.graphs is not None else nullcontext():
            self._steps(epoch, batches, done, t0, sums, per_task, bar, resumed_rng)
        self._read(checkpoint, sums, per_task, bar)    # the epoch's last losses (on a GPU: waits for its last step)
        bar.close()
        if self.graphs is not None:
            self.say(self.graphs.describe())
            self.say(self.graphs.describe_seconds())
        total = sums["total"] / max(sums["n"], 1)
        if self.parallel:  # the ranks' shares add up to the global batches' mean losses
            tasks = sorted(per_task)
            total_sum, *task_sums = dp.sum_over_ranks([sums["total"]] + [per_task[t][0] for t in tasks], self.device)
            per_task = {t: [s, per_task[t][1]] for t, s in zip(tasks, task_sums)}
            total = total_sum / max(sums["n"], 1)
        return total, per_task, time.perf_counter() - t0

    def _steps(self, epoch: int, batches, done: int, t0: float, sums: dict, per_task: dict, bar: tqdm,
               resumed_rng: dict | None = None) -> None:
        """The epoch's optimiser steps from the `done`-th on, with the reads, hooks and mid-epoch checkpoints; after
        the `done` skipped, before the next is taken, the checkpoint's RNG states (`resumed_rng`) come back."""
        checkpoint, post_step = self.options.checkpoint, self.work.post_step
        for i, group in enumerate(step_groups(batches, self.recipe.grad_accum)):
            if i < done:                             # the same batches as before the interruption: already taken
                bar.update(len(group))
                if i + 1 == done and resumed_rng is not None:
                    set_rng_state(resumed_rng)
                continue
            if self.earlier and self.per_epoch is not None:
                self._lay_out()                      # a replayed resume's --epochs takes over at its step
            graphed = self.graphs is not None          # forward, backward and update in one (a graph's replay)
            self.reads.add(self.step, epoch, self._graphed(group[0], bar) if graphed else self._accumulate(group, bar))
            if self.reads.due(self.step):            # on the CPU every step, before its update (as it always was)
                self._read(checkpoint, sums, per_task, bar)
            if graphed:
                self.step += 1
            else:
                self._optimizer_step()
            if post_step is not None:
                post_step(self.model)
            self.terms.after_step(self.model)
            every = self.options.save_every
            if every and self.step % every == 0 and checkpoint is not None:
                self._read(checkpoint, sums, per_task, bar)
                self.save(epoch, within={"groups": i + 1, "sums": sums, "per_task": per_task,
                                         "seconds": time.perf_counter() - t0, "epoch_rng": self.epoch_rng})
            maybe_kill(KILL_AT_STEP, self.step)

    def _schedule(self, batches: Iterable[dict]) -> None:
        """The learning-rate schedule and the steps at which gradual unfreezing lets each parameter train, laid out once
        the first epoch's number of batches is known (and again where Recipe.earlier_epochs says: _lay_out)."""
        if not self.scheduled:
            return
        if not hasattr(batches, "__len__"):
            raise TypeError("a learning-rate schedule or gradual unfreezing needs Work.batches to return a sequence: "
                            "its length sets the number of optimiser steps")
        self.per_epoch = math.ceil(len(batches) / self.recipe.grad_accum)
        self._lay_out()

    @property
    def scheduled(self) -> bool:
        """Whether the run's steps follow a schedule laid out over its epochs (warm-up and decay, gradual unfreezing)."""
        return self.recipe.warmup_ratio is not None or self.recipe.gradual_unfreezing > 0

    def _lay_out(self) -> None:
        """The schedule over the epochs planned at this step (recipe.planned_epochs), unless it is laid out so."""
        epochs = planned_epochs(self.earlier, self.step, self.options.epochs)
        if epochs == self.laid_for:
            return
        again, self.laid_for = self.laid_for is not None, epochs
        self.total = epochs * self.per_epoch
        if again:
            self.say(f"from optimiser step {self.step + 1} on, laid out again over {epochs} epochs (--earlier-epochs):")
        if self.recipe.warmup_ratio is not None:
            self.schedule = LinearSchedule.from_ratio(self.recipe.warmup_ratio, self.total)
            self.say(f"learning rate: linear warm-up over {self.schedule.warmup} of {self.schedule.total} optimiser "
                     "steps, then linear decay to 0")
        if self.recipe.gradual_unfreezing > 0:
            self.unfreeze_at, line = unfreezing(self.model, self.params, self.recipe.gradual_unfreezing, self.total)
            self.say(line)

    def _accumulate(self, group: list[dict], bar: tqdm) -> list[Taken]:
        """The gradients of one optimiser step's batches, summed as if they were one batch; each batch's loss is
        left on the device (self._read reads them)."""
        rows = sum(dp.batch_rows(b) for b in group)  # examples in this optimiser step, over every rank
        self.optimizer.zero_grad(set_to_none=True)
        taken = []
        for batch in group:
            size = dp.batch_rows(batch)
            part, mine = dp.shard(batch, self.me, self.world) if self.parallel else (batch, size)
            if self.work.prepare is not None:          # on the CPU, before the copy: what shapes the batch
                part = self.work.prepare(part)
            if self.recipe.compile != "off":           # a few lengths, so that compiled steps are reused
                part = pad_lengths(part, PAD_MULTIPLE, self.max_tokens)
            part = to_device(part, self.device)
            if self.recipe.compile == "reduce-overhead":
                torch.compiler.cudagraph_mark_step_begin()  # each forward a new replay of the captured graphs
            with autocast(self.device, self.recipe.precision):
                loss = self.compute(part)
            # DDP averages over ranks: world * mine / rows makes the sum of the ranks' gradients the one of the
            # mean loss over the step's examples (just the loss itself for one process and one batch)
            self.scaler.scale(loss * (self.world * mine / rows)).backward()
            kept = loss.detach() if self.recipe.compile == "off" else loss.detach().clone()   # a graph's output is
            taken.append(Taken(kept, batch.get("task"), mine, size))      # overwritten by its next replay: copied
            bar.update()
        return taken

    def _read(self, checkpoint: str | Path | None, sums: dict, per_task: dict[str, list[float]], bar: tqdm) -> None:
        """The losses of the steps not read yet, in one copy from the device; then, step by step, what the loop keeps
        of them: the divergence check, the epoch's sums, the curves, the progress bar's running mean."""
        shown = sums["shown"]
        for step, epoch, taken in self.reads.read():
            group_loss = 0.0
            for value, t in taken:
                if not math.isfinite(value):
                    diverged(value, epoch, step, t.task, self.unit, checkpoint, len(self.history))
                group_loss += value / len(taken)
                share = value * (t.mine / t.size)         # this rank's part of the batch's mean loss
                sums["total"], sums["n"] = sums["total"] + share, sums["n"] + 1
                if t.task is not None:
                    acc = per_task.setdefault(t.task, [0.0, 0])
                    acc[0], acc[1] = acc[0] + share, acc[1] + 1
                if t.mine:
                    shown[0], shown[1] = shown[0] + value, shown[1] + 1
            if self.curve is not None:
                named = {t.task for _, t in taken}
                self.curve.step(step + 1, epoch + 1, group_loss, named.pop() if len(named) == 1 else None)
        bar.set_postfix(loss=f"{shown[0] / max(shown[1], 1):.4f}", refresh=False)   # drawn at the bar's next redraw

    def _optimizer_step(self) -> None:
        """The scheduled learning rate, gradual unfreezing, clipping, the (scaled) step."""
        if self.unfreeze_at is not None:             # a parameter before its turn takes no step (AdamW skips None)
            for p, first in zip(self.params, self.unfreeze_at):
                if self.step < first:
                    p.grad = None
        self._set_lr()
        self._update()
        self.step += 1

    def _set_lr(self) -> None:
        """The scheduled learning rate of this step (into the tensor a CUDA graph reads, under --cuda-graphs)."""
        if self.schedule is not None:
            for g, lr in zip(self.optimizer.param_groups, self.base_lrs):
                if torch.is_tensor(g["lr"]):
                    g["lr"].fill_(lr * self.schedule.factor(self.step))
                else:
                    g["lr"] = lr * self.schedule.factor(self.step)

    def _update(self) -> None:
        """Clipping and the (scaled) optimiser step: device work only."""
        if self.recipe.max_grad_norm is not None:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.params, self.recipe.max_grad_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def _graphed(self, batch: dict, bar: tqdm) -> list[Taken]:
        """One optimiser step as StepGraphs takes it (tasks/core/graphs.py): prepared and padded on the CPU, the
        learning rate set outside the graph, then zero_grad, the loss, backward and the update as one graph."""
        part = self.work.prepare(batch) if self.work.prepare is not None else batch
        part = pad_lengths(part, PAD_MULTIPLE, self.max_tokens)
        self._set_lr()

        def body(on_device: dict) -> torch.Tensor:
            self.optimizer.zero_grad(set_to_none=True)
            with autocast(self.device, self.recipe.precision):
                loss = self.compute(on_device)
            loss.backward()
            self._update()
            return loss.detach()
        loss = self.graphs.step(part, body)
        bar.update()
        size = dp.batch_rows(batch)
        return [Taken(loss, batch.get("task"), size, size)]

    def evaluate(self, epoch: int, train_loss: float, per_task: dict[str, list[float]], train_time: float,
                 logged: dict[str, float]) -> dict:
        """Evaluate on dev, record the epoch (with what the terms `logged`), keep the best state, log one line; the
        epoch's record."""
        t0 = time.perf_counter()
        with (evaluating(self.model, self.device, self.recipe.precision),   # eval mode, no gradients, the precision
              showing("dev", self.progress and self.main)):                # a bar over predict_batches' batches
            scores = self.work.evaluate(self.model)
        record = {"epoch": epoch + 1, "train_loss": train_loss,
                  **{f"train_loss_{t}": s / k for t, (s, k) in sorted(per_task.items())}, **logged,
                  "train_seconds": train_time,
                  "eval_seconds": time.perf_counter() - t0, **{f"dev_{k}": v for k, v in scores.items()}}
        self.history.append(record)
        if self.curve is not None:
            self.curve.epoch(record, self.step)
        improved = scores[self.metric] > self.best.best_score
        if improved:
            self.best = FitResult(epoch + 1, scores[self.metric], cpu_state(self.model), self.history)
        task_losses = "".join(f", {k[len('train_loss_'):]} {v:.4f}" for k, v in record.items()
                              if k.startswith("train_loss_"))
        self.say(f"{self.label}{self.unit} {epoch + 1}/{self.options.epochs}: train loss {record['train_loss']:.4f}{task_losses}, "
                 f"dev {self.metric} {scores[self.metric]:.4f}{' (best so far)' if improved else ''}, "
                 f"{train_time:.0f}s training + {record['eval_seconds']:.0f}s eval")
        return record
