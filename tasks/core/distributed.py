"""Data-parallel training through torchrun and DistributedDataParallel: which process am I, and my share of a batch.

torchrun starts one process per device (on one machine or several) and tells each its place in the
environment: RANK (0..WORLD_SIZE-1 over all machines) and LOCAL_RANK (which device on this machine).
tasks.core.train.fit() joins the process group when WORLD_SIZE > 1 (gloo on CPU, nccl on CUDA), wraps the
loss in DistributedDataParallel, and gives each process its rows of every global batch (`shard`), so that
--batch-size stays the global batch and a run computes the same updates on any number of processes.
A plain `python -m ...` has no RANK or WORLD_SIZE: one process, nothing here is used.
"""

from __future__ import annotations

import atexit
import os
import warnings
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn

from .errors import ConfigurationError


def world_size() -> int:
    """How many processes train together (1 without torchrun)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank() -> int:
    """This process's place among them, 0..world_size()-1 over every machine (0 without torchrun)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", "0"))


def local_rank() -> int:
    """This process's device index on its own machine (LOCAL_RANK from torchrun; 0 without it)."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def is_main_process() -> bool:
    """True in rank 0, the one process that logs, shows progress and writes checkpoints and prediction files."""
    return rank() == 0


def init_distributed(device: torch.device) -> bool:
    """Join the process group that torchrun describes (once per process); True when there is more than one process.

    gloo for CPU tensors, nccl for CUDA ones; the group lives until the process exits.
    """
    if world_size() <= 1:
        return False
    if dist.is_initialized():
        return True
    if device.type not in ("cpu", "cuda"):
        raise RuntimeError(f"training on several processes runs on cpu (gloo) or cuda (nccl), not {device.type}; "
                           "use --device cpu or --device cuda")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    atexit.register(_destroy)
    return True


def _destroy() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def batch_rows(batch: dict) -> int:
    """The number of examples in a collated batch: the first dimension of its first tensor."""
    for value in batch.values():
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            return value.shape[0]
    raise ValueError(f"a batch needs at least one tensor with a batch dimension; it has keys {sorted(batch)}")


def shard(batch: dict, rank: int, world: int) -> tuple[dict, int]:
    """This rank's contiguous rows of a global batch, and how many real rows they are.

    Every tensor and list whose first dimension is the batch's size is cut (input_ids_1 and input_ids_2
    of a pair alike); other values (batch["task"]) are kept whole. Rank r takes rows [B r / W, B (r+1) / W).
    When B < W some ranks have no row: they get the batch's last row to run on and count 0 rows, so that
    every rank still runs forward and backward (DDP needs all of them) and its loss is weighted 0.
    """
    B = batch_rows(batch)
    lo, hi = B * rank // world, B * (rank + 1) // world
    n = hi - lo
    if n == 0:
        lo, hi = B - 1, B

    def cut(value):
        if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == B:
            return value[lo:hi]
        if isinstance(value, (list, tuple)) and len(value) == B:
            return value[lo:hi]
        return value
    return {k: cut(v) for k, v in batch.items()}, n


class LossModule(nn.Module):
    """model and loss_fn as one module whose forward is the loss: DDP hooks every parameter the loss reaches,
    whatever methods of the model loss_fn calls (heads, encoders, a second sentence)."""

    def __init__(self, model: nn.Module, loss_fn: Callable[[nn.Module, dict], torch.Tensor]):
        super().__init__()
        self.model, self.loss_fn = model, loss_fn

    def forward(self, batch: dict) -> torch.Tensor:
        return self.loss_fn(self.model, batch)


def data_parallel(model: nn.Module, loss_fn: Callable[[nn.Module, dict], torch.Tensor],
                  device: torch.device) -> nn.Module:
    """DistributedDataParallel around the loss; find_unused_parameters because a multitask batch uses one head only.

    With it, DDP walks the autograd graph after each forward to mark the parameters the loss did not reach,
    so their gradients are left untouched (None) instead of waited for; parameters that no rank used keep
    their gradient, which keeps accumulation over micro-batches of different tasks exact. The walk costs far
    less than a BERT forward. static_graph=True would avoid it, but only when every step uses the same
    parameters, which a task schedule does not.
    """
    # a model whose every parameter is used (a one-task classifier) makes DDP warn that the flag is not needed
    warnings.filterwarnings("ignore", message="find_unused_parameters=True was specified")
    return nn.parallel.DistributedDataParallel(
        LossModule(model, loss_fn), device_ids=[device.index] if device.type == "cuda" else None,
        find_unused_parameters=True)


def all_gather(obj: object) -> list:
    """Every rank's `obj`, in rank order (a collective: every rank must call it)."""
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def sum_over_ranks(values: list[float], device: torch.device) -> list[float]:
    """The element-wise sum of `values` over every rank (float64; a collective)."""
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


def barrier() -> None:
    dist.barrier()


DEVICES = ("auto", "cpu", "cuda", "mps")
DEVICE_HELP = "auto picks cuda, then mps, then cpu"   # --device's help, in every command that has it


def pick_device(name: str = "auto") -> torch.device:
    """cpu, cuda, mps, or auto: cuda if available, then mps, then cpu; a clear error if the one asked for is absent.

    Under torchrun, cuda is this process's own GPU, cuda:LOCAL_RANK.
    """
    if name in ("auto", "cuda") and torch.cuda.is_available() and world_size() > 1:
        if local_rank() >= torch.cuda.device_count():
            raise ConfigurationError(f"LOCAL_RANK {local_rank()} but this machine has {torch.cuda.device_count()} "
                                     "CUDA device(s): start at most that many processes per machine (--nproc-per-node)")
        return torch.device("cuda", local_rank())
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigurationError("--device cuda: no CUDA device is available (try --device auto)")
    if name == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ConfigurationError("--device mps: MPS is not available (try --device auto)")
    return torch.device(name)
