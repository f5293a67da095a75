"""Task schedules for multitask training (Qian & Yang, CS224N report, sec. 4.2; Stickland & Murray, 2019,
sec. 4 for `annealed`): which task each batch of an epoch comes from. Data order, not the model.

Each schedule gives the order of one epoch's training batches as (task, j): the j-th batch of that task's
stream for the epoch. A task's stream is its shuffled batches, and, should a schedule ask for more batches
than the task has, further passes over it, each shuffled anew (the caller builds them; see
tasks/multitask/data.py, EpochBatches). The order depends on (seed, epoch) alone, so a run resumed at an epoch boundary goes
on exactly as an uninterrupted run would.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass


def annealed_alpha(epoch: int, epochs: int) -> float:
    """Stickland & Murray (2019, sec. 4): alpha = 1 - 0.8 (e - 1) / (E - 1) at epoch e = 1..E (1 when E = 1)."""
    return 1.0 if epochs <= 1 else 1.0 - 0.8 * (epoch - 1) / (epochs - 1)


def task_probabilities(sizes: dict[str, int], alpha: float = 1.0) -> dict[str, float]:
    """p_i proportional to N_i ** alpha over the tasks' training-set sizes N_i."""
    weights = {t: n ** alpha for t, n in sizes.items()}
    total = sum(weights.values())
    return {t: w / total for t, w in weights.items()}


@dataclass
class TaskSchedule:
    """Which task each batch of an epoch comes from.

    sequential     every batch of the first task, then of the second, ...; an epoch is one pass over every task.
    round-robin    one batch of each task in turn (the report's sec. 4.2). when_exhausted="drop" (default): a
                   task whose batches have run out leaves the rotation and the others go on, so an epoch is
                   still one pass over every task, each example seen once; "cycle": smaller tasks start
                   another pass until the largest has been seen once, so an epoch is max_i(n_i) batches
                   of each task (the small tasks are oversampled).
    proportional   each batch's task drawn with probability n_i / sum n over the tasks' sizes (in batches);
                   an epoch is sum n batches, the tasks' streams cycling if drawn more often than they have batches.
    annealed       as proportional, with probabilities proportional to n_i ** alpha, alpha falling from 1 at the
                   first epoch to 0.2 at the last (Stickland & Murray, 2019, sec. 4): the tasks are drawn more
                   evenly as training goes on. An epoch is sum n batches.
    """

    name: str
    when_exhausted: str = "drop"

    def __post_init__(self) -> None:
        if self.name not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, not {self.name!r}")
        if self.when_exhausted not in ("drop", "cycle"):
            raise ValueError(f"when_exhausted must be 'drop' or 'cycle', not {self.when_exhausted!r}")

    def probabilities(self, num_batches: dict[str, int], epoch: int, epochs: int) -> dict[str, float] | None:
        """The task-drawing probabilities at epoch (0-based) of epochs; None for the deterministic schedules."""
        if self.name == "proportional":
            return task_probabilities(num_batches)
        if self.name == "annealed":
            return task_probabilities(num_batches, annealed_alpha(epoch + 1, epochs))
        return None

    def order(self, num_batches: dict[str, int], epoch: int, epochs: int, seed: int) -> list[tuple[str, int]]:
        """The epoch's batches as (task, index into that task's stream), for tasks with num_batches[t] batches."""
        tasks = [t for t, n in num_batches.items() if n > 0]
        if self.name == "sequential":
            return [(t, j) for t in tasks for j in range(num_batches[t])]
        if self.name == "round-robin":
            rounds = max(num_batches[t] for t in tasks)
            return [(t, j) for j in range(rounds) for t in tasks
                    if self.when_exhausted == "cycle" or j < num_batches[t]]
        probs = self.probabilities({t: num_batches[t] for t in tasks}, epoch, epochs)
        rng = random.Random(seed * 1_000_003 + epoch)
        drawn = rng.choices(tasks, weights=[probs[t] for t in tasks], k=sum(num_batches[t] for t in tasks))
        seen = dict.fromkeys(tasks, 0)
        out = []
        for t in drawn:
            out.append((t, seen[t]))
            seen[t] += 1
        return out


SCHEDULES = ("sequential", "round-robin", "proportional", "annealed")


def num_batches_of(sizes: dict[str, int], batch_size: int) -> dict[str, int]:
    """ceil(N_i / batch_size) batches for each task of N_i examples."""
    return {t: math.ceil(n / batch_size) for t, n in sizes.items()}
