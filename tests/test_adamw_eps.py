"""The AdamW check tells apart where eps goes (the course's sqrt(v) + eps before the bias corrections, torch's
sqrt(v_hat) + eps after them) by construction, on the shipped problem and on every hidden draw, while the right
update of either style, run in float32, passes each of them."""

from __future__ import annotations

import re

import pytest
import test_kit_hints_adamw as kh
import torch

import minbert.optim
from assignments import hidden
from assignments.adamw_problem import ADAMW_GROUPS, ADAMW_STEPS, adamw_problem
from assignments.checks import check_adamw
from assignments.common import Fail
from assignments.mistakes import AdamWSpec, adamw_trajectory

RTOL, ATOL = 1e-5, 1e-6                  # the check's tolerances for AdamW
DRAWS = [20261126 + k for k in range(50)]   # grading seeds; each one's AdamW problem as the grader draws it (attempt 0)


def _ratio(got: list[list[torch.Tensor]], want: list[list[torch.Tensor]]) -> float:
    """The largest |got - want| / (ATOL + RTOL |want|) over every step and parameter: above 1 fails the check."""
    return max(float(((a.double() - b.double()).abs() / (ATOL + RTOL * b.double().abs())).max())
               for sa, sb in zip(got, want) for a, b in zip(sa, sb))


def _reference(init: list[torch.Tensor], grads: list[list[torch.Tensor | None]], style: str,
               eps_other_style: bool = False) -> list[list[torch.Tensor]]:
    """The fixture's trajectory (float64 equations, stored in float32, as the check reads it)."""
    traj = adamw_trajectory(init, grads, ADAMW_GROUPS, 1e-6, AdamWSpec(style, eps_other_style=eps_other_style))
    return [[p.float() for p in step] for step in traj]


def _run(opt_class: type, init: list[torch.Tensor], grads: list[list[torch.Tensor | None]],
         step=None) -> list[list[torch.Tensor]]:
    """opt_class (its step replaced by `step` when given) run on the problem in float32, as the check runs it."""
    ps = [p.clone().requires_grad_() for p in init]
    opt = opt_class([{**grp, "params": [ps[i] for i in grp["params"]]} for grp in ADAMW_GROUPS], eps=1e-6)
    if step is not None:
        opt.step = step.__get__(opt)
    out = []
    for t in range(ADAMW_STEPS):
        for p, g in zip(ps, grads[t]):
            p.grad = None if g is None else g.clone()
        opt.step()
        out.append([p.detach().clone() for p in ps])
    return out


def _problem(seed: int | None) -> tuple[list[torch.Tensor], list[list[torch.Tensor | None]]]:
    """The shipped problem (None), or the one the grader draws from a grading seed (hidden.hidden_fixture's first
    attempt: adamw_fixture draws the problem first from the sub-seed's generator)."""
    if seed is None:
        return adamw_problem()
    return adamw_problem(torch.Generator().manual_seed(hidden.sub_seed(seed, "adamw", 0)))


@pytest.mark.parametrize("style", ["course", "torch"])
def test_the_shipped_fixture_holds_the_eps_placements_far_apart(style: str) -> None:
    # the fixture's right trajectory and its eps_other_style one, as the check reads them: far beyond the tolerance
    # (before, sqrt(v) ~ 1 >> eps made them differ by 3.5 times the tolerance at one value, by luck)
    from assignments.adamw_problem import adamw_trajectory_of
    from assignments.common import load_fixture
    f = load_fixture("adamw")
    ratio = _ratio(adamw_trajectory_of(f, style, "eps_other_style"), adamw_trajectory_of(f, style, "right"))
    assert ratio > 100, ratio


@pytest.mark.parametrize("style", ["course", "torch"])
def test_eps_in_the_other_styles_place_fails_the_public_check_by_far(monkeypatch: pytest.MonkeyPatch,
                                                                     style: str) -> None:
    if style == "torch":
        monkeypatch.setattr(minbert.optim, "AdamW", torch.optim.AdamW)
    monkeypatch.setattr(minbert.optim.AdamW, "step", kh._student_step("eps-placement", style))
    with pytest.raises(Fail) as e:
        check_adamw()
    msg = str(e.value)
    assert kh.ADAMW_MISTAKES["eps-placement"] in msg, msg
    diff = float(re.search(r"max abs diff ([0-9.e+-]+)", msg).group(1))
    assert diff > 100 * (ATOL + RTOL * 3), msg     # |p| < 3: far beyond the tolerance, not one value by luck


def test_every_hidden_draw_tells_the_eps_placements_apart_and_passes_the_right_updates() -> None:
    """On 50 grading seeds' problems: eps_other_style is far out of tolerance in both styles, and the right update
    run in float32 (minbert.AdamW, the course's; torch.optim.AdamW; each style written out as a student would) is
    within it, with room to spare."""
    torch.set_num_threads(1)
    apart, right = [], []
    for seed in [None, *DRAWS]:
        init, grads = _problem(seed)
        ref = {style: _reference(init, grads, style) for style in ("course", "torch")}
        for style in ("course", "torch"):
            apart.append((seed, style, _ratio(_reference(init, grads, style, eps_other_style=True), ref[style])))
        runs = {("course", "minbert.AdamW"): _run(minbert.optim.AdamW, init, grads),
                ("torch", "torch.optim.AdamW"): _run(torch.optim.AdamW, init, grads),
                ("course", "written out"): _run(kh._CourseAdamW, init, grads, kh._student_step("", "course")),
                ("torch", "written out"): _run(torch.optim.AdamW, init, grads, kh._student_step("", "torch"))}
        right += [(seed, style, name, _ratio(run, ref[style])) for (style, name), run in runs.items()]
    assert min(r for *_, r in apart) > 100, sorted(apart, key=lambda a: a[-1])[:5]
    assert max(r for *_, r in right) < 0.1, sorted(right, key=lambda a: -a[-1])[:5]
