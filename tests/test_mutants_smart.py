"""Tests written to kill the mutants mutmut left alive in minbert/smart.py (tests/MUTATION.md): SmartConfig's bounds
and messages, the perturbation on a non-linear f (x + delta, not x - delta), and Smart.forward's loss, train/eval
modes and logged running sums on a toy model whose R_s and D_Breg are computed here by hand."""

from __future__ import annotations

import math
import re

import pytest
import torch
from torch import nn

from minbert.smart import PRESETS, Smart, SmartConfig, adversarial_perturbation, smoothness_loss

pytestmark = pytest.mark.usefixtures("one_thread")


# ------------------------------------------------------------------ SmartConfig

def test_config_bounds_at_their_edges() -> None:
    """lambda_s, sigma, mu, steps >= 0 and beta in [0, 1) accept their 0; eta and epsilon must be > 0."""
    SmartConfig(lambda_s=0.0, sigma=0.0, mu=0.0, steps=0, beta=0.0)
    for name in ("eta", "epsilon"):
        with pytest.raises(ValueError, match=f"^SMART {name} must be > 0, not 0.0$"):
            SmartConfig(**{name: 0.0})


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"rule": "clip"}, "SMART rule must be 'project' or 'rescale', not 'clip'"),
    ({"lambda_s": -1.0}, "SMART lambda_s must be >= 0, not -1.0"),
    ({"sigma": -0.5}, "SMART sigma must be >= 0, not -0.5"),
    ({"mu": -2.0}, "SMART mu must be >= 0, not -2.0"),
    ({"eta": -1e-3}, "SMART eta must be > 0, not -0.001"),
    ({"epsilon": -1.0}, "SMART epsilon must be > 0, not -1.0"),
    ({"steps": -1}, "SMART steps must be >= 0, not -1"),
    ({"beta": 1.0}, "SMART beta must be in [0, 1), not 1.0"),
])
def test_config_messages_exactly(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        SmartConfig(**kwargs)


def test_preset_message_exactly() -> None:
    assert list(PRESETS) == ["mt-dnn", "vat", "paper"]
    with pytest.raises(ValueError, match="^" + re.escape(
            "SMART perturbation preset must be one of mt-dnn, vat, paper, not 'smart'") + "$"):
        SmartConfig.preset("smart")


# ------------------------------------------------------------------ the perturbation on a non-linear f

def test_perturbation_and_r_s_at_x_plus_delta_on_a_quadratic_f() -> None:
    """f(x) = sum x^2 is not odd, so f(x + delta) and f(x - delta) differ: one step and R_s by hand."""
    x = [torch.tensor([[[1.0, -2.0, 0.5]], [[0.25, 1.5, -1.0]]], dtype=torch.float64)]   # (B=2, T=1, H=3)

    def f(xs: list[torch.Tensor]) -> torch.Tensor:
        return (xs[0] ** 2).sum((1, 2))                                 # (B,), a regression output

    config = SmartConfig(steps=1, sigma=0.3, eta=0.5, epsilon=10.0)     # a ball too large to project
    torch.manual_seed(3)
    (delta,) = adversarial_perturbation(f, x, f(x), "regression", config)
    torch.manual_seed(3)
    nu = 0.3 * torch.randn(2, 1, 3, dtype=torch.float64)
    expected = []
    for b in range(2):
        xb, nb = x[0][b, 0].tolist(), nu[b, 0].tolist()
        a = sum((xi + ni) ** 2 - xi * xi for xi, ni in zip(xb, nb))     # f(x + nu) - f(x)
        g = [2 / 2 * a * 2 * (xi + ni) for xi, ni in zip(xb, nb)]       # d/dnu of mean_b a_b^2, B = 2
        norm = max(abs(v) for v in g)
        expected.append([ni + 0.5 * gi / norm for ni, gi in zip(nb, g)])
    assert delta[:, 0].tolist() == [pytest.approx(e, rel=1e-5) for e in expected]
    torch.manual_seed(3)
    r_s = smoothness_loss(f, x, f(x), "regression", config)
    by_hand = sum(sum((xi + di) ** 2 - xi * xi for xi, di in zip(x[0][b, 0].tolist(), expected[b])) ** 2
                  for b in range(2)) / 2
    assert r_s.item() == pytest.approx(by_hand, rel=1e-5)


# ------------------------------------------------------------------ Smart.forward on a toy model

class Toy(nn.Module):
    """f(x) = sum_t (w . e_t + b): a regression on token embeddings; records the mode of every f call."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(6, 3)
        self.lin = nn.Linear(3, 1)
        self.modes: list[bool] = []

    def embed(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        return [self.emb(ids) for ids in inputs]                        # (B, T, H)

    def predict_from_embeddings(self, task: str, embeddings: list[torch.Tensor], inputs: list) -> torch.Tensor:
        self.modes.append(self.training)
        return self.lin(embeddings[0]).sum((1, 2))                      # (B,)


def by_hand(w: list[float], b: float, emb: list[list[float]], ids: list[list[int]]) -> list[float]:
    return [sum(sum(wi * ei for wi, ei in zip(w, emb[t])) + b for t in row) for row in ids]


def run_batch(smart: Smart, model: Toy, ids: list[list[int]], task_loss: float, seed: int) -> float:
    inputs = [torch.tensor(ids)]
    h = model.embed(inputs)
    y = model.predict_from_embeddings("sts", h, inputs)
    torch.manual_seed(seed)
    return smart(model, "sts", "regression", {}, inputs, h, y, torch.tensor(task_loss)).item()


def r_s_by_hand(model: Toy, ids: list[list[int]], sigma: float, seed: int) -> float:
    """K = 0: delta = nu, and f(x + nu) - f(x) = sum_t w . nu_t, the bias cancelling; the mean square over B."""
    torch.manual_seed(seed)
    nu = (sigma * torch.randn(len(ids), len(ids[0]), 3)).tolist()
    w = model.lin.weight[0].tolist()
    return sum(sum(sum(wi * ni for wi, ni in zip(w, tok)) for tok in row) ** 2 for row in nu) / len(ids)


BATCHES = [([[0, 1, 2], [3, 4, 5]], 0.7, 11), ([[5, 5, 1], [2, 0, 3]], 1.3, 12)]


@pytest.mark.parametrize("bregman", [True, False])
def test_loss_and_logged_running_sums_by_hand(bregman: bool) -> None:
    """loss = L + lambda_s R_s + mu D_Breg per batch, and the epoch's means and shares, all by hand."""
    model = Toy().train()
    config = SmartConfig(lambda_s=2.0, mu=0.5, steps=0, sigma=0.5, bregman=bregman)
    smart = Smart(config, dict(model.named_parameters()))
    tilde = (model.lin.weight[0].tolist(), model.lin.bias.item(), model.emb.weight.tolist())
    with torch.no_grad():                                               # theta moves away from theta~
        model.lin.weight += torch.tensor([[0.5, -1.0, 0.25]])
        model.lin.bias += 0.3
    theta = (model.lin.weight[0].tolist(), model.lin.bias.item(), model.emb.weight.tolist())
    losses, r_s, d = [], [], []
    for ids, task_loss, seed in BATCHES:
        losses.append(run_batch(smart, model, ids, task_loss, seed))
        r_s.append(r_s_by_hand(model, ids, 0.5, seed))
        gap = [a - c for a, c in zip(by_hand(*theta, ids), by_hand(*tilde, ids))]
        d.append(sum(v * v for v in gap) / len(gap) if bregman else 0.0)
        assert losses[-1] == pytest.approx(task_loss + 2.0 * r_s[-1] + 0.5 * d[-1], rel=1e-5)
    assert not bregman or min(d) > 0.1
    st = smart.stats
    assert st["batches"] == 2 and st["task_loss"] == pytest.approx(2.0)
    assert (st["loss"], st["r_s"], st["bregman"]) == pytest.approx((sum(losses), sum(r_s), sum(d)), rel=1e-5)
    got = smart.epoch_stats()
    assert got["smart_r_s"] == pytest.approx(sum(r_s) / 2, rel=1e-5)
    assert got["smart_r_s_share"] == pytest.approx(2.0 * sum(r_s) / sum(losses), rel=1e-5)
    assert got["smart_bregman"] == pytest.approx(sum(d) / 2, rel=1e-5, abs=1e-12)
    assert got["smart_bregman_share"] == pytest.approx(0.5 * sum(d) / sum(losses), rel=1e-5, abs=1e-12)
    smart.reset_stats()                                                 # one batch: the means are that batch's
    loss = run_batch(smart, model, *BATCHES[0])
    one = smart.epoch_stats()
    assert one["smart_r_s"] == pytest.approx(r_s[0], rel=1e-5) and smart.stats["batches"] == 1
    assert one["smart_r_s_share"] == pytest.approx(2.0 * r_s[0] / loss, rel=1e-5)
    smart.reset_stats()                                                 # no batch: nothing, and no share
    empty = smart.epoch_stats()
    assert smart.stats == {"batches": 0, "loss": 0.0, "task_loss": 0.0, "r_s": 0.0, "bregman": 0.0}
    assert empty["smart_r_s"] == 0.0 and empty["smart_bregman"] == 0.0
    assert math.isnan(empty["smart_r_s_share"]) and math.isnan(empty["smart_bregman_share"])


@pytest.mark.parametrize("dropout", [True, False])
def test_the_regulariser_passes_run_in_train_mode_unless_dropout_is_off(dropout: bool) -> None:
    """dropout=True: the perturbation and adversarial passes keep the model's train mode; False: eval mode."""
    model = Toy().train()
    smart = Smart(SmartConfig(steps=2, dropout=dropout), {})
    ids = BATCHES[0][0]
    inputs = [torch.tensor(ids)]
    h = model.embed(inputs)
    y = model.predict_from_embeddings("sts", h, inputs)
    model.modes.clear()
    smart(model, "sts", "regression", {}, inputs, h, y, torch.tensor(0.0))
    passes = 3 if dropout else 4                                        # K perturbation passes, the adversarial pass
    assert model.modes == [dropout] * passes and model.training        # (+ the clean target without dropout)
