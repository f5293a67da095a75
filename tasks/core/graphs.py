"""Whole optimiser steps as CUDA graphs (--cuda-graphs): what fit() (tasks/core/train.py) runs on a GPU when asked.

A small model's step on a GPU is a few hundred short kernels, and the host takes longer to launch them than the GPU
takes to run them. A CUDA graph records a step's kernels once and launches them all with one call. StepGraphs keeps
one graph per batch shape (the task and every tensor's shape and dtype; fit() pads token sequences to a multiple of
PAD_MULTIPLE, so that few shapes occur): the first batch of a shape takes an ordinary eager step, the second is
captured (forward, backward, clipping and the fused AdamW's update, torch.cuda.graph) and replayed, and every later
one copies its tensors into the graph's input buffers and replays it. A replay runs the kernels an eager step runs,
on the same inputs: the same numbers, dropout included (a graph draws its random numbers from the generator's state
at each replay and advances it, so a checkpoint's RNG state resumes the run exactly). What a graph cannot hold is
host work inside the step, so fit() refuses what needs it (check_graphs).

What the optimiser needs: torch's fused AdamW with capturable=True and its learning rate as a tensor on the GPU
(the schedule fills it before each replay; a float would be frozen into the graph). Checkpoints keep the float.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import contextmanager

import torch

from .batching import map_tensors, to_device
from .errors import ConfigurationError


def tensors_of(batch) -> list[torch.Tensor]:
    """Every tensor of a batch, in map_tensors' order."""
    found: list[torch.Tensor] = []
    map_tensors(batch, found.append)
    return found


def shape_key(batch: dict) -> tuple:
    """What a graph is captured for: the batch's structure, its values other than tensors (the task; not the rows'
    ids) and each tensor's shape and dtype."""
    def frozen(value):
        if isinstance(value, torch.Tensor):
            return tuple(value.shape), value.dtype
        if isinstance(value, dict):
            return tuple((k, frozen(v)) for k, v in value.items() if k != "ids")
        if isinstance(value, (list, tuple)):
            return type(value).__name__, tuple(frozen(v) for v in value)
        return value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)
    return frozen(batch)


def optimizer_kind(optimizer: torch.optim.Optimizer) -> str:
    """The --optimizer name of an optimiser (fused, torch or course), else its class's name."""
    import minbert
    if isinstance(optimizer, torch.optim.AdamW):
        return "fused" if all(g.get("fused") for g in optimizer.param_groups) else "torch"
    return "course" if isinstance(optimizer, minbert.AdamW) else type(optimizer).__name__


def check_graphs(device: torch.device, recipe, optimizer: torch.optim.Optimizer, parallel: bool = False,
                 terms: bool = False, post_step: bool = False, checkpointing: bool = False) -> None:
    """Refuse --cuda-graphs where a step does work a graph cannot replay, naming every setting it needs."""
    problems = []
    if device.type != "cuda":
        problems.append(f"a CUDA device (this run's is {device.type})")
    if (kind := optimizer_kind(optimizer)) != "fused":
        problems.append(f"--optimizer fused (the graphs are built for torch's fused AdamW; this run's is {kind})")
    if recipe.precision == "fp16":
        problems.append("fp32 or bf16 (fp16's gradient scaler reads its overflow check back each step)")
    if recipe.grad_accum != 1:
        problems.append("--grad-accum 1")
    if recipe.gradual_unfreezing:
        problems.append("--gradual-unfreezing 0 (it drops gradients on the host each step)")
    if recipe.compile != "off":
        problems.append("--compile off (reduce-overhead is torch.compile's own CUDA graphs)")
    if checkpointing:
        problems.append("no --gradient-checkpointing (its recomputation reads the CUDA generator's state, which a "
                        "capture cannot)")
    if parallel:
        problems.append("one process (no torchrun)")
    if terms:
        problems.append("no extension term (their steps log on the host)")
    if post_step:
        problems.append("no post-step hook")
    if problems:
        raise ConfigurationError("--cuda-graphs needs " + "; ".join(problems))


def check_graphs_device(device: torch.device) -> None:
    """The one need of --cuda-graphs a command knows before it loads anything: a CUDA device (the training commands
    check it where they pick the device, before the data, the model or run.json; check_graphs checks the rest)."""
    if device.type != "cuda":
        raise ConfigurationError(f"--cuda-graphs needs a CUDA device (this run's is {device.type}): leave it off, or "
                                 "run on a GPU (--device cuda)")


