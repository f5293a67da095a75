"""What make train's multitask command trains: the model class (by --sts-output) and its per-batch loss, each task's
loss (minbert.multitask, its heads) wrapped by the run's switched-on terms (tasks/multitask/terms.py: SMART, the
sentence-embedding objectives, R-Drop; tasks/core/terms.py), and on a round of batches the term that combines the
tasks' gradients (PCGrad; Yu et al., 2020, Alg. 1)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from minbert.multitask import TASK_LOSSES, MultitaskBert

from ..core.batching import to_device
from ..core.terms import TermSet
from .toolkit import CosineStsMultitask


def model_class(sts_output: str = "head") -> type[MultitaskBert]:
    """The multitask model class of a run's --sts-output."""
    return CosineStsMultitask if sts_output == "cosine" else MultitaskBert


class once:
    """A property computed when first read and then kept, as functools.cached_property, without the lock Python 3.11's
    takes (which torch.compile cannot trace: --compile would break the step's graph there)."""

    def __init__(self, f: Callable):
        self.f, self.name = f, f.__name__

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.f(obj)
        return value


class TaskForward:
    """One batch's task forward, computed when first asked for (MultitaskBert.loss, in parts): the encoder passes'
    inputs, their h0 (B, T, H) each, the output y (logits (B, C) or (B,)) and the task's loss. What a term reads."""

    def __init__(self, model: nn.Module, task: str, batch: dict):
        self.model, self.task, self.batch = model, task, batch

    @once
    def inputs(self) -> list:
        return self.model.inputs(self.task, self.batch)

    @once
    def h(self) -> list[torch.Tensor]:
        return self.model.embed(self.inputs)

    @once
    def y(self) -> torch.Tensor:
        return self.model.head_output(self.task, self.h, self.inputs)    # predict_from_embeddings, its shape checked

    @once
    def task_loss(self) -> torch.Tensor:
        return TASK_LOSSES[self.task](self.y, self.batch["labels"])

    def again(self) -> TaskForward:
        """A fresh forward of the same batch (new dropout masks)."""
        return TaskForward(self.model, self.task, self.batch)


def prepare_inputs(model: MultitaskBert, batch: dict) -> dict:
    """The batch (or each batch of a round) with its encoder passes' inputs made on the CPU by the model's own
    inputs() (a cross-encoder's pairs joined, join_pairs), which it then reads from batch["encoder_inputs"]: on a GPU
    the joined length would otherwise be read back from the device in every step (Work.prepare)."""
    if "round" in batch:
        return batch | {"round": {t: prepare_inputs(model, b) for t, b in batch["round"].items()}}
    return batch | {"encoder_inputs": model.inputs(batch["task"], batch)}


def multitask_loss(terms: TermSet, device: torch.device) -> Callable[[nn.Module, dict], torch.Tensor]:
    """The multitask loss_fn: the task's loss wrapped by the switched-on terms; a round of batches (one per task)
    combined by the term that combines them (PCGrad)."""
    def one(m: nn.Module, task: str, batch: dict) -> torch.Tensor:
        return terms.loss(TaskForward(m, task, batch), lambda fwd: fwd.task_loss)

    combine = terms.combiner()

    def loss_fn(m: nn.Module, batch: dict) -> torch.Tensor:
        if "round" not in batch:
            return one(m, batch["task"], batch)
        if combine is None:
            raise ValueError("a round of batches needs a term that combines the tasks' losses (--gradient-surgery)")
        return combine(m, [one(m, t, to_device(b, device)) for t, b in batch["round"].items()])
    return loss_fn
