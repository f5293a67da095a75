"""Each hint of part 1's checks fires on its classic mistake, written here as a student would, and not on the right
answer."""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F

from assignments.checks import check_attention, check_embeddings
from assignments.common import Fail

# ---------------------------------------------------------------- attention and embeddings

def _attention(softmax_dim: int = -1, mask_sign: float = 1.0, div: str = "sqrt", mask: bool = True,
               merge: bool = True, always_dropout: bool = False):
    """attention() with one mistake (the defaults are the right answer), as a student might write it."""
    def attention(q, k, v, mask_, dropout_p=0.0, training=False):
        B, nh, T, hs = q.shape
        scale = {"sqrt": math.sqrt(hs), "hs": hs, "none": 1.0,
                 "H": math.sqrt(q.shape[1] * q.shape[-1])}[div]           # "H": the hidden size, nh * hs
        scores = q @ k.transpose(-2, -1) / scale + (mask_sign * mask_ if mask else 0.0)
        probs = F.dropout(scores.softmax(dim=softmax_dim), dropout_p, training or always_dropout)
        out = probs @ v                                                    # (B, nh, T, hs)
        return (out.transpose(1, 2) if merge else out).reshape(B, T, nh * hs)
    return attention


ATTENTION_MISTAKES = {   # id: (the student's attention(), what the hint says)
    "softmax-over-queries": (_attention(softmax_dim=-2), "the softmax runs over the queries (dim=-2)"),
    "softmax-over-heads": (_attention(softmax_dim=1), "the softmax runs over the heads (dim=1)"),
    "mask-sign": (_attention(mask_sign=-1.0), "the mask is subtracted instead of added"),
    "no-mask": (_attention(mask=False), "the mask is not added to the scores"),
    "divided-by-hs": (_attention(div="hs"), "the scores are divided by hs instead of sqrt(hs)"),
    "not-scaled": (_attention(div="none"), "the scores are not divided by sqrt(hs)"),
    "divided-by-sqrt-H": (_attention(div="H"), "the scores are divided by sqrt(nh * hs)"),
    "merge-without-transpose": (_attention(merge=False), "the heads are merged without moving nh next to hs"),
    "dropout-in-eval": (_attention(always_dropout=True), "dropout is applied in eval mode"),
}


@pytest.mark.parametrize("bug", ["", *ATTENTION_MISTAKES])
def test_attention_hint_fires_on_its_mistake_only(monkeypatch: pytest.MonkeyPatch, bug: str) -> None:
    import minbert.model
    monkeypatch.setattr(minbert.model, "attention", ATTENTION_MISTAKES[bug][0] if bug else _attention())
    if not bug:
        check_attention()                              # the right answer passes: no hint fires
        return
    with pytest.raises(Fail) as e:
        check_attention()
    msg, says = str(e.value), ATTENTION_MISTAKES[bug][1]
    assert says in msg, msg
    assert not [text for _, text in ATTENTION_MISTAKES.values() if text != says and text in msg], msg


def _hints_apart(hints: dict[str, torch.Tensor], right: torch.Tensor) -> None:
    """No hint's tensor is within the checks' tolerance of another's or of the right answer: none can shadow one."""
    from assignments.common import ATOL, RTOL, _close
    named = {"the right answer": right, **hints}
    for a, x in named.items():
        for b, y in named.items():
            if a != b:
                assert _close(x, y, RTOL, ATOL).any(), f"{a!r} matches {b!r}"


def test_attention_hints_are_apart() -> None:
    from assignments.checks import attention_check_hints
    from assignments.common import load_fixture
    f = load_fixture("attention")
    _hints_apart(attention_check_hints(f), f["out"])


def test_embeddings_without_layernorm_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    import minbert.model

    def forward(self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None):
        T = input_ids.shape[1]
        e = self.word(input_ids) + self.position(torch.arange(T))[None] + self.token_type(token_type_ids)
        return F.dropout(e, self.p, self.training)
    monkeypatch.setattr(minbert.model.BertEmbeddings, "forward", forward)
    with pytest.raises(Fail, match=re.escape("the LayerNorm is left out")):
        check_embeddings()


