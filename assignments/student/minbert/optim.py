"""AdamW written out: Adam with bias correction and decoupled weight decay (Loshchilov & Hutter, 2019, alg. 2)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch
from torch.optim import Optimizer

VARIANTS = ("course",)


class AdamW(Optimizer):
    """AdamW (Loshchilov & Hutter, 2019, alg. 2) as the CS224N course has it: Hugging Face's
    `transformers.AdamW` (deprecated during 4.x, since removed), which the course's optimizer_test.py passes against.

    It differs from torch.optim.AdamW in two details. eps (default 1e-6) is added to sqrt(v) before the bias
    correction, which is folded into the step size: the effective eps is eps / sqrt(1 - beta2^t), about 32x larger at
    step 1, which shrinks the early steps of a parameter with tiny gradients (lr 1e-3, g = 1e-7: a first step of
    3.2e-6 against torch's 9.1e-5; at g = 1e-2 the two agree). And the decoupled weight decay, lr * weight_decay * p,
    comes after the Adam step, on the updated p (torch's takes lr * weight_decay * theta_{t-1} before it). Both scale
    the decay by lr, where Alg. 2 scales the decay by the schedule multiplier eta_t alone: eta_t lambda theta_{t-1}.
    correct_bias=False leaves the bias uncorrected. weight_decay defaults to 0 (torch.optim.AdamW's default is 0.01).
    `variant` is kept for the course's interface and accepts "course" only. tasks/ trains with it under
    --optimizer course (tasks/core/recipe.py), torch's own AdamW under --optimizer torch or fused.
    """

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.0, correct_bias: bool = True, variant: str = "course"):
        if variant not in VARIANTS:
            raise ValueError(f"unknown variant {variant!r}: minbert.AdamW is the course's AdamW ('course'); for "
                             "torch's update use torch.optim.AdamW")
        if lr < 0.0:
            raise ValueError(f"invalid learning rate {lr}")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"invalid betas {betas}: each must be in [0, 1)")
        if eps < 0.0:
            raise ValueError(f"invalid eps {eps}")
        if weight_decay < 0.0:
            raise ValueError(f"invalid weight_decay {weight_decay}")
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                                  "correct_bias": correct_bias, "variant": variant})

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """One AdamW update of every parameter with a gradient (Loshchilov & Hutter, 2019, alg. 2)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
            correct_bias = group["correct_bias"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("AdamW does not support sparse gradients")
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                g, m, v = p.grad, state["exp_avg"], state["exp_avg_sq"]
                # YOUR CODE HERE
                # One AdamW update of p, the course's variant (Hugging Face's `transformers.AdamW`,
                # deprecated during 4.x, since removed; Loshchilov & Hutter, 2019, alg. 2); g, m, v and p all
                # have p's shape.
                #   count the step: state["step"] goes up by one; call the new count t
                #   m <- beta1 * m + (1 - beta1) * g        first moment, m is state["exp_avg"]
                #   v <- beta2 * v + (1 - beta2) * g^2      second moment, v is state["exp_avg_sq"]
                #   step_size = lr * sqrt(1 - beta2^t) / (1 - beta1^t)   the bias corrections, folded into
                #               the step size; step_size = lr when correct_bias is False
                #   p <- p - step_size * m / (sqrt(v) + eps)            eps is added to sqrt(v) itself
                #   p <- p - lr * wd * p                    decoupled weight decay, AFTER the Adam step
                # Update p, m and v in place (mul_, add_, addcmul_, addcdiv_): the optimizer keeps these tensors.
                raise NotImplementedError
        return loss

