"""BitFit's per-task files (Ben-Zaken et al., 2022, sec. 1): a task is its trained biases and its head, a few
kilobytes, switched in and out of one frozen backbone (SharedBackbone)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from .bitfit import bias_snapshot, check_encoder, term_of
from .files import replacing
from .model import BertModel

TASK_FORMAT = "minbert-bitfit-task/1"


def backbone_fingerprint(model: BertModel) -> str:
    """A short hash of frozen weights, so a task file refuses to load onto a different backbone."""
    h = hashlib.sha256()
    for t in (model.embeddings.word.weight[:16], model.layers[0].Wq, model.layers[-1].Wm3):
        h.update(t.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def save_task(path: str | Path, model: BertModel, head: nn.Module | None = None,
              metadata: Mapping[str, str] | None = None) -> int:
    """Write what a BitFit task changed: the trainable biases and the head (sec. 1: a few KB per task).

    Tensors are stored as `encoder.<name>` and `head.<name>` in one safetensors file, written
    atomically; returns its size in bytes.
    """
    check_encoder(model)
    tensors = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            if not term_of(name):
                raise ValueError(f"{name} is trainable but is not a bias term: a task file holds biases only; "
                                 "save the whole model instead")
            tensors[f"encoder.{name}"] = p.detach().cpu().contiguous().clone()
    if head is not None:
        tensors.update({f"head.{k}": v.detach().cpu().contiguous().clone() for k, v in head.state_dict().items()})
    meta = {"format": TASK_FORMAT, "backbone": backbone_fingerprint(model), **dict(metadata or {})}
    path = Path(path)
    with replacing(path, sync=True) as tmp:   # a temporary file beside it, fsynced and renamed; removed if it fails
        save_file(tensors, tmp, metadata={k: str(v) for k, v in meta.items()})
    return path.stat().st_size


def load_task(path: str | Path, model: BertModel, head: nn.Module | None = None,
              base: Mapping[str, torch.Tensor] | None = None) -> dict[str, str]:
    """Put a task file's biases into `model` and its tensors into `head`; returns the file's metadata.

    With `base` (bias_snapshot of the backbone), every bias the file does not hold is first reset to it,
    so that switching between tasks trained on different subsets is exact. Checks the backbone, every
    name and every shape before changing anything.
    """
    check_encoder(model)
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open is not iterable)
    if meta.get("format") != TASK_FORMAT:
        raise ValueError(f"{path}: not a BitFit task file (format {meta.get('format')!r}, expected {TASK_FORMAT!r})")
    if meta.get("backbone") != backbone_fingerprint(model):
        raise ValueError(f"{path}: was trained on a different backbone (fingerprint {meta.get('backbone')}, "
                         f"this model's is {backbone_fingerprint(model)})")
    params = dict(model.named_parameters())
    enc = {k.removeprefix("encoder."): v for k, v in tensors.items() if k.startswith("encoder.")}
    hd = {k.removeprefix("head."): v for k, v in tensors.items() if k.startswith("head.")}
    problems = [f"{k} is not a bias of this model" for k in enc if not term_of(k) or k not in params]
    problems += [f"{k}: file {tuple(v.shape)} vs model {tuple(params[k].shape)}"
                 for k, v in enc.items() if k in params and v.shape != params[k].shape]
    problems += [f"{k} is neither encoder. nor head." for k in tensors if not k.startswith(("encoder.", "head."))]
    if head is not None:
        own = head.state_dict()
        problems += [f"head.{k} missing from the file" for k in own if k not in hd]
        problems += [f"head.{k} is not in the given head" for k in hd if k not in own]
        problems += [f"head.{k}: file {tuple(v.shape)} vs head {tuple(own[k].shape)}"
                     for k, v in hd.items() if k in own and v.shape != own[k].shape]
    if problems:
        raise ValueError(f"{path}: does not fit this model: " + "; ".join(problems))
    with torch.no_grad():
        for name, b in (base or {}).items():
            params[name].copy_(b)
        for name, b in enc.items():
            params[name].copy_(b)
    if head is not None:
        head.load_state_dict(hd, strict=True)
    return meta


class SharedBackbone:
    """One frozen encoder serving many BitFit tasks: switch() swaps in a task's biases and head (sec. 1)."""

    def __init__(self, model: BertModel):
        self.model = model
        self.base = bias_snapshot(model)

    def switch(self, path: str | Path, head: nn.Module | None = None) -> dict[str, str]:
        """Reset every bias to the backbone's, then load the task file at `path` (and its head)."""
        return load_task(path, self.model, head, base=self.base)
