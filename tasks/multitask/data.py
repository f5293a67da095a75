"""The multitask CLI's data: each task's file (train, dev or test) read and tokenised once (Encoded), a task's batches
collated from token ids, and one epoch's batches in a task schedule's order (EpochBatches), each task's passes
drawn by tasks.core.batching.Passes from (seed, epoch, task, pass) alone, so that a resumed run draws the same batches
as an uninterrupted one. The ordering, cutting and padding are the core's; what is the multitask's own is which task a
batch belongs to, the schedule across the tasks, the pairs and their random order (swap_pairs).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

import minbert
from minbert.multitask import TASK_NAMES
from minbert.schedules import TaskSchedule, num_batches_of

from ..core.batching import Passes, hash_seed, pad_views, token_ids
from ..core.data import PairExample, Records
from ..core.training_setup import read_records


@dataclass
class Encoded:
    """One loaded file, tokenised once: records, and per record its token ids (one list, or two for pairs)."""

    task: str
    split: str
    records: Records
    ids: list[list[int]]
    ids2: list[list[int]] | None

    @property
    def lengths(self) -> list[int]:
        """Tokens per example: the sentence, or the joined pair [CLS] a [SEP] b [SEP] (for bucketing)."""
        if self.ids2 is None:
            return [len(a) for a in self.ids]
        return [len(a) + len(b) - 1 for a, b in zip(self.ids, self.ids2)]


def load(task: str, split: str, path: str | Path, tokenizer: minbert.Tokenizer, limit: int | None = None,
         seed: int = 0) -> Encoded:
    """Read and tokenise a file, reporting skipped rows; `limit` keeps a seeded random sample of that many rows."""
    records = read_records(path, task, limit, f"{seed}-{task}")
    if isinstance(records[0], PairExample):
        return Encoded(task, split, records, token_ids(tokenizer, [r.sentence1 for r in records]),
                       token_ids(tokenizer, [r.sentence2 for r in records]))
    return Encoded(task, split, records, token_ids(tokenizer, [r.sentence for r in records]), None)


def collate(data: Encoded, index: Sequence[int], swap: Sequence[bool] | None = None) -> dict:
    """A batch of a task: input_ids/attention_mask (or the _1/_2 pair), labels when known, ids, and the task;
    swap[k] true puts the k-th pair's sentences in the other order."""
    out: dict = {"task": data.task, "ids": [data.records[i].id for i in index]}
    if data.ids2 is None:
        out |= pad_views([[data.ids[i] for i in index]])
        out["token_type_ids"] = torch.zeros_like(out["input_ids"])
    else:
        swap = swap or [False] * len(index)
        first = [data.ids2[i] if s else data.ids[i] for i, s in zip(index, swap)]
        second = [data.ids[i] if s else data.ids2[i] for i, s in zip(index, swap)]
        out |= pad_views([first, second])
    if data.records.labelled:
        dtype = torch.long if data.task == "sst" else torch.float
        out["labels"] = torch.tensor([data.records[i].label for i in index], dtype=dtype)  # (B,)
    return out


class EpochBatches(Sequence):
    """The batches of one epoch in the schedule's order, collated when asked for (fit() iterates it);
    swap_pairs=True gives each pair a random order, drawn anew every epoch from (seed, epoch, batch)."""

    def __init__(self, train: dict[str, Encoded], schedule: TaskSchedule, batch_size: int, epoch: int,
                 epochs: int, seed: int, bucket: bool = True, swap_pairs: bool = False):
        self.train, self.swap_pairs, self.seed, self.epoch = train, swap_pairs, seed, epoch
        self.num_batches = num_batches_of({t: len(d.records) for t, d in train.items()}, batch_size)
        self.order = schedule.order(self.num_batches, epoch, epochs, seed)
        self.passes = {t: Passes(d.lengths, batch_size, seed, epoch, TASK_NAMES.index(t), bucket=bucket)
                       for t, d in train.items()}   # a task's j-th batch this epoch: passes[task].batch(j)

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, i: int) -> dict:
        task, j = self.order[i]
        index = self.passes[task].batch(j)
        swap = None
        if self.swap_pairs and self.train[task].ids2 is not None:
            rng = random.Random(hash_seed(self.seed, self.epoch, TASK_NAMES.index(task), j, 1))
            swap = [rng.random() < 0.5 for _ in index]
        return collate(self.train[task], index, swap)
