"""A training step that never waits for a GPU: what fit() (tasks/core/train.py) uses on a device other than the CPU.

On a GPU the host only queues kernels; every time it reads a value back (loss.item(), a mask's .any(), a boolean
index, whose size the host must know) it waits until the device has run everything queued, and the device then
waits for the host to queue more. A step without those waits lets the host run ahead, building and copying the next
batches while the device computes. Its pieces:

- the batch is built on the CPU, pinned and copied without blocking (batching.to_device), and whatever shapes it is
  computed there before the copy (Work.prepare: the multitask command joins a cross-encoder's pairs);
- each batch's loss stays on the device; LossReads reads the losses of `every` optimiser steps back at once and
  then does what the loop did with each (the progress bar, the curves, the divergence check), in the same order;
- attention_kernels() picks torch's attention kernel deliberately on a GPU (no kernel that builds a plan for each
  new shape);
- compiled() wraps the loss in torch.compile (mode "default", or "reduce-overhead": CUDA graphs, replayed for each
  shape seen before) and fit() pads the token sequences to a multiple of PAD_MULTIPLE, so that few shapes occur.

On the CPU the loop reads every step's loss at once (every=1) and runs as it always has.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch

ATTENTION_KERNELS = ("auto", "efficient", "flash", "cudnn", "math")
COMPILE_MODES = ("off", "default", "reduce-overhead")
PAD_MULTIPLE = 32          # with compile on, sequences are padded to a multiple of this: 32, 64, 96, ... tokens
READ_EVERY_GPU = 32        # the default optimiser steps between two reads of the loss on a GPU


def read_every(device: torch.device, asked: int | None) -> int:
    """Optimiser steps between two reads of the training loss from the device: `asked`, else 1 on the CPU (nothing
    to wait for) and READ_EVERY_GPU elsewhere."""
    if asked is not None:
        if asked < 1:
            raise ValueError(f"the loss is read every N >= 1 optimiser steps, not {asked}")
        return asked
    return 1 if device.type == "cpu" else READ_EVERY_GPU


@dataclass
class Taken:
    """One batch's part of an optimiser step, as the loop needs it once the loss is read: the loss (a 0-d tensor on
    the device until read), the batch's task, its rows on this process and in all."""

    loss: torch.Tensor
    task: str | None
    mine: int
    size: int


@dataclass
class LossReads:
    """The optimiser steps whose losses are still on the device, read back every `every` steps in one copy."""

    every: int
    steps: list[tuple[int, int, list[Taken]]] = field(default_factory=list)   # (step, epoch, its batches)

    def add(self, step: int, epoch: int, taken: list[Taken]) -> None:
        self.steps.append((step, epoch, taken))

    def due(self, step: int) -> bool:
        """Whether optimiser step `step` (0-based) is the last of a stretch of `every`."""
        return (step + 1) % self.every == 0

    def read(self) -> list[tuple[int, int, list[tuple[float, Taken]]]]:
        """Every pending step with each batch's loss as a float (one device-to-host copy for all), and none left."""
        losses = [t.loss for _, _, taken in self.steps for t in taken]
        values = iter(torch.stack(losses).float().tolist() if losses else [])   # (n,) -> n floats
        out = [(step, epoch, [(next(values), t) for t in taken]) for step, epoch, taken in self.steps]
        self.steps = []
        return out


def attention_kernels(device: torch.device, kernel: str = "auto"):
    """A context in which torch's scaled_dot_product_attention tries `kernel` first on a GPU ("auto": the memory-
    efficient kernel, which takes any mask and dropout and has no per-shape plan; cuDNN's builds a plan for each new
    shape), then the efficient one, then the plain math; on the CPU torch's own choice."""
    if kernel not in ATTENTION_KERNELS:
        raise ValueError(f"attention kernel must be one of {ATTENTION_KERNELS}, not {kernel!r}")
    if device.type != "cuda":
        return nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    named = {"efficient": SDPBackend.EFFICIENT_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
             "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
    first = named["efficient" if kernel == "auto" else kernel]
    order = [first] + [b for b in (SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH) if b != first]
    try:
        return sdpa_kernel(order, set_priority=True)
    except TypeError:                  # a torch without set_priority: these kernels only, in torch's own order
        return sdpa_kernel(order)


def compiled(compute: Callable[[dict], torch.Tensor], mode: str) -> Callable[[dict], torch.Tensor]:
    """The loss computation under torch.compile (its forward and backward): "default" fuses kernels; "reduce-overhead"
    also captures each shape's step as CUDA graphs and replays them (on a GPU). Shapes that change are compiled
    once more with dynamic sizes, then reused."""
    if mode not in COMPILE_MODES:
        raise ValueError(f"compile must be one of {COMPILE_MODES}, not {mode!r}")
    if mode == "off":
        return compute
    import torch._dynamo
    limit = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
    setattr(torch._dynamo.config, limit, max(getattr(torch._dynamo.config, limit), 64))   # each task, each shape
    return torch.compile(compute, mode=mode)


def optimizers_without_dynamo() -> None:
    """Let torch.optim.Optimizer's dynamo-disabled methods run as they are, without importing torch._dynamo.

    For processes that compile nothing (the checks, and runs without --compile): that import costs 1-2 s at the first
    optimiser built. The course's AdamW then never imports it; torch's AdamW still does at its first step (its step()
    imports it itself). torch's _disable_dynamo wrapper caches the disabled function on the wrapped one; caching the
    function itself skips the import. With another torch the marker differs, nothing is set, and torch imports as usual.
    """
    from torch._compile import _disable_dynamo
    marker = _disable_dynamo(lambda: None).__code__            # the wrapper's code (building it imports nothing)
    for attr in vars(torch.optim.Optimizer).values():
        inner = getattr(attr, "__wrapped__", None)
        if getattr(attr, "__code__", None) is marker and inner is not None:
            setattr(inner, "__dynamo_disable", inner)
