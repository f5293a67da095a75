"""A training checkpoint of tasks.core.train.fit (not a pretrained model's weights: those are minbert/checkpoint.py's):
the RNG states it holds, written atomically, read back with weights_only and checked.

A checkpoint (written after every epoch) holds the model's state (encoder and head), the optimiser's state, the
number of finished epochs, the best dev score so far with that epoch's model state, the history, the run
settings, and the RNG states of python, numpy and torch (CPU and CUDA); also the optimiser step count, the base
learning rates and the fp16 gradient scaler, and under torchrun every rank's RNG states.
"""

from __future__ import annotations

import os
import random
import signal
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from .errors import MissingFileError, ResumeError
from .recipe import RECIPE_BEFORE, optimizer_name


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
    """Restore what rng_state() returned."""
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


def maybe_kill(variable: str, count: int) -> None:
    """SIGKILL this process when the test variable names this count."""
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
        maybe_kill(KILL_IN_SAVE, _saves)
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
        raise ResumeError(f"{path}: not a training checkpoint of tasks.core.train (no {', '.join(missing)}); --resume "
                          "takes the file that --checkpoint wrote")
    bad = [k for k, v in state.get("model", {}).items() if isinstance(v, torch.Tensor) and v.is_floating_point()
           and not torch.isfinite(v).all()]
    if bad:
        raise ResumeError(f"{path}: the model state holds NaN or infinite values ({bad[0]}); the run had diverged "
                          "before this checkpoint: start again with a lower --lr or --max-grad-norm")
    return state


IGNORED_ON_RESUME = {"epochs", "checkpoint", "resume", "out_dir", "device", "predictions_dir"}


def check_config(path: str | Path, stored: dict, current: dict) -> None:
    """The settings must match; a setting absent from an older checkpoint counts as what it ran with then.

    A command with typed settings stores {dotted path: value} of what a resumed run must keep (tasks.core.settings.
    resume_config, whose `before` says what each newer setting was before it existed); a checkpoint written before
    typed settings, with flat flag names, is read through the paths' last parts and RECIPE_BEFORE."""
    defaults = dict(RECIPE_BEFORE)
    if any("." in k for k in stored):      # typed: a setting newer than the checkpoint counts as it ran then
        before = getattr(current, "before", {})                    # (tasks.core.settings.resume_config)
        stored = {k: before[k] for k in current if k in before} | stored
    elif any("." in k for k in current):
        short = {}
        for k in current:
            short.setdefault(k.rsplit(".", 1)[-1], []).append(k)
        stored = {short[k][0]: v for k, v in (defaults | stored).items() if len(short.get(k, ())) == 1}
        current = {k: v for k, v in current.items() if k in stored}   # what the older checkpoint recorded
    elif set(defaults) & set(current):
        stored, current = defaults | stored, defaults | current
    stored, current = _decay_rule_moot(_legacy(stored)), _decay_rule_moot(_legacy(current))
    diffs = [f"{k}: checkpoint {stored.get(k)!r}, now {current.get(k)!r}"
             for k in sorted((set(stored) | set(current)) - IGNORED_ON_RESUME) if stored.get(k) != current.get(k)]
    if diffs:
        raise ResumeError(f"{path}: cannot resume a different run; settings differ: " + "; ".join(diffs))


def _legacy(config: dict) -> dict:
    """Legacy values read as today's: optimizer 'minbert' (torch's update written out, since removed) is 'torch'."""
    return {k: optimizer_name(v) if k.rsplit(".", 1)[-1] == "optimizer" and isinstance(v, str) else v
            for k, v in config.items()}


def _decay_rule_moot(config: dict) -> dict:
    """Which parameters weight decay spares does not matter when the weight decay is 0: compare it as None then."""
    rule = next((k for k in config if k.rsplit(".", 1)[-1] == "decay_biases_and_gains"), None)
    decay = next((v for k, v in config.items() if k.rsplit(".", 1)[-1] == "weight_decay"), None)
    return config | {rule: None} if rule is not None and decay == 0 else config
