"""The training loop every task CLI shares: devices, seeding, epochs with a progress bar, dev selection,
and atomic checkpoints that a killed run resumes from to the same result as an uninterrupted one; the
recipe (mixed precision, warm-up and decay, clipping, accumulation; its pieces and flags in tasks/recipe.py)
and data parallelism through torchrun (tasks/distributed.py).

A checkpoint (written after every epoch) holds the model's state (encoder and head), the
optimiser's state, the number of finished epochs, the best dev score so far with that epoch's
model state, the history, and the RNG states of python, numpy and torch (CPU and CUDA). Each
epoch's batch order is drawn from (seed, epoch) alone, so restoring those is enough to continue
exactly where an uninterrupted run would be; the checkpoint also holds the optimiser step count, the
base learning rates and the fp16 gradient scaler, and under torchrun every rank's RNG states.

Every CLI takes the loop's flags with one call, add_loop_arguments(parser), and passes them on with
fit(..., **loop_kwargs(args)); under torchrun it writes its files only where is_main_process(). Both come
from tasks/recipe.py and are importable from here too.
"""

from __future__ import annotations

import math
import os
import random
import signal
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from tqdm import tqdm

from . import distributed as dp
from .curves import Curves, curves_path
from .data import to_device
from .distributed import is_main_process, rank, world_size
from .errors import ConfigurationError, MissingFileError, ResumeError, TrainingError
from .recipe import (
    LinearSchedule,
    add_loop_arguments,  # noqa: F401 - re-exported: the CLIs import the loop's flags from here
    autocast,
    check_precision,
    cpu_has_bf16,
    loop_kwargs,  # noqa: F401 - re-exported
)


def pick_device(name: str = "auto") -> torch.device:
    """cpu, cuda, mps, or auto: cuda if available, then mps, then cpu; a clear error if the one asked for is absent.

    Under torchrun, cuda is this process's own GPU, cuda:LOCAL_RANK.
    """
    if name in ("auto", "cuda") and torch.cuda.is_available() and world_size() > 1:
        if dp.local_rank() >= torch.cuda.device_count():
            raise ConfigurationError(f"LOCAL_RANK {dp.local_rank()} but this machine has {torch.cuda.device_count()} "
                                     "CUDA device(s): start at most that many processes per machine (--nproc-per-node)")
        return torch.device("cuda", dp.local_rank())
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigurationError("--device cuda: no CUDA device is available (try --device auto)")
    if name == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ConfigurationError("--device mps: MPS is not available (try --device auto)")
    return torch.device(name)


def seed_everything(seed: int) -> None:
    """Seed python's random, numpy and torch (every device)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict:
    """The RNG states of python, numpy and torch, as tensors and plain values that weights_only loading accepts."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": {"version": version, "state": torch.tensor(internal, dtype=torch.int64), "gauss": gauss},
        "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached": float(cached)},
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state: dict) -> None:
    py = state["python"]
    random.setstate((py["version"], tuple(py["state"].tolist()), py["gauss"]))
    npy = state["numpy"]
    np.random.set_state((npy["kind"], npy["keys"].numpy().astype(np.uint32), npy["pos"], npy["has_gauss"], npy["cached"]))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# Test-only fault injection: SIGKILL this process inside the Nth checkpoint write (the temporary file written, not
# yet renamed), or right after the Nth optimiser step. Unset, they cost one dictionary look-up.
KILL_IN_SAVE, KILL_AT_STEP = "MINBERT_TEST_KILL_IN_SAVE", "MINBERT_TEST_KILL_AT_STEP"
_saves = 0


def _maybe_kill(variable: str, count: int) -> None:
    if os.environ.get(variable) == str(count):
        os.kill(os.getpid(), signal.SIGKILL)
CHECKPOINT_KEYS = ("model", "optimizer", "epoch", "best_epoch", "best_score", "best_state", "history", "rng")


def save_checkpoint(path: str | Path, state: dict) -> Path:
    """torch.save to a temporary file in the same directory, fsync, then rename: a crash (or a full disk) at any
    moment leaves either the previous checkpoint or the new one, never half a file."""
    global _saves
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        _saves += 1
        _maybe_kill(KILL_IN_SAVE, _saves)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


