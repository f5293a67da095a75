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
    # YOUR CODE HERE
    # The sentence vector (B, H), chosen by `how`:
    #   "mean":   the mean of hidden (B, T, H) over the tokens that are not padding (attention_mask (B, T) is
    #             1 there, 0 at padding): their sum over T divided by their count (at least 1), in hidden's dtype
    #   "cls":    the final hidden state of the [CLS] token, the first position: (B, T, H) -> (B, H)
    #   "pooler": pooler_output as it is, (B, H): BERT's tanh(Wp h_[CLS] + bp)
    raise NotImplementedError