def _embeddings_forward(leave_out: str):
    """BertEmbeddings.forward as a student might write it, with one table's embeddings left out of the sum."""
    from minbert.model import layer_norm

    def forward(self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None):
        B, T = input_ids.shape
        if token_type_ids is None:
            token_type_ids = torch.zeros(B, T, dtype=torch.long)
        e = self.word(input_ids)
        if leave_out != "position":
            e = e + self.position(torch.arange(T))[None]
        if leave_out != "token_type":
            e = e + self.token_type(token_type_ids)
        return F.dropout(layer_norm(e, self.gLN, self.bLN, self.eps), self.p, self.training)
    return forward


@pytest.mark.parametrize("leave_out, says", [("token_type", "the token-type embeddings are left out"),
                                             ("position", "the position embeddings are left out"), ("", "")])
def test_embeddings_without_a_table_is_named(monkeypatch: pytest.MonkeyPatch, leave_out: str, says: str) -> None:
    """The handout's "the embeddings without their LayerNorm or a table": each table's hint fires on its mistake."""
    import minbert.model
    monkeypatch.setattr(minbert.model.BertEmbeddings, "forward", _embeddings_forward(leave_out))
    if not leave_out:
        check_embeddings()                             # the same code with both tables passes: no hint
        return
    with pytest.raises(Fail) as e:
        check_embeddings()
    msg = str(e.value)
    assert f"It matches what you get when {says}" in msg, msg
    others = ("the token-type embeddings are left out", "the position embeddings are left out",
              "the LayerNorm is left out")
    assert [t for t in others if t in msg] == [says], msg


def test_the_layer_equations_reproduce_the_fixture() -> None:
    # the hints' layer is right where it should be: with no mistake it gives the reference's stored output
    from assignments.common import _tiny_config, load_fixture
    from assignments.mistakes import layer_variant
    f, config = load_fixture("layer"), _tiny_config()
    assert torch.allclose(layer_variant(f, config.num_attention_heads, config.layer_norm_eps), f["out"], atol=1e-5)


def test_the_sublayer_norm_equations_reproduce_the_fixture() -> None:
    # layer_variant's LayerNorm placement against the fixture's LN(h) + x mistake, written from the reference code
    from assignments.common import _tiny_config, load_fixture
    from assignments.mistakes import layer_variant
    f, config = load_fixture("layer"), _tiny_config()
    got = layer_variant(f, config.num_attention_heads, config.layer_norm_eps, norm="sublayer")
    assert torch.allclose(got, f["out_pre_ln"], atol=1e-5)


def _student_after_attention(bug: str):
    """A BertLayer.after_attention with one mistake (bug="" is the right answer), as a student might write it."""
    from minbert.model import layer_norm

    def after_attention(self, h1, x, ts=0.0):
        def ln1(a):
            return layer_norm(a, self.gLN1, self.bLN1, self.eps)

        def ln2(a):
            return layer_norm(a, self.gLN2, self.bLN2, self.eps)

        act = {"tanh": lambda a: F.gelu(a, approximate="tanh"), "relu": F.relu}.get(bug, self.act)

        def ffn(a):                                    # h5 from the feed-forward block's input
            return F.dropout(F.linear(act(F.linear(a, self.Wm2, self.bm2)), self.Wm3, self.bm3), self.p, self.training)

        h2 = F.dropout(F.linear(h1, self.Wm1, self.bm1), self.p, self.training)
        if bug == "norm-sublayer":                     # normalise the sublayer's output, then add
            h3 = ln1(h2) + x
            return ln2(ffn(h3)) + h3 + ts
        if bug == "norm-residual":                     # normalise the residual, then add
            h3 = h2 + ln1(x)
            return ffn(h3) + ln2(h3) + ts
        if bug in ("pre-ln", "pre-ln1"):               # GPT-2's pre-LN, attention having already run on x
            h3 = h2 + x
            return h3 + ffn(ln1(h3) if bug == "pre-ln1" else ln2(h3)) + ts
        if bug == "no-residual":
            h3 = ln1(h2)
            return ln2(ffn(h3) + ts)
        h3 = ln1(h2 + x)
        return ln2(ffn(h3) + (x if bug == "second-residual-x" else h3) + ts)
    return after_attention


