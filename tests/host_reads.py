"""The CPU's stand-in for torch.cuda.set_sync_debug_mode("error"): a context in which reading a tensor's value back to
the host raises, for the tests of the step that never waits for a GPU (tasks/core/step.py) and of minbert.packed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch.overrides import TorchFunctionMode

READS = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "any", "all", "nonzero", "numpy")


class _NoReads(TorchFunctionMode):
    """Sees every torch function and tensor method called within (torch's own dispatch: nothing is patched)."""

    def __init__(self, allowed: Callable[[], bool], seen: list[str]):
        super().__init__()
        self.allowed, self.seen = allowed, seen

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in READS or func in (torch.any, torch.all, torch.nonzero):
            if not self.allowed():
                raise RuntimeError(f"Tensor.{name}() reads a value back to the host inside the step")
            self.seen.append(name)
        if name == "__getitem__" and len(args) > 1:
            parts = args[1] if isinstance(args[1], tuple) else (args[1],)
            if any(isinstance(p, torch.Tensor) and p.dtype == torch.bool for p in parts) and not self.allowed():
                raise RuntimeError("a boolean-mask index makes the host wait for the number of selected elements")
        return func(*args, **(kwargs or {}))


@contextmanager
def no_host_reads(allowed: Callable[[], bool] = lambda: False) -> Iterator[list[str]]:
    """Within the block, reading a tensor's value on the host (item, tolist, bool, int, float, any, all, nonzero, a
    boolean-mask index) raises, unless `allowed()`. Yields the list of reads that were allowed."""
    seen: list[str] = []
    with _NoReads(allowed, seen):
        yield seen
