"""Shape checks where the given code calls a function students write: a wrong shape stops there, naming the function
and its check, rather than deep in the given code that uses it. Kept out of the files students submit, so that the
given code (tasks/core/errors.py) imports it from a tree of any age."""

from __future__ import annotations

import torch


class ShapeError(ValueError):
    """A function students write returned a tensor of the wrong shape; raised where the given code calls it."""


def expect_shape(out: torch.Tensor, expected: tuple[int, ...], what: str, dims: str, part: str,
                 hint: str = "") -> torch.Tensor:
    """out, once its shape is expected: a wrong one stops here, naming the function and its check, rather than
    deep in the given code that uses it. A comparison of shapes alone (no value is read: free under torch.compile)."""
    if tuple(out.shape) != tuple(expected):
        raise ShapeError(f"{what} returned shape {tuple(out.shape)}, expected {dims} = {tuple(expected)}{hint}; "
                         f"python -m assignments.check {part}")
    return out
