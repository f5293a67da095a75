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

# The projection order's source when a call passes no rng: one generator that advances with every call, so each call
# draws a new order (Alg. 1 draws one per step) and a process's sequence of calls repeats from run to run.
ORDER = random.Random(0)


def pcgrad_coefficients(gram: torch.Tensor, rng: random.Random | None = None) -> torch.Tensor:
    """Yu et al. (2020), Alg. 1 on dot products: C (n, n) such that task i's projected gradient is sum_k C[i, k] g_k,
    from the Gram matrix gram[i, j] = g_i . g_j (n, n) of the tasks' gradients; rng draws the order (default ORDER)."""
    rng = rng or ORDER
    n = gram.shape[0]
    G = gram.detach().double().cpu()                                 # (n, n): tiny, and each test below is a branch
    C = torch.eye(n, dtype=torch.float64)                            # g_i^PC starts as g_i
    for i in range(n):
        others = [j for j in range(n) if j != i]
        rng.shuffle(others)                                          # "in random order"
        for j in others:
            dot = C[i] @ G[:, j]                                     # g_i^PC . g_j, g_j the other task's original
            if dot < 0:                                              # conflict: g_i^PC -= (g_i^PC . g_j / |g_j|^2) g_j
                C[i, j] -= dot / G[j, j].clamp_min(1e-30)
    return C


def projection_stats(gram: torch.Tensor, C: torch.Tensor) -> dict[str, float]:
    """The size of what PCGrad (Yu et al., 2020, Alg. 1) changed, from the Gram matrix (n, n) and pcgrad_coefficients'
    C: task pairs, how many conflict (g_i . g_j < 0), and |sum_i g_i^PC - sum_i g_i| / |sum_i g_i|."""
    G, n = gram.detach().double().cpu(), gram.shape[0]
    i, j = torch.triu_indices(n, n, 1)
    d = C.double().cpu().sum(0) - 1                                        # sum_i g_i^PC - sum_i g_i = d @ F
    ones = torch.ones(n, dtype=torch.float64)
    change = (d @ G @ d).clamp_min(0).sqrt() / (ones @ G @ ones).clamp_min(1e-30).sqrt()
    return {"pairs": n * (n - 1) // 2, "conflicts": int((G[i, j] < 0).sum()), "change": float(change)}


def pcgrad_project(grads: list[torch.Tensor], rng: random.Random | None = None) -> list[torch.Tensor]:
    """Yu et al. (2020), Alg. 1: each flat task gradient (D,) projected off the others' where the dot product is < 0."""
    F = torch.stack(grads)                                           # (n, D)
    C = pcgrad_coefficients(F @ F.T, rng)                            # (n, n)
    return list(C.to(F) @ F)                                         # (n, D), on F's device and dtype


def surgery_loss(losses: list[torch.Tensor], params: list[nn.Parameter], rng: random.Random | None = None,
                 project: bool = True, workspace: dict | None = None) -> torch.Tensor:
    """A scalar whose backward() gives PCGrad's gradients: on the parameters two or more tasks reach, the sum of the
    tasks' projected gradients (Yu et al., 2020, Alg. 1); on the others, their one task's own gradient.
    project=False sums the gradients unprojected (the control: the same steps, work and rounds without the surgery).
    Its value is the mean of the task losses (for logging). workspace: a dict the caller keeps between steps, where the
    (n, D) matrix of the gradients and their sum are written over rather than allocated anew each step (on CPU fresh
    memory is paid for in page faults: benchmarks/leaderboard.md); backward() must come before the next call. The
    workspace's "last" is then projection_stats of the call, for the log."""
    grads = [torch.autograd.grad(loss, params, allow_unused=True) for loss in losses]  # per task, per parameter
    shared = [k for k in range(len(params)) if sum(g[k] is not None for g in grads) > 1]
    total: list[torch.Tensor | None] = [None] * len(params)
    if shared:
        # (n, D): each task's gradient on every shared parameter, 0 where the task does not reach one. The projected
        # gradients are combinations of the originals (pcgrad_coefficients): one Gram matrix, one pass to sum them.
        sizes = [params[k].numel() for k in shared]
        F, summed = _buffers(workspace, len(losses), sum(sizes), params[shared[0]])   # (n, D), (D,)
        for row, g in zip(F, grads):
            flat = [(g[k] if g[k] is not None else torch.zeros_like(params[k])).reshape(-1)  # param shape -> (numel,)
                    for k in shared]
            torch.cat(flat, out=row)                                  # (D,)
        gram = F @ F.T                                                # (n, n)
        C = pcgrad_coefficients(gram, rng) if project else torch.eye(len(losses), dtype=torch.float64)  # (n, n)
        if workspace is not None:                                     # what the projection did, for the log
            workspace["last"] = projection_stats(gram, C)
        torch.mv(F.T, C.sum(0).to(F), out=summed)                     # (D, n) @ (n,) -> (D,): sum_i g_i^PC
        for k, piece in zip(shared, summed.split(sizes)):
            total[k] = piece.view_as(params[k])                       # (numel,) -> param shape
    for k in range(len(params)):
        if total[k] is None:                                          # one task's own parameter (or unused)
            owned = [g[k] for g in grads if g[k] is not None]
            total[k] = owned[0] if owned else None
    value = torch.stack([loss.detach() for loss in losses]).mean()
    stamp = None if workspace is None else (workspace.setdefault("calls", [0]), workspace["calls"][0])
    return _WithGradients.apply(value, total, stamp, *params)         # value of the mean loss, gradient `total`


def _buffers(workspace: dict | None, n: int, D: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The (n, D) matrix and the (D,) sum: the workspace's when it has them at this shape, dtype and device, else new."""
    if workspace is None:
        return like.new_empty(n, D), like.new_empty(D)
    F = workspace.get("F")
    if F is None or F.shape != (n, D) or F.dtype != like.dtype or F.device != like.device:
        workspace["F"], workspace["sum"] = like.new_empty(n, D), like.new_empty(D)
    workspace.setdefault("calls", [0])[0] += 1                        # this call's number: backward checks it
    return workspace["F"], workspace["sum"]


class _WithGradients(torch.autograd.Function):
    """Returns `value`; its backward hands each parameter the gradient given (times the incoming one, e.g. a scale)."""

    @staticmethod
    def forward(ctx, value: torch.Tensor, grads: list, stamp: tuple | None, *params: torch.Tensor) -> torch.Tensor:
        ctx.grads, ctx.stamp = grads, stamp
        return value.clone()

    @staticmethod
    def backward(ctx, out: torch.Tensor):
        if ctx.stamp is not None and ctx.stamp[0][0] != ctx.stamp[1]:
            raise RuntimeError("surgery_loss: backward() after a later call wrote over the workspace's gradients; "
                               "call backward() on each surgery_loss before the next one with the same workspace")
        scale = None if bool(out == 1) else out
        return (None, None, None, *[g if g is None or scale is None else g * scale for g in ctx.grads])
