"""BitFit (Ben-Zaken, Ravfogel & Goldberg, ACL 2022): fine-tune only the bias terms of BERT.

The layer's biases carry the paper's names (sec. 3.1): bq bk bv (query, key, value), bm1 (attention
output), bLN1 (first LayerNorm), bm2 (feed-forward up, H -> 4H), bm3 (feed-forward down), bLN2 (second
LayerNorm). Outside the layers the encoder has two more: the embedding LayerNorm's `embeddings.bLN` and
the pooler's `pooler.bp`. The method is a filter on these names:

- freeze(model, terms)      train only the named bias terms (sec. 3.1); the caller's head stays trainable
- bitfit_budget(model)      how many parameters that trains (the random controls' budget)
- bias_snapshot(model)      a copy of every bias (b0 for the Figure 1 analysis, the reset point of task files)

Around it, each in its own module: the paper's random controls (bitfit_controls), the trainable counts and
the bias-change analysis (bitfit_report), per-task files on one shared backbone (bitfit_tasks).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch
from torch import nn

from .model import BertModel

LAYER_TERMS = ("bq", "bk", "bv", "bm1", "bLN1", "bm2", "bm3", "bLN2")  # per layer, sec. 3.1
OTHER_BIASES = ("embeddings.bLN", "pooler.bp")                        # once per encoder


def parse_terms(terms: str | Sequence[str]) -> tuple[str, ...]:
    """'all' | 'none' | 'bq,bm2' | ['bq', 'bm2'] -> the bias names to train (BitFit, sec. 3.1 and Table 3).

    'all' is every bias of the encoder: the eight per-layer terms of every layer plus `embeddings.bLN` and
    `pooler.bp`, as the paper trains "all the bias terms". A subset names per-layer terms (and may add the
    two others by their full names); 'none' trains no encoder parameter (the `frozen` control). The paper's code adds
    the pooler bias to every subset; here a subset is only what it names (add 'pooler.bp' to match it).
    """
    items = [t.strip() for t in terms.split(",")] if isinstance(terms, str) else [str(t).strip() for t in terms]
    items = [t for t in items if t]
    if items == ["all"]:
        return LAYER_TERMS + OTHER_BIASES
    if items == ["none"]:
        return ()
    known = LAYER_TERMS + OTHER_BIASES
    unknown = [t for t in items if t not in known]
    if unknown or not items:
        raise ValueError(f"unknown bias term(s) {unknown or terms!r}: use 'all', 'none', or a comma-separated "
                         f"subset of {', '.join(known)}")
    return tuple(t for t in known if t in items)  # canonical order, no repeats


def term_of(name: str) -> str | None:
    """The BitFit term a parameter name belongs to ('layers.3.bm2' -> 'bm2'), or None for weights and gains."""
    m = re.fullmatch(r"layers\.\d+\.(\w+)", name)
    if m and m.group(1) in LAYER_TERMS:
        return m.group(1)
    return name if name in OTHER_BIASES else None


def check_encoder(model: nn.Module) -> None:
    """Raise TypeError unless model is the BertModel encoder itself (not a model holding it)."""
    if not isinstance(model, BertModel):
        raise TypeError(f"expected the BertModel encoder, got {type(model).__name__}; pass model.bert (or "
                        "whatever holds the encoder) and mark the task head trainable yourself")


def freeze(model: BertModel, terms: str | Sequence[str] = "all") -> list[str]:
    """BitFit (Ben-Zaken et al., 2022, sec. 3.1): requires_grad only on the named biases; returns their names.

    Every weight, LayerNorm gain and embedding table gets requires_grad=False, so backward computes no
    gradient for them (only the activations' gradients the biases need) and an optimizer never sees them.
    Parameters outside `model` (the task head) are left as they are. 'all' includes `embeddings.bLN`
    (it shifts every token's input to layer 0) and `pooler.bp` (it only gets a gradient if the head reads
    pooler_output; a head on [CLS] or mean-pooled states leaves it at its pretrained value).
    """
    check_encoder(model)
    chosen = set(parse_terms(terms))
    trained = []
    for name, p in model.named_parameters():
        p.requires_grad_(term_of(name) in chosen)
        if p.requires_grad:
            trained.append(name)
    return trained


def bitfit_budget(model: BertModel, terms: str | Sequence[str] = "all") -> int:
    """How many encoder parameters BitFit with these terms trains (the budget of the random controls)."""
    chosen = set(parse_terms(terms))
    return sum(p.numel() for n, p in model.named_parameters() if term_of(n) in chosen)


def bias_snapshot(model: BertModel) -> dict[str, torch.Tensor]:
    """A detached copy of every bias of the encoder (b0 for bias_change, the reset point for load_task)."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if term_of(n)}
