"""Batching, for every command: each file tokenised once when it is loaded, then every batch cut from the stored ids.

    split = tokenise("train", records, tokenizer)           # a Split: the records and each one's token ids
    train_batches(split, batch_size, seed, epoch, bucket)   # epoch `epoch`'s batches, drawn from (seed, epoch) alone

An epoch's order is drawn from (seed, epoch, ...) alone (epoch_order; Passes for a stream of passes), so that a
resumed run draws the same batches; it is cut into batches of indices, length-grouped or not (batch_indices), and
each batch is padded from the stored ids (pad; pad_views for commands that pad views apart, collate for a Split).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from minbert import Batch, Tokenizer

from .data import PairExample, Records


@dataclass
class Split:
    """One loaded file tokenised once (tokenise): its records and, per record, its token ids [CLS] a [SEP] (b [SEP])
    as the tokenizer gives them, truncated and unpadded, with a pair's token type ids."""

    name: str
    records: Records
    ids: list[list[int]]
    type_ids: list[list[int]] | None = None     # pairs: 0 for [CLS] a [SEP], 1 for b [SEP]
    pad_id: int = 0                             # the tokenizer's [PAD]
    float_labels: bool = False                  # labels as floats (STS), not class indices

    @property
    def lengths(self) -> list[int]:
        """Tokens per example (for bucketing)."""
        return [len(s) for s in self.ids]

    def subset(self, name: str, keep: Sequence[int]) -> Split:
        """The examples `keep`, in that order, as a split of their own."""
        r = self.records
        types = None if self.type_ids is None else [self.type_ids[i] for i in keep]
        return Split(name, Records([r[i] for i in keep], r.path, r.labelled, r.skipped), [self.ids[i] for i in keep],
                     types, self.pad_id, self.float_labels)


def tokenise(name: str, records: Records, tokenizer: Tokenizer, float_labels: bool = False) -> Split:
    """Every record tokenised once, as the tokenizer tokenises a batch of them (a pair together, truncated
    longest-first to its max_length), without the padding."""
    pairs = bool(records) and isinstance(records[0], PairExample)
    encodings = tokenizer.backend.encode_batch([(e.sentence1, e.sentence2) if pairs else e.sentence for e in records])
    n = [sum(e.attention_mask) for e in encodings]
    return Split(name, records, [e.ids[:k] for e, k in zip(encodings, n)],
                 [e.type_ids[:k] for e, k in zip(encodings, n)] if pairs else None, tokenizer.pad_token_id,
                 float_labels)


