"""Gradient surgery between tasks: PCGrad (Yu et al., 2020, "Gradient Surgery for Multi-Task Learning", Alg. 1).

Each task's gradient g_i on the shared parameters is projected, in a random order of the other tasks, off
every other task's gradient g_j it conflicts with (g_i . g_j < 0):

    g_i <- g_i - (g_i . g_j / |g_j|^2) g_j

and the update is the sum of the projected gradients. Parameters only one task reaches (its head, its PALs)
keep that task's own gradient. Every projected gradient is a combination of the original ones, so the projection
runs on the tasks' Gram matrix (n x n) alone: pcgrad_coefficients is that pure function, pcgrad_project applies it
to flat gradients, and surgery_loss builds, from the tasks' losses, a scalar whose backward() leaves exactly those
gradients, so any training loop can use it. Cost: one (n, D) copy of the shared gradients, the Gram matrix and one
weighted sum, a few passes over n x D floats.
"""

from __future__ import annotations

import random

import torch
from torch import nn


def pcgrad_coefficients(gram: torch.Tensor, rng: random.Random | None = None) -> torch.Tensor:
    """Yu et al. (2020), Alg. 1 on dot products: C (n, n) such that task i's projected gradient is sum_k C[i, k] g_k,
    from the Gram matrix gram[i, j] = g_i . g_j (n, n) of the tasks' gradients."""
    rng = rng or random.Random(0)
    n = gram.shape[0]
    G = gram.double()
    C = torch.eye(n, dtype=torch.float64)                            # g_i^PC starts as g_i
    for i in range(n):
        others = [j for j in range(n) if j != i]
        rng.shuffle(others)                                          # "in random order"
        for j in others:
            dot = C[i] @ G[:, j]                                     # g_i^PC . g_j, g_j the other task's original
            if dot < 0:                                              # conflict: g_i^PC -= (g_i^PC . g_j / |g_j|^2) g_j
                C[i, j] -= dot / G[j, j].clamp_min(1e-30)
    return C


def pcgrad_project(grads: list[torch.Tensor], rng: random.Random | None = None) -> list[torch.Tensor]:
    """Yu et al. (2020), Alg. 1: each flat task gradient (D,) projected off the others' where the dot product is < 0."""
    F = torch.stack(grads)                                           # (n, D)
    C = pcgrad_coefficients(F @ F.T, rng)                            # (n, n)
    return list(C.to(F.dtype) @ F)                                   # (n, D)


def surgery_loss(losses: list[torch.Tensor], params: list[nn.Parameter], rng: random.Random | None = None,
                 project: bool = True) -> torch.Tensor:
    """A scalar whose backward() gives PCGrad's gradients: on the parameters two or more tasks reach, the sum of the
    tasks' projected gradients (Yu et al., 2020, Alg. 1); on the others, their one task's own gradient.
    project=False sums the gradients unprojected (the control: the same steps, work and rounds without the surgery).
    Its value is the mean of the task losses (for logging)."""
    grads = [torch.autograd.grad(loss, params, allow_unused=True) for loss in losses]  # per task, per parameter
    shared = [k for k in range(len(params)) if sum(g[k] is not None for g in grads) > 1]
    total: list[torch.Tensor | None] = [None] * len(params)
    if shared:
        # (n, D): each task's gradient on every shared parameter, 0 where the task does not reach one. The projected
        # gradients are combinations of the originals (pcgrad_coefficients): one Gram matrix, one pass to sum them.
        sizes = [params[k].numel() for k in shared]
        F = params[shared[0]].new_empty(len(losses), sum(sizes))
        for row, g in zip(F, grads):
            torch.cat([(g[k] if g[k] is not None else torch.zeros_like(params[k])).reshape(-1) for k in shared], out=row)
        C = pcgrad_coefficients(F @ F.T, rng) if project else torch.eye(len(losses), dtype=torch.float64)  # (n, n)
        summed = C.sum(0).to(F.dtype) @ F                             # (n,) @ (n, D) -> (D,): sum_i g_i^PC
        for k, piece in zip(shared, summed.split(sizes)):
            total[k] = piece.view_as(params[k])
    for k in range(len(params)):
        if total[k] is None:                                          # one task's own parameter (or unused)
            owned = [g[k] for g in grads if g[k] is not None]
            total[k] = owned[0] if owned else None
    value = torch.stack([loss.detach() for loss in losses]).mean()
    return _WithGradients.apply(value, total, *params)               # value of the mean loss, gradient `total`


class _WithGradients(torch.autograd.Function):
    """Returns `value`; its backward hands each parameter the gradient given (times the incoming one, e.g. a scale)."""

    @staticmethod
    def forward(ctx, value: torch.Tensor, grads: list, *params: torch.Tensor) -> torch.Tensor:
        ctx.grads = grads
        return value.clone()

    @staticmethod
    def backward(ctx, out: torch.Tensor):
        scale = None if bool(out == 1) else out
        return (None, None, *[g if g is None or scale is None else g * scale for g in ctx.grads])
