"""AdamW's parameter groups for fine-tuning: decoupled weight decay (Loshchilov & Hutter, 2019) on the weight matrices
only, layer-wise learning-rate decay (Howard & Ruder, 2018, sec. 3.2 "discriminative fine-tuning"; Sun et al.,
2019, sec. 5.3: layer l of L learns at lr * decay^(L - l)), and the step at which each parameter starts to train
under gradual unfreezing (Howard & Ruder, 2018, sec. 3.3: the last layer first, then one more layer at a time).

Depth of a parameter, for a model that holds a BertModel anywhere inside it (at prefix P):
    P.embeddings.*          depth 0          lr * decay^L        (the lowest rate)
    P.layers.{i}.*          depth i + 1      lr * decay^(L-i-1)  (the top layer, i = L - 1, learns at lr)
    P.pooler.*              depth L          lr                  (pretrained, above the top layer)
    anything else           a head           lr * head_lr_scale  (task heads, off-ramps, PALs: new parameters)

Gradual unfreezing over a fraction U of T optimiser steps: the heads train from step 0; depth d (the top layer and the
pooler d = L, ..., the embeddings d = 0) joins at step ceil((L + 1 - d) * U * T / (L + 1)), so the top layer joins
after the heads have trained alone for U * T / (L + 1) steps and the embeddings join last, at U * T.

Which parameters are not decayed is one name rule on minbert's notation (BitFit, sec. 3.1): a name whose last part
starts with "b" is a bias (bq bk bv bm1 bLN1 bm2 bm3 bLN2 bLN bp, and torch's own "bias"), one that starts with "gLN"
is a LayerNorm gain (gLN gLN1 gLN2). This is the exclusion Hugging Face's Trainer makes by module type.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from torch import nn

from .model import BertModel

_LAYER = re.compile(r"layers\.(\d+)\.")


def no_decay(name: str) -> bool:
    """True for a bias or a LayerNorm gain, by the name rule above (the last part of a dotted parameter name)."""
    leaf = name.rsplit(".", 1)[-1]
    return leaf.startswith(("b", "gLN"))


def depth(name: str, model: nn.Module) -> int | None:
    """A parameter's depth in the encoder (0 embeddings .. L top layer and pooler), or None for a head's."""
    for prefix, module in model.named_modules():
        if not isinstance(module, BertModel):
            continue
        start = prefix + "." if prefix else ""
        if not name.startswith(start):
            continue
        rest, top = name[len(start):], module.config.num_hidden_layers
        if rest.startswith("embeddings."):
            return 0
        if rest.startswith("pooler."):
            return top
        layer = _LAYER.match(rest)
        if layer is not None:
            return int(layer.group(1)) + 1
    return None


def top_depth(model: nn.Module) -> int:
    """L: the depth of the top layer (and the pooler) of the deepest BertModel inside the model."""
    return max(m.config.num_hidden_layers for m in model.modules() if isinstance(m, BertModel))


def lr_scale(name: str, model: nn.Module, layer_decay: float, head_lr_scale: float) -> float:
    """The multiplier of the base learning rate for one parameter: decay^(L - depth), or head_lr_scale for a head."""
    d = depth(name, model)
    if d is None:
        return head_lr_scale
    top = top_depth(model)
    return layer_decay ** (top - d)


def param_groups(model: nn.Module, params: Iterable[nn.Parameter], lr: float, weight_decay: float,
                 layer_decay: float = 1.0, head_lr_scale: float = 1.0,
                 decay_biases_and_gains: bool = False) -> list[dict]:
    """The optimiser's groups for the trainable `params` of `model`: one per (learning rate, weight decay), in the
    order the parameters come; a single group of every parameter when all of them share both."""
    if not 0.0 < layer_decay <= 1.0:
        raise ValueError(f"layer_decay must be in (0, 1] (1: the same rate everywhere), not {layer_decay}")
    if head_lr_scale <= 0.0:
        raise ValueError(f"head_lr_scale must be positive, not {head_lr_scale}")
    names = {id(p): n for n, p in model.named_parameters()}
    groups: dict[tuple[float, float], dict] = {}
    for p in params:
        if id(p) not in names:
            raise ValueError(f"a parameter of shape {tuple(p.shape)} to train is not a parameter of the model")
        name = names[id(p)]
        scale = lr_scale(name, model, layer_decay, head_lr_scale)
        wd = 0.0 if weight_decay and not decay_biases_and_gains and no_decay(name) else weight_decay
        group = groups.setdefault((scale, wd), {"params": [], "lr": lr * scale, "weight_decay": wd})
        group["params"].append(p)
    return list(groups.values())


def unfreeze_step(name: str, model: nn.Module, fraction: float, total: int) -> int:
    """The optimiser step (0-based) from which a parameter trains under gradual unfreezing over the first `fraction`
    of `total` steps (Howard & Ruder, 2018, sec. 3.3): 0 for a head, then the encoder from its top depth down."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"the gradual unfreezing fraction must be in [0, 1) (0: off), not {fraction}")
    d = depth(name, model)
    if d is None or fraction == 0.0:
        return 0
    top = top_depth(model)
    return math.ceil((top + 1 - d) * fraction * total / (top + 1))
