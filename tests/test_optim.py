"""minbert.AdamW: the course's own optimizer test (variant="course"), and torch.optim.AdamW over 1000 steps
(variant="torch")."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import FIXTURES

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
    start, ours, our_m = train(minbert.AdamW, dtype, variant="torch")
    _, theirs, their_m = train(torch.optim.AdamW, dtype, foreach=False)
    assert max((a - b).abs().max().item() for a, b in zip(theirs, start)) > 0.1, "training should move the weights"
    for a, b in zip(ours, theirs):
        diff = (a - b).abs().max().item()
        assert diff <= TOLERANCE[dtype], f"{dtype}: parameters differ from torch.optim.AdamW by {diff:.2e}"
    for a, b in zip(our_m, their_m):
        torch.testing.assert_close(a, b, atol=TOLERANCE[dtype], rtol=0)


@pytest.mark.parametrize("variant", ["course", "torch"])
def test_weight_decay_is_decoupled(variant: str) -> None:
    """With a zero gradient, AdamW only shrinks the weights: theta <- (1 - lr * lambda) theta."""
    p = torch.nn.Parameter(torch.full((3,), 2.0))
    opt = minbert.AdamW([p], lr=0.1, weight_decay=0.5, variant=variant)
    p.grad = torch.zeros(3)
    opt.step()
    torch.testing.assert_close(p.detach(), torch.full((3,), 2.0 * (1 - 0.1 * 0.5)))


def course_optimizer_test(opt_class: type) -> torch.Tensor:
    """The course's optimizer_test.py (neubig/minbert-assignment), its logic unchanged: 1000 steps on a linear map."""
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2, bias=False)
    opt = opt_class(model.parameters(), lr=1e-3, weight_decay=1e-4, correct_bias=True)
    for _ in range(1000):
        opt.zero_grad()
        x = torch.FloatTensor(rng.uniform(size=[model.in_features]))
        y_hat = model(x)
        y = torch.Tensor([x[0] + x[1], -x[2]])
        loss = ((y - y_hat) ** 2).sum()
        loss.backward()
        opt.step()
    return model.weight.detach()


def test_the_course_optimizer_test_passes() -> None:
    """`from minbert.optim import AdamW` passes the course's test: torch.allclose to its optimizer_test.npy."""
    from minbert.optim import AdamW
    ref = torch.tensor(np.load(FIXTURES / "optimizer_test.npy"))
    actual = course_optimizer_test(AdamW)
    assert torch.allclose(ref, actual), f"max abs difference {(ref - actual).abs().max().item():.2e}"
    assert (ref - actual).abs().max().item() < 1e-6  # measured 6e-8: the same update, float32 rounding only
    # torch's update (eps on sqrt(v_hat), decay before the step) is what the course's test rejects
    torch_like = course_optimizer_test(lambda params, correct_bias, **kw: minbert.AdamW(params, variant="torch", **kw))
    assert not torch.allclose(ref, torch_like)


def test_course_variant_first_step_by_hand() -> None:
    """One step from m = v = 0, by hand: m = (1-b1) g, v = (1-b2) g^2, then decay after the Adam step."""
    lr, b1, b2, eps, wd = 0.1, 0.9, 0.99, 1e-6, 0.5
    g = torch.tensor([0.5, -2.0, 0.0])
    for correct_bias, step_size in ((True, lr * (1 - b2) ** 0.5 / (1 - b1)), (False, lr)):
        p = torch.nn.Parameter(torch.tensor([1.0, 1.0, -3.0], dtype=torch.float64))
        opt = minbert.AdamW([p], lr=lr, betas=(b1, b2), weight_decay=wd, correct_bias=correct_bias)
        assert opt.defaults["eps"] == eps and opt.defaults["variant"] == "course"
        p.grad = g.double()
        opt.step()
        for before, gi, after in zip([1.0, 1.0, -3.0], g.tolist(), p.detach().tolist()):
            m, v = (1 - b1) * gi, (1 - b2) * gi * gi
            adam = before - step_size * m / (v ** 0.5 + eps)
            assert after == pytest.approx(adam - lr * wd * adam, abs=1e-12)


def test_rejects_bad_hyperparameters() -> None:
    p = [torch.nn.Parameter(torch.zeros(1))]
    with pytest.raises(ValueError, match="learning rate"):
        minbert.AdamW(p, lr=-1.0)
    with pytest.raises(ValueError, match="betas"):
        minbert.AdamW(p, betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="eps"):
        minbert.AdamW(p, eps=-1e-8)
    with pytest.raises(ValueError, match="variant"):
        minbert.AdamW(p, variant="adam")
    with pytest.raises(ValueError, match="correct_bias=False needs variant='course'"):
        minbert.AdamW(p, variant="torch", correct_bias=False)
    assert minbert.AdamW(p, variant="torch").defaults["eps"] == 1e-8   # torch.optim.AdamW's default


def test_training_scripts_keep_torch_numerics() -> None:
    """tasks/ (--optimizer minbert) steps with variant="torch": the same update as torch.optim.AdamW, as before."""
    from tasks.core.recipe import make_optimizer
    opt = make_optimizer([torch.nn.Parameter(torch.zeros(2))], lr=1e-3, weight_decay=0.01, kind="minbert")
    assert type(opt) is minbert.AdamW and opt.defaults["variant"] == "torch" and opt.defaults["eps"] == 1e-8