def token_ids(tokenizer: Tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """Each text's ids, [CLS] ... [SEP], truncated as the tokenizer truncates and without its padding."""
    return [e.ids[:sum(e.attention_mask)] for e in tokenizer.backend.encode_batch(list(texts))]


def hash_seed(*parts: int) -> int:
    """One integer seed from several (deterministic across runs and machines, unlike hash()): every command's batch
    order of an epoch is drawn from hash_seed(seed, epoch, ...) alone, so that a resumed run draws the same batches."""
    seed = 0
    for p in parts:
        seed = (seed * 1_000_003 + p) % (2 ** 61 - 1)
    return seed


def batch_indices(lengths: Sequence[int], batch_size: int, shuffle: bool, seed: int = 0,
                  bucket: bool = False, pool: int = 50) -> list[list[int]]:
    """The batches of one epoch as lists of example indices.

    shuffle: a random order drawn from `seed` alone (pass a per-epoch seed), so that a resumed run
    sees the same batches. bucket: examples sorted by length within pools of pool * batch_size,
    cut into batches, and the batches shuffled, so that a batch pads to similar lengths.
    """
    order = list(range(len(lengths)))
    rng = random.Random(seed)
    if shuffle:
        rng.shuffle(order)
    if not bucket:
        return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    batches = []
    for start in range(0, len(order), pool * batch_size):
        chunk = sorted(order[start:start + pool * batch_size], key=lambda i: lengths[i])
        batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    if shuffle:
        rng.shuffle(batches)
    return batches


def epoch_order(lengths: Sequence[int], batch_size: int, seed: int, *epoch: int, bucket: bool = False
                ) -> list[list[int]]:
    """One epoch (a pass over the examples) as batches of indices, shuffled from hash_seed(seed, *epoch) alone (the
    epoch, and whatever else tells a run's passes apart), so that a resumed run draws the same batches; bucket:
    length-grouped (batch_indices)."""
    return batch_indices(lengths, batch_size, shuffle=True, seed=hash_seed(seed, *epoch), bucket=bucket)


class Passes:
    """A stream of shuffled passes over one set of examples, pass k drawn from (*seed, k) alone (epoch_order) when
    first needed: for runs whose rounds are not one pass each (a task's share of a multitask epoch, SimCSE's rounds)."""

    def __init__(self, lengths: Sequence[int], batch_size: int, *seed: int, bucket: bool = False):
        self.lengths, self.batch_size, self.seed, self.bucket = lengths, batch_size, seed, bucket
        self.per_pass = -(-len(lengths) // batch_size)            # batches in a pass
        self._drawn: dict[int, list[list[int]]] = {}

    def batch(self, i: int) -> list[int]:
        """The stream's i-th batch of example indices: batch i % per_pass of pass i // per_pass."""
        k, j = divmod(i, self.per_pass)
        if k not in self._drawn:
            self._drawn[k] = epoch_order(self.lengths, self.batch_size, *self.seed, k, bucket=self.bucket)
        return self._drawn[k][j]


def pad(seqs: list[list[int]], value: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Token id lists right-padded with `value` into (B, T) ids and the (B, T) mask of the real tokens."""
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), value, dtype=torch.long)
    mask = torch.zeros(len(seqs), T, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
        mask[i, :len(s)] = 1
    return ids, mask                                            # (B, T) each, right-padded


def pad_views(views: Sequence[Sequence[list[int]]]) -> dict[str, torch.Tensor]:
    """A batch's token id lists, one list per view (a sentence; a pair's first and second; ...), each padded (pad):
    input_ids and attention_mask for one view, input_ids_k and attention_mask_k (k = 1, 2, ...) for several."""
    if len(views) == 1:
        ids, mask = pad(list(views[0]))
        return {"input_ids": ids, "attention_mask": mask}
    out = {}
    for k, view in enumerate(views, start=1):
        out[f"input_ids_{k}"], out[f"attention_mask_{k}"] = pad(list(view))
    return out


def collate(split: Split, index: Sequence[int]) -> dict:
    """The batch of a split's examples `index`: input_ids, attention_mask and token_type_ids (B, T), padded to the
    longest (pad), labels (long, or float for STS) when the records have them, and the ids."""
    input_ids, mask = pad([split.ids[i] for i in index], split.pad_id)
    types = torch.zeros_like(input_ids) if split.type_ids is None else pad([split.type_ids[i] for i in index])[0]
    out = {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": types}
    examples = [split.records[i] for i in index]
    if all(e.label is not None for e in examples):
        out["labels"] = torch.tensor([e.label for e in examples],
                                     dtype=torch.float if split.float_labels else torch.long)  # (B,)
    out["ids"] = [e.id for e in examples]
    return out


def batches(split: Split, batch_size: int, shuffle: bool = False, seed: int = 0, bucket: bool = False) -> list[dict]:
    """A split's collated batches (batch_indices): for prediction, in file order or grouped by length."""
    return [collate(split, b) for b in batch_indices(split.lengths, batch_size, shuffle, seed, bucket)]


def train_batches(split: Split, batch_size: int, seed: int, epoch: int, bucket: bool = False) -> list[dict]:
    """The collated batches of training epoch `epoch`, in the order epoch_order draws from (seed, epoch)."""
    return [collate(split, b) for b in epoch_order(split.lengths, batch_size, seed, epoch, bucket=bucket)]


def step_groups(batches: Iterable[dict], k: int) -> Iterator[list[dict]]:
    """Consecutive runs of k batches (the last one may be shorter): the micro-batches of one optimiser step."""
    group = []
    for batch in batches:
        group.append(batch)
        if len(group) == k:
            yield group
            group = []
    if group:
        yield group


def map_tensors(value, f):
    """`value` with f applied to every tensor in it, within dicts, lists, tuples and NamedTuples (EncoderInput);
    everything else (ids, the task's name, None) kept as it is."""
    if isinstance(value, torch.Tensor):
        return f(value)
    if isinstance(value, dict):
        return {k: map_tensors(v, f) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):         # a NamedTuple
        return type(value)(*(map_tensors(v, f) for v in value))
    if isinstance(value, (list, tuple)) and any(isinstance(v, (torch.Tensor, tuple)) for v in value):
        return type(value)(map_tensors(v, f) for v in value)
    return value


def to_device(batch: dict, device: torch.device | str) -> dict:
    """Move every tensor of a collated batch to device (map_tensors: within a round of batches and EncoderInputs
    too); other values (ids) are kept as they are. To a GPU each tensor is first pinned and then copied without
    blocking, so that the host goes on to the next batch while the copy runs (the step never waits for it)."""
    device = torch.device(device)

    def move(t: torch.Tensor) -> torch.Tensor:
        if device.type == "cuda" and t.device.type == "cpu":
            return t.pin_memory().to(device, non_blocking=True)
        return t.to(device)
    return map_tensors(batch, move)


def pad_lengths(batch: dict, multiple: int, limit: int | None = None) -> dict:
    """The batch with every token sequence, each (B, T) integer tensor (ids, masks, segments; map_tensors),
    right-padded with 0 to T rounded up to a multiple of `multiple`, but never past `limit` (the model's positions):
    a few shapes instead of one per length, so that a compiled or captured step is reused (the model masks the
    padding: the same outputs)."""
    def grow(t: torch.Tensor) -> torch.Tensor:
        if t.dim() != 2 or t.is_floating_point() or t.dtype == torch.bool or t.shape[1] % multiple == 0:
            return t
        target = t.shape[1] + -t.shape[1] % multiple
        if limit is not None and t.shape[1] <= limit:
            target = min(target, limit)
        return F.pad(t, (0, target - t.shape[1]))                     # (B, T) -> (B, T rounded up)
    return map_tensors(batch, grow) if multiple > 1 else batch


def position_limit(model: torch.nn.Module) -> int | None:
    """The most tokens the model's position tables hold (the smallest over its encoders; None: none inside)."""
    limits = [m.config.max_position_embeddings for m in model.modules()
              if isinstance(getattr(getattr(m, "config", None), "max_position_embeddings", None), int)]
    return min(limits) if limits else None


def model_inputs(batch: dict) -> Batch:
    """The three tensors the encoder takes, from a collated batch."""
    return Batch({k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")})