LAYER_MISTAKES = {   # id: what the hint says
    "tanh": "GELU's tanh approximation is used",
    "relu": "a ReLU is used instead of GELU",
    "second-residual-x": "the last add-and-norm adds x instead of h3",
    "no-residual": "the residual connections (+ x, + h3) are left out",
    "norm-sublayer": "LayerNorm is applied before the residual add, to the sublayer's output",
    "norm-residual": "LayerNorm is applied before the residual add, to the residual:",
    "pre-ln": "the layer is written pre-LN, as GPT-2 is: h3 = h2 + x, out = h3 + FFN(LN2(h3))",
    "pre-ln1": "the layer is written pre-LN, as GPT-2 is: h3 = h2 + x, out = h3 + FFN(LN1(h3))",
}


@pytest.mark.parametrize("bug", ["", *LAYER_MISTAKES])
def test_layer_hint_fires_on_its_mistake_only(monkeypatch: pytest.MonkeyPatch, bug: str) -> None:
    import minbert.model
    from assignments.checks import check_layer
    monkeypatch.setattr(minbert.model.BertLayer, "after_attention", _student_after_attention(bug))
    if not bug:
        check_layer()                                  # the right answer passes (training mode, adapter): no hint
        return
    with pytest.raises(Fail) as e:
        check_layer()
    msg, says = str(e.value), LAYER_MISTAKES[bug]
    assert "(eval mode)" in msg and says in msg, msg
    assert not [text for text in LAYER_MISTAKES.values() if text != says and text in msg], msg


def test_layer_hints_are_apart() -> None:
    from assignments.checks import layer_check_hints
    from assignments.common import load_fixture
    f = load_fixture("layer")
    _hints_apart(layer_check_hints(f), f["out"])


def test_every_mistake_in_the_fixtures_has_its_hint_text() -> None:
    # mistakes.py (reference only) writes each mistake's output under a fixture key; the checks (shipped) hold the
    # texts under the same keys, so a mistake added on one side alone is caught here
    from assignments.checks import ATTENTION_HINTS, LAYER_HINTS, adamw_hint_texts
    from assignments.common import load_fixture
    from assignments.mistakes import adamw_mistakes
    for style in ("course", "torch"):
        assert list(adamw_mistakes(style)) == list(adamw_hint_texts(style))
    adamw = load_fixture("adamw")
    assert {k.split(".")[1] for k in adamw if "." in k} == {"right", *adamw_mistakes("course")}
    for name, hints in (("attention", ATTENTION_HINTS), ("layer", LAYER_HINTS)):
        f = load_fixture(name)
        assert set(hints) <= set(f), name
    assert "out_no_layernorm" in load_fixture("embeddings")


def _fused_by(route: str):
    """attention() through torch's fused kernel, reached by `route`, with the heads merged as the stub asks."""
    from torch.nn.functional import scaled_dot_product_attention  # bound by name, before the check runs
    kernel = {"F": lambda *a, **kw: F.scaled_dot_product_attention(*a, **kw),
              "by-name": scaled_dot_product_attention,
              "aten": lambda q, k, v, attn_mask, dropout_p: torch.ops.aten.scaled_dot_product_attention(
                  q, k, v, attn_mask, dropout_p)}.get(route)
    if route == "given":                                           # the model's own fused path, merged heads and all
        from minbert.model import fused_attention
        return fused_attention

    def attention(q, k, v, mask, dropout_p=0.0, training=False):
        B, nh, T, hs = q.shape
        out = kernel(q, k, v, attn_mask=mask, dropout_p=dropout_p if training else 0.0)   # (B, nh, T, hs)
        return out.transpose(1, 2).reshape(B, T, nh * hs)
    return attention


@pytest.mark.parametrize("route", ["F", "by-name", "aten", "given"])
def test_attention_through_the_fused_kernel_is_refused_by_any_route(monkeypatch: pytest.MonkeyPatch,
                                                                    route: str) -> None:
    """The handout's "calling torch's fused scaled_dot_product_attention does not count", however it is imported:
    `from torch.nn.functional import scaled_dot_product_attention` binds the function before the check runs."""
    import minbert.model
    monkeypatch.setattr(minbert.model, "attention", _fused_by(route))
    with pytest.raises(Fail, match=re.escape("calls torch's fused scaled_dot_product_attention")):
        check_attention()
    F.scaled_dot_product_attention(*(torch.randn(1, 1, 2, 4) for _ in range(3)))  # usable again after the check


