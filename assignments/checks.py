"""The reference checks, one function per part of the assignment; each raises Fail with a message or returns.

Expected values, and the outputs of the classic mistakes that the hints name, come from small tensor fixtures in
assignments/fixtures/ (written from the reference code, and the mistakes' equations in the reference's
assignments/mistakes.py, by assignments/make_fixtures.py); for AdamW, the course's and torch's AdamW formulas in
float64 and the course's own optimizer_test.npy (neubig/minbert-assignment; see tests/fixtures/PROVENANCE.md). No
check computes an answer here: each hint below is a text keyed by the fixture key that holds its mistake's output. This file holds
part 1's checks and the table of every part (the AdamW check, with its problem, which make_fixtures.py shares, is
in adamw_problem.py); part 2 (the multitask model) and the extensions have their own files: checks_multitask.py,
checks_deebert.py, checks_smart.py, checks_pals.py and checks_simcse.py (a student tree carries those of its
profile's groups: common.GROUPS lists them).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from .adamw_problem import adamw_hint_texts, check_adamw  # noqa: F401 - part of this table, and the tests' import
from .common import (
    GROUPS,
    MODEL_ATOL,
    SEED,
    Fail,
    Part,
    _state,
    _tiny_config,
    add_hint,
    compare,
    gradients,
    load_fixture,
    needs_pool,
)

# ---------------------------------------------------------------- the parts

NO_GRADIENT_HINT = ("the output is right but its gradient is not: some of it is computed off the graph (.detach(), "
                    ".data, torch.no_grad(), a new tensor from numbers)")

FUSED_KERNEL = ("attention() in minbert/model.py calls torch's fused scaled_dot_product_attention; "
                "write the computation out instead")


class _RefuseTheFusedKernel(TorchFunctionMode):
    """While on, any call of torch's fused attention raises Fail(FUSED_KERNEL): F.scaled_dot_product_attention however
    it was imported (the mode sees the call, not the name the function was bound to), and the aten ops
    (aten.scaled_dot_product_attention, its _scaled_dot_product_* kernels) called through torch.ops, which reach the
    mode as calls too (tests/test_kit_hints.py tries each route)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if "scaled_dot_product" in getattr(func, "__name__", ""):
            raise Fail(FUSED_KERNEL)
        return func(*args, **(kwargs or {}))


def _refused(fn: Callable[..., torch.Tensor], *args) -> torch.Tensor:
    """fn(*args) with torch's fused attention refused: the student's attention() alone, the fixture loaded and compared
    outside. A function mode only: a TorchDispatchMode would import torch._dynamo (1.3 s a check, measured on machine
    B), and every route the tests try (F., the function imported by name, torch.ops.aten, the given fused_attention)
    is a call that the function mode sees."""
    with _RefuseTheFusedKernel():
        return fn(*args)


# The attention check's hints (eval mode), in the order they are tried: fixture key -> the hint's text. The
# fixture's out_train (dropout with torch.manual_seed(SEED)) is also what an attention() that drops out whatever
# training says returns, as the check seeds the same way before its eval-mode call.
ATTENTION_HINTS = {
    "out_no_scale": "the scores are not divided by sqrt(hs)",
    "out_no_mask": "the mask is not added to the scores",
    "out_bad_merge": "the heads are merged without moving nh next to hs first",
    "out_softmax_queries": "the softmax runs over the queries (dim=-2) instead of the keys (the last dimension, dim=-1)",
    "out_softmax_heads": "the softmax runs over the heads (dim=1) instead of the keys (the last dimension, dim=-1)",
    "out_mask_subtracted": "the mask is subtracted instead of added (it already holds the huge negative numbers: "
                           "scores + mask)",
    "out_divided_by_hs": "the scores are divided by hs instead of sqrt(hs)",
    "out_divided_by_sqrt_H": "the scores are divided by sqrt(nh * hs), the square root of the hidden size H, instead "
                             "of sqrt(hs), that of one head's size (hs = q.shape[-1]): each head's dot products sum "
                             "over hs numbers only",
    "out_train": "dropout is applied in eval mode: with training=False the probabilities must reach the weighted sum "
                 "untouched (pass the training flag on to the dropout)",
}


