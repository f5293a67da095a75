"""Pure pieces the library's losses share, written once: class cross-entropy, and one binary logit as two classes."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of class logits (B, C) against class indices (B,): -log softmax(logits_b)[labels_b]."""
    return F.cross_entropy(logits, labels)


def two_class(logit: torch.Tensor) -> torch.Tensor:
    """A binary logit z (B,) as the logits [0, z] (B, 2) of the distribution [1 - sigmoid(z), sigmoid(z)]."""
    return torch.stack([torch.zeros_like(logit), logit], dim=-1)