# ---------------------------------------------------------------- a wrong shape, as the checker reports it

@pytest.mark.parametrize("part, says", [
    ("classifier_head", "pool() returned shape (3, 5), expected (B, H) = (3, 32): one vector per sentence"),
    ("model", "attention() returned shape"),
])
def test_a_wrong_shape_is_reported_as_the_students_function_alone(monkeypatch: pytest.MonkeyPatch, part: str,
                                                                  says: str) -> None:
    """A ShapeError, raised where the given code calls the student's function, reads like a failed comparison: its
    message naming the function, not the given minbert/shapes.py it is raised in, and no command to run the part
    that is being checked already (another part's, as model's for attention(), is kept)."""
    import minbert.model
    import tasks.classifier
    from assignments.check import run_part
    if part == "classifier_head":
        monkeypatch.setattr(tasks.classifier, "pool",
                            lambda hidden, mask, pooled, how: (hidden * mask[..., None]).mean(-1))   # over H
    else:
        real = _attention()
        monkeypatch.setattr(minbert.model, "attention", lambda q, k, v, *a: real(q, k, v, *a).reshape(
            q.shape[0], q.shape[2], q.shape[1], q.shape[3]))      # the heads left apart: (B, T, nh, hs)
    r = run_part(part)
    assert r["status"] == "fail" and r["message"].startswith(says), r
    assert "shapes.py" not in r["message"] and "expect_shape" not in r["message"], r
    assert f"python -m assignments.check {part}" not in r["message"], r
    if part == "model":
        assert r["message"].endswith("python -m assignments.check attention"), r


# ---------------------------------------------------------------- the backward pass training takes

def _attention_with(change: str):
    """The right attention(), with one change that leaves its output right: the probabilities' dropout in place, or
    the probabilities detached from the graph."""
    def attention(q, k, v, mask, dropout_p=0.0, training=False):
        B, nh, T, hs = q.shape
        probs = (q @ k.transpose(-2, -1) / math.sqrt(hs) + mask).softmax(dim=-1)
        if change == "detach":
            probs = probs.detach()
        probs = F.dropout(probs, dropout_p, training, inplace=change == "inplace-dropout")
        return (probs @ v).transpose(1, 2).reshape(B, T, nh * hs)
    return attention


def _after_attention_with(change: str):
    """The right BertLayer.after_attention, with one change that leaves its output right on the check's padded (N, H)
    inputs: the first residual added into x in place (x += h2), h1 detached from the graph, a LayerNorm written over
    dim=1 (the features of (N, H), the tokens of (B, T, H)), or Wm1 h1 + bm1 by torch.addmm (matrices alone)."""
    from minbert.model import layer_norm

    def norm(a, g, b, eps):                 # "ln-dim1": a LayerNorm by hand over dim=1, right on (N, H) alone
        if change != "ln-dim1":
            return layer_norm(a, g, b, eps)
        return g * (a - a.mean(1, keepdim=True)) / (a.var(1, keepdim=True, unbiased=False) + eps).sqrt() + b

    def after_attention(self, h1, x, ts=0.0):
        h1 = h1.detach() if change == "detach" else h1
        lin = torch.addmm(self.bm1, h1, self.Wm1.T) if change == "addmm" else F.linear(h1, self.Wm1, self.bm1)
        h2 = F.dropout(lin, self.p, self.training)            # addmm: matrices alone, (N, H) but not (B, T, H)
        if change == "inplace-x":
            x += h2
            h3 = norm(x, self.gLN1, self.bLN1, self.eps)
        else:
            h3 = norm(h2 + x, self.gLN1, self.bLN1, self.eps)
        h5 = F.dropout(F.linear(self.act(F.linear(h3, self.Wm2, self.bm2)), self.Wm3, self.bm3), self.p, self.training)
        return norm(h5 + h3 + ts, self.gLN2, self.bLN2, self.eps)
    return after_attention


