"""The sentence vector a task head reads from BERT's final hidden states (Devlin et al., 2019, sec. 3;
Reimers & Gurevych, 2019, sec. 3 for the mean): one function, shared by every model in minbert/."""

from __future__ import annotations

import torch

POOLINGS = ("mean", "cls", "pooler")


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, pooler_output: torch.Tensor | None,
         how: str) -> torch.Tensor:
    """A sentence vector (B, H) from the final hidden states (B, T, H): mean of real tokens, [CLS], or the pooler."""
    if how == "mean":
        keep = attention_mask[..., None].to(hidden.dtype)                # (B, T, 1)
        return (hidden * keep).sum(1) / keep.sum(1).clamp(min=1.0)       # (B, H)
    if how == "cls":
        return hidden[:, 0]                                              # (B, H)
    if how == "pooler" and pooler_output is not None:
        return pooler_output
    raise ValueError(f"pooling must be one of {POOLINGS} (\"pooler\" needs the pooler's output), not {how!r}")