def attention_check_hints(f: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Every classic mistake the attention check names (eval mode), from the fixture; keyed by the hint's text."""
    return {text: f[key] for key, text in ATTENTION_HINTS.items()}


def check_attention() -> None:
    from minbert.model import attention
    f = load_fixture("attention")
    q, k, v, mask, p = f["q"], f["k"], f["v"], f["mask"], float(f["dropout_p"])
    what = "attention() in minbert/model.py"
    torch.manual_seed(SEED)            # a dropout that ignores training=False draws the out_train fixture's mask
    compare(f"{what} (training=False, so no dropout)", _refused(attention, q, k, v, mask, p, False), f["out"],
            hints=attention_check_hints(f))
    # training=True on q, k, v that require grad, then the backward pass that training takes: an operation in place
    # on a tensor autograd saved (the probabilities' dropout with inplace=True) fails there, in training mode alone
    qkv = [t.clone().requires_grad_() for t in (q, k, v)]
    torch.manual_seed(SEED)
    train = f"{what} with training=True, dropout_p={p:g} (after torch.manual_seed({SEED}))"
    out = _refused(attention, *qkv, mask, p, True)
    compare(train, out, f["out_train"],
            hint="Apply F.dropout(probs, dropout_p, training) to the probabilities, once, before the weighted sum")
    for name, grad in zip("qkv", gradients(train, out, qkv)):
        compare(f"{train}: the gradient with respect to {name} (of a fixed weighting of the output)", grad,
                f[f"grad_{name}"], hint=NO_GRADIENT_HINT)


def check_embeddings() -> None:
    from minbert.model import BertEmbeddings
    f = load_fixture("embeddings")
    emb = BertEmbeddings(_tiny_config())
    emb.load_state_dict(_state(f, "param."))
    what = "BertEmbeddings.forward in minbert/model.py"
    with torch.no_grad():
        emb.eval()
        compare(f"{what} (eval mode)", emb(f["input_ids"], f["token_type_ids"]), f["out"],
                hints={"the token-type embeddings are left out": f["out_no_type"],
                       "the position embeddings are left out": f["out_no_position"],
                       "the LayerNorm is left out (normalise the sum: layer_norm(e, self.gLN, self.bLN, self.eps))":
                           f["out_no_layernorm"]})
        emb.train()
        torch.manual_seed(SEED)
        compare(f"{what} in training mode (after torch.manual_seed({SEED}))",
                emb(f["input_ids"], f["token_type_ids"]), f["out_train"],
                hint="Apply dropout (rate self.p, only in training mode) once, after the LayerNorm")


class _FixedAdapter(nn.Module):
    """A stand-in adapter: adapter(h1, x, mask) = (h1, x A^T): the merged heads as they are, ts = x A^T (B, T, H)."""

    def __init__(self, A: torch.Tensor):
        super().__init__()
        self.A = A

    def forward(self, h1: torch.Tensor, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return h1, x @ self.A.T


POST_LN = "BERT is post-LN: normalise each sum, h3 = LN1(h2 + x) and out = LN2(h5 + h3 + ts)"

# The layer check's hints (eval mode, no adapter), in the order they are tried: fixture key -> the hint's text.
LAYER_HINTS = {
    "out_pre_ln": "LayerNorm is applied before the residual add, to the sublayer's output: LN1(h2) + x, LN2(h5) + h3; "
                  + POST_LN,
    "out_no_residual": "the residual connections (+ x, + h3) are left out",
    "out_gelu_tanh": "GELU's tanh approximation is used; BERT's GELU is the exact one, gelu() at the top of model.py",
    "out_relu": "a ReLU is used instead of GELU (gelu())",
    "out_second_residual_x": "the last add-and-norm adds x instead of h3: out = LN2(h5 + h3 + ts)",
    "out_norm_residual": "LayerNorm is applied before the residual add, to the residual: h2 + LN1(x), h5 + LN2(h3); "
                         + POST_LN,
    "out_gpt2_ln2": "the layer is written pre-LN, as GPT-2 is: h3 = h2 + x, out = h3 + FFN(LN2(h3)); " + POST_LN,
    "out_gpt2_ln1": "the layer is written pre-LN, as GPT-2 is: h3 = h2 + x, out = h3 + FFN(LN1(h3)); " + POST_LN,
}


def layer_check_hints(f: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Every classic mistake the layer check names (eval mode, no adapter), from the fixture; keyed by the hint's
    text."""
    return {text: f[key] for key, text in LAYER_HINTS.items()}


def check_layer() -> None:
    from minbert.model import BertLayer

    f = load_fixture("layer")
    # Torch's fused attention kernel stands in for attention() here, so that this part depends only on
    # the code after h1; attention_probs_dropout_prob=0 keeps the training-mode run's randomness in ours.
    config = _tiny_config(attn_implementation="sdpa", attention_probs_dropout_prob=0.0)
    layer = BertLayer(config)
    layer.load_state_dict(_state(f, "param."))
    x, mask = f["x"], f["mask"]
    what = "BertLayer.after_attention in minbert/model.py"
    with torch.no_grad():
        layer.eval()
        compare(f"{what} (eval mode)", layer(x, mask), f["out"], hints=layer_check_hints(f))
        layer.train()
        torch.manual_seed(SEED)
        compare(f"{what} in training mode (after torch.manual_seed({SEED}))", layer(x, mask), f["out_train"],
                hint="Dropout goes on Wm1 h1 + bm1 and on Wm3 h4 + bm3, in that order, each with "
                     "F.dropout(..., self.p, self.training)")
        layer.eval()            # the same expected rows with after_attention given (B, T, H), not the real tokens
        # copies of x: an after_attention that adds into x in place (x += h2) would change the fixture's, but is
        # right here; the gradient leg below names it
        for how, run in (("sentence 0 alone, no padding", lambda: layer(x[:1].clone(), mask[:1])[0]),
                         ("the padded batch, run as on a GPU, padding included",
                          lambda: _on_every_position(layer, x.clone(), mask))):
            compare(f"{what} on (B, T, H) inputs ({how}; {BTH})", _on_b_t_h(run), f["out"][0 if "alone" in how else
                                                                                      slice(None)], hint=BTH_HINT)
    for key, grad in layer_gradients(layer, x, mask, what).items():
        compare(f"{what}: the gradient with respect to {'the input x' if key == 'grad_x' else key[5:]} (of a fixed "
                "weighting of the output, on sentence 0 alone, eval mode)", grad, f[key], hint=NO_GRADIENT_HINT)
    with torch.no_grad():
        layer.adapter = _FixedAdapter(f["parallel_A"])
        compare(f"{what} with an adapter set (self.adapter is not None, so ts is not 0)",
                layer(x, mask), f["out_parallel"], hints={"ts is left out of the last add-and-norm": f["out"]},
                hint="With an adapter, out = LN2(h5 + h3 + ts): ts (given) joins the last residual sum")


BTH = "the shape after_attention gets from a batch without padding, and from every batch on a GPU"
BTH_HINT = ("It is right on the (N, H) rows of a padded batch: every step must act on each token alone, along the "
            "last dimension (dim=-1), whatever the dimensions before it")


def _on_b_t_h(run: Callable[[], torch.Tensor]) -> torch.Tensor:
    """run(), an error raised in it said to be on the (B, T, H) inputs of after_attention."""
    try:
        return run()
    except Exception as e:  # noqa: BLE001 - raised again, with where it was
        raise add_hint(e, f"That was on (B, T, H) inputs to BertLayer.after_attention ({BTH}), where it is right on "
                          "the (N, H) rows of a padded batch: every step must act along the last dimension alone "
                          "(F.linear, layer_norm), whatever the dimensions before it") from None


def _on_every_position(layer: nn.Module, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """layer(x, mask) with after_attention on every position, (B, T, H), padding times 0, as on a GPU, where
    minbert.model.skips_padding says False."""
    import minbert.model
    saved, minbert.model.skips_padding = minbert.model.skips_padding, lambda mask: False
    try:
        return layer(x, mask)
    finally:
        minbert.model.skips_padding = saved


def layer_gradients(layer: nn.Module, x: torch.Tensor, mask: torch.Tensor, what: str) -> dict[str, torch.Tensor]:
    """The layer's gradients, by fixture key, on sentence 0 alone (no padding, so x itself reaches after_attention, as
    a layer's input does in training: an operation in place on it, x += h2, breaks the backward pass): with respect to
    x (grad_x) and each parameter (grad.NAME); what: the function named when the backward pass fails."""
    x = x[:1].clone().requires_grad_()
    params = dict(layer.named_parameters())
    out = layer(x * 1.0, mask[:1])              # x * 1.0: not a leaf, as the output of the layer before is not
    grads = gradients(what, out, [x, *params.values()])
    return dict(zip(["grad_x", *(f"grad.{name}" for name in params)], grads))


def check_model() -> None:
    import minbert
    f = load_fixture("model")
    model = minbert.load_pretrained("minilm", attn_implementation="eager")  # eager: your attention() runs
    with torch.no_grad():
        out = model(f["input_ids"], f["attention_mask"], f["token_type_ids"], output_hidden_states=True)
    L = len(out.hidden_states) - 1
    compare("BertModel on MiniLM: the embeddings h0 (BertEmbeddings.forward)", out.hidden_states[0],
            f["hidden_0"], atol=MODEL_ATOL)
    for layer in range(1, L + 1):
        compare(f"BertModel on MiniLM: the output of layer {layer} (attention() and BertLayer.after_attention)",
                out.hidden_states[layer], f[f"hidden_{layer}"], atol=MODEL_ATOL)
    compare("BertModel on MiniLM: the pooler output", out.pooler_output, f["pooler"], atol=MODEL_ATOL)
    # sentence 0 alone, cut to its n real tokens: no padding, so each layer's after_attention gets (B, T, H) and its
    # input x itself; the same rows as in the padded batch, then the backward pass training takes (the last layer's
    # output alone: an x += h2 in place, which the backward pass names, changes the hidden states before it)
    what = "BertModel on MiniLM (attention() and BertLayer.after_attention)"
    out, n = _on_b_t_h(lambda: sentence_0_alone(model, f)), int(f["attention_mask"][0].sum())
    compare(f"BertModel on MiniLM, sentence 0 alone (no padding: each layer's BertLayer.after_attention on (B, T, H) "
            f"inputs, {BTH}): the output of the last layer, {L}", out.hidden_states[L][0], f[f"hidden_{L}"][0, :n],
            atol=MODEL_ATOL, hint=BTH_HINT)
    compare(f"{what}: the gradient with respect to the embeddings h0 (of a fixed weighting of the last layer's "
            "output, on sentence 0 alone, eval mode)", gradients(what, out.last_hidden_state, [out.hidden_states[0]])[0],
            f["grad_h0"], atol=MODEL_ATOL, hint=NO_GRADIENT_HINT)


def sentence_0_alone(model: nn.Module, f: dict[str, torch.Tensor]) -> object:
    """The model's output (with every hidden state, and the graph for the backward pass) on the model fixture's
    sentence 0 alone, cut to its n real tokens."""
    n = int(f["attention_mask"][0].sum())
    ids, mask, types = (f[k][:1, :n] for k in ("input_ids", "attention_mask", "token_type_ids"))
    return model(ids, mask, types, output_hidden_states=True)


class _FixedEncoder(nn.Module):
    """Stands in for BERT with fixed outputs, so that the classifier's head is checked on its own."""

    def __init__(self, config: object, hidden: torch.Tensor, pooled: torch.Tensor):
        super().__init__()
        self.config, self.hidden, self.pooled = config, hidden, pooled

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> object:
        from minbert.model import BertOutput
        return BertOutput(self.hidden.clone(), self.pooled.clone())


def check_classifier_head() -> None:
    from tasks.classifier import SentimentClassifier
    f = load_fixture("classifier_head")
    what = "SentimentClassifier.forward in tasks/classifier.py (its h from pool() in minbert/pooling.py)"
    for pooling in ("mean", "cls", "pooler"):
        model = SentimentClassifier(_FixedEncoder(_tiny_config(), f["hidden"], f["pooled"]), 5, pooling=pooling)
        model.load_state_dict(_state(f, "param."))
        with torch.no_grad():
            model.eval()
            compare(f'{what} with pooling="{pooling}" (eval mode)',
                    model(f["input_ids"], f["attention_mask"]), f[f"out_{pooling}"],
                    hints={"padding tokens are counted in the mean": f["out_mean_with_padding"],
                           "the [CLS] token (position 0) is used": f["out_cls"],
                           "the pooler output is used": f["out_pooler"]} if pooling == "mean" else None)
            model.train()
            torch.manual_seed(SEED)
            compare(f'{what} with pooling="{pooling}" in training mode (after torch.manual_seed({SEED}))',
                    model(f["input_ids"], f["attention_mask"]), f[f"out_{pooling}_train"],
                    hint="Apply self.dropout to h once, then self.head; pool() itself takes no dropout")


CORE_PARTS = [
    Part("attention", 25, "attention() in minbert/model.py", check_attention, ("minbert/model.py",),
         fixtures=("attention",)),
    Part("embeddings", 10, "BertEmbeddings.forward in minbert/model.py", check_embeddings, ("minbert/model.py",),
         fixtures=("embeddings",)),
    Part("layer", 25, "BertLayer.after_attention in minbert/model.py", check_layer, ("minbert/model.py",),
         fixtures=("layer",)),
    Part("model", 10, "no new code: your attention(), embeddings and layer together, on MiniLM", check_model,
         ("minbert/model.py",), fixtures=("model",)),
    Part("adamw", 20, "AdamW.step in minbert/optim.py", check_adamw, ("minbert/optim.py",), fixtures=("adamw",)),
    Part("classifier_head", 10, "pool() in minbert/pooling.py and SentimentClassifier.forward in tasks/classifier.py",
         check_classifier_head, ("minbert/pooling.py", "tasks/classifier.py"), fixtures=("classifier_head",)),
]


def group_parts(group: str) -> list[Part]:
    """The parts of a group other than core, from its file checks_GROUP.py; they run through part 1's pool(), whose
    absence they name as such (common.needs_pool)."""
    import dataclasses
    import importlib
    parts = getattr(importlib.import_module(f".checks_{group}", __package__), f"{group.upper()}_PARTS")
    return [dataclasses.replace(p, check=needs_pool(p.check)) for p in parts]


# Every part of the groups this tree carries (GROUPS), in the order they are run and printed; each group is scored
# on its own.
PARTS: dict[str, Part] = {p.name: p for p in [*CORE_PARTS, *(p for g in GROUPS if g != "core" for p in group_parts(g))]}


def parts_of(groups: list[str] | tuple[str, ...]) -> list[str]:
    """The names of the parts of these groups, in PARTS order."""
    return [name for name, p in PARTS.items() if p.group in groups]


def part_sets(names: list[str]) -> list[list[str]]:
    """The sets of parts the grader runs one after the other, each in a tree of its own: part 1's, then the other
    groups' (on the reference's part 1 helpers); empty sets left out."""
    sets = [[n for n in names if PARTS[n].group == "core"], [n for n in names if PARTS[n].group != "core"]]
    return [s for s in sets if s]
