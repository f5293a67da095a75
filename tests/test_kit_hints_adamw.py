"""Each hint of the AdamW check fires on its classic mistake, written here as a student would (in the course's
style and in torch's), and not on the right answer; the problem's first step by hand."""

from __future__ import annotations

import math

import pytest
import torch

from assignments.adamw_problem import adamw_problem, adamw_style
from assignments.checks import check_adamw
from assignments.common import Fail

# ---------------------------------------------------------------- AdamW, written out as a student might

def _student_step(bug: str, style: str):
    """An AdamW.step with one mistake (bug="" is the right answer), in the style the check expects."""
    @torch.no_grad()
    def step(self, closure=None):
        self._t = getattr(self, "_t", 0) + 1           # "shared-count": one count for the optimizer, each step()
        for group in self.param_groups:
            b1, b2 = group["betas"]
            if bug == "swap-betas":
                b1, b2 = b2, b1
            lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state.update(step=0, exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
                g, m, v = p.grad, state["exp_avg"], state["exp_avg_sq"]
                if bug != "no-count":
                    state["step"] += 1
                t = max(state["step"], 1) + (1 if bug == "t-plus-one" else 0)
                if bug == "shared-count":
                    t = self._t
                if bug == "l2":
                    g = g + wd * p
                decay_first = (style == "torch") != (bug == "order")
                c1, c2 = (1 - b1 ** t, 1 - b2 ** t) if bug != "no-bias-correction" else (1.0, 1.0)
                if bug == "swap-corrections":
                    c1, c2 = 1 - b2 ** t, 1 - b1 ** t
                if not group.get("correct_bias", True):
                    c1, c2 = 1.0, 1.0
                step_size = lr * math.sqrt(c2) / c1 if style == "course" else lr / c1    # as each style names it
                decay_lr = step_size if bug == "decay-step-size" else lr
                if decay_first and bug not in ("l2", "no-decay", "no-lr"):
                    p.mul_(1 - decay_lr * wd)
                if bug == "rebind-moments":
                    m = b1 * m + (1 - b1) * g
                    v = b2 * v + (1 - b2) * g * g
                else:
                    m.mul_(b1).add_(g, alpha=1 - b1)
                    v.mul_(b2).addcmul_(g, g, value=1 - b2)
                root = v.sqrt() if bug != "no-sqrt" else v
                if bug == "eps-in-sqrt" and style == "torch":
                    update = lr / c1 * m / (v / c2 + eps).sqrt()
                elif bug == "eps-in-sqrt":
                    update = lr * math.sqrt(c2) / c1 * m / (v + eps).sqrt()
                elif (style == "torch") != (bug == "eps-placement"):   # eps-placement: the other style's eps
                    update = lr / c1 * m / (root / (math.sqrt(c2) if bug != "no-sqrt" else c2) + eps)
                else:
                    update = lr * math.sqrt(c2) / c1 * m / (root + eps)
                if bug == "rebind-step":
                    p = p - update
                else:
                    p.sub_(update)
                if not decay_first and bug == "mul-decay":
                    p.mul_(1 - lr * wd)                # 1 - lr * wd rounded to float32
                elif not decay_first and bug not in ("l2", "no-decay", "no-lr"):
                    p.add_(p, alpha=-decay_lr * wd)    # the course's reference: exact for tiny lr * wd
                if bug == "no-lr":
                    p.mul_(1 - wd)
    return step


ADAMW_MISTAKES = {
    "no-bias-correction": "the bias corrections (1 - beta1^t, 1 - beta2^t) are left out",
    "l2": "added to the gradient (L2: g + wd * p) instead of decoupled",
    "order": "the weight decay is applied",
    "no-lr": "the weight decay is not multiplied by lr",
    "no-decay": "the weight decay is left out",
    "rebind-moments": "m and v are rebound",
    "no-count": "the step count stays 1",
    "no-sqrt": "v is not square-rooted",
    "swap-betas": "beta1 and beta2 are swapped",
    "rebind-step": "only the weight decay reached p",
    "swap-corrections": "the bias corrections are swapped",
    "t-plus-one": "the bias corrections use t + 1",
    "eps-in-sqrt": "eps is added inside the square root",
    "decay-step-size": "the weight decay is scaled by the step size",
    "eps-placement": "the bias corrections, to sqrt(v",   # after them to sqrt(v_hat) (course), before to sqrt(v)
    "shared-count": "one step count is kept for the whole optimizer",
}


class _CourseAdamW(torch.optim.Optimizer):
    """An AdamW with the course's signature (variant="course"): the check then expects the course's update."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=None, weight_decay=0.0, correct_bias=True,
                 variant="course"):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": 1e-6 if eps is None else eps,
                                  "weight_decay": weight_decay, "correct_bias": correct_bias})


@pytest.mark.parametrize("style", ["torch", "course"])
@pytest.mark.parametrize("bug", ["", *ADAMW_MISTAKES])
def test_adamw_hint_fires_on_its_mistake_only(monkeypatch: pytest.MonkeyPatch, bug: str, style: str) -> None:
    import minbert.optim
    if style != adamw_style(minbert.optim.AdamW):
        monkeypatch.setattr(minbert.optim, "AdamW", _CourseAdamW if style == "course" else torch.optim.AdamW)
    assert adamw_style(minbert.optim.AdamW) == style
    monkeypatch.setattr(minbert.optim.AdamW, "step", _student_step(bug, style))
    if not bug:
        check_adamw()                                  # the right answer passes: no hint fires
        return
    with pytest.raises(Fail) as e:
        check_adamw()
    msg = str(e.value)
    says = ADAMW_MISTAKES[bug]
    if bug == "rebind-step" and style == "course":   # the decay, after the lost step, went to the new tensor too
        says = "It matches what you get when the parameter did not change: update p in place"
    assert says in msg, msg
    others = [text for b, text in ADAMW_MISTAKES.items() if text != says and text in msg]
    assert not others, msg                             # one hint, the right one


def test_adamw_as_kingma_and_ba_write_it_is_named_for_its_eps_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kingma & Ba's update (torch.optim.AdamW's: eps added to sqrt(v_hat) after the bias corrections) against the
    course's: at step 1 the betas swapped change the update by eps's share alone (the bias corrections undo them), so
    a wrong run's first values can agree with that mistake too; the hint names where eps goes and nothing else, as it
    holds at every step and parameter and the betas' does not."""
    msg = _course_check_of(monkeypatch, "eps-placement", "course")
    assert "beta1 and beta2 are swapped" not in msg, msg
    assert "It matches what you get when eps is added after the bias corrections, to sqrt(v_hat)" in msg, msg


def test_adamw_hint_needs_the_whole_trajectory(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mistake whose value matches at the first failing step and parameter but not at the others is not named:
    torch's whole AdamW (decay before the step and its eps) against the course's matches neither mistake alone."""
    msg = _course_check_of(monkeypatch, "", "torch")
    assert "It matches what you get when" not in msg, msg


def _course_check_of(monkeypatch: pytest.MonkeyPatch, mistake: str, style: str) -> str:
    """The course-style check's failure message for a student's step written in `style` with `mistake`."""
    import minbert.optim
    assert adamw_style(minbert.optim.AdamW) == "course"
    monkeypatch.setattr(minbert.optim.AdamW, "step", _student_step(mistake, style))
    with pytest.raises(Fail) as e:
        check_adamw()
    return str(e.value)


@pytest.mark.parametrize("style", ["torch", "course"])
def test_adamw_no_sqrt_hint_names_the_styles_own_denominator(monkeypatch: pytest.MonkeyPatch, style: str) -> None:
    """The course folds the bias corrections into the step size and divides by sqrt(v) + eps: its hint must not send
    the student to sqrt(v_hat), which would correct twice; torch's divides by sqrt(v_hat) + eps."""
    import minbert.optim
    if style != adamw_style(minbert.optim.AdamW):
        monkeypatch.setattr(minbert.optim, "AdamW", _CourseAdamW if style == "course" else torch.optim.AdamW)
    monkeypatch.setattr(minbert.optim.AdamW, "step", _student_step("no-sqrt", style))
    with pytest.raises(Fail) as e:
        check_adamw()
    root = "sqrt(v) + eps" if style == "course" else "sqrt(v_hat) + eps"
    assert f"v is not square-rooted (divide by {root})" in str(e.value), str(e.value)


def test_adamw_float32_decay_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    """p.mul_(1 - lr * wd) passes the 5-step check but fails the course's 1000-step test (1 - 1e-7 rounds in
    float32); the check then names that cause."""
    import minbert.optim
    assert adamw_style(minbert.optim.AdamW) == "course"
    monkeypatch.setattr(minbert.optim.AdamW, "step", _student_step("mul-decay", "course"))
    with pytest.raises(Fail) as e:
        check_adamw()
    assert "optimizer_test.py" in str(e.value) and "subtract lr * wd times p from p" in str(e.value), str(e.value)


def test_adamw_problem_first_step_by_hand() -> None:
    # the hints' equations at step 1 of the check's first parameter, computed here from the paper's algorithm:
    # m = (1 - b1) g, v = (1 - b2) g^2, so m_hat / sqrt(v_hat) = g / |g| and p1 = p0 (1 - lr wd) - lr sign(g)
    from assignments.adamw_problem import ADAMW_GROUPS
    from assignments.mistakes import AdamWSpec, adamw_trajectory
    init, grads = adamw_problem()
    lr, wd = ADAMW_GROUPS[0]["lr"], ADAMW_GROUPS[0]["weight_decay"]
    got = adamw_trajectory(init, grads, ADAMW_GROUPS, 0.0, AdamWSpec("torch"))[0][0]
    assert torch.allclose(got, (init[0] * (1 - lr * wd) - lr * grads[0][0].sign()).double(), atol=1e-12)
    course = adamw_trajectory(init, grads, ADAMW_GROUPS, 0.0, AdamWSpec("course"))[0][0]
    assert torch.allclose(course, ((init[0] - lr * grads[0][0].sign()) * (1 - lr * wd)).double(), atol=1e-12)
    torch_ref = [p.clone().requires_grad_() for p in init]
    opt = torch.optim.AdamW([{**g, "params": [torch_ref[i] for i in g["params"]]} for g in ADAMW_GROUPS], eps=1e-6)
    traj = adamw_trajectory(init, grads, ADAMW_GROUPS, 1e-6, AdamWSpec("torch"))
    for t, step_grads in enumerate(grads):
        for q, g in zip(torch_ref, step_grads):
            q.grad = None if g is None else g.clone()
        opt.step()
        for q, want in zip(torch_ref, traj[t]):
            assert torch.allclose(q.detach().double(), want, atol=1e-6)


def test_a_parameter_without_a_gradient_on_some_steps_keeps_its_own_step_count() -> None:
    """The problem gives one parameter a gradient on some steps and None on others (as round-robin multitask training
    does to each task's head), so that t is per parameter, advancing only on its steps with a gradient: torch's AdamW
    (state['step']), whose trajectory the hints' equations reproduce in test_adamw_problem_first_step_by_hand."""
    from assignments.adamw_problem import ADAMW_GROUPS
    from assignments.mistakes import AdamWSpec, adamw_trajectory
    init, grads = adamw_problem()
    some = [i for i in range(len(init)) if 0 < sum(step[i] is None for step in grads) < len(grads)]
    assert some, "no parameter has a gradient on some steps and None on others"
    shared = adamw_trajectory(init, grads, ADAMW_GROUPS, 1e-6, AdamWSpec("torch", shared_count=True))
    right = adamw_trajectory(init, grads, ADAMW_GROUPS, 1e-6, AdamWSpec("torch"))
    assert not torch.allclose(shared[-1][some[0]], right[-1][some[0]], rtol=1e-5, atol=1e-6)   # the check's