def load_checkpoint(path: str | Path, device: torch.device | str = "cpu", required: Sequence[str] = ()) -> dict:
    """A checkpoint written by save_checkpoint, read with weights_only=True (tensors and plain values only);
    a missing or damaged file, one without the `required` keys, or a model state with NaN is a ResumeError."""
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"{path}: no such checkpoint; check the --resume path (checkpoints are written after "
                               "each epoch, to --checkpoint)")
    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch raises RuntimeError, OSError, EOFError, UnpicklingError, ...
        detail = next((line for line in str(e).splitlines() if line.strip()), "no details").split(". ")[0][:200]
        raise ResumeError(f"{path}: cannot read the training checkpoint ({type(e).__name__}: {detail}); it is "
                          "truncated or damaged: resume from another copy, or start again without --resume") from None
    missing = [k for k in required if k not in state] if isinstance(state, dict) else list(required) or ["dict"]
    if missing:
        raise ResumeError(f"{path}: not a training checkpoint of tasks.train (no {', '.join(missing)}); --resume "
                          "takes the file that --checkpoint wrote")
    bad = [k for k, v in state.get("model", {}).items() if isinstance(v, torch.Tensor) and v.is_floating_point()
           and not torch.isfinite(v).all()]
    if bad:
        raise ResumeError(f"{path}: the model state holds NaN or infinite values ({bad[0]}); the run had diverged "
                          "before this checkpoint: start again with a lower --lr or --max-grad-norm")
    return state


def cpu_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """A copy of the model's state dict on the CPU (for keeping the best epoch)."""
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


@dataclass
class FitResult:
    """What fit() returns: the best epoch (1-based), its dev score and model state, and per-epoch records."""

    best_epoch: int
    best_score: float
    best_state: dict[str, torch.Tensor]
    history: list[dict] = field(default_factory=list)


class Interrupted(Exception):
    """Raised by a callback to stop a run after its checkpoint is written (used to test resuming)."""


def _groups(batches: Iterable[dict], k: int) -> Iterable[list[dict]]:
    """Consecutive runs of k batches (the last one may be shorter): the micro-batches of one optimiser step."""
    group = []
    for batch in batches:
        group.append(batch)
        if len(group) == k:
            yield group
            group = []
    if group:
        yield group


