"""A training checkpoint of tasks.core.train.fit (not a pretrained model's weights: those are minbert/checkpoint.py's):
the RNG states it holds, written atomically, read back with weights_only and checked.

A checkpoint (written after every epoch) holds the model's state (encoder and head), the optimiser's state, the
number of finished epochs, the best dev score so far with that epoch's model state, the history, the run
settings, and the RNG states of python, numpy and torch (CPU and CUDA); also the optimiser step count, the base
learning rates and the fp16 gradient scaler, and under torchrun every rank's RNG states. With extension terms on, it
holds their state() (every rank's under torchrun) and the keys of their per-epoch stats; written within an epoch, the
RNG states of that epoch's start as well (what the terms' batches() drew from). It records the size and sha256 of each
task file the run read (tasks.core.data.files_read), and a resume on a labelled one changed since is refused.
"""

from __future__ import annotations

import os
import random
import shlex
import signal
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

import minbert

from .errors import ConfigurationError, MissingFileError, ResumeError
from .evaluation import replacing
from .resume import resume_differences
from .run_files import read_as, started_from


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
    with replacing(path) as tmp:                 # readable as any new file of the run directory (the umask's mode)
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        _saves += 1
        maybe_kill(KILL_IN_SAVE, _saves)
    return path


def load_checkpoint(path: str | Path, device: torch.device | str = "cpu", required: Sequence[str] = ()) -> dict:
    """A checkpoint written by save_checkpoint, read with weights_only=True (tensors and plain values only);
    a missing or damaged file, one without the `required` keys, or a model state with NaN is a ResumeError."""
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"{path}: no such checkpoint (checkpoints are written after each epoch, to "
                               "--checkpoint; a run directory's is RUN_DIR/checkpoint.pt)")
    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch raises RuntimeError, OSError, EOFError, UnpicklingError, ...
        refused = next((line.strip() for line in str(e).splitlines() if "WeightsUnpickler error" in line), None)
        if refused is not None:              # whole, but a value that weights_only refuses: torch's reason, kept
            raise ResumeError(f"{path}: cannot read the training checkpoint: it holds a value that loading with "
                              f"weights_only refuses ({refused.split('. ')[0][:300]}); it was written with something "
                              "other than tensors and plain python values in it (a numpy scalar in an extension "
                              "term's state() or log?): keep those as float(x), int(x) and start again without "
                              "--resume") from None
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


def check_trained(state: dict, path: str | Path, run: str | Path | None = None, kind: str | None = None) -> dict:
    """`state` (a checkpoint of `path`, in the run directory `run` of tasks.`kind`) if at least one epoch of its run
    finished, so that its best state is trained weights; otherwise (a --save-every checkpoint within epoch 1: its
    best state is the starting weights) a ResumeError saying to resume the run first."""
    if isinstance(state, dict) and state.get("best_epoch") == 0 and not state.get("history"):
        where = run if run is not None else path
        kind = kind or (state.get("config") or {}).get("command") or "COMMAND"
        raise ResumeError(f"no epoch of {where} finished: python -m tasks.{kind} --resume {shlex.quote(str(where))} "
                          "first")
    return state


def read_trained(path: str | Path) -> dict:
    """load_checkpoint(path), its refusal worded for predicting (which has no --resume to start again without)."""
    try:
        return load_checkpoint(path)
    except ResumeError as e:
        if "without --resume" not in str(e):
            raise
        said, cut, _ = str(e).replace("start again without --resume", "train the run again").partition("; it is trunc")
        raise ResumeError(said + ("; it is truncated or damaged: copy it again from where the run wrote it, or give "
                                  "another checkpoint of the run" if cut else "")) from None


def check_config(path: str | Path, stored: dict, current: dict) -> None:
    """A checkpoint continues only the run it was written by: its stored settings must agree with `current` (what
    tasks.core.resume.resume_config gives, and any extra keys) by the settings' own resume rule
    (tasks.core.resume.resume_differences); otherwise a ResumeError names each difference."""
    diffs = resume_differences(stored, current)
    if diffs:
        raise ResumeError(f"{path}: cannot resume a different run; settings differ: " + "; ".join(diffs))


