"""Gradient surgery between tasks: PCGrad (Yu et al., 2020, "Gradient Surgery for Multi-Task Learning", Alg. 1).

Each task's gradient g_i on the shared parameters is projected, in a random order of the other tasks, off
every other task's gradient g_j it conflicts with (g_i . g_j < 0):

    g_i <- g_i - (g_i . g_j / |g_j|^2) g_j

and the update is the sum of the projected gradients. Parameters only one task reaches (its head, its PALs)
keep that task's own gradient. pcgrad_project is the pure function on flat gradients; surgery_loss builds, from
the tasks' losses, a scalar whose backward() leaves exactly those gradients, so any training loop can use it.
"""

from __future__ import annotations

import random

import torch
from torch import nn


def pcgrad_project(grads: list[torch.Tensor], rng: random.Random | None = None) -> list[torch.Tensor]:
    """Yu et al. (2020), Alg. 1: each flat task gradient (D,) projected off the others' where the dot product is < 0."""
    rng = rng or random.Random(0)
    out = []
    for i, g in enumerate(grads):
        g = g.clone()
        others = [j for j in range(len(grads)) if j != i]
        rng.shuffle(others)                                          # "in random order"
        for j in others:
            dot = torch.dot(g, grads[j])                             # against the other task's original gradient
            if dot < 0:
                g = g - dot / grads[j].pow(2).sum().clamp_min(1e-20) * grads[j]
        out.append(g)
    return out


def surgery_loss(losses: list[torch.Tensor], params: list[nn.Parameter], rng: random.Random | None = None,
                 ) -> torch.Tensor:
    """A scalar whose backward() gives PCGrad's gradients: on the parameters two or more tasks reach, the sum of the
    tasks' projected gradients (Yu et al., 2020, Alg. 1); on the others, their one task's own gradient.
    Its value is the mean of the task losses (for logging)."""
    grads = [torch.autograd.grad(loss, params, allow_unused=True) for loss in losses]  # per task, per parameter
    shared = [k for k in range(len(params)) if sum(g[k] is not None for g in grads) > 1]
    total: list[torch.Tensor | None] = [None] * len(params)
    if shared:
        # (D,) per task: its gradient on every shared parameter, zeros where the task does not reach one
        flat = [torch.cat([(g[k] if g[k] is not None else torch.zeros_like(params[k])).reshape(-1) for k in shared])
                for g in grads]
        summed = torch.stack(pcgrad_project(flat, rng)).sum(0)        # (n_tasks, D) -> (D,)
        for k, piece in zip(shared, summed.split([params[k].numel() for k in shared])):
            total[k] = piece.view_as(params[k])
    for k in range(len(params)):
        if total[k] is None:                                          # one task's own parameter (or unused)
            owned = [g[k] for g in grads if g[k] is not None]
            total[k] = owned[0] if owned else None
    surrogate = sum((p * g.detach()).sum() for p, g in zip(params, total) if g is not None)
    value = torch.stack([loss.detach() for loss in losses]).mean()
    return surrogate - surrogate.detach() + value                    # value of the mean loss, gradient of the sum
