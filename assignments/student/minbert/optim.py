"""AdamW written out: Adam with bias correction and decoupled weight decay (Loshchilov & Hutter, 2019, alg. 2)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch
from torch.optim import Optimizer


class AdamW(Optimizer):
    """AdamW (Loshchilov & Hutter, 2019, alg. 2); the same update and defaults as torch.optim.AdamW."""

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01):
        if lr < 0.0:
            raise ValueError(f"invalid learning rate {lr}")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"invalid betas {betas}: each must be in [0, 1)")
        if eps < 0.0:
            raise ValueError(f"invalid eps {eps}")
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
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
                # One AdamW update of p (Loshchilov & Hutter, 2019, alg. 2); g, m, v and p all have p's shape.
                #   count the step: state["step"] goes up by one; call the new count t
                #   p <- p - lr * wd * p                    decoupled weight decay, on p before the Adam step
                #   m <- beta1 * m + (1 - beta1) * g        first moment, m is state["exp_avg"]
                #   v <- beta2 * v + (1 - beta2) * g^2      second moment, v is state["exp_avg_sq"]
                #   m_hat = m / (1 - beta1^t),  v_hat = v / (1 - beta2^t)    bias corrections
                #   p <- p - lr * m_hat / (sqrt(v_hat) + eps)
                # Update p, m and v in place (mul_, add_, addcmul_, addcdiv_): the optimizer keeps these tensors.
                raise NotImplementedError
        return loss
