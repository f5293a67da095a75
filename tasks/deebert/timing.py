"""Timing DeeBERT's early exit (Xin et al., 2020, sec. 4): the plain model and each exit rule over the same
batches, interleaved in seeded rounds. minbert.deebert computes; this module times (tasks.deebert's sweep)."""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from minbert.deebert import DeeBert, ExitRule, early_exit


@dataclass
class Timed:
    """One configuration over a split: logits (N, C) and exit layers (N,) in batch order, seconds per round."""

    name: str
    logits: torch.Tensor
    layers: torch.Tensor
    seconds: list[float] = field(default_factory=list)
    token_layers: int = 0

    @property
    def time(self) -> float:
        return statistics.median(self.seconds)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def timed_run(model: DeeBert, batches: Sequence[dict], rule: ExitRule | None,
              trim: bool = True) -> tuple[torch.Tensor, torch.Tensor, float, int]:
    """Run every batch (dicts of input_ids, attention_mask, token_type_ids); (logits, layers, seconds, work).

    rule None: the plain model (all layers, the last off-ramp only), the baseline of every timing.
    """
    device = next(model.parameters()).device
    logits, layers, work = [], [], 0
    _sync(device)
    t0 = time.perf_counter()
    for b in batches:
        if rule is None:
            z = model(b["input_ids"], b["attention_mask"], b.get("token_type_ids"))
            logits.append(z)
            layers.append(torch.full((z.shape[0],), model.num_layers, dtype=torch.long, device=z.device))
            work += model.num_layers * b["input_ids"].numel()
        else:
            o = early_exit(model, b["input_ids"], b["attention_mask"], b.get("token_type_ids"), rule, trim)
            logits.append(o.logits)
            layers.append(o.layers)
            work += o.token_layers
    _sync(device)
    seconds = time.perf_counter() - t0
    return torch.cat(logits).cpu(), torch.cat(layers).cpu(), seconds, work


def round_orders(names: Sequence[str], rounds: int, seed: int = 0) -> list[list[str]]:
    """The order of the settings in each timing round: a fresh seeded shuffle of all of them per round, the
    plain model included, so that no setting always runs first (after a cold start) or next to the same one."""
    g = random.Random(f"deebert-sweep-{seed}")
    orders = []
    for _ in range(rounds):
        order = list(names)
        g.shuffle(order)
        orders.append(order)
    return orders


def sweep(model: DeeBert, batches: Sequence[dict], rules: dict[str, ExitRule], rounds: int = 5, seed: int = 0,
          log: Callable[[str], None] | None = None) -> tuple[Timed, list[Timed]]:
    """Time the plain model and each exit rule over the same batches, interleaved in rounds (DeeBERT, sec. 4).

    First one untimed pass of every setting over all the batches (plain included; a seeded order); then each
    round runs every setting once in a fresh seeded order (round_orders), so that a change of load on the
    machine, or a cache warmed by the setting before, hits all alike. A Timed keeps every round's seconds;
    its time is their median. Returns (plain, one Timed per rule).
    """
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, not {rounds}")
    model.eval()
    names = ["plain", *rules]
    for name in round_orders(names, 1, seed + 1)[0]:                    # the untimed pass
        timed_run(model, batches, rules.get(name))
    runs = {name: Timed(name, torch.empty(0), torch.empty(0)) for name in names}
    for r, order in enumerate(round_orders(names, rounds, seed)):
        for name in order:
            run = runs[name]
            run.logits, run.layers, seconds, run.token_layers = timed_run(model, batches, rules.get(name))
            run.seconds.append(seconds)
            if log is not None:
                log(f"round {r + 1}/{rounds}: {name} {seconds:.2f}s")
    return runs["plain"], [runs[name] for name in rules]
