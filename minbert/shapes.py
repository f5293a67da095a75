"""Shape checks where the given code calls a function students write, and of BertModel's inputs: a wrong shape stops
there, naming the function (or the input) and its check, rather than deep in the given code that uses it. Kept out of the files students submit, so that the
given code (tasks/core/errors.py) imports it from a tree of any age."""

from __future__ import annotations

import torch


class ShapeError(ValueError):
    """A function students write returned a tensor of the wrong shape; raised where the given code calls it."""


def expect_shape(out: torch.Tensor, expected: tuple[int, ...], what: str, dims: str, part: str,
                 hint: str = "", dtype: torch.dtype | None = None) -> torch.Tensor:
    """out, once its shape (and, given dtype, its dtype) is expected: a wrong one stops here, naming the function and
    its check, rather than deep in the given code that uses it (a float64 leak trips the next nn.Linear). A comparison
    of shapes and dtypes alone (no value is read: free under torch.compile)."""
    if tuple(out.shape) != tuple(expected):
        raise ShapeError(f"{what} returned shape {tuple(out.shape)}, expected {dims} = {tuple(expected)}{hint}; "
                         f"python -m assignments.check {part}")
    if dtype is not None and out.dtype != dtype:
        raise ShapeError(f"{what} returned dtype {out.dtype}, expected {dtype}, its input's dtype (no .double() or "
                         f"torch.float64 in it); python -m assignments.check {part}")
    return out


def expect_batch(input_ids: torch.Tensor | None, embeddings: torch.Tensor | None, *, ids_name: str = "input_ids",
                 **per_token: torch.Tensor | None) -> None:
    """BertModel's inputs: input_ids (B, T) or embeddings (B, T, H), and each per-token tensor given (B, T) as well. A
    wrong shape stops here in one line naming it, not deep in the layers (and a (B, 1) mask, which would broadcast and
    attend to the padding, is refused); ids_name: what the message calls input_ids (a pair's input_ids_1, say). A
    comparison of shapes alone (no value is read: free under torch.compile)."""
    name, x, dims = (ids_name, input_ids, "(B, T)") if embeddings is None else ("embeddings", embeddings, "(B, T, H)")
    if x is None:
        return                                        # embed() says to give input_ids
    if x.dim() != dims.count(",") + 1:
        one = f" (one sequence: {name}[None])" if x.dim() == dims.count(",") else ""
        raise ValueError(f"{name} has shape {tuple(x.shape)}, expected {dims}: a batch of B sequences of T tokens{one}")
    for key, t in per_token.items():
        if t is not None and t.shape != x.shape[:2]:
            hint = ": 1 at real tokens, 0 at padding" if key.startswith("attention_mask") else ""
            raise ValueError(f"{key} has shape {tuple(t.shape)}, expected (B, T) = {tuple(x.shape[:2])} (from {name})"
                             f"{hint}")
