"""The classic mistakes of part 1, computed from the equations here (not from the reference code), for the hints.

Each function computes the right answer when its flags are left at their defaults and one classic mistake
when a flag is changed. The reference's fixture builders (make_fixtures.py) store each mistake's output under a
key of its fixture; a check compares a failing result with those keys and names the mistake it matches (the
hint texts are the checks', keyed the same way).

Reference only: with its defaults this module computes graded answers (attention, the embeddings before their
LayerNorm, the layer, AdamW), so it never goes into a student tree (assignments/make.py's ASSIGNMENT_FILES; the
test test_the_student_tree_carries_no_module_that_computes_an_answer). The grader imports it through the builders.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

# ---------------------------------------------------------------- attention (Vaswani et al., 2017, sec. 3.2)


def attention_variant(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, *,
                      softmax_dim: int = -1, mask_sign: float = 1.0, scale: str = "sqrt") -> torch.Tensor:
    """softmax(q k^T / sqrt(hs) + mask) v with the heads merged, (B, T, nh*hs); no dropout.

    softmax_dim=-2 normalises over the queries, mask_sign=-1 subtracts the mask, scale="hs" divides by hs,
    scale="H" by sqrt(H) = sqrt(nh * hs), the hidden size (what math.sqrt(nh * hs) or q.shape[1] * q.shape[-1] gives).
    """
    nh, hs = q.shape[1], q.shape[-1]
    div = {"sqrt": math.sqrt(hs), "hs": float(hs), "H": math.sqrt(nh * hs), "none": 1.0}[scale]
    scores = q @ k.transpose(-2, -1) / div + mask_sign * mask          # (B, nh, T, T)
    out = scores.softmax(dim=softmax_dim) @ v                           # (B, nh, T, hs)
    return torch.cat(out.unbind(1), dim=-1)                             # the heads side by side, (B, T, H)


def attention_mistakes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """What attention() returns (eval mode) under each classic mistake, keyed by its attention fixture key (the
    check's ATTENTION_HINTS names each)."""
    return {
        "out_softmax_queries": attention_variant(q, k, v, mask, softmax_dim=-2),
        "out_softmax_heads": attention_variant(q, k, v, mask, softmax_dim=1),
        "out_mask_subtracted": attention_variant(q, k, v, mask, mask_sign=-1.0),
        "out_divided_by_hs": attention_variant(q, k, v, mask, scale="hs"),
        "out_divided_by_sqrt_H": attention_variant(q, k, v, mask, scale="H"),
    }


# ---------------------------------------------------------------- embeddings (Devlin et al., 2019, sec. 3.2)

def embeddings_without_layernorm(word: torch.Tensor, position: torch.Tensor, token_type: torch.Tensor,
                                 input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
    """E_word[x] + E_pos[t] + E_type[s], (B, T, H): the embeddings with the LayerNorm left out (eval mode)."""
    T = input_ids.shape[1]
    return word[input_ids] + position[:T][None] + token_type[token_type_ids]


# ---------------------------------------------------------------- AdamW (Loshchilov & Hutter, 2019, alg. 2)

@dataclass
class AdamWSpec:
    """One way of computing AdamW; the defaults are right, each other value is a classic mistake.

    style "torch": decay p <- p - lr wd p before the Adam step, p <- p - lr m_hat / (sqrt(v_hat) + eps)
    (torch.optim.AdamW). style "course": the course's update, p <- p - step_size m / (sqrt(v) + eps) with
    step_size = lr sqrt(1 - b2^t) / (1 - b1^t), then p <- p - lr wd p (decay after the update).
    """

    style: str = "torch"
    correct_bias: bool = True
    decay: str = "decoupled"     # "decoupled" | "l2" (wd p added to g) | "other-order" | "no-lr" | "none"
    #                              | "step-size" (decoupled, scaled by the style's step size instead of lr:
    #                                lr sqrt(1 - b2^t) / (1 - b1^t) for course, lr / (1 - b1^t) for torch)
    keep_moments: bool = True    # False: m and v rebound each step, so the state stays zero
    count_steps: bool = True     # False: t stays 1
    shared_count: bool = False   # True: one t for the optimizer, advanced by every step(), not one per parameter
    sqrt_v: bool = True          # False: divide by v + eps
    adam_step: bool = True       # False: only the decay reaches p (the step went to a rebound name)
    swap_betas: bool = False     # beta2 for m and beta1 for v
    swap_corrections: bool = False   # m corrected by 1 - beta2^t and v by 1 - beta1^t
    t_offset: int = 0            # 1: the bias corrections use t + 1
    eps_in_sqrt: bool = False    # sqrt(v + eps) (course) or sqrt(v_hat + eps) (torch) instead of sqrt(...) + eps
    eps_other_style: bool = False    # eps where the other style adds it: sqrt(v_hat) + eps, after the corrections
    #                                  (torch's, in the course's update) or sqrt(v) + eps, before them (the course's)


def adamw_trajectory(init: list[torch.Tensor], grads: list[list[torch.Tensor | None]], groups: list[dict],
                     eps: float, spec: AdamWSpec) -> list[list[torch.Tensor]]:
    """The parameters after each step, [step][param], in float64; groups: {"params": [indices], "lr", "weight_decay",
    "betas"}. A parameter whose gradient is None is skipped, as optimizers do."""
    p = [x.double().clone() for x in init]
    m = [torch.zeros_like(x) for x in p]
    v = [torch.zeros_like(x) for x in p]
    steps = [0] * len(p)
    out = []
    for calls, step_grads in enumerate(grads, 1):
        for group in groups:
            lr, wd = group["lr"], group["weight_decay"]
            b1, b2 = group.get("betas", (0.9, 0.999))
            if spec.swap_betas:
                b1, b2 = b2, b1
            for i in group["params"]:
                if step_grads[i] is None:
                    continue
                _adamw_one(p, m, v, steps, i, step_grads[i].double(), lr, wd, b1, b2, eps, spec, calls)
        out.append([x.clone() for x in p])
    return out


def _adamw_one(p: list, m: list, v: list, steps: list, i: int, g: torch.Tensor, lr: float, wd: float, b1: float,
               b2: float, eps: float, spec: AdamWSpec, calls: int) -> None:
    """One AdamW update of parameter i (in the lists), following spec; calls: the optimizer's step() calls so far."""
    steps[i] += 1
    t = (calls if spec.shared_count else steps[i] if spec.count_steps else 1) + spec.t_offset
    before = spec.style == "torch"
    if spec.decay == "other-order":
        before = not before
    if spec.decay == "l2":
        g = g + wd * p[i]
    c1, c2 = (1 - b1 ** t, 1 - b2 ** t) if spec.correct_bias else (1.0, 1.0)
    if spec.swap_corrections and spec.correct_bias:
        c1, c2 = 1 - b2 ** t, 1 - b1 ** t
    decay_lr = lr
    if spec.decay == "step-size":
        decay_lr = lr * math.sqrt(c2) / c1 if spec.style == "course" else lr / c1
    decoupled = spec.decay in ("decoupled", "other-order", "step-size")
    if before and decoupled:
        p[i] = p[i] - decay_lr * wd * p[i]
    m_new, v_new = b1 * m[i] + (1 - b1) * g, b2 * v[i] + (1 - b2) * g * g
    if spec.keep_moments:
        m[i], v[i] = m_new, v_new
    root = v_new.sqrt() if spec.sqrt_v else v_new
    if spec.eps_in_sqrt and spec.style == "torch":
        update = lr / c1 * m_new / (v_new / c2 + eps).sqrt()
    elif spec.eps_in_sqrt:
        update = lr * math.sqrt(c2) / c1 * m_new / (v_new + eps).sqrt()
    elif (spec.style == "torch") != spec.eps_other_style:
        update = lr / c1 * m_new / (root / (math.sqrt(c2) if spec.sqrt_v else c2) + eps)
    else:
        update = lr * math.sqrt(c2) / c1 * m_new / (root + eps)
    if spec.adam_step:
        p[i] = p[i] - update
    if not before and decoupled:
        p[i] = p[i] - decay_lr * wd * p[i]
    if spec.decay == "no-lr":
        p[i] = p[i] - wd * p[i]


def adamw_mistakes(style: str) -> dict[str, AdamWSpec]:
    """The classic AdamW mistakes for one style, keyed by name (the check's adamw_hint_texts names each)."""
    return {
        "no_bias_correction": AdamWSpec(style, correct_bias=False),
        "l2": AdamWSpec(style, decay="l2"),
        "decay_other_order": AdamWSpec(style, decay="other-order"),
        "decay_no_lr": AdamWSpec(style, decay="no-lr"),
        "no_decay": AdamWSpec(style, decay="none"),
        "moments_rebound": AdamWSpec(style, keep_moments=False),
        "step_stays_1": AdamWSpec(style, count_steps=False),
        "no_sqrt": AdamWSpec(style, sqrt_v=False),
        "betas_swapped": AdamWSpec(style, swap_betas=True),
        "step_lost": AdamWSpec(style, adam_step=False),
        "corrections_swapped": AdamWSpec(style, swap_corrections=True),
        "t_plus_one": AdamWSpec(style, t_offset=1),
        "eps_in_sqrt": AdamWSpec(style, eps_in_sqrt=True),
        "decay_by_step_size": AdamWSpec(style, decay="step-size"),
        "eps_other_style": AdamWSpec(style, eps_other_style=True),
        "step_count_shared": AdamWSpec(style, shared_count=True),
    }


def adamw_fixture_keys(init: list[torch.Tensor], grads: list[list[torch.Tensor | None]], groups: list[dict],
                       eps: float, steps: int) -> dict[str, torch.Tensor]:
    """The AdamW fixture's trajectories: "STYLE.NAME.i" is parameter i after each of the steps, (steps, *shape),
    float32, for each style ("course", "torch"), NAME "right" (AdamWSpec(style)) or an adamw_mistakes name (the
    course's correct_bias=False run is its "no_bias_correction")."""
    out = {}
    for style in ("course", "torch"):
        for name, spec in {"right": AdamWSpec(style), **adamw_mistakes(style)}.items():
            traj = adamw_trajectory(init, grads, groups, eps, spec)
            assert len(traj) == steps
            for i in range(len(init)):
                out[f"{style}.{name}.{i}"] = torch.stack([traj[t][i] for t in range(steps)]).float()
    return out


# ---------------------------------------------------------------- the layer (BitFit eqs. 1-5)

def layer_variant(f: dict[str, torch.Tensor], nh: int, eps: float, *, act: str = "gelu",
                  second_residual: str = "h3", norm: str = "post") -> torch.Tensor:
    """The layer check's BertLayer on f["x"], f["mask"] with f's "param.*" weights, eval mode, (B, T, H), 0 at padding.

    act="tanh" uses GELU's tanh approximation, act="relu" a ReLU; second_residual="x" adds x in the last add-and-norm.
    norm places the LayerNorms: "post" is BERT's, LN(sublayer + residual); "sublayer" normalises the sublayer's
    output before the add, LN1(h2) + x and LN2(h5) + h3; "residual" normalises the residual before the add,
    h2 + LN1(x) and h5 + LN2(h3); "pre" and "pre-LN1" are a pre-LN layer (Xiong et al., 2020; GPT-2) written after
    an attention that has already run on x: h3 = h2 + x, out = h3 + FFN(LN(h3)) with LN2's (or LN1's) weights.
    """
    x, mask = f["x"], f["mask"]
    B, T, H = x.shape

    def w(name: str) -> torch.Tensor:
        return f[f"param.{name}"]

    def heads(a: torch.Tensor) -> torch.Tensor:
        return a.view(B, T, nh, H // nh).transpose(1, 2)                # (B, T, H) -> (B, nh, T, hs)

    def ln(a: torch.Tensor, i: int) -> torch.Tensor:
        return F.layer_norm(a, (H,), w(f"gLN{i}"), w(f"bLN{i}"), eps)

    def add_norm(a: torch.Tensor, r: torch.Tensor, i: int) -> torch.Tensor:    # sublayer output a, residual r
        if norm == "sublayer":
            return ln(a, i) + r
        return a + ln(r, i) if norm == "residual" else ln(a + r, i)

    def ffn(a: torch.Tensor) -> torch.Tensor:                           # (B, T, H) -> (B, T, I) -> (B, T, H)
        a = F.linear(a, w("Wm2"), w("bm2"))
        h4 = {"gelu": F.gelu(a), "tanh": F.gelu(a, approximate="tanh"), "relu": F.relu(a)}[act]
        return F.linear(h4, w("Wm3"), w("bm3"))

    h1 = attention_variant(heads(F.linear(x, w("Wq"), w("bq"))), heads(F.linear(x, w("Wk"), w("bk"))),
                           heads(F.linear(x, w("Wv"), w("bv"))), mask)  # (B, T, H)
    h2 = F.linear(h1, w("Wm1"), w("bm1"))
    if norm in ("pre", "pre-LN1"):                                      # no LayerNorm after either residual add
        h3 = h2 + x
        out = h3 + ffn(ln(h3, 1 if norm == "pre-LN1" else 2))
    else:
        h3 = add_norm(h2, x, 1)
        out = add_norm(ffn(h3), h3 if second_residual == "h3" else x, 2)
    return out * (mask == 0).view(B, T, 1)                              # zeros at padding, as the layer returns


def layer_mistakes(f: dict[str, torch.Tensor], nh: int, eps: float) -> dict[str, torch.Tensor]:
    """What BertLayer returns (eval mode, no adapter) under each classic mistake, keyed by its layer fixture key (the
    check's LAYER_HINTS names each). (The fixture's own out_pre_ln, LN(h) + x, is written from the reference code:
    layer_variant's norm="sublayer".)"""
    return {
        "out_gelu_tanh": layer_variant(f, nh, eps, act="tanh"),
        "out_relu": layer_variant(f, nh, eps, act="relu"),
        "out_second_residual_x": layer_variant(f, nh, eps, second_residual="x"),
        "out_norm_residual": layer_variant(f, nh, eps, norm="residual"),
        "out_gpt2_ln2": layer_variant(f, nh, eps, norm="pre"),
        "out_gpt2_ln1": layer_variant(f, nh, eps, norm="pre-LN1"),
    }