def fit(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    epoch_batches: Callable[[int], Sequence[dict]],
    loss_fn: Callable[[nn.Module, dict], torch.Tensor],
    evaluate: Callable[[nn.Module], dict[str, float]],
    *,
    metric: str,
    epochs: int,
    device: torch.device,
    seed: int = 0,
    checkpoint: str | Path | None = None,
    resume: str | Path | None = None,
    config: dict | None = None,
    post_step: Callable[[nn.Module], None] | None = None,
    on_epoch_end: Callable[[int, dict], None] | None = None,
    log: Callable[[str], None] = print,
    progress: bool = True,
    precision: str = "fp32",
    warmup_ratio: float | None = None,
    max_grad_norm: float | None = None,
    grad_accum: int = 1,
    patience: int | None = None,
    unit: str = "epoch",
    curves: str | Path | None = None,
) -> FitResult:
    """Train for `epochs` epochs; after each, evaluate on dev, keep the best state by `metric`, checkpoint.

    epoch_batches(epoch) gives that epoch's collated batches, the same on every process (shuffled from
    seed and epoch); loss_fn(model, batch) gives the mean loss of a batch on the device; a batch may name
    its task (batch["task"], as the multitask schedules do), and the record then also holds each task's
    mean training loss, train_loss_{task}. `config` (plain values) is stored in the checkpoint; on resume,
    a stored config that differs in any key but 'epochs' and the paths is an error, since the run would
    not continue the same experiment.

    The recipe: precision "bf16" or "fp16" runs loss_fn and evaluate under torch.autocast (fp16 with a
    gradient scaler, CUDA only); warmup_ratio (None: a constant learning rate) warms the learning rate up
    linearly over that fraction of the optimiser steps of all `epochs`, then decays it linearly to 0;
    max_grad_norm clips the gradients' total norm; grad_accum sums the gradients of that many consecutive
    batches, weighted by their sizes, into one optimiser step, as if they were one batch.

    Under torchrun (WORLD_SIZE > 1) each process takes its rows of every batch, DDP averages the
    gradients (each loss weighted so that the step equals one process's on the whole batch), every
    process evaluates the whole dev set (the same numbers as one process), and rank 0 alone logs, shows
    the progress bar and writes the checkpoint, which holds every rank's RNG state for an exact resume.

    Early stopping: patience P (None: run all `epochs`) ends the run once P evaluations in a row have not
    improved on the best, resumed runs included. `unit` is the log's word for one call of epoch_batches: a CLI
    that evaluates every N steps hands fit rounds of N batches as its "epochs" and calls them "round".

    Curves (tasks/curves.py): each optimiser step's loss and each epoch's record go to `curves` (default: beside the
    checkpoint, CHECKPOINT.curves.jsonl), drawn as a PNG when the run ends.
    """
    check_precision(device, precision)
    if grad_accum < 1:
        raise ValueError(f"grad_accum must be at least 1, not {grad_accum}")
    if patience is not None and patience < 1:
        raise ValueError(f"patience must be at least 1, not {patience}")
    if warmup_ratio is not None and not 0 <= warmup_ratio < 1:
        raise ValueError(f"warmup_ratio must be in [0, 1), not {warmup_ratio}")
    model.to(device)
    parallel = dp.init_distributed(device)
    me, world, main = rank(), world_size(), is_main_process()
    say = log if main else (lambda message: None)
    if precision == "bf16" and device.type == "cpu" and not cpu_has_bf16():
        say("warning: this CPU has neither avx512_bf16 nor AMX: bf16 autocast will be slower than fp32 here")
    if parallel:
        say(f"data parallel: {world} processes ({dist.get_backend()}), each takes 1/{world} of every batch")
    start, history, step = 0, [], 0
    best = FitResult(0, float("-inf"), cpu_state(model))
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    base_lrs = [group["lr"] for group in optimizer.param_groups]
    if resume is not None:
        # on the CPU: RNG states must stay there; load_state_dict moves the rest
        state = load_checkpoint(resume, required=CHECKPOINT_KEYS)
        _check_config(resume, state.get("config", {}), config or {})
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start, history = state["epoch"], list(state["history"])
        best = FitResult(state["best_epoch"], state["best_score"], state["best_state"], history)
        step, base_lrs = state.get("optimizer_steps", 0), state.get("base_lrs", base_lrs)
        if scaler.is_enabled() and state.get("scaler"):
            scaler.load_state_dict(state["scaler"])
        rngs = state.get("rng_ranks") or [state["rng"]]
        if len(rngs) != world:
            say(f"{resume} was written by {len(rngs)} process(es), now {world}: dropout draws other random numbers "
                "than an uninterrupted run would")
        set_rng_state(rngs[me] if len(rngs) == world else state["rng"])
        say(f"resumed from {resume}: {start} epochs done, best dev {metric} {best.best_score:.4f} (epoch {best.best_epoch})")
    else:
        seed_everything(seed)
    log_path = curves if curves is not None else curves_path(checkpoint) if checkpoint is not None else None
    curve = Curves(log_path, keep_epochs=start) if main and log_path is not None else None
    compute = dp.data_parallel(model, loss_fn, device) if parallel else (lambda batch: loss_fn(model, batch))
    params = [p for group in optimizer.param_groups for p in group["params"]]
    schedule = None
    for epoch in range(start, epochs):
        if patience is not None and epoch - best.best_epoch >= patience:
            say(f"stopping early: dev {metric} has not improved for {patience} {unit}s (best: {unit} {best.best_epoch})")
            break
        model.train()
        t0, total, n, shown = time.perf_counter(), 0.0, 0, [0.0, 0]
        per_task: dict[str, list[float]] = {}  # task -> [loss sum, batches]
        batches: Iterable[dict] = epoch_batches(epoch)
        if warmup_ratio is not None and schedule is None:
            if not hasattr(batches, "__len__"):
                raise TypeError("a learning-rate schedule needs epoch_batches to return a sequence: its length "
                                "sets the number of optimiser steps")
            schedule = LinearSchedule.from_ratio(warmup_ratio, epochs * math.ceil(len(batches) / grad_accum))
            say(f"learning rate: linear warm-up over {schedule.warmup} of {schedule.total} optimiser steps, "
                "then linear decay to 0")
        bar = tqdm(desc=f"{unit} {epoch + 1}/{epochs}", disable=not (progress and main), leave=False,
                   total=len(batches) if hasattr(batches, "__len__") else None)
        for group in _groups(batches, grad_accum):
            rows = sum(dp.batch_rows(b) for b in group)  # examples in this optimiser step, over every rank
            optimizer.zero_grad(set_to_none=True)
            group_loss = 0.0
            for batch in group:
                size = dp.batch_rows(batch)
                part, mine = dp.shard(batch, me, world) if parallel else (batch, size)
                part = to_device(part, device)
                with autocast(device, precision):
                    loss = compute(part)
                # DDP averages over ranks: world * mine / rows makes the sum of the ranks' gradients the one of the
                # mean loss over the step's examples (just the loss itself for one process and one batch)
                scaler.scale(loss * (world * mine / rows)).backward()
                value = loss.item()
                if not math.isfinite(value):
                    _diverged(value, epoch, step, batch.get("task"), unit, checkpoint)
                group_loss += value / len(group)
                share = value * (mine / size)                 # this rank's part of the batch's mean loss
                total, n = total + share, n + 1
                if "task" in batch:
                    acc = per_task.setdefault(batch["task"], [0.0, 0])
                    acc[0], acc[1] = acc[0] + share, acc[1] + 1
                if mine:
                    shown[0], shown[1] = shown[0] + value, shown[1] + 1
                bar.update()
                bar.set_postfix(loss=f"{shown[0] / max(shown[1], 1):.4f}")
            if schedule is not None:
                for g, lr in zip(optimizer.param_groups, base_lrs):
                    g["lr"] = lr * schedule.factor(step)
            if max_grad_norm is not None:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
            scaler.step(optimizer)
            scaler.update()
            step += 1
            if curve is not None:
                named = {b.get("task") for b in group}
                curve.step(step, epoch + 1, group_loss, named.pop() if len(named) == 1 else None)
            _maybe_kill(KILL_AT_STEP, step)
            if post_step is not None:
                post_step(model)
        bar.close()
        if parallel:  # the ranks' shares add up to the global batches' mean losses
            tasks = sorted(per_task)
            total, *sums = dp.sum_over_ranks([total] + [per_task[t][0] for t in tasks], device)
            per_task = {t: [s, per_task[t][1]] for t, s in zip(tasks, sums)}
        train_time = time.perf_counter() - t0
        model.eval()
        with torch.no_grad(), autocast(device, precision):
            scores = evaluate(model)
        record = {"epoch": epoch + 1, "train_loss": total / max(n, 1),
                  **{f"train_loss_{t}": s / k for t, (s, k) in sorted(per_task.items())}, "train_seconds": train_time,
                  "eval_seconds": time.perf_counter() - t0 - train_time, **{f"dev_{k}": v for k, v in scores.items()}}
        history.append(record)
        if curve is not None:
            curve.epoch(record, step)
        improved = scores[metric] > best.best_score
        if improved:
            best = FitResult(epoch + 1, scores[metric], cpu_state(model), history)
        task_losses = "".join(f", {k[len('train_loss_'):]} {v:.4f}" for k, v in record.items()
                              if k.startswith("train_loss_"))
        say(f"{unit} {epoch + 1}/{epochs}: train loss {record['train_loss']:.4f}{task_losses}, "
            f"dev {metric} {scores[metric]:.4f}"
            f"{' (best so far)' if improved else ''}, {train_time:.0f}s training + {record['eval_seconds']:.0f}s eval")
        if checkpoint is not None:
            rngs = dp.all_gather(rng_state()) if parallel else [rng_state()]
            if main:
                save_checkpoint(checkpoint, {
                    "model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch + 1,
                    "best_epoch": best.best_epoch, "best_score": best.best_score, "best_state": best.best_state,
                    "history": history, "rng": rngs[0], "config": config or {}, "optimizer_steps": step,
                    "base_lrs": base_lrs, "scaler": scaler.state_dict(), **({"rng_ranks": rngs} if parallel else {}),
                })
            if parallel:
                dp.barrier()  # the epoch ends when its checkpoint is on disk, for every rank
        if on_epoch_end is not None:
            on_epoch_end(epoch + 1, record)
    best.history = history
    if curve is not None:
        curve.close()
    return best


