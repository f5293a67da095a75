"""DeeBERT (Xin, Tang, Lee, Yu & Lin, ACL 2020): an off-ramp after every layer, two-stage fine-tuning, and
early exit when an off-ramp's prediction is confident; PABEE's patience rule (Zhou et al., NeurIPS 2020) too.

Off-ramp l reads layer l's hidden states: a copy of the pretrained pooler (tanh(Wp v + bp), v the [CLS]
state or the mean over real tokens), dropout, a linear classifier. The last off-ramp is the task's
ordinary classifier. Training (sec. 3.1): stage 1 fine-tunes the encoder and the last off-ramp as usual;
stage 2 freezes all of that and trains off-ramps 1..n-1 on the sum of their losses.

Inference (sec. 3.2, Algorithm 1): after layer l, off-ramp l predicts; if the entropy of its distribution is
below S the sample leaves with that prediction, else it goes on to layer l + 1; the last layer always returns.
early_exit() runs a whole batch this way: the samples that leave are written to their own rows of the
output and dropped from the running batch (with the padding columns no remaining sample needs), so every
sample gets what it would get alone; at batch size 1 the loop is Algorithm 1.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from .losses import cross_entropy
from .model import BertModel
from .pooling import POOLINGS, pool
from .shapes import expect_batch

RAMP_POOLINGS = tuple(p for p in POOLINGS if p != "pooler")  # a layer's states have no pooler output of their own


@dataclass
class DeeBertConfig:
    """The off-ramps' shape (DeeBERT, sec. 3.1): classes (1 for a regression), pooled vector, pooler, dropout."""

    num_labels: int
    pooling: str = "cls"          # "cls": the [CLS] state, as the paper; "mean": the mean over real tokens
    ramp_pooler: bool = True      # a copy of the pretrained pooler (dense + tanh) before the classifier
    dropout: float | None = None  # before the classifier; None: the encoder's hidden dropout

    def __post_init__(self) -> None:
        if self.pooling not in RAMP_POOLINGS:
            raise ValueError(f"pooling must be one of {RAMP_POOLINGS}, not {self.pooling!r}")
        if self.num_labels < 1:
            raise ValueError(f"num_labels must be at least 1, not {self.num_labels}")


class OffRamp(nn.Module):
    """One off-ramp: pooled vector -> copy of the pretrained pooler -> dropout -> linear (DeeBERT, sec. 3.1)."""

    def __init__(self, bert: BertModel, config: DeeBertConfig):
        super().__init__()
        H = bert.config.hidden_size
        self.pooling = config.pooling
        self.pooler = copy.deepcopy(bert.pooler) if config.ramp_pooler else None   # Wp (H, H), bp (H,)
        p = bert.config.hidden_dropout_prob if config.dropout is None else config.dropout
        self.dropout = nn.Dropout(p)
        self.classifier = nn.Linear(H, config.num_labels)                           # (C, H), (C,)

    def forward(self, h: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """A layer's hidden states (B, T, H) and the 1/0 mask (B, T) -> logits (B, C)."""
        v = pool(h, attention_mask, None, self.pooling)                    # (B, H): [CLS] or the mean
        if self.pooler is not None:
            v = torch.tanh(F.linear(v, self.pooler.Wp, self.pooler.bp))    # (B, H)
        v = F.dropout(v, self.dropout.p, self.training)                    # functional calls: this runs after
        return F.linear(v, self.classifier.weight, self.classifier.bias)   # every layer at batch 1; (B, C)


class DeeBert(nn.Module):
    """A BERT encoder with an off-ramp after every layer; forward() is the ordinary model (the last off-ramp)."""

    def __init__(self, bert: BertModel, config: DeeBertConfig):
        super().__init__()
        self.bert, self.config = bert, config
        self.ramps = nn.ModuleList(OffRamp(bert, config) for _ in bert.layers)

    @property
    def num_layers(self) -> int:
        """L, the encoder's layers (one off-ramp after each)."""
        return len(self.bert.layers)

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      token_type_ids: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Every layer's output, L tensors of (B, T, H)."""
        expect_batch(input_ids, None, attention_mask=attention_mask, token_type_ids=token_type_ids)  # as bert(...)
        h = self.bert.embed(input_ids, token_type_ids)                     # (B, T, H)
        bias = self.bert.attention_bias(attention_mask, h)                 # (B, 1, 1, T)
        out = []
        for block in self.bert.layers:
            h = block(h, bias)
            out.append(h)
        return out

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """All layers, then the last off-ramp: the plain fine-tuned model, logits (B, C)."""
        return self.ramps[-1](self.hidden_states(input_ids, attention_mask, token_type_ids)[-1], attention_mask)

    def all_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Every off-ramp's logits, (L, B, C): forced exit at each layer (the paper's Figure 3)."""
        hidden = self.hidden_states(input_ids, attention_mask, token_type_ids)
        return torch.stack([ramp(h, attention_mask) for ramp, h in zip(self.ramps, hidden)])

    def stage2_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      token_type_ids: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Off-ramps 1..n-1 on hidden states computed without autograd, so no frozen parameter gets a gradient."""
        with torch.no_grad():
            hidden = self.hidden_states(input_ids, attention_mask, token_type_ids)[:-1]
        return [ramp(h, attention_mask) for ramp, h in zip(self.ramps[:-1], hidden)]


