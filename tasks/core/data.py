"""Readers for the CS224N task files, and batching: typed records, every bad row reported by file and line.

The four formats (tab-separated, Python-csv quoting, an unnamed pandas index first):

    single sentence, labelled     \\tid\\tsentence\\tsentiment                  (ids-sst-*, ids-cfimdb-*)
    single sentence, unlabelled   0\\t\\tid\\tsentence     (the malformed header of the *-test-student files)
    sentence pair, labelled       \\tid\\tsentence1\\tsentence2\\t{is_duplicate|similarity}
    sentence pair, unlabelled     \\tid\\tsentence1\\tsentence2

Columns are found by their header name, so the extra index column of the test-student files
needs no special case. A row with the wrong number of columns, an empty or repeated id, an
empty sentence, or an empty, unparsable or out-of-range label is skipped and recorded (file,
line, reason); the caller prints `records.summary()`, or passes strict=True to stop at the
first bad row. Rows are never dropped silently.

Batching, for every command: an epoch's order drawn from (seed, epoch, ...) alone (epoch_order; Passes for a stream
of passes), cut into batches of indices, length-grouped or not (batch_indices), and padded (pad, pad_views; Collator
tokenises records and pads them through the tokenizer).
"""

from __future__ import annotations

import csv
import io
import math
import random
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from minbert import Batch, Tokenizer

from .errors import UserError

LABEL_COLUMNS = ("sentiment", "is_duplicate", "similarity")


class DataError(UserError, ValueError):
    """A task file cannot be read as a whole (missing, wrong header) or, with strict=True, has a bad row."""


@dataclass(frozen=True)
class SentenceExample:
    """One row of a single-sentence file (SST, CFIMDB); label is None in unlabelled files."""

    id: str
    sentence: str
    label: int | None = None
    line: int = 0


@dataclass(frozen=True)
class PairExample:
    """One row of a sentence-pair file: Quora (label 0/1) or STS (label a float in [0, 5])."""

    id: str
    sentence1: str
    sentence2: str
    label: float | int | None = None
    line: int = 0


@dataclass(frozen=True)
class Skipped:
    """A row that was not loaded, and why."""

    path: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


class Records(list):
    """The examples of one file (a list), with the file's path, whether it had labels, and the skipped rows."""

    def __init__(self, items: list, path: Path, labelled: bool, skipped: list[Skipped]):
        super().__init__(items)
        self.path, self.labelled, self.skipped = path, labelled, skipped

    def summary(self) -> str:
        """One line of counts, then one line per skipped row: what a CLI prints after loading."""
        head = f"{self.path}: {len(self)} examples loaded"
        if not self.skipped:
            return head + ", none skipped"
        why = Counter(re.sub(r" \(.*\)$|: '.*'$", "", s.reason) for s in self.skipped)
        reasons = "; ".join(f"{n} {r}" for r, n in why.most_common())
        return "\n".join([f"{head}, {len(self.skipped)} rows skipped ({reasons}):"] + [f"  {s}" for s in self.skipped])


PTB = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}", "``": '"', "''": '"'}
PTB_RE = re.compile("|".join(re.escape(k) for k in PTB))


def ptb_to_text(sentence: str) -> str:
    """Undo the Penn Treebank escapes of SST and CFIMDB (-LRB- -> '(', `` -> '"'); other text is kept."""
    return PTB_RE.sub(lambda m: PTB[m.group(0)], sentence).strip()


def unquote(text: str) -> str:
    """Undo the extra layers of CSV quoting some cells carry: '"Do I need ""the"" here?"' -> 'Do I need "the" here?'.

    Only a cell that is wrapped in quotes and contains doubled quotes is touched, one layer at a time.
    """
    text = text.strip()
    while len(text) >= 2 and text[0] == text[-1] == '"' and '""' in text:
        text = text[1:-1].replace('""', '"').strip()
    return text


@dataclass(frozen=True)
class LabelSpec:
    """How a label column parses: int classes 0..num_classes-1, or a float in [low, high]."""

    kind: str                 # "class" or "float"
    num_classes: int = 0
    low: float = 0.0
    high: float = 0.0

    def parse(self, text: str) -> float | int:
        """The label, or ValueError with a reason that says what was expected."""
        text = text.strip()
        if not text:
            raise ValueError("empty label")
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"unparsable label: {text!r}") from None
        if not math.isfinite(value):
            raise ValueError(f"label is not a finite number: {text!r}")
        if self.kind == "float":
            if not self.low <= value <= self.high:
                raise ValueError(f"label out of range [{self.low:g}, {self.high:g}]: {text!r}")
            return value
        if value != int(value) or not 0 <= value < self.num_classes:
            raise ValueError(f"label out of range 0..{self.num_classes - 1}: {text!r}")
        return int(value)


