"""The CPU's stand-in for torch.cuda.set_sync_debug_mode("error"): a context in which reading a tensor's value back to
the host raises, for the tests of the step that never waits for a GPU (tasks/core/step.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch


@contextmanager
def no_host_reads(allowed: Callable[[], bool] = lambda: False) -> Iterator[list[str]]:
    """Within the block, reading a tensor's value on the host (item, tolist, bool, int, float, any, all, nonzero, a
    boolean-mask index) raises, unless `allowed()`: the CPU's stand-in for torch.cuda.set_sync_debug_mode("error"),
    for tests of the step. Yields the list of reads that were allowed."""
    seen: list[str] = []
    names = ("item", "tolist", "__bool__", "__int__", "__float__", "any", "all", "nonzero")
    saved = {n: getattr(torch.Tensor, n) for n in names}
    saved_getitem = torch.Tensor.__getitem__

    def guard(name: str, original: Callable) -> Callable:
        def read(self, *args, **kwargs):
            if not allowed():
                raise RuntimeError(f"Tensor.{name}() reads a value back to the host inside the step")
            seen.append(name)
            return original(self, *args, **kwargs)
        return read

    def getitem(self, index):
        parts = index if isinstance(index, tuple) else (index,)
        if any(isinstance(p, torch.Tensor) and p.dtype == torch.bool for p in parts) and not allowed():
            raise RuntimeError("a boolean-mask index makes the host wait for the number of selected elements")
        return saved_getitem(self, index)

    try:
        for n in names:
            setattr(torch.Tensor, n, guard(n, saved[n]))
        torch.Tensor.__getitem__ = getitem
        yield seen
    finally:
        for n, f in saved.items():
            setattr(torch.Tensor, n, f)
        torch.Tensor.__getitem__ = saved_getitem
