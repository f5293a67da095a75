"""Tests written to kill the mutants mutmut left alive in minbert/optim.py (tests/MUTATION.md): AdamW.__init__'s
defaults, its bounds on lr, betas and eps (each edge against torch.optim.AdamW's own checks), and its messages."""

from __future__ import annotations

import re

import pytest
import torch

import minbert

# (hyperparameters, accepted?): the edges of each bound. torch.optim.AdamW decides the same way (checked below).
EDGES = [
    ({"lr": 0.0}, True), ({"lr": -1e-12}, False),
    ({"betas": (0.0, 0.999)}, True), ({"betas": (0.9, 0.0)}, True), ({"betas": (0.0, 0.0)}, True),
    ({"betas": (1.0, 0.999)}, False), ({"betas": (1.5, 0.999)}, False), ({"betas": (-0.1, 0.999)}, False),
    ({"betas": (0.9, 1.0)}, False), ({"betas": (0.9, -0.1)}, False),
    ({"eps": 0.0}, True), ({"eps": -1e-12}, False),
]


def torch_accepts(kwargs: dict) -> bool:
    try:
        torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], **kwargs)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize(("kwargs", "accepted"), EDGES, ids=[str(k) for k, _ in EDGES])
def test_bounds_are_torchs(kwargs: dict, accepted: bool) -> None:
    """lr >= 0, 0 <= b1, b2 < 1, eps >= 0: the closed and open ends exactly where torch.optim.AdamW puts them."""
    assert torch_accepts(kwargs) is accepted
    p = [torch.nn.Parameter(torch.zeros(1))]
    if accepted:
        minbert.AdamW(p, **kwargs)
    else:
        name = next(iter(kwargs))
        with pytest.raises(ValueError, match="learning rate" if name == "lr" else name):
            minbert.AdamW(p, **kwargs)


def test_edge_values_step_by_hand() -> None:
    """lr = 0 leaves p alone; b1 = b2 = 0 and eps = 0 make the first course step lr * sign(g) (m = g, v = g^2)."""
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.float64))
    opt = minbert.AdamW([p], lr=0.0)
    p.grad = torch.tensor([3.0, -0.5], dtype=torch.float64)
    opt.step()
    assert p.detach().tolist() == [1.0, -2.0]
    opt = minbert.AdamW([p], lr=0.25, betas=(0.0, 0.0), eps=0.0)
    opt.step()
    assert p.detach().tolist() == [0.75, -1.75]


def test_weight_decay_defaults_to_zero() -> None:
    """No weight_decay given: no decay. A zero gradient moves nothing (m = v = 0), so a decayed p would shrink."""
    p = torch.nn.Parameter(torch.tensor([2.0, -4.0]))
    opt = minbert.AdamW([p], lr=0.1)
    assert opt.defaults["weight_decay"] == 0.0
    p.grad = torch.zeros(2)
    opt.step()
    assert p.detach().tolist() == [2.0, -4.0]


def test_messages_exactly() -> None:
    p = [torch.nn.Parameter(torch.zeros(1))]
    with pytest.raises(ValueError, match="^" + re.escape(
            "unknown variant 'torch': minbert.AdamW is the course's AdamW ('course'); for torch's update use "
            "torch.optim.AdamW") + "$"):
        minbert.AdamW(p, variant="torch")
    with pytest.raises(ValueError, match=r"^invalid learning rate -1\.0$"):
        minbert.AdamW(p, lr=-1.0)
    with pytest.raises(ValueError, match=re.escape("invalid betas (0.9, 1.0): each must be in [0, 1)")):
        minbert.AdamW(p, betas=(0.9, 1.0))
    with pytest.raises(ValueError, match=r"^invalid eps -1e-08$"):
        minbert.AdamW(p, eps=-1e-8)


def test_default_hyperparameters() -> None:
    """lr = 1e-3 and betas = (0.9, 0.999) by default, torch.optim.AdamW's; eps 1e-6, the course's."""
    g = torch.tensor([0.5, -2.0], dtype=torch.float64)
    p = torch.nn.Parameter(torch.tensor([1.0, 1.0], dtype=torch.float64))
    opt = minbert.AdamW([p])
    p.grad = g.clone()
    opt.step()
    for gi, after in zip(g.tolist(), p.detach().tolist()):   # first step: m = 0.1 g, v = 0.001 g^2
        step_size = 1e-3 * (1 - 0.999) ** 0.5 / (1 - 0.9)
        assert after == pytest.approx(1.0 - step_size * 0.1 * gi / ((0.001 * gi * gi) ** 0.5 + 1e-6), abs=1e-15)
    assert opt.defaults["eps"] == 1e-6 and opt.defaults["correct_bias"] is True
