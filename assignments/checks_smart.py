"""The SMART extension's checks (minbert/smart.py): the symmetric KL divergence and one ascent step.

Both are pure functions of tensors, so no model runs: the checks compare with hand computations and with the
reference on random inputs (assignments/fixtures/smart.safetensors).
"""

from __future__ import annotations

import math

import torch

from .common import Fail, Part, compare, differentiable, load_fixture

FILE = "minbert/smart.py"


def check_kl() -> None:
    from minbert.smart import symmetric_kl
    what = f"symmetric_kl() in {FILE}"
    # by hand: logits (0, ln 3) and (0, 0) give P = (1/4, 3/4), Q = (1/2, 1/2), and
    # KL(P||Q) + KL(Q||P) = sum (P - Q)(log P - log Q) = 1/4 ln 2 + 1/4 ln 3/2 = (ln 3) / 4
    p, q = torch.tensor([[0.0, math.log(3.0)]]), torch.zeros(1, 2)
    pq = 0.25 * math.log(0.5) + 0.75 * math.log(1.5)                    # KL(P || Q)
    qp = 0.5 * math.log(2.0) + 0.5 * math.log(0.5 / 0.75)               # KL(Q || P)
    compare(f"{what} of the logits (0, ln 3) and (0, 0), where P = (1/4, 3/4), Q = (1/2, 1/2) and the symmetric KL "
            "is (ln 3) / 4 (a 0-d tensor)", symmetric_kl(p, q), torch.tensor(math.log(3.0) / 4), hints={
                "only KL(P || Q) is computed: the symmetric KL adds KL(Q || P)": torch.tensor(pq),
                "only KL(Q || P) is computed: the symmetric KL adds KL(P || Q)": torch.tensor(qp),
                "the two directions are averaged: the symmetric KL is their sum": torch.tensor((pq + qp) / 2)},
            shape_hint="Sum over the classes and average over the batch: one number, a 0-d tensor")
    big = torch.tensor([[100.0, 0.0, -100.0]]), torch.tensor([[0.0, 100.0, 0.0]])
    compare(f"{what} of the confident logits (100, 0, -100) and (0, 100, 0) (expected 200: finite)", symmetric_kl(*big),
            torch.tensor(200.0), hint="It must stay finite: take log P and log Q from F.log_softmax (a softmax of "
            "logits ~100 underflows to 0, and its log is -inf: the sum becomes inf or nan)")
    f = load_fixture("smart")
    p, q = f["kl_p"].clone().requires_grad_(), f["kl_q"]
    loss = symmetric_kl(p, q)
    compare(f"{what} of random logits (4, 5)", loss, f["kl"], hints={
        "only KL(P || Q) is computed: the symmetric KL adds KL(Q || P)": f["kl_pq"],
        "only KL(Q || P) is computed: the symmetric KL adds KL(P || Q)": f["kl_qp"],
        "the two directions are averaged: the symmetric KL is their sum": f["kl_half"],
        "the divergence is summed over the batch instead of averaged": f["kl_sum"],
        "the mean is taken over classes and batch (sum over the classes, then the mean over the batch)": f["kl_mean_all"]},
        shape_hint="Sum over the classes and average over the batch: one number, a 0-d tensor")
    differentiable(what, loss)


DESCENT = ("the step descends: delta moves against the gradient, but the adversarial step ascends, along it (it "
           "makes the loss larger)")


def _nan_hint(got: object, rows: str) -> str:
    if isinstance(got, torch.Tensor) and bool(got.isnan().any()):
        return (f"It has NaN: an example whose gradient is 0 ({rows}) must stay where it is; use 1 in place of a "
                "zero norm")
    return ""