SENTIMENT5 = LabelSpec("class", num_classes=5)
BINARY = LabelSpec("class", num_classes=2)
SIMILARITY = LabelSpec("float", low=0.0, high=5.0)


NOT_UTF8 = re.compile("[\udc80-\udcff]")  # bytes that were not UTF-8, as decode(errors="surrogateescape") keeps them


def _text(path: Path) -> str:
    """The file's text: UTF-8, a leading BOM dropped, bytes that are not UTF-8 kept as surrogates (rows with them
    are skipped and reported)."""
    if not path.is_file():
        raise DataError(f"{path}: no such file" + ("; it is a directory" if path.is_dir() else
                                                   "; check the path, or --data-dir for the default files"))
    try:
        data = path.read_bytes()
    except OSError as e:
        raise DataError(f"{path}: cannot read the file ({e.strerror}); check its permissions") from None
    return data.decode("utf-8-sig", errors="surrogateescape")


def file_rows(path: Path) -> Iterator[tuple[int, list[str] | str]]:
    """(line number, cells) for every row, header first; line numbers count physical lines, from 1. A row the csv
    module cannot split (a cell over its size limit: a very long line, or an unclosed quote) comes as (line, why)."""
    reader = csv.reader(io.StringIO(_text(path), newline=""), delimiter="\t")
    start = 1
    while True:
        try:
            cells: list[str] | str = next(reader)
        except StopIteration:
            return
        except csv.Error as e:   # the reader goes on with the next line
            cells = f"cannot split the row into cells ({e}): a very long line, or an unclosed quote mark?"
        yield start, cells
        start = reader.line_num + 1


def _check_cells(cells: list[str]) -> None:
    """ValueError for a row with bytes that are not UTF-8 or with NUL characters."""
    text = "\t".join(cells)
    if NOT_UTF8.search(text):
        raise ValueError("bytes that are not UTF-8 text (save the file as UTF-8)")
    if "\x00" in text:
        raise ValueError("a NUL byte (a binary or UTF-16 file?)")


def _read(path: str | Path, sentence_columns: tuple[str, ...], label: LabelSpec, strict: bool, ptb: bool) -> Records:
    path = Path(path)
    rows = file_rows(path)
    try:
        _, header = next(rows)
    except StopIteration:
        raise DataError(f"{path}:1: the file is empty; expected a header with id and {', '.join(sentence_columns)}")
    if isinstance(header, str):
        raise DataError(f"{path}:1: the header: {header}")
    try:
        _check_cells(header)
    except ValueError as e:
        raise DataError(f"{path}:1: the header has {e}") from None
    missing = [c for c in ("id", *sentence_columns) if c not in header]
    if missing:
        raise DataError(f"{path}:1: the header {str(header)[:200]} has no {' or '.join(missing)} column; "
                        f"expected id and {', '.join(sentence_columns)}")
    label_names = [c for c in header if c in LABEL_COLUMNS]
    label_col = header.index(label_names[0]) if label_names else None
    id_col, text_cols = header.index("id"), [header.index(c) for c in sentence_columns]
    items, skipped, seen = [], [], {}
    for line, cells in rows:
        try:
            if isinstance(cells, str):
                raise ValueError(cells)
            _check_cells(cells)
            if len(cells) != len(header):
                raise ValueError(f"{len(cells)} columns, the header has {len(header)}")
            ident = cells[id_col].strip()
            if not ident:
                raise ValueError("empty id")
            if ident in seen:
                raise ValueError(f"duplicate id {ident} (first on line {seen[ident]})")
            texts = [cells[i] for i in text_cols]
            for name, text in zip(sentence_columns, texts):
                if not text.strip():
                    raise ValueError(f"empty {name}")
            texts = [ptb_to_text(unquote(t)) if ptb else unquote(t) for t in texts]
            value = label.parse(cells[label_col]) if label_col is not None else None
        except ValueError as e:
            if strict:
                raise DataError(f"{path}:{line}: {e}") from None
            skipped.append(Skipped(str(path), line, str(e)))
            continue
        seen[ident] = line
        if len(texts) == 1:
            items.append(SentenceExample(ident, texts[0], value, line))
        else:
            items.append(PairExample(ident, texts[0], texts[1], value, line))
    return Records(items, path, label_col is not None, skipped)


def read_sentences(path: str | Path, num_classes: int = 5, strict: bool = False, ptb: bool = True) -> Records:
    """A single-sentence file (labelled or not, found from the header) -> SentenceExample records."""
    return _read(path, ("sentence",), LabelSpec("class", num_classes=num_classes), strict, ptb)


def read_pairs(path: str | Path, label: LabelSpec = BINARY, strict: bool = False) -> Records:
    """A sentence-pair file (labelled or not) -> PairExample records; Quora takes BINARY, STS SIMILARITY."""
    return _read(path, ("sentence1", "sentence2"), label, strict, ptb=False)