def check_data_files(path: str | Path, recorded: dict | None, read: dict) -> None:
    """A checkpoint continues only on the data it was trained and selected on: each labelled task file it recorded
    (`recorded`, {path: {"bytes", "sha256", "labelled"}}; None for a checkpoint written before files were recorded)
    must be one this run read too (`read`, tasks.core.data.files_read(); matched by tasks.core.run_files.read_as: the
    place it names, from another folder too, or its name under a data folder taken as the same bytes), and unchanged;
    otherwise a ResumeError names the first that is not read or changed (as read now). A test file (no labels) may
    change: the run only predicts it, at its end."""
    def same(a: dict, b: dict) -> bool:      # the bytes alone: a record may hold more keys, or fewer (older)
        return (a.get("bytes"), a.get("sha256")) == (b.get("bytes"), b.get("sha256"))
    named = {f: read_as(f, read) for f in recorded or {}}   # each as read now
    unread = [f for f, mark in (recorded or {}).items() if mark.get("labelled", True) and named[f] is None]
    if unread:
        raise ResumeError(f"{path}: cannot resume: {unread[0]} (relative to {started_from()}, where the run started), a "
                          "labelled file the run read, is not among the files this run read, so it may have changed: "
                          "resume with the files it started with, or start a new run without --resume")
    changed = [f for f, mark in (recorded or {}).items()
               if mark.get("labelled", True) and not same(read[named[f]], mark)]
    if changed:
        was, now = recorded[changed[0]], read[named[changed[0]]]
        more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
        raise ResumeError(f"{path}: cannot resume: {named[changed[0]]}{more} has changed since the run started "
                          f"({was['bytes']:,} bytes, sha256 {was['sha256'][:12]}; now {now['bytes']:,} bytes, sha256 "
                          f"{now['sha256'][:12]}): put the file back as it was, or start a new run without --resume")


def trained_encoder(checkpoint: str | Path, base: str, attn_implementation: str | None = None,
                    run: str | Path | None = None, kind: str | None = None) -> tuple[minbert.BertModel, dict]:
    """The encoder of a checkpoint's best state (its bert.* weights: not a head, DeeBERT's off-ramps or SimCSE's MLP)
    on the architecture of the run's --model `base`, and the checkpoint (of the run directory `run`, of tasks.`kind`:
    refused before an epoch finished)."""
    full = check_trained(load_checkpoint(checkpoint), checkpoint, run, kind)
    bert = minbert.load_pretrained(base, attn_implementation=attn_implementation)   # its weights replaced
    weights = {k[len("bert."):]: v for k, v in full["best_state"].items() if k.startswith("bert.")}
    missing, unexpected = bert.load_state_dict(weights, strict=False)
    if missing or unexpected:
        raise ConfigurationError(f"{checkpoint}: its encoder does not fit {base}'s (missing {missing[:3]}, "
                                 f"unexpected {unexpected[:3]})")
    return bert, full


def run_differences(whole: str | Path, resumed: str | Path) -> list[str]:
    """What differs between the final checkpoints of two runs of the same settings (run directories or files), one
    never interrupted and one killed and resumed: model and best-state tensors, the history less its seconds; [] when
    the resume was exact (docs/extensions.md, "Check a term's resume")."""
    a, b = (load_checkpoint(Path(p) / "checkpoint.pt" if Path(p).is_dir() else p) for p in (whole, resumed))
    out = [f"{part}.{k}" for part in ("model", "best_state") for k in sorted(set(a[part]) | set(b[part]))
           if k not in a[part] or k not in b[part] or not torch.equal(a[part][k], b[part][k])]
    history = [[{k: v for k, v in h.items() if not k.endswith("seconds")} for h in c["history"]] for c in (a, b)]
    if len(history[0]) != len(history[1]):
        out.append(f"history: {len(history[0])} epochs, resumed {len(history[1])}")
    for epoch, (x, y) in enumerate(zip(*history), 1):
        out += [f"history epoch {epoch} {k}: {x.get(k)} resumed {y.get(k)}" for k in sorted(set(x) | set(y))
                if x.get(k) != y.get(k)]
    return out