def _trainable(model: nn.Module) -> list[nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def stage1_parameters(model: DeeBert) -> list[nn.Parameter]:
    """Stage 1 (sec. 3.1): embeddings, every layer and the last off-ramp train; the rest is frozen."""
    model.requires_grad_(False)
    model.bert.requires_grad_(True)
    model.bert.pooler.requires_grad_(False)   # unused: each off-ramp has its own copy
    model.ramps[-1].requires_grad_(True)
    return _trainable(model)


def stage2_parameters(model: DeeBert) -> list[nn.Parameter]:
    """Stage 2 (sec. 3.1): everything stage 1 trained is frozen; off-ramps 1..n-1 train."""
    model.requires_grad_(False)
    for ramp in model.ramps[:-1]:
        ramp.requires_grad_(True)
    return _trainable(model)


def ramp_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """One off-ramp's loss: cross-entropy of (B, C) logits, or squared error when C = 1 (a regression)."""
    if logits.shape[-1] == 1:
        return F.mse_loss(logits.squeeze(-1).float(), labels.float())
    return cross_entropy(logits, labels)


def offramp_loss(logits: Sequence[torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
    """Stage 2's objective, the sum of the off-ramps' losses, L = sum_{i<n} L_i (DeeBERT, sec. 3.1)."""
    return torch.stack([ramp_loss(z, labels) for z in logits]).sum()


def entropy(logits: torch.Tensor, normalize: bool = False) -> torch.Tensor:
    """H = -sum_c p_c log p_c of softmax(logits) (DeeBERT, sec. 3.2), from log_softmax: finite for any finite logits.

    logits (..., C) -> (...); normalize divides by ln C, so that H lies in [0, 1].
    """
    # YOUR CODE HERE
    # H = -sum_c p_c log p_c over the last dimension, p = softmax(logits): (..., C) -> (...), in float32.
    #   log p is F.log_softmax over the last dimension of the logits cast to float32, and p = exp(log p).
    #   (Taking softmax first and then its log fails at large logits: p underflows to 0, log 0 = -inf, and
    #   0 * -inf = nan.) Where a logit is -inf, log p is -inf too: clamp log p to the dtype's finite
    #   minimum so that 0 log 0 counts as 0.
    #   With normalize (and C > 1), return H / ln C, which lies in [0, 1]; else H.
    raise NotImplementedError


class ExitRule(Protocol):
    """When a sample leaves: start() gives per-sample state (B rows), step() the exit mask (B,) and the new state."""

    def start(self, batch_size: int, device: torch.device) -> dict[str, torch.Tensor]:
        """The rule's state before layer 1, for a batch of batch_size examples."""

    def step(self, logits: torch.Tensor, state: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        """One off-ramp's logits (B, C) and the state -> which examples leave here (B,) bool, the new state."""


@dataclass(frozen=True)
class EntropyExit:
    """DeeBERT's rule (sec. 3.2): leave at the first off-ramp whose entropy is below the threshold S."""

    threshold: float
    normalize: bool = False

    def start(self, batch_size: int, device: torch.device) -> dict[str, torch.Tensor]:
        """No state: each off-ramp decides alone."""
        return {}

    def step(self, logits: torch.Tensor, state: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        """Leave where the entropy of the logits (B, C) is below the threshold: (B,) bool."""
        if logits.shape[-1] < 2:
            raise ValueError("entropy needs a class distribution; a regression exits by patience (PatienceExit)")
        return entropy(logits, self.normalize) < self.threshold, state


@dataclass(frozen=True)
class PatienceExit:
    """PABEE (Zhou et al., 2020, sec. 3.2): leave once the prediction has not changed for P consecutive layers.

    Unchanged means the same argmax for classes; for a regression (C = 1), a change smaller than `change`.
    """

    patience: int
    change: float = 0.0

    def __post_init__(self) -> None:
        if self.patience < 1:
            raise ValueError(f"patience must be at least 1, not {self.patience}")

    def start(self, batch_size: int, device: torch.device) -> dict[str, torch.Tensor]:
        """The previous off-ramp's prediction (NaN before layer 1) and the run of agreeing ones, (B,) each."""
        return {"previous": torch.full((batch_size,), math.nan, device=device),
                "count": torch.zeros(batch_size, dtype=torch.long, device=device)}

    def step(self, logits: torch.Tensor, state: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        """Leave where the prediction of the logits (B, C) has held for patience off-ramps: (B,) bool."""
        if logits.shape[-1] == 1:
            value = logits[:, 0].float()                                   # (B,)
            same = (value - state["previous"]).abs() < self.change         # NaN at layer 1: never the same
        else:
            value = logits.argmax(-1).float()                              # (B,)
            same = value == state["previous"]
        count = torch.where(same, state["count"] + 1, torch.zeros_like(state["count"]))
        return count >= self.patience, {"previous": value, "count": count}


@dataclass
class ExitOutput:
    """Each sample's logits at its exit layer (B, C), its exit layer (B,), 1-based, and the work done."""

    logits: torch.Tensor
    layers: torch.Tensor
    token_layers: int = 0     # sum over the layers run of (rows x columns) in the running batch, padding included


@torch.no_grad()
def early_exit(model: DeeBert, input_ids: torch.Tensor, attention_mask: torch.Tensor,
               token_type_ids: torch.Tensor | None, rule: ExitRule, trim: bool = True) -> ExitOutput:
    """Algorithm 1 of DeeBERT (sec. 3.2) for a whole batch: each sample leaves at its own layer.

    After layer l every running sample's off-ramp l and exit rule are computed; the samples that leave are
    written to their rows and removed from the batch, the rest go on. trim also drops the columns that only
    the samples gone had needed.
    """
    expect_batch(input_ids, None, attention_mask=attention_mask, token_type_ids=token_type_ids)  # as bert(...)
    B, L = input_ids.shape[0], model.num_layers
    h = model.bert.embed(input_ids, token_type_ids)                        # (B, T, H)
    mask = attention_mask
    bias = model.bert.attention_bias(mask, h)                              # (B, 1, 1, T)
    # YOUR CODE HERE
    # Algorithm 1 for the batch; h (B, T, H), mask (B, T), bias (B, 1, 1, T) hold the running samples.
    # Keep, for the running samples, their output rows (0..B-1 at first, torch.arange on h's device), their
    # exit layers (a long (B,) tensor, L for all), the rule's state (rule.start, given the batch size B and
    # h's device) and a work count, 0. For l = 1..L, with the l-th of model.bert.layers and of model.ramps:
    #   run the layer on the running h and the bias; h is now (b, T', H), b samples left, T' columns; add
    #   its rows x columns, b * T', to the work count. The off-ramp, called on h and the mask, gives the
    #   logits (b, C); at l = 1 make the output (B, C), zeros of the logits' dtype and device.
    #   At l = L every sample still running returns: write the logits to their output rows, and stop.
    #   Before that the exit rule decides: rule.step takes the logits and the state and gives back a (b,)
    #   bool, the samples that leave, and the new state. Those write their logits to their output rows and
    #   record l (1-based) as their exit layer; keep only the others in the rows, h, mask, bias and each
    #   tensor of the state (stop if none is left). With trim, then drop the columns that no running
    #   sample needs any more (the mask is 0 in every running row there): from h and the mask (dim 1)
    #   and the bias (its last dim).
    # Return an ExitOutput of the output (B, C), the exit layers (B,) and the work count.
    raise NotImplementedError


def exit_from_logits(all_logits: torch.Tensor, rule: ExitRule) -> tuple[torch.Tensor, torch.Tensor]:
    """The exit rule applied to precomputed per-layer logits (L, B, C): (logits (B, C), exit layers (B,))."""
    L, B, _ = all_logits.shape
    state, layers = rule.start(B, all_logits.device), torch.full((B,), L, dtype=torch.long, device=all_logits.device)
    gone = torch.zeros(B, dtype=torch.bool, device=all_logits.device)
    for l in range(1, L):
        done, state = rule.step(all_logits[l - 1], state)
        layers[done & ~gone] = l
        gone |= done
    return all_logits[layers - 1, torch.arange(B)], layers
