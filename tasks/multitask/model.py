"""What make train's multitask command trains: the model class (by --sts-output) and its per-batch loss, each task's
loss (minbert.multitask, its heads) plus the leaderboard toolkit's optional extras (tasks/multitask/toolkit.py): the
sentence-embedding objectives and, on a round of batches, gradient surgery (PCGrad; Yu et al., 2020, Alg. 1)."""

from __future__ import annotations

import random
from collections.abc import Callable

import torch
from torch import nn

from minbert.multitask import MultitaskBert
from minbert.pcgrad import surgery_loss

from ..core.batching import to_device
from .toolkit import CosineStsMultitask, ToolkitLog, ToolkitSettings, embedding_loss


def model_class(sts_output: str = "head") -> type[MultitaskBert]:
    """The multitask model class of a run's --sts-output."""
    return CosineStsMultitask if sts_output == "cosine" else MultitaskBert


def multitask_loss(args: ToolkitSettings, device: torch.device,
                   log: ToolkitLog | None = None) -> Callable[[nn.Module, dict], torch.Tensor]:
    """The multitask loss_fn: the task's loss, plus the embedding objective; a PCGrad round's surgery_loss. What
    the toolkit adds is logged in `log` (a ToolkitLog) when one is given."""
    def one(m: nn.Module, task: str, batch: dict) -> torch.Tensor:
        extra = embedding_loss(m, task, batch, args)
        if task == "sts" and args.sts_output == "cosine":
            total = extra                                                 # the head is unused: no MSE on it
        else:
            loss = m.loss(task, batch)
            total = loss if extra is None else loss + args.embedding_loss_weight * extra
        if log is not None and extra is not None:
            log.add(f"{task}_embedding", extra)
            log.add(f"{task}_embedding_weighted", args.embedding_loss_weight * extra if total is not extra else extra)
            log.add(f"{task}_total", total)
        return total

    workspace: dict = {}                                                  # PCGrad's (n, D) matrix, kept between rounds

    def loss_fn(m: nn.Module, batch: dict) -> torch.Tensor:
        if "round" not in batch:
            return one(m, batch["task"], batch)
        losses = [one(m, t, to_device(b, device)) for t, b in batch["round"].items()]
        # the projection order from python's random, whose state the checkpoint keeps: resumes stay exact
        loss = surgery_loss(losses, [p for p in m.parameters() if p.requires_grad],
                            random.Random(random.getrandbits(64)), project=args.gradient_surgery == "pcgrad",
                            workspace=workspace)
        if log is not None and "last" in workspace:                      # a round of two or more tasks
            for k, v in workspace.pop("last").items():
                log.add(f"pcgrad_{k}", v)
        return loss
    return loss_fn