@dataclass(frozen=True)
class TaskFiles:
    """Where a task's files live under the data directory, and how its rows parse."""

    name: str
    prefix: str               # file names: {prefix}-{split}.csv, the test split {prefix}-test-student.csv
    pair: bool
    label: LabelSpec

    def path(self, data_dir: str | Path, split: str) -> Path:
        return Path(data_dir) / f"{self.prefix}-{'test-student' if split == 'test' else split}.csv"

    def read(self, path: str | Path, strict: bool = False) -> Records:
        if self.pair:
            return read_pairs(path, self.label, strict)
        return read_sentences(path, self.label.num_classes, strict)


TASKS = {
    "sst": TaskFiles("sst", "ids-sst", False, SENTIMENT5),
    "cfimdb": TaskFiles("cfimdb", "ids-cfimdb", False, BINARY),
    "para": TaskFiles("para", "quora", True, BINARY),
    "sts": TaskFiles("sts", "sts", True, SIMILARITY),
}


class Collator:
    """Turns a list of records into a Batch (input_ids, attention_mask, token_type_ids), padded to the longest
    in the batch, plus `labels` (long for classes, float for STS) when the records have them, and `ids`."""

    def __init__(self, tokenizer: Tokenizer, float_labels: bool = False):
        self.tokenizer, self.float_labels = tokenizer, float_labels

    def __call__(self, examples: Sequence[SentenceExample | PairExample]) -> dict:
        if isinstance(examples[0], PairExample):
            batch = self.tokenizer([e.sentence1 for e in examples], [e.sentence2 for e in examples])
        else:
            batch = self.tokenizer([e.sentence for e in examples])
        out = dict(batch)
        if all(e.label is not None for e in examples):
            out["labels"] = torch.tensor([e.label for e in examples],
                                         dtype=torch.float if self.float_labels else torch.long)  # (B,)
        out["ids"] = [e.id for e in examples]
        return out


def to_device(batch: dict, device: torch.device | str) -> dict:
    """Move every tensor of a collated batch to device; other values (ids) are kept as they are."""
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def model_inputs(batch: dict) -> Batch:
    """The three tensors the encoder takes, from a collated batch."""
    return Batch({k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")})


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


def token_lengths(examples: Sequence[SentenceExample | PairExample], tokenizer: Tokenizer) -> list[int]:
    """Each example's length in tokens with [CLS] and [SEP], truncated as the tokenizer truncates."""
    if examples and isinstance(examples[0], PairExample):
        encodings = tokenizer.backend.encode_batch([(e.sentence1, e.sentence2) for e in examples])
    else:
        encodings = tokenizer.backend.encode_batch([e.sentence for e in examples])
    return [sum(enc.attention_mask) for enc in encodings]


def _lengths(examples: Sequence, bucket: bool, lengths: Sequence[int] | None) -> Sequence[int]:
    if bucket and lengths is None:
        raise ValueError("bucketed batching needs the examples' lengths (token_lengths)")
    return lengths if lengths is not None else [0] * len(examples)


def batches(examples: Sequence, collate: Collator, batch_size: int, shuffle: bool = False, seed: int = 0,
            bucket: bool = False, lengths: Sequence[int] | None = None) -> list[dict]:
    """Collated batches of an epoch (see batch_indices); pass lengths when bucket is set."""
    idx = batch_indices(_lengths(examples, bucket, lengths), batch_size, shuffle, seed, bucket)
    return [collate([examples[i] for i in b]) for b in idx]


def train_batches(examples: Sequence, collate: Collator, batch_size: int, seed: int, epoch: int,
                  bucket: bool = False, lengths: Sequence[int] | None = None) -> list[dict]:
    """The collated batches of training epoch `epoch`, in the order epoch_order draws from (seed, epoch)."""
    order = epoch_order(_lengths(examples, bucket, lengths), batch_size, seed, epoch, bucket=bucket)
    return [collate([examples[i] for i in b]) for b in order]


def token_ids(tokenizer: Tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """Each text's ids, [CLS] ... [SEP], truncated as the tokenizer truncates and without its padding."""
    return [e.ids[:sum(e.attention_mask)] for e in tokenizer.backend.encode_batch(list(texts))]


def pad(seqs: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Token id lists right-padded with 0 into (B, T) ids and the (B, T) mask of the real tokens."""
    T = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), T, dtype=torch.long)
    mask = torch.zeros(len(seqs), T, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
        mask[i, :len(s)] = 1
    return ids, mask                                            # (B, T) each, right-padded with 0


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


def hash_seed(*parts: int) -> int:
    """One integer seed from several (deterministic across runs and machines, unlike hash()): every command's batch
    order of an epoch is drawn from hash_seed(seed, epoch, ...) alone, so that a resumed run draws the same batches."""
    seed = 0
    for p in parts:
        seed = (seed * 1_000_003 + p) % (2 ** 61 - 1)
    return seed
