"""The AdamW check (part 1) and what it runs: its problem (groups, parameters, gradients), the course's optimizer test,
its fixture, its hints."""

from __future__ import annotations

import torch
from torch import nn

from .common import compare, load_fixture, matches_throughout, seen

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
ADAMW_SOMETIMES = 2, (1, 3)   # a parameter, and the steps (0-based: steps 2 and 4) on which its gradient is None


def adamw_problem(g: torch.Generator | None = None) -> tuple[list[torch.Tensor], list[list[torch.Tensor | None]]]:
    """The check's initial parameters and per-step gradients (from g, by default seeded 0: the shipped fixture's);
    the last parameter never gets a gradient, and parameter ADAMW_SOMETIMES[0] none on steps ADAMW_SOMETIMES[1]
    (as round-robin multitask training leaves a task's head, so that its step count t must be its own: state['step'],
    advanced only on its steps with a gradient, as torch's AdamW does). Parameter ADAMW_TINY's gradients are randn * eps, so that sqrt(v) is
    about eps and where eps is added shows: the course's sqrt(v) + eps and torch's sqrt(v_hat) + eps then differ
    by far more than the tolerance (with randn gradients alone, sqrt(v) ~ 1 >> eps hides it)."""
    g = torch.Generator().manual_seed(0) if g is None else g
    shapes = [(4, 3), (5,), (2, 2, 2), (3,)]
    init = [torch.randn(s, generator=g) for s in shapes]
    grads = [[torch.randn(s, generator=g) for s in shapes[:-1]] + [None] for _ in range(ADAMW_STEPS)]
    for t, step in enumerate(grads):
        step[ADAMW_TINY] = step[ADAMW_TINY] * ADAMW_EPS
        if t in ADAMW_SOMETIMES[1]:
            step[ADAMW_SOMETIMES[0]] = None            # drawn all the same, so that the other draws stay as they were
    return init, grads


def adamw_inputs(f: dict[str, torch.Tensor]) -> tuple[list[torch.Tensor], list[list[torch.Tensor | None]]]:
    """adamw_problem's parameters and gradients as the fixture stores them (init_i, grad_t_i)."""
    init = [f[f"init_{i}"] for i in range(4)]
    return init, [[f.get(f"grad_{t}_{i}") for i in range(3)] + [None] for t in range(ADAMW_STEPS)]


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


def adamw_hint_texts(style: str) -> dict[str, str]:
    """The AdamW check's hints for one style, in the order they are tried: the name of the mistake's trajectory in
    the adamw fixture (STYLE.NAME.i) -> the hint's text."""
    order = ("before the Adam step; this AdamW decays after it (p <- p - lr * wd * p last)" if style == "course"
             else "after the Adam step; this AdamW decays before it (p <- p - lr * wd * p first)")
    root = "sqrt(v) + eps" if style == "course" else "sqrt(v_hat) + eps"
    return {
        "no_bias_correction": "the bias corrections (1 - beta1^t, 1 - beta2^t) are left out",
        "l2": "the weight decay is added to the gradient (L2: g + wd * p) instead of decoupled (p <- p - lr * wd * p)",
        "decay_other_order": f"the weight decay is applied {order}",
        "decay_no_lr": "the weight decay is not multiplied by lr (p <- p - wd * p instead of p - lr * wd * p)",
        "no_decay": "the weight decay is left out",
        "moments_rebound": "m and v are rebound (m = beta1 * m + ...) instead of updated in place "
                           "(m.mul_(...).add_(...)), so state['exp_avg'] and state['exp_avg_sq'] stay zero between "
                           "steps",
        "step_stays_1": "the step count stays 1: increase state['step'] each step and use the new count as t",
        "no_sqrt": f"v is not square-rooted (divide by {root})",
        "betas_swapped": "beta1 and beta2 are swapped (m uses beta1, v uses beta2)",
        "step_lost": "only the weight decay reached p: the Adam step was assigned to a new tensor (p = p - ...) "
                     "instead of applied in place (p.addcdiv_(...))",
        "corrections_swapped": "the bias corrections are swapped: m's is 1 - beta1^t and v's is 1 - beta2^t",
        "t_plus_one": "the bias corrections use t + 1: t is the count of steps taken, this one included (1 at the "
                      "first step)",
        "eps_in_sqrt": f"eps is added inside the square root; it is added after it ({root})",
        "decay_by_step_size": "the weight decay is scaled by the step size (with its bias corrections) instead of by "
                              "lr alone (p <- p - lr * wd * p)",
        "eps_other_style": (
            "eps is added after the bias corrections, to sqrt(v_hat), as torch.optim.AdamW and Kingma & Ba's Adam do; "
            "the course's AdamW adds it before them, to sqrt(v) itself, and folds the corrections into the step size: "
            "p <- p - step_size * m / (sqrt(v) + eps)" if style == "course" else
            "eps is added before the bias corrections, to sqrt(v), as the course's AdamW does; torch.optim.AdamW adds "
            "it after them, to sqrt(v_hat): p <- p - lr * m_hat / (sqrt(v_hat) + eps)"),
        "step_count_shared": "one step count is kept for the whole optimizer, advanced by every step(), so a parameter "
                             "without a gradient on some steps (p.grad is None: skipped) gets a t too high after them; "
                             "keep one per parameter, state['step'], advanced only on the steps it is updated",
    }