def _diverged(value: float, epoch: int, step: int, task: str | None, unit: str, checkpoint: str | Path | None) -> None:
    """Stop a run whose loss became NaN or infinite, naming where; the last checkpoint on disk is left as it is."""
    kept = (f"{checkpoint} still holds the last finished {unit} (--resume it with other settings)"
            if checkpoint is not None and Path(checkpoint).is_file() else "no checkpoint had been written yet")
    raise TrainingError(f"the training loss is {value} in {unit} {epoch + 1}, optimiser step {step + 1}"
                        f"{f', task {task}' if task else ''}; {kept}. Lower --lr, set --max-grad-norm, or "
                        "check the data for extreme labels")


IGNORED_ON_RESUME = {"epochs", "checkpoint", "resume", "out_dir", "device", "predictions_dir"}
LOOP_DEFAULTS = {"precision": "fp32", "warmup_ratio": None, "max_grad_norm": None, "grad_accum": 1}
RECIPE_DEFAULTS = LOOP_DEFAULTS | {"optimizer": "minbert"}  # every flag of add_loop_arguments, at its default


def _check_config(path: str | Path, stored: dict, current: dict) -> None:
    """The settings must match; a recipe flag absent from an older checkpoint counts as its default."""
    if set(RECIPE_DEFAULTS) & set(current):
        stored, current = RECIPE_DEFAULTS | stored, RECIPE_DEFAULTS | current
    diffs = [f"{k}: checkpoint {stored.get(k)!r}, now {current.get(k)!r}"
             for k in sorted((set(stored) | set(current)) - IGNORED_ON_RESUME) if stored.get(k) != current.get(k)]
    if diffs:
        raise ResumeError(f"{path}: cannot resume a different run; settings differ: " + "; ".join(diffs))
