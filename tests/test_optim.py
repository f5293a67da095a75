"""minbert.AdamW against torch.optim.AdamW: the same parameters after 1000 steps."""

from __future__ import annotations

import pytest
import torch

import minbert

STEPS = 1000
# Largest |difference| allowed in any parameter after STEPS steps (parameters are of size ~1-3).
# The two differ only in rounding (mul/add against lerp), measured 1.2e-7 in float32 and 1.1e-16 in float64.
TOLERANCE = {torch.float32: 1e-6, torch.float64: 1e-12}


pytestmark = pytest.mark.usefixtures("one_thread")


def train(optimizer_class: type, dtype: torch.dtype, **kwargs) -> tuple[list[torch.Tensor], ...]:
    """Minibatch least squares, weights decayed and biases not, with a linear warm-up.

    Returns the parameters before and after, and the optimiser's first moments m_t."""
    torch.manual_seed(0)
    X = torch.randn(256, 10, dtype=dtype)
    Y = X @ torch.randn(10, 3, dtype=dtype) + 0.5 * torch.randn(256, 3, dtype=dtype)
    net = torch.nn.Linear(10, 3).to(dtype)
    before = [p.detach().clone() for p in net.parameters()]
    unused = torch.nn.Parameter(torch.ones(4, dtype=dtype))  # never gets a gradient: must stay as it is
    groups = [{"params": [net.weight, unused], "weight_decay": 0.1},
              {"params": [net.bias], "weight_decay": 0.0, "lr": 3e-3}]
    opt = optimizer_class(groups, lr=1e-2, betas=(0.9, 0.99), eps=1e-6, **kwargs)
    schedule = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=100)
    g = torch.Generator().manual_seed(1)
    for _ in range(STEPS):
        i = torch.randint(0, len(X), (32,), generator=g)
        opt.zero_grad()
        ((net(X[i]) - Y[i]) ** 2).mean().backward()
        opt.step()
        schedule.step()
    assert torch.equal(unused, torch.ones(4, dtype=dtype)) and unused not in opt.state
    params = [net.weight.detach(), net.bias.detach()]
    return before, params, [opt.state[p]["exp_avg"] for p in (net.weight, net.bias)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_adamw_matches_torch_over_1000_steps(dtype: torch.dtype) -> None:
    """Max abs difference <= 1e-6 (float32) / 1e-12 (float64) in every parameter after 1000 steps."""
    start, ours, our_m = train(minbert.AdamW, dtype)
    _, theirs, their_m = train(torch.optim.AdamW, dtype, foreach=False)
    assert max((a - b).abs().max().item() for a, b in zip(theirs, start)) > 0.1, "training should move the weights"
    for a, b in zip(ours, theirs):
        diff = (a - b).abs().max().item()
        assert diff <= TOLERANCE[dtype], f"{dtype}: parameters differ from torch.optim.AdamW by {diff:.2e}"
    for a, b in zip(our_m, their_m):
        torch.testing.assert_close(a, b, atol=TOLERANCE[dtype], rtol=0)


def test_weight_decay_is_decoupled() -> None:
    """With a zero gradient, AdamW only shrinks the weights: theta <- (1 - lr * lambda) theta."""
    p = torch.nn.Parameter(torch.full((3,), 2.0))
    opt = minbert.AdamW([p], lr=0.1, weight_decay=0.5)
    p.grad = torch.zeros(3)
    opt.step()
    torch.testing.assert_close(p.detach(), torch.full((3,), 2.0 * (1 - 0.1 * 0.5)))


def test_rejects_bad_hyperparameters() -> None:
    p = [torch.nn.Parameter(torch.zeros(1))]
    with pytest.raises(ValueError, match="learning rate"):
        minbert.AdamW(p, lr=-1.0)
    with pytest.raises(ValueError, match="betas"):
        minbert.AdamW(p, betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="eps"):
        minbert.AdamW(p, eps=-1e-8)