def check_adamw() -> None:
    from minbert.optim import AdamW
    from tasks.core.step import optimizers_without_dynamo
    optimizers_without_dynamo()
    f = load_fixture("adamw")
    init, grads = adamw_inputs(f)
    style = adamw_style(AdamW)
    ps = [p.clone().requires_grad_() for p in init]
    opt = AdamW([{**grp, "params": [ps[i] for i in grp["params"]]} for grp in ADAMW_GROUPS], eps=ADAMW_EPS)
    # expected: the update by the equations in float64, stored in float32 (tests/test_kit_hints_adamw.py checks them
    # against torch.optim.AdamW), and each mistake's trajectory for the hints
    expected = adamw_trajectory_of(f, style, "right")
    wrong = {text: adamw_trajectory_of(f, style, name) for name, text in adamw_hint_texts(style).items()}
    against = "torch.optim.AdamW's update" if style == "torch" else "the course's update"
    stuck = ("the parameter did not change: update p in place (p.mul_, p.addcdiv_, ...) instead of assigning a new "
             "tensor to the name p")
    history, error = [], None          # the parameters after each step, until the student's step raises, if it does
    for t in range(ADAMW_STEPS):
        for i, p in enumerate(ps):
            p.grad = None if grads[t][i] is None else grads[t][i].clone()
        try:
            opt.step()
        except Exception as e:  # noqa: BLE001 - raised again below, after the steps before it are compared
            error = e
            break
        history.append([p.detach().clone() for p in ps])
    # a mistake is named only when the whole run matches its trajectory (every step taken, every parameter), not
    # because one value at the first difference happens to agree with it
    run = seen("AdamW.step in minbert/optim.py: every parameter after each step it took",
               torch.cat([p.flatten() for step in history for p in step]) if history else None)
    wrong = {text: traj for text, traj in wrong.items()
             if matches_throughout(run, torch.cat([p.flatten() for step in traj for p in step]), 1e-5, 1e-6)}
    for t in range(1, len(history) + 1):
        before = [expected[t - 2][i] if t > 1 else init[i] for i in range(len(ps))]
        for i, p in enumerate(history[t - 1]):
            group = 0 if i < 2 else 1
            hints = {text: traj[t - 1][i] for text, traj in wrong.items()}
            if grads[t - 1][i] is not None:
                hints[stuck] = before[i]
            compare(f"AdamW.step in minbert/optim.py, at step {t}, param group {group}, parameter {i} "
                    f"(compared with {against})", p, expected[t - 1][i], rtol=1e-5, atol=1e-6,
                    hints=hints)
    if error is not None:
        raise error
    if style == "course":   # correct_bias=False: the step size is lr itself
        ps = [p.clone().requires_grad_() for p in init]
        opt = AdamW([{**grp, "params": [ps[i] for i in grp["params"]]} for grp in ADAMW_GROUPS], eps=ADAMW_EPS,
                    correct_bias=False)
        expected = adamw_trajectory_of(f, style, "no_bias_correction")   # AdamWSpec(style, correct_bias=False)
        for t in range(ADAMW_STEPS):
            for i, p in enumerate(ps):
                p.grad = None if grads[t][i] is None else grads[t][i].clone()
            opt.step()
        for i, p in enumerate(ps):
            compare(f"AdamW.step in minbert/optim.py with correct_bias=False, after {ADAMW_STEPS} steps, parameter {i} "
                    "(the step size is lr itself)", p.detach(), expected[-1][i], rtol=1e-5, atol=1e-6)
        seed = int(f["course_seed"])
        compare(f"AdamW in minbert/optim.py on the course's optimizer_test.py (1000 steps, lr 1e-3, weight_decay 1e-4"
                f"{'' if seed == 0 else f', data seed {seed}'})", course_optimizer_test(AdamW, seed), f["course_out"],
                rtol=1e-5, atol=1e-6,
                hint="If the 5-step checks pass, the usual cause is the decay written as p.mul_(1 - lr * wd): with "
                     "lr * wd = 1e-7, 1 - lr * wd is not representable in float32 and rounds by up to 40%, so over "
                     "1000 steps the decay drifts; subtract lr * wd times p from p instead (one in-place add of a multiple "
                     "of p), as the course's reference does")
