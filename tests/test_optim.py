"""minbert.AdamW, the course's AdamW: the course's own optimizer test, a hand step, decoupled decay; and which AdamW
each --optimizer builds."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
from conftest import FIXTURES, ROOT

import minbert

pytestmark = pytest.mark.usefixtures("one_thread")


def test_weight_decay_is_decoupled() -> None:
    """With a zero gradient, AdamW only shrinks the weights: theta <- (1 - lr * lambda) theta."""
    p = torch.nn.Parameter(torch.full((3,), 2.0))
    opt = minbert.AdamW([p], lr=0.1, weight_decay=0.5)
    p.grad = torch.zeros(3)
    opt.step()
    torch.testing.assert_close(p.detach(), torch.full((3,), 2.0 * (1 - 0.1 * 0.5)))


def test_a_parameter_without_a_gradient_is_left_alone() -> None:
    """A parameter that gets no gradient (a frozen or unused one) neither moves, decay included, nor gets a state."""
    used, unused = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(4))
    opt = minbert.AdamW([{"params": [used, unused], "weight_decay": 0.1}], lr=1e-2)
    for _ in range(3):
        used.grad = torch.tensor([0.5, -1.0, 2.0])
        opt.step()
    assert torch.equal(unused, torch.ones(4)) and unused not in opt.state
    assert not torch.equal(used, torch.ones(3)) and opt.state[used]["step"] == 3


def _tree_script(name: str):
    """A script of the student tree's root (assignments/tree_files/), imported as a module."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "assignments" / "tree_files" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The course's optimizer_test.py (neubig/minbert-assignment), its logic unchanged: 1000 steps on a linear map. One copy:
# the student tree's own optimizer_test.py, which students run.
course_optimizer_test = _tree_script("optimizer_test").test_optimizer


def test_the_course_optimizer_test_passes() -> None:
    """`from minbert.optim import AdamW` passes the course's test: torch.allclose to its optimizer_test.npy."""
    from minbert.optim import AdamW
    ref = torch.tensor(np.load(FIXTURES / "optimizer_test.npy"))
    actual = course_optimizer_test(AdamW)
    assert torch.allclose(ref, actual), f"max abs difference {(ref - actual).abs().max().item():.2e}"
    assert (ref - actual).abs().max().item() < 1e-6  # measured 6e-8: the same update, float32 rounding only
    # torch's update (eps on sqrt(v_hat), decay before the step) is what the course's test rejects
    torch_like = course_optimizer_test(lambda params, correct_bias, **kw: torch.optim.AdamW(params, foreach=False, **kw))
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
    with pytest.raises(ValueError, match="weight_decay"):   # torch.optim.AdamW refuses it too
        minbert.AdamW(p, weight_decay=-1.0)
    for variant in ("adam", "torch"):                 # torch's update is torch.optim.AdamW's (--optimizer torch)
        with pytest.raises(ValueError, match="variant"):
            minbert.AdamW(p, variant=variant)
    assert minbert.AdamW(p, variant="course").defaults["eps"] == 1e-6   # the course's default


@pytest.mark.parametrize(("kind", "fused"), [("torch", None), ("minbert", None), ("fused", True)])
def test_optimizer_kinds_build_torch_adamw(kind: str, fused: bool | None) -> None:
    """--optimizer torch (and its legacy name minbert) and fused: torch.optim.AdamW with torch's eps 1e-8."""
    from tasks.core.recipe import make_optimizer
    opt = make_optimizer([torch.nn.Parameter(torch.zeros(2))], lr=1e-3, weight_decay=0.01, kind=kind)
    assert type(opt) is torch.optim.AdamW and opt.defaults["fused"] is fused and opt.defaults["eps"] == 1e-8


def test_optimizer_course_builds_the_course_adamw() -> None:
    """--optimizer course: minbert.AdamW, the course's update, with its eps 1e-6 and bias correction."""
    from tasks.core.recipe import make_optimizer
    opt = make_optimizer([torch.nn.Parameter(torch.zeros(2))], lr=1e-3, weight_decay=0.01, kind="course")
    assert type(opt) is minbert.AdamW and opt.defaults["eps"] == 1e-6 and opt.defaults["correct_bias"]
    assert opt.defaults["weight_decay"] == 0.01 and opt.defaults["lr"] == 1e-3