AUTOGRAD_MISTAKES = {   # id: (part, what to patch, its value, what the failure says)
    "attention-inplace-dropout": ("attention", "attention", _attention_with("inplace-dropout"),
                                  "with training=True, dropout_p=0.3 (after torch.manual_seed(1234)): the backward pass"),
    "attention-detach": ("attention", "attention", _attention_with("detach"),
                         "the gradient with respect to q (of a fixed weighting of the output) differs"),
    "layer-inplace-x": ("layer", "after_attention", _after_attention_with("inplace-x"),
                        "BertLayer.after_attention in minbert/model.py: the backward pass"),
    "layer-detach": ("layer", "after_attention", _after_attention_with("detach"),
                     "the gradient with respect to the input x (of a fixed weighting of the output"),
    "model-inplace-x": ("model", "after_attention", _after_attention_with("inplace-x"),
                        "BertModel on MiniLM (attention() and BertLayer.after_attention): the backward pass"),
}


def _plant(monkeypatch: pytest.MonkeyPatch, attribute: str, value) -> None:
    import minbert.model
    monkeypatch.setattr(minbert.model if attribute == "attention" else minbert.model.BertLayer, attribute, value)


@pytest.mark.parametrize("bug", [*AUTOGRAD_MISTAKES, "right-attention", "right-layer"])
def test_a_forward_that_breaks_the_backward_pass_fails_its_part(monkeypatch: pytest.MonkeyPatch, bug: str) -> None:
    """An operation in place on a tensor autograd saved (dropout with inplace=True on the probabilities, x += h2) or a
    .detach() leaves the forward pass right; the backward pass the checks now take fails the part, naming the
    function (an in-place one with how to write it), where every training step used to crash in autograd."""
    from assignments.check import run_part
    if bug.startswith("right-"):
        _plant(monkeypatch, *(("attention", _attention_with("")) if bug == "right-attention"
                              else ("after_attention", _after_attention_with(""))))
        assert run_part(bug[6:])["status"] == "pass"
        return
    part, attribute, value, says = AUTOGRAD_MISTAKES[bug]
    _plant(monkeypatch, attribute, value)
    r = run_part(part)
    assert r["status"] == "fail" and says in r["message"], r
    if "inplace" in bug:
        assert "modified by an inplace operation" in r["message"] and "write it out of place" in r["message"], r


@pytest.mark.parametrize("part", ["layer", "model"])
@pytest.mark.parametrize("change, says", [("ln-dim1", "differs"), ("addmm", "mat1 must be a matrix")])
def test_an_after_attention_right_on_n_h_alone_fails_on_b_t_h(monkeypatch: pytest.MonkeyPatch, part: str,
                                                              change: str, says: str) -> None:
    """after_attention gets (N, H) from a padded batch on a CPU and (B, T, H) from a batch without padding and from
    every batch on a GPU: code right on (N, H) alone (a LayerNorm over dim=1, torch.addmm) fails the layer and model
    parts, naming after_attention and the (B, T, H) inputs, no longer only the first training step."""
    from assignments.check import run_part
    _plant(monkeypatch, "after_attention", _after_attention_with(change))
    r = run_part(part)
    assert r["status"] in ("fail", "error") and says in r["message"], r
    assert "after_attention" in r["message"] and "(B, T, H) inputs" in r["message"], r
    assert "gradient" not in r["message"], r         # the forward pass on (B, T, H) is named, not a gradient


@pytest.mark.parametrize("part, says", [
    ("classifier_head", "pool() returned dtype torch.float64, expected torch.float32"),
    ("model", "attention() returned dtype torch.float64, expected torch.float32"),
])
def test_a_float64_leak_is_reported_as_the_students_function(monkeypatch: pytest.MonkeyPatch, part: str,
                                                             says: str) -> None:
    """A float64 from pool() (a .double() mask) or attention() is named where the given code calls it, not as an
    error of the next given line (the head's nn.Linear, after_attention's F.linear) that trips on it."""
    import minbert.model
    import tasks.classifier
    from assignments.check import run_part
    if part == "classifier_head":
        monkeypatch.setattr(tasks.classifier, "pool", lambda hidden, mask, pooled, how: (
            (hidden * mask[..., None].double()).sum(1) / mask[..., None].double().sum(1)))
    else:
        real = _attention()
        monkeypatch.setattr(minbert.model, "attention", lambda q, k, v, *a: real(q.double(), k.double(), v.double(),
                                                                                 *a))
    r = run_part(part)
    assert r["status"] == "fail" and r["message"].startswith(says), r