def check_ascent() -> None:
    from minbert.smart import ascent_step
    what = f"ascent_step() in {FILE}"
    # by hand: g = (3, -6), ||g||_inf = 6, eta = 0.5: the step is 0.5 * (1/2, -1) = (0.25, -0.5)
    delta, grad = [torch.zeros(1, 2)], [torch.tensor([[3.0, -6.0]])]
    l2 = 0.5 * torch.tensor([[3.0, -6.0]]) / math.sqrt(45.0)
    hints = {"the gradient is divided by its L2 norm, not by its infinity norm (the largest |entry|)": l2,
             "the step is eta * sign(g), not eta * g / ||g||_inf": torch.tensor([[0.5, -0.5]]),
             "the gradient is not normalised: divide it by ||g||_inf": torch.tensor([[1.5, -3.0]]),
             DESCENT: torch.tensor([[-0.25, 0.5]])}
    out = ascent_step(delta, grad, 0.5, 1.0)
    if not isinstance(out, (list, tuple)) or len(out) != 1:
        raise Fail(f"{what} returned {type(out).__name__}"
                   + (f" of {len(out)} tensors" if isinstance(out, (list, tuple)) else "")
                   + ", expected a list of one tensor per tensor of delta")
    compare(f"{what} by hand: delta 0, g = (3, -6), eta = 0.5, epsilon = 1: ||g||_inf = 6, so the new delta is "
            "0.5 * (3, -6) / 6 = (0.25, -0.5)", out[0], torch.tensor([[0.25, -0.5]]), hints=hints)
    out = ascent_step([torch.zeros(1, 2)], grad, 0.5, 0.3)[0]
    compare(f"{what} by hand: the same step with epsilon = 0.3: (0.25, -0.5) projected onto the ball "
            "||delta||_inf <= 0.3 is (0.25, -0.3)", out, torch.tensor([[0.25, -0.3]]),
            hints={"the step is not projected onto the epsilon ball: clamp every entry of delta to "
                   "[-epsilon, epsilon]": torch.tensor([[0.25, -0.5]])})
    # the norm is a constant of the step, taken from the gradient detached: with g requiring grad, the gradient of
    # sum(new delta) with respect to g is eta / ||g||_inf = 1/12 everywhere (no clamp is active at epsilon = 1)
    g = torch.tensor([[3.0, -6.0]], requires_grad=True)
    out = ascent_step([torch.zeros(1, 2)], [g], 0.5, 1.0)
    if isinstance(out, (list, tuple)) and len(out) == 1 and isinstance(out[0], torch.Tensor) and out[0].requires_grad:
        (through,) = torch.autograd.grad(out[0].sum(), g, allow_unused=True)
        through = torch.zeros_like(g) if through is None else through.detach()
    else:                              # no graph at all: none through the norm either
        through = torch.full((1, 2), 1 / 12)
    compare(f"{what} by hand with g = (3, -6) requiring grad (eta = 0.5, epsilon = 1): the gradient of the sum of the "
            "new delta with respect to g, eta / ||g||_inf = 1/12 everywhere when ||g||_inf is taken as a constant",
            through, torch.full((1, 2), 1 / 12), hints={
                "the norm is computed from g itself, not detached: the gradient also flows through ||g||_inf":
                torch.tensor([[1 / 12, 1 / 24]])},
            hint="||g||_inf must be computed from the gradient detached: the step's norm is a constant, and no "
                 "gradient flows through it")
    f = load_fixture("smart")
    delta, grad = [f["delta_0"], f["delta_1"]], [f["grad_0"], f["grad_1"]]
    eta, eps = float(f["eta"]), float(f["epsilon"])
    before = [d.clone() for d in delta]
    out = ascent_step([d.clone() for d in delta], [g.clone() for g in grad], eta, eps)
    if not isinstance(out, (list, tuple)) or len(out) != 2:
        raise Fail(f"{what} returned {type(out).__name__}, expected a list of 2 tensors, one per tensor of delta")
    for i in range(2):
        compare(f"{what} on a bi-encoder pair's two tensors, delta[{i}] {tuple(before[i].shape)}, eta = {eta:g}, "
                f"epsilon = {eps:g}, the gradient of row 2 all 0", out[i], f[f"out_{i}"], hints={
                    "the gradient is divided by its L2 norm, not by its infinity norm": f[f"out_{i}_l2"],
                    "the step is not projected onto the epsilon ball: clamp every entry of delta to "
                    "[-epsilon, epsilon]": f[f"out_{i}_no_projection"],
                    "each tensor of the list is normalised by its own norm: ||g_b||_inf is over all the tensors of "
                    "example b (both sentences of a pair)": f[f"out_{i}_per_tensor"],
                    "each token is normalised by its own norm: ||g_b||_inf is over all of example b": f[f"out_{i}_per_token"],
                    "one norm is taken for the whole batch: each example b has its own ||g_b||_inf": f[f"out_{i}_batch"],
                    "the step is eta * sign(g), not eta * g / ||g||_inf": f[f"out_{i}_sign"],
                    DESCENT: f[f"out_{i}_descent"]},
                hint=lambda got: _nan_hint(got, "row 2"))


SMART_PARTS = [Part(*p[:4], files=(FILE,), group="smart", fixtures=p[4]) for p in [
    ("smart_kl", 10, f"symmetric_kl() in {FILE}", check_kl, ("smart",)),
    ("smart_ascent", 15, f"ascent_step() in {FILE}", check_ascent, ("smart",)),
]]
