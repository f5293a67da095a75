"""Each hint of the extensions' checks (DeeBERT, SimCSE, PALs, SMART) fires on its mistake, written here as a student
would: in this process, and once through the grader (hidden inputs, the check replayed on the reference). Also: a
hint whose value is the right answer is never offered, and grade() refuses a part it does not know by name."""

from __future__ import annotations

import importlib
import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from assignments.common import Fail, judge

pytestmark = pytest.mark.usefixtures("one_thread")


# ---------------------------------------------------------------- DeeBERT

def _entropy_without_clamp(logits: torch.Tensor, normalize: bool = False) -> torch.Tensor:
    logp = F.log_softmax(logits.float(), dim=-1)
    h = -(logp.exp() * logp).sum(-1)
    return h / math.log(logits.shape[-1]) if normalize and logits.shape[-1] > 1 else h


# ---------------------------------------------------------------- SimCSE

def _unsup(z1: torch.Tensor, z2: torch.Tensor, temperature: float = 0.05, *, fixed: float | None = None,
           reduction: str = "mean", dot: bool = False) -> torch.Tensor:
    from minbert.simcse import cosine_matrix
    sim = z1 @ z2.T if dot else cosine_matrix(z1, z2)
    return F.cross_entropy(sim / (fixed or temperature), torch.arange(z1.shape[0]), reduction=reduction)


def _margin(e1: torch.Tensor, e2: torch.Tensor, y: torch.Tensor, margin: float = 0.5, distance: str = "cosine", *,
            swap: bool = False, all_pull: bool = False, clamp: bool = True, reverse: bool = False, pull: int = 2,
            push: int = 2, half: float = 0.5, reduction: str = "mean", cos: bool = False) -> torch.Tensor:
    """margin_loss with one mistake (the defaults are the right answer)."""
    if distance == "cosine":
        c = F.cosine_similarity(e1, e2, dim=-1)
        d = c if cos else 1 - c
    else:
        d = (e1 - e2).norm(dim=-1)
    y = torch.ones_like(y, dtype=d.dtype) if all_pull else y.to(d.dtype)
    y = 1 - y if swap else y
    gap = d - margin if reverse else margin - d
    per = half * (y * d ** pull + (1 - y) * (gap.clamp(min=0) if clamp else gap) ** push)
    return per.sum() if reduction == "sum" else per.mean()


def _unsup_right(z1: torch.Tensor, z2: torch.Tensor, temperature: float = 0.05) -> torch.Tensor:
    return _unsup(z1, z2, temperature)


# ---------------------------------------------------------------- PALs

