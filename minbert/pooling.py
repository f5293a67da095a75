"""The sentence vector a task head reads from BERT's final hidden states (Devlin et al., 2019, sec. 3;
Reimers & Gurevych, 2019, sec. 3 for the mean): one function, shared by every model in minbert/; students write it
in part 1 (classifier_head)."""

from __future__ import annotations

import torch

POOLINGS = ("mean", "cls", "pooler")


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, pooler_output: torch.Tensor | None,
         how: str) -> torch.Tensor:
    """A sentence vector (B, H) from the final hidden states (B, T, H): mean of real tokens, [CLS], or the pooler."""
    if how not in POOLINGS or (how == "pooler" and pooler_output is None):
        raise ValueError(f"pooling must be one of {POOLINGS} (\"pooler\" needs the pooler's output), not {how!r}")
    ### BEGIN SOLUTION
    ### STUB: The sentence vector (B, H), chosen by `how`:
    ### STUB:   "mean":   the mean of hidden (B, T, H) over the tokens that are not padding (attention_mask (B, T) is
    ### STUB:             1 there, 0 at padding): their sum over T divided by their count (at least 1), in hidden's dtype
    ### STUB:   "cls":    the final hidden state of the [CLS] token, the first position: (B, T, H) -> (B, H)
    ### STUB:   "pooler": pooler_output as it is, (B, H): BERT's tanh(Wp h_[CLS] + bp)
    if how == "cls":
        return hidden[:, 0]                                              # (B, H)
    if how == "pooler":
        return pooler_output
    keep = attention_mask[..., None].to(hidden.dtype)                    # (B, T, 1)
    return (hidden * keep).sum(1) / keep.sum(1).clamp(min=1.0)           # (B, H)
    ### END SOLUTION
