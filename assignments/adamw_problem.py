"""What the AdamW check runs: its problem (groups, parameters, gradients), the course's optimizer test, its fixture."""

from __future__ import annotations

import torch
from torch import nn

ADAMW_STEPS = 5
ADAMW_GROUPS = [{"params": [0, 1], "lr": 1e-2, "weight_decay": 0.1},
                {"params": [2, 3], "lr": 3e-3, "weight_decay": 0.0, "betas": (0.8, 0.99)}]


def adamw_style(opt_class: type) -> str:
    """"course" when the given AdamW's signature defaults to the course's update (variant="course"), else "torch"."""
    import inspect
    variant = inspect.signature(opt_class).parameters.get("variant")
    return "course" if variant is not None and variant.default == "course" else "torch"


ADAMW_EPS = 1e-6
ADAMW_TINY = 1       # the parameter whose gradients are about eps in size (randn * ADAMW_EPS)


def adamw_problem(g: torch.Generator | None = None) -> tuple[list[torch.Tensor], list[list[torch.Tensor | None]]]:
    """The check's initial parameters and per-step gradients (from g, by default seeded 0: the shipped fixture's);
    the last parameter never gets a gradient. Parameter ADAMW_TINY's gradients are randn * eps, so that sqrt(v) is
    about eps and where eps is added shows: the course's sqrt(v) + eps and torch's sqrt(v_hat) + eps then differ
    by far more than the tolerance (with randn gradients alone, sqrt(v) ~ 1 >> eps hides it)."""
    g = torch.Generator().manual_seed(0) if g is None else g
    shapes = [(4, 3), (5,), (2, 2, 2), (3,)]
    init = [torch.randn(s, generator=g) for s in shapes]
    grads = [[torch.randn(s, generator=g) for s in shapes[:-1]] + [None] for _ in range(ADAMW_STEPS)]
    for step in grads:
        step[ADAMW_TINY] = step[ADAMW_TINY] * ADAMW_EPS
    return init, grads


def adamw_inputs(f: dict[str, torch.Tensor]) -> tuple[list[torch.Tensor], list[list[torch.Tensor | None]]]:
    """adamw_problem's parameters and gradients as the fixture stores them (init_i, grad_t_i)."""
    init = [f[f"init_{i}"] for i in range(4)]
    return init, [[f[f"grad_{t}_{i}"] for i in range(3)] + [None] for t in range(ADAMW_STEPS)]


def course_optimizer_test(opt_class: type, seed: int = 0) -> torch.Tensor:
    """The course's optimizer_test.py (neubig/minbert-assignment): 1000 steps on a linear map, the weight after.

    seed 0 is the course's; the grader's hidden inputs draw another.
    """
    import numpy as np
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    model = nn.Linear(3, 2, bias=False)
    opt = opt_class(model.parameters(), lr=1e-3, weight_decay=1e-4, correct_bias=True)
    for _ in range(1000):
        opt.zero_grad()
        x = torch.FloatTensor(rng.uniform(size=[model.in_features]))
        loss = ((torch.Tensor([x[0] + x[1], -x[2]]) - model(x)) ** 2).sum()
        loss.backward()
        opt.step()
    return model.weight.detach()


def adamw_trajectory_of(f: dict[str, torch.Tensor], style: str, name: str) -> list[list[torch.Tensor]]:
    """The adamw fixture's trajectory STYLE.NAME as [step][param] (float32): "right", or a mistake's name."""
    return [[f[f"{style}.{name}.{i}"][t] for i in range(4)] for t in range(ADAMW_STEPS)]
