"""The training loop every task CLI shares: devices, seeding, epochs with a progress bar, dev selection,
and atomic checkpoints that a killed run resumes from to the same result as an uninterrupted one.

A checkpoint (written after every epoch) holds the model's state (encoder and head), the
optimiser's state, the number of finished epochs, the best dev score so far with that epoch's
model state, the history, and the RNG states of python, numpy and torch (CPU and CUDA). Each
epoch's batch order is drawn from (seed, epoch) alone, so restoring those is enough to continue
exactly where an uninterrupted run would be.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from .data import to_device


def pick_device(name: str = "auto") -> torch.device:
    """cpu, cuda, mps, or auto: cuda if available, then mps, then cpu; a clear error if the one asked for is absent."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda: no CUDA device is available (try --device auto)")
    if name == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise RuntimeError("--device mps: MPS is not available (try --device auto)")
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


def save_checkpoint(path: str | Path, state: dict) -> Path:
    """torch.save to a temporary file in the same directory, then rename: a crash never leaves half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    try:
        torch.save(state, tmp)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


def load_checkpoint(path: str | Path, device: torch.device | str = "cpu") -> dict:
    """A checkpoint written by save_checkpoint, read with weights_only=True (tensors and plain values only)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such checkpoint")
    return torch.load(path, map_location=device, weights_only=True)


PRECISIONS = ("fp32", "bf16")


def autocast(device: torch.device, precision: str) -> torch.autocast:
    """The autocast context for a precision: fp32 is autocast switched off."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


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
) -> FitResult:
    """Train for `epochs` epochs; after each, evaluate on dev, keep the best state by `metric`, checkpoint.

    epoch_batches(epoch) gives that epoch's collated batches (shuffled from seed and epoch);
    loss_fn(model, batch) gives the mean loss of a batch on the device; a batch may name its task
    (batch["task"], as the multitask schedules do), and the record then also holds each task's mean
    training loss, train_loss_{task}. precision "bf16" runs loss_fn under torch.autocast (bf16 matrix
    products; parameters, optimiser state and the update stay fp32). `config` (plain values)
    is stored in the checkpoint; on resume, a stored config that differs in any key but
    'epochs' and the paths is an error, since the run would not continue the same experiment.
    """
    model.to(device)
    start, history = 0, []
    best = FitResult(0, float("-inf"), cpu_state(model))
    if resume is not None:
        state = load_checkpoint(resume)  # on the CPU: RNG states must stay there; load_state_dict moves the rest
        _check_config(resume, state.get("config", {}), config or {})
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start, history = state["epoch"], list(state["history"])
        best = FitResult(state["best_epoch"], state["best_score"], state["best_state"], history)
        set_rng_state(state["rng"])
        log(f"resumed from {resume}: {start} epochs done, best dev {metric} {best.best_score:.4f} (epoch {best.best_epoch})")
    else:
        seed_everything(seed)
    for epoch in range(start, epochs):
        model.train()
        t0, total, n = time.perf_counter(), 0.0, 0
        per_task: dict[str, list[float]] = {}  # task -> [loss sum, batches]
        batches: Iterable[dict] = epoch_batches(epoch)
        bar = tqdm(batches, desc=f"epoch {epoch + 1}/{epochs}", disable=not progress, leave=False,
                   total=len(batches) if hasattr(batches, "__len__") else None)
        for batch in bar:
            batch = to_device(batch, device)
            with autocast(device, precision):
                loss = loss_fn(model, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if post_step is not None:
                post_step(model)
            value = loss.item()
            total, n = total + value, n + 1
            if "task" in batch:
                acc = per_task.setdefault(batch["task"], [0.0, 0])
                acc[0], acc[1] = acc[0] + value, acc[1] + 1
            bar.set_postfix(loss=f"{total / n:.4f}")
        train_time = time.perf_counter() - t0
        model.eval()
        with torch.no_grad():
            scores = evaluate(model)
        record = {"epoch": epoch + 1, "train_loss": total / max(n, 1),
                  **{f"train_loss_{t}": s / k for t, (s, k) in sorted(per_task.items())}, "train_seconds": train_time,
                  "eval_seconds": time.perf_counter() - t0 - train_time, **{f"dev_{k}": v for k, v in scores.items()}}
        history.append(record)
        improved = scores[metric] > best.best_score
        if improved:
            best = FitResult(epoch + 1, scores[metric], cpu_state(model), history)
        task_losses = "".join(f", {k[len('train_loss_'):]} {v:.4f}" for k, v in record.items()
                              if k.startswith("train_loss_"))
        log(f"epoch {epoch + 1}/{epochs}: train loss {record['train_loss']:.4f}{task_losses}, "
            f"dev {metric} {scores[metric]:.4f}"
            f"{' (best so far)' if improved else ''}, {train_time:.0f}s training + {record['eval_seconds']:.0f}s eval")
        if checkpoint is not None:
            save_checkpoint(checkpoint, {
                "model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch + 1,
                "best_epoch": best.best_epoch, "best_score": best.best_score, "best_state": best.best_state,
                "history": history, "rng": rng_state(), "config": config or {},
            })
        if on_epoch_end is not None:
            on_epoch_end(epoch + 1, record)
    best.history = history
    return best


IGNORED_ON_RESUME = {"epochs", "checkpoint", "resume", "out_dir", "device", "predictions_dir"}


def _check_config(path: str | Path, stored: dict, current: dict) -> None:
    diffs = [f"{k}: checkpoint {stored.get(k)!r}, now {current.get(k)!r}"
             for k in sorted((set(stored) | set(current)) - IGNORED_ON_RESUME) if stored.get(k) != current.get(k)]
    if diffs:
        raise ValueError(f"{path}: cannot resume a different run; settings differ: " + "; ".join(diffs))