class StepGraphs:
    """One CUDA graph per batch shape of a run's optimiser step: eager at a shape's first batch, captured at its
    second, replayed from then on (the module docstring). counts: eager steps, captures, replays; seconds: the wall
time of the one-time work (the run's first step, the other shapes' eager steps, the captures, their first replays),
each timed between two synchronisations, which only these steps make."""

    PARTS = ("first step", "eager", "capture", "first replay")     # the keys of seconds

    def __init__(self, device: torch.device, optimizer: torch.optim.Optimizer):
        self.device, self.optimizer = device, optimizer
        self.stream = torch.cuda.Stream(device)          # warm-up, capture, replay: one side stream (torch's advice)
        self.pool = torch.cuda.graph_pool_handle()       # one memory pool: graphs never run at the same time
        self.seen: set[tuple] = set()
        self.graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, dict, torch.Tensor]] = {}
        self.counts = {"eager": 0, "captured": 0, "replayed": 0}
        self.seconds = dict.fromkeys(self.PARTS, 0.0)

    def ready(self) -> None:
        """The optimiser as a graph needs it: capturable, its learning rates tensors on the GPU (again after a
        checkpoint's load_state_dict put floats back)."""
        for group in self.optimizer.param_groups:
            group["capturable"] = True
            if not torch.is_tensor(group["lr"]):
                group["lr"] = torch.tensor(float(group["lr"]), device=self.device)

    @contextmanager
    def on_stream(self):
        """Run the block on the graphs' stream, ordered after what the default stream queued and before what it
        queues next (evaluation)."""
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)
        try:
            with torch.cuda.stream(self.stream):
                yield
        finally:                                         # also when the epoch stops with an error
            current.wait_stream(self.stream)

    def step(self, batch: dict, body: Callable[[dict], torch.Tensor]) -> torch.Tensor:
        """One optimiser step on `batch` (on the CPU, prepared and padded): body(batch on the GPU) zeroes the
        gradients, runs the loss, backward and the update, and returns the detached loss; the loss, in memory of its
        own (a graph's output is overwritten by its next replay)."""
        key = shape_key(batch)
        if key in self.graphs:
            graph, static, loss = self.graphs[key]
            _copy_into(static, batch)
            graph.replay()
            self.counts["replayed"] += 1
            return loss.clone()
        if key not in self.seen:                         # a shape's first batch: an eager step, which also warms up
            self.seen.add(key)
            self.counts["eager"] += 1
            with self._timed("first step" if len(self.seen) == 1 else "eager"):
                loss = body(to_device(batch, self.device)).clone()
            return loss
        static = map_tensors(batch, lambda t: torch.empty_like(t, device=self.device))
        _copy_into(static, batch)
        graph, states = torch.cuda.CUDAGraph(), len(self.optimizer.state)
        failure: BaseException | None = None
        try:
            with self._timed("capture"), torch.cuda.graph(graph, pool=self.pool, stream=self.stream):
                try:
                    loss = body(static)
                except Exception as e:  # noqa: BLE001 -- the step's own error: ending the capture may raise another
                    failure = e
        except RuntimeError as e:                    # capture_end's, after an invalidated capture
            failure = failure or e
        if failure is not None:
            _capture_failed(failure)
        if len(self.optimizer.state) != states:          # it would live in the shared pool, which other graphs reuse
            raise RuntimeError("--cuda-graphs: the optimiser made new state while a step was captured (a parameter "
                               "that had no gradient in this shape's eager step); run without --cuda-graphs")
        self.graphs[key] = (graph, static, loss)
        self.counts["captured"] += 1
        with self._timed("first replay"):
            graph.replay()                               # capturing ran nothing: this batch's step
        return loss.clone()

    @contextmanager
    def _timed(self, part: str):
        """Add the block's wall time to seconds[part], the GPU's queue emptied before and after it (one-time steps
        only: a replay never waits)."""
        torch.cuda.synchronize(self.device)
        t0 = time.perf_counter()
        yield
        torch.cuda.synchronize(self.device)              # not reached when the block raised: nothing to time
        self.seconds[part] += time.perf_counter() - t0

    def describe(self) -> str:
        """The log line of what ran how: shapes captured, steps replayed, eager steps."""
        c = self.counts
        return (f"CUDA graphs: {c['captured']} shapes captured, {c['replayed']} steps replayed, {c['eager']} eager "
                "(each shape's first)")

    def describe_seconds(self) -> str:
        """The log line of the one-time work's wall time so far (the run's whole, like the counts)."""
        s, eager = self.seconds, max(self.counts["eager"] - 1, 0)
        return (f"CUDA graphs' one-time work: first step {s['first step']:.2f} s, {eager} other eager "
                f"{s['eager']:.2f} s, {self.counts['captured']} captures {s['capture']:.2f} s, their first replays "
                f"{s['first replay']:.2f} s")


def _capture_failed(failure: BaseException) -> None:
    """Raise what stopped a capture: the step's own error, or (a RuntimeError but out of memory) one that says which
    steps a graph cannot hold."""
    if not isinstance(failure, RuntimeError) or isinstance(failure, torch.cuda.OutOfMemoryError):   # torch>=2.1
        raise failure
    raise RuntimeError(f"--cuda-graphs: this step could not be captured as a CUDA graph ({failure}); a step that "
                       "reads values back to the host cannot be: run without --cuda-graphs") from failure


def _copy_into(static: dict, batch: dict) -> None:
    """Each of the batch's tensors (on the CPU) into the graph's input buffer, pinned and without blocking."""
    for dst, src in zip(tensors_of(static), tensors_of(batch), strict=True):
        dst.copy_(src.pin_memory() if src.device.type == "cpu" else src, non_blocking=True)


def float_learning_rates(optimizer_state: dict) -> dict:
    """An optimiser state dict whose learning rates are floats and capturable False, as a run without graphs writes
    it (a checkpoint stays the same whether or not the run used graphs)."""
    for group in optimizer_state["param_groups"]:
        if torch.is_tensor(group.get("lr")):
            group["lr"] = float(group["lr"])
        if "capturable" in group:
            group["capturable"] = False
    return optimizer_state