def _projected(bug: str):
    def forward(self, z: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q, k, v = (self.split_heads(F.linear(z, W, b)) for W, b in
                   ((self.Wq, self.bq), (self.Wk, self.bk), (self.Wv, self.bv)))
        if bug == "no-mask":
            return self.attend(q, k, v, torch.zeros_like(mask), self.p, self.training)
        if bug == "always-training":
            return self.attend(q, k, v, mask, self.p, True)
        return self.attend(q, k, v, mask, self.p, self.training)
    return forward


def _pal_previous_layer(self, layer: int, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return F.gelu(self.decoder(self.attention[layer - 1](self.encoder(x), mask)))


# ---------------------------------------------------------------- SMART

def _ascent(delta: list, grad: list, eta: float, epsilon: float, *, descent: bool = False, detach: bool = True,
            l2: bool = False, project: bool = True) -> list:
    """SMART's step, right by default, or with one mistake: descent, an undetached norm, the L2 norm, no projection."""
    B = delta[0].shape[0]
    flat = torch.cat([(g.detach() if detach else g).reshape(B, -1) for g in grad], 1)    # (B, N)
    norm = flat.norm(dim=1) if l2 else flat.abs().amax(1)
    norm = torch.where(norm > 0, norm, torch.ones_like(norm))
    sign = -1.0 if descent else 1.0
    out = [d + sign * eta * g / norm.view(B, *[1] * (g.dim() - 1)) for d, g in zip(delta, grad)]
    return [x.clamp(-epsilon, epsilon) for x in out] if project else out


# (module, the function replaced, the wrong one, the check, what the message must say, what it must not say)
MISTAKES = {
    "entropy-without-clamp": ("deebert", "entropy", _entropy_without_clamp, "check_entropy",
                              "a logit is -inf", None),
    "unsup-fixed-temperature": ("simcse", "unsup_simcse_loss", lambda z1, z2, t=0.05: _unsup(z1, z2, t, fixed=0.05),
                                "check_unsup", "the temperature argument is not used", "dot products"),
    "unsup-dot": ("simcse", "unsup_simcse_loss", lambda z1, z2, t=0.05: _unsup(z1, z2, t, dot=True), "check_unsup",
                  "the dot products are used", None),
    "unsup-sum": ("simcse", "unsup_simcse_loss", lambda z1, z2, t=0.05: _unsup(z1, z2, t, reduction="sum"),
                  "check_unsup", "summed over the batch instead of averaged", None),
    "margin-sum": ("simcse", "margin_loss", lambda *a: _margin(*a, reduction="sum"), "check_margin",
                   "summed over the batch instead of averaged", None),
    "margin-cos": ("simcse", "margin_loss", lambda *a: _margin(*a, cos=True), "check_margin",
                   "d is the cosine itself", None),
    "margin-push-not-squared": ("simcse", "margin_loss", lambda *a: _margin(*a, push=1), "check_margin",
                                "the push term max(0, margin - d) is not squared", None),
    "margin-not-squared": ("simcse", "margin_loss", lambda *a: _margin(*a, pull=1, push=1), "check_margin",
                           "the distances are not squared", None),
    "margin-no-half": ("simcse", "margin_loss", lambda *a: _margin(*a, half=1.0), "check_margin",
                       "the factor 0.5 is left out", None),
    "margin-swapped": ("simcse", "margin_loss", lambda *a: _margin(*a, swap=True), "check_margin",
                       "the branches are swapped", None),
    "margin-all-pull": ("simcse", "margin_loss", lambda *a: _margin(*a, all_pull=True), "check_margin",
                        "the paraphrase branch is used for the other pairs", None),
    "margin-no-clamp": ("simcse", "margin_loss", lambda *a: _margin(*a, clamp=False), "check_margin",
                        "max(0, .) is left out", None),
    "margin-reversed": ("simcse", "margin_loss", lambda *a: _margin(*a, reverse=True), "check_margin",
                        "max(0, d - margin) is used", None),
    "pals-no-mask": ("pals", "ProjectedAttention.forward", _projected("no-mask"), "check_attention",
                     "the attention mask is not applied", None),
    "pals-always-training": ("pals", "ProjectedAttention.forward", _projected("always-training"), "check_attention",
                             "training=True in eval mode", None),
    "pals-previous-layer": ("pals", "TaskPALs.forward", _pal_previous_layer, "check_pal",
                            "another layer's attention is used", None),
    "smart-descent": ("smart", "ascent_step", lambda *a: _ascent(*a, descent=True), "check_ascent",
                      "descends", None),
    "smart-no-detach": ("smart", "ascent_step", lambda *a: _ascent(*a, detach=False), "check_ascent",
                        "detached", None),
}


def _patch(monkeypatch: pytest.MonkeyPatch, module: str, name: str, wrong: object) -> None:
    target = importlib.import_module(f"minbert.{module}")
    owner, _, attr = name.rpartition(".")
    monkeypatch.setattr(getattr(target, owner) if owner else target, attr, wrong)


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_extension_hint_fires_on_its_mistake(monkeypatch: pytest.MonkeyPatch, mistake: str) -> None:
    module, name, wrong, check, says, never = MISTAKES[mistake]
    _patch(monkeypatch, module, name, wrong)
    with pytest.raises(Fail) as e:
        getattr(importlib.import_module(f"assignments.checks_{module}"), check)()
    assert says in str(e.value), str(e.value)
    assert never is None or never not in str(e.value), str(e.value)


@pytest.mark.parametrize("check", ["checks_deebert.check_entropy", "checks_simcse.check_unsup",
                                   "checks_simcse.check_margin", "checks_pals.check_attention", "checks_pals.check_pal",
                                   "checks_smart.check_ascent"])
def test_the_reference_passes_the_changed_checks(check: str) -> None:
    module, name = check.split(".")
    getattr(importlib.import_module(f"assignments.{module}"), name)()


def test_the_entropy_check_has_a_minus_infinity_logit() -> None:
    """entropy() of logits holding -inf is finite; without the clamp it is nan (what the new case catches)."""
    z = torch.tensor([0.0, -math.inf, math.log(3.0)])
    assert _entropy_without_clamp(z).isnan()
    from minbert.deebert import entropy
    assert entropy(z).item() == pytest.approx(math.log(4.0) - 0.75 * math.log(3.0))


def test_a_hint_equal_to_the_right_answer_is_never_offered() -> None:
    """A mistake that computes the right answer on these inputs (within tolerance) says nothing about a wrong result,
    even one close enough to it to match: the next hint, or the fallback, is said instead."""
    expected, got = torch.tensor(0.0), torch.tensor(1.8e-5)        # off by more than atol = 1e-5
    at_answer = torch.tensor(0.9e-5)                                # within tolerance of both
    with pytest.raises(Fail) as e:
        judge("f()", got, expected, hints={"at the answer": at_answer, "a real one": torch.tensor(1.8e-5)})
    assert str(e.value).endswith("It matches what you get when a real one"), str(e.value)
    with pytest.raises(Fail) as e:
        judge("f()", got, expected, hints={"at the answer": at_answer}, hint="fallback")
    assert "It matches" not in str(e.value) and str(e.value).endswith(". fallback"), str(e.value)


def test_grade_names_an_unknown_part(tmp_path: Path) -> None:
    from assignments.checks import PARTS
    from assignments.grade import grade
    (tmp_path / "minbert").mkdir()
    with pytest.raises(ValueError, match=re.escape("multitask_losses")) as e:
        grade(tmp_path, parts=["multitask_losses"], as_user="none")
    assert "mt_sst_loss" in str(e.value) and "attention" in str(e.value)
    assert set(PARTS) >= {"mt_sst_loss", "attention"}


# ---------------------------------------------------------------- through the grader: hidden inputs, replayed

def test_the_hints_survive_hidden_grading(tmp_path: Path) -> None:
    """One submission with a mistake per extension part: each part fails with its hint on the hidden inputs."""
    from conftest import grading_user
    from test_assignments import submission_with

    from assignments.grade import grade
    bodies = {
        "entropy": """
            logp = F.log_softmax(logits.float(), dim=-1)
            h = -(logp.exp() * logp).sum(-1)
            return h / math.log(logits.shape[-1]) if normalize and logits.shape[-1] > 1 else h
        """,
        "unsup_simcse_loss": "return F.cross_entropy(cosine_matrix(z1, z2) / 0.05, torch.arange(z1.shape[0]))",
        "margin_loss": """
            e1, e2, y = e1.float(), e2.float(), y.float()
            d = 1.0 - F.cosine_similarity(e1, e2, dim=-1) if distance == "cosine" else (e1 - e2).norm(dim=-1)
            return (0.5 * (y * d ** 2 + (1 - y) * (margin - d).clamp(min=0))).mean()
        """,
        "ProjectedAttention.forward": """
            q, k, v = (self.split_heads(F.linear(z, W, b)) for W, b in
                       ((self.Wq, self.bq), (self.Wk, self.bk), (self.Wv, self.bv)))
            return self.attend(q, k, v, torch.zeros_like(mask), self.p, self.training)
        """,
        "TaskPALs.forward": "return F.gelu(self.decoder(self.attention[layer - 1](self.encoder(x), mask)))",
        "ascent_step": """
            B = delta[0].shape[0]
            norm = torch.stack([g.abs().reshape(B, -1).amax(1) for g in grad]).amax(0)
            norm = torch.where(norm > 0, norm, torch.ones_like(norm))
            return [(d + eta * g / norm.view(B, *[1] * (g.dim() - 1))).clamp(-epsilon, epsilon)
                    for d, g in zip(delta, grad)]
        """,
    }
    says = {"deebert_entropy": "a logit is -inf", "simcse_unsup": "the temperature argument is not used",
            "simcse_margin": "the push term max(0, margin - d) is not squared",
            "pals_attention": "the attention mask is not applied", "pals_forward": "another layer's attention is used",
            "smart_ascent": "detached"}
    res = grade(submission_with(tmp_path, bodies), groups=["deebert", "simcse", "pals", "smart"], seed=20240611,
                as_user=grading_user())
    parts = {r["part"]: r for r in res["parts"]}
    assert {p for p, r in parts.items() if r["status"] != "pass"} == set(says), res["parts"]
    for part, text in says.items():
        assert parts[part]["status"] == "fail" and text in parts[part]["message"], parts[part]["message"]
    assert "dot products" not in parts["simcse_unsup"]["message"]


class _HintSpy:
    """A grader-like session over the reference: each compare() judged as usual, and its hints' values recorded."""

    def __init__(self, seed: int | None):
        self.seed, self.collisions = seed, []

    def fixture(self, name: str) -> dict[str, torch.Tensor]:
        from assignments import hidden
        from assignments.common import FIXTURES
        if self.seed is None:
            from safetensors.torch import load_file
            return load_file(FIXTURES / f"{name}.safetensors")
        return hidden.hidden_fixture(name, self.seed)

    def compare(self, what: str, got: object, expected: torch.Tensor, **options: object) -> None:
        from assignments.common import ATOL, RTOL, _close
        judge(what, got, expected, **options)
        rtol, atol = options.get("rtol", RTOL), options.get("atol", ATOL)
        live = {text: v.to(expected.dtype) for text, v in (options.get("hints") or {}).items()
                if v.shape == expected.shape and _close(v.to(expected.dtype), expected, rtol, atol).any()}
        texts = list(live)
        for i, a in enumerate(texts):
            for b in texts[i + 1:]:
                if not _close(live[a], live[b], rtol, atol).any():
                    self.collisions.append((what, a, b))

    def differentiable(self, what: str, loss: object) -> None:
        pass


@pytest.mark.parametrize("seed", [None, 7])
def test_the_extension_hints_are_apart(monkeypatch: pytest.MonkeyPatch, seed: int | None) -> None:
    """On the shipped fixtures and on hidden ones, no two hints of a compare that differ from the right answer give
    the same value (the second could never be named, and the first would be named for it)."""
    from assignments import common
    from assignments.checks import PARTS
    spy = _HintSpy(seed)
    monkeypatch.setattr(common, "SESSION", spy)
    for name in ("deebert_entropy", "simcse_unsup", "simcse_margin", "pals_attention", "pals_forward", "smart_kl",
                 "smart_ascent"):
        torch.manual_seed(common.SEED)
        PARTS[name].check()
    assert spy.collisions == []


# ---------------------------------------------------------------- the extensions' hints, checked in this process

def _kl_one_sided(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    lp, lq = p.float().log_softmax(-1), q.float().log_softmax(-1)
    return (lp.exp() * (lp - lq)).sum(-1).mean()


def _kl_from_softmax(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    P, Q = p.float().softmax(-1), q.float().softmax(-1)
    return ((P - Q) * (P.log() - Q.log())).sum(-1).mean()


def _unsup_without_temperature(z1: torch.Tensor, z2: torch.Tensor, temperature: float = 0.05) -> torch.Tensor:
    from minbert.simcse import cosine_matrix
    return torch.nn.functional.cross_entropy(cosine_matrix(z1, z2), torch.arange(z1.shape[0]))


def _margin_swapped(e1: torch.Tensor, e2: torch.Tensor, y: torch.Tensor, margin: float = 0.5,
                    distance: str = "cosine") -> torch.Tensor:
    d = 1 - torch.nn.functional.cosine_similarity(e1, e2, dim=-1) if distance == "cosine" else (e1 - e2).norm(dim=-1)
    y = y.float()
    return (0.5 * ((1 - y) * d ** 2 + y * (margin - d).clamp(min=0) ** 2)).mean()


def _one_head(self: torch.nn.Module, z: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    B, T, d = z.shape
    q, k, v = (torch.nn.functional.linear(z, W, b).view(B, T, 1, d).transpose(1, 2)
               for W, b in ((self.Wq, self.bq), (self.Wk, self.bk), (self.Wv, self.bv)))
    return self.attend(q, k, v, mask, self.p, self.training)


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("module, name, wrong, check, says", [
    ("smart", "symmetric_kl", _kl_one_sided, "check_kl", "only KL(P || Q) is computed"),
    ("smart", "symmetric_kl", _kl_from_softmax, "check_kl", "take log P and log Q from F.log_softmax"),
    ("smart", "ascent_step", lambda *a: _ascent(*a, l2=True), "check_ascent", "divided by its L2 norm"),
    ("smart", "ascent_step", lambda *a: _ascent(*a, project=False), "check_ascent", "not projected onto the epsilon"),
    ("pals", "ProjectedAttention.forward", _one_head, "check_attention", "one head of size d is used"),
    ("simcse", "unsup_simcse_loss", _unsup_without_temperature, "check_unsup", "the temperature is not applied"),
    ("simcse", "margin_loss", _margin_swapped, "check_margin", "the branches are swapped"),
], ids=["kl-one-sided", "kl-from-softmax", "ascent-l2", "ascent-unprojected", "pals-one-head", "simcse-no-temperature",
        "margin-swapped"])
def test_extension_checks_name_the_typical_mistakes(monkeypatch: pytest.MonkeyPatch, module: str, name: str,
                                                    wrong: object, check: str, says: str) -> None:
    import importlib

    from assignments.common import Fail
    target = importlib.import_module(f"minbert.{module}")
    owner, _, attr = name.rpartition(".")
    monkeypatch.setattr(getattr(target, owner) if owner else target, attr, wrong)
    with pytest.raises(Fail, match=re.escape(says)):
        getattr(importlib.import_module(f"assignments.checks_{module}"), check)()
