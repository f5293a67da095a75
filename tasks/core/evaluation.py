"""Metrics, and prediction files in the CS224N leaderboard's format: writing them, reading them, checking them.

The course's files look like this (a header naming the column, then `id , value` rows; the
spaces and the grader's spelling `Predicted_Similiary` are part of the format):

    id \\t Predicted_Sentiment \\n
    b7573736a6ddf7be102b7fee0 , 3 \\n

They are named {task}-{split}-output.csv with task sst, para or sts (cfimdb-* for CFIMDB).
The reader is tolerant of whitespace and of tabs in place of the comma.

The one prediction loop, predict_batches, runs a model over batches in eval mode without gradients; every command
predicts through it (and fit() evaluates in the same `evaluating` block); within tasks.core.progress.showing it shows a
progress bar over the batches.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import torch
from torch import nn

# the atomic writers live in the library; the commands' writers import them from here too
from minbert.files import new_file_mode, replacing, write_text  # noqa: F401

from .batching import to_device
from .data import TASKS, DataError, Records
from .progress import progress_bar, shown
from .recipe import autocast

T = TypeVar("T")


@contextmanager
def evaluating(model: nn.Module, device: torch.device, precision: str | None = None) -> Iterator[None]:
    """Within the block: eval mode, torch.no_grad() and precision's autocast (None: the caller's, if any); the model's
    training flag as it was afterwards, after an exception too."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), (autocast(device, precision) if precision is not None else nullcontext()):
            yield
    finally:
        model.train(was_training)


def predict_batches(model: nn.Module, batches: Iterable[dict], step: Callable[[nn.Module, dict], T],
                    device: torch.device, precision: str | None = None, total: int | None = None) -> list[T]:
    """step(model, batch) for every batch moved to the device, within evaluating(model, device, precision): the
    outputs in the batches' order. Within progress.showing(desc), a bar named desc counts the batches (`total`: how
    many, where `batches` has no len())."""
    desc = shown()
    with evaluating(model, device, precision):
        if desc is None:                        # no bar (the timed sweeps of tasks.deebert among them)
            return [step(model, to_device(batch, device)) for batch in batches]
        total = len(batches) if total is None and hasattr(batches, "__len__") else total
        with progress_bar(desc, total, True) as bar:
            outputs = []
            for batch in batches:
                outputs.append(step(model, to_device(batch, device)))
                bar.update()
            return outputs


def in_order(keys: Iterable[Hashable], batch_keys: Iterable[Sequence], outputs: Iterable[Sequence]) -> list:
    """Rows of per-batch outputs put back in the order of `keys`: outputs[b][i] is the row of batch_keys[b][i]
    (predictions of length-sorted batches written back in file order)."""
    rows = {key: row for names, out in zip(batch_keys, outputs) for key, row in zip(names, out)}
    return [rows[key] for key in keys]


def accuracy(predictions: Sequence, labels: Sequence) -> float:
    """The fraction of predictions equal to their labels."""
    if len(predictions) != len(labels) or not labels:
        raise ValueError(f"{len(predictions)} predictions for {len(labels)} labels")
    return sum(int(p) == int(y) for p, y in zip(predictions, labels)) / len(labels)


def _centred(values: Sequence[float]) -> torch.Tensor:
    """values - their mean, in float64, first scaled by a power of two to a largest magnitude in [0.5, 1): exact for
    ordinary values, so that no sum or norm underflows (1e-162: r above 1) or overflows (1e307: nan)."""
    v = torch.tensor(values, dtype=torch.float64)
    if not torch.isfinite(v).all():
        raise ValueError("a value that is not finite (nan or inf)")
    top = float(v.abs().max())
    if top > 0:
        shift = -math.frexp(top)[1]                 # in two halves: 2**shift alone overflows for subnormal values
        v = v * 2.0 ** (shift // 2) * 2.0 ** (shift - shift // 2)
    return v - v.mean()


def pearson(predictions: Sequence[float], labels: Sequence[float]) -> float:
    """Pearson's correlation r between predictions and gold similarities, in [-1, 1] (0 if either is constant)."""
    if len(predictions) != len(labels) or len(labels) < 2:
        raise ValueError(f"{len(predictions)} predictions for {len(labels)} labels; need at least 2")
    x, y = _centred(predictions), _centred(labels)
    denom = (x.norm() * y.norm()).item()
    return 0.0 if denom == 0 else min(1.0, max(-1.0, (x @ y).item() / denom))


@dataclass(frozen=True)
class Leaderboard:
    """One leaderboard task: its prediction column (as the grader spells it), its values and its metric."""

    task: str                 # key into data.TASKS
    column: str
    kind: str                 # "class" (an int 0..num_classes-1) or "float"
    num_classes: int = 0
    metric: str = "accuracy"

    def format(self, value: float) -> str:
        if self.kind == "float":
            return repr(float(value))
        return f"{float(value):.1f}" if self.task == "para" else str(int(value))

    def parse(self, text: str) -> tuple[float | int, str | None]:
        """(value, None), or (nan, reason) when the text is not a valid prediction for this task."""
        try:
            value = float(text)
        except ValueError:
            return math.nan, f"unparsable value {text!r}"
        if not math.isfinite(value):
            return math.nan, f"non-finite value {text!r}"
        if self.kind == "float":
            return value, None
        if value != int(value) or not 0 <= value < self.num_classes:
            return math.nan, f"value {text!r} out of range: expected an integer 0..{self.num_classes - 1}"
        return int(value), None


LEADERBOARD = {
    "sst": Leaderboard("sst", "Predicted_Sentiment", "class", 5),
    "para": Leaderboard("para", "Predicted_Is_Paraphrase", "class", 2),
    "sts": Leaderboard("sts", "Predicted_Similiary", "float", metric="pearson"),
    "cfimdb": Leaderboard("cfimdb", "Predicted_Sentiment", "class", 2),
}


def prediction_path(pred_dir: str | Path, task: str, split: str) -> Path:
    return Path(pred_dir) / f"{task}-{split}-output.csv"


def write_predictions(path: str | Path, task: str, ids: Sequence[str], values: Sequence) -> Path:
    """Write a prediction file in the course's exact format, atomically (temp file + rename)."""
    board = LEADERBOARD[task]
    if len(ids) != len(values):
        raise ValueError(f"{len(ids)} ids but {len(values)} predictions")
    text = f"id \t {board.column} \n" + "".join(f"{i} , {board.format(v)} \n" for i, v in zip(ids, values))
    return write_text(path, text)


@dataclass
class Report:
    """What checking one prediction file found: the metric when it could be computed, and every problem."""

    task: str
    path: str
    gold: str
    n_predictions: int = 0
    n_gold: int = 0
    metric: str = ""
    score: float | None = None
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


SPLIT = re.compile(r"\s*[,\t]\s*")
NOT_TEXT = re.compile("[\udc80-\udcff\x00]")
MAX_LISTED = 10
MAX_LINE_ERRORS = 20        # bad lines listed per file; the rest are counted in one line
MAX_QUOTED = 80             # characters of a line, an id or a value quoted in a message


def _short(text: str) -> str:
    """text cut to MAX_QUOTED characters, with "..." when cut: a file's text quoted in a message stays short."""
    return text if len(text) <= MAX_QUOTED else text[:MAX_QUOTED] + "..."


def read_predictions(path: str | Path, task: str, report: Report) -> dict[str, float | int]:
    """id -> value from a prediction file; the first MAX_LINE_ERRORS bad lines go into report.errors as
    path:line: reason (a quoted text cut to MAX_QUOTED characters), and one more line counts the others."""
    board = LEADERBOARD[task]
    try:  # a BOM is dropped; bytes that are not UTF-8 stay as surrogates and make their line an error
        lines = Path(path).read_bytes().decode("utf-8-sig", errors="surrogateescape").splitlines()
    except OSError as e:
        report.errors.append(f"{path}: cannot read the file ({e.strerror})")
        return {}
    values: dict[str, float | int] = {}
    first_line: dict[str, int] = {}
    bad = 0

    def listed() -> bool:          # counts a bad line; its message is made only when listed (a file may hold millions)
        nonlocal bad
        bad += 1
        return bad <= MAX_LINE_ERRORS

    start = 0
    if lines and lines[0].strip():
        head = SPLIT.split(lines[0].strip())
        if head[0].lower() == "id":
            start = 1
            if len(head) != 2 or head[1] != board.column:
                report.warnings.append(f"{path}:1: header {_short(lines[0].strip())!r}; the grader expects "
                                       f"'id \\t {board.column}' (spelled exactly so)")
        else:
            report.warnings.append(f"{path}:1: no header line; expected 'id \\t {board.column}'")
    for n, line in enumerate(lines[start:], start + 1):
        if not line.strip():
            continue
        if NOT_TEXT.search(line):
            if listed():
                report.errors.append(f"{path}:{n}: bytes that are not UTF-8 text, or a NUL byte; save the file as UTF-8")
            continue
        cells = SPLIT.split(line.strip())
        if len(cells) != 2 or not cells[0]:
            if listed():
                report.errors.append(f"{path}:{n}: expected 'id , value', got {_short(line.strip())!r}")
            continue
        ident, text = cells
        value, problem = board.parse(text)
        if problem:
            if listed():
                shown = problem.replace(repr(text), repr(_short(text)))
                report.errors.append(f"{path}:{n}: id {_short(ident)}: {shown}")
            continue
        if ident in values:
            if listed():
                report.errors.append(f"{path}:{n}: duplicate id {_short(ident)} (first on line {first_line[ident]})")
            continue
        values[ident], first_line[ident] = value, n
    if bad > MAX_LINE_ERRORS:
        report.errors.append(f"{path}: {bad} lines with errors; {bad - MAX_LINE_ERRORS} more lines with errors not "
                             "listed")
    return values


def _listed(kind: str, ids: list[str], where: str) -> str:
    shown = ", ".join(_short(i) for i in ids[:MAX_LISTED])
    shown += f", ... ({len(ids) - MAX_LISTED} more)" if len(ids) > MAX_LISTED else ""
    return f"{len(ids)} {kind} ids {where}: {shown}"


def check_predictions(path: str | Path, task: str, gold: Records) -> Report:
    """Check a prediction file against the gold records (ids missing, duplicated, unknown; bad values),
    and compute the task's metric when the file is clean and the gold file has labels."""
    board = LEADERBOARD[task]
    report = Report(task, str(path), str(gold.path), n_gold=len(gold), metric=board.metric)
    report.errors += gold_errors(gold, path)
    values = read_predictions(path, task, report)
    report.n_predictions = len(values)
    gold_ids = {e.id for e in gold}
    unknown = [i for i in values if i not in gold_ids]
    missing = [e.id for e in gold if e.id not in values]
    if unknown:
        skipped = f" (its {len(gold.skipped)} bad row(s) above skipped)" if gold.skipped else ""
        report.errors.append(_listed("unknown", unknown, f"not in {gold.path}{skipped}"))
    if missing:
        report.errors.append(_listed("missing", missing, f"of {gold.path} have no prediction"))
    if board.kind == "float":
        outside = [i for i, v in values.items() if not 0.0 <= v <= 5.0]
        if outside:
            report.warnings.append(_listed("", outside, "have a similarity outside [0, 5] (fine for Pearson r)")
                                   .replace("  ", " "))
    fewest = 2 if board.metric == "pearson" else 1
    if gold.labelled and len(gold) < fewest:
        report.errors.append(f"{gold.path}: {len(gold)} labelled rows to score; the {board.metric} needs at least "
                             f"{fewest}: give --data-dir the folder of the full gold files")
    if report.ok and gold.labelled:
        preds = [values[e.id] for e in gold]
        labels = [e.label for e in gold]
        report.score = pearson(preds, labels) if board.metric == "pearson" else accuracy(preds, labels)
    return report


def gold_errors(gold: Records, path: str | Path) -> list[str]:
    """The gold file's skipped rows as report errors, GOLD:LINE: reason, said to be the gold file's and not `path`'s
    (the first MAX_LINE_ERRORS, then one line counting the others)."""
    shown = [f"{s}: a bad row of the gold file, not of {path}: fix the gold file or get it again"
             for s in gold.skipped[:MAX_LINE_ERRORS]]
    if len(gold.skipped) > MAX_LINE_ERRORS:
        shown.append(f"{gold.path}: {len(gold.skipped) - MAX_LINE_ERRORS} more bad rows of the gold file not listed")
    return shown


# The dev figures' names on the console and in the curves' legend (a key not here keeps its own name).
DEV_NAMES = {"sst_accuracy": "SST acc", "para_accuracy": "Quora acc", "sts_pearson": "STS r", "overall": "overall"}


def overall_score(sst_accuracy: float, para_accuracy: float, sts_pearson: float) -> float:
    """The leaderboard's overall score: the mean of SST accuracy, Quora accuracy and (r + 1) / 2."""
    return (sst_accuracy + para_accuracy + (sts_pearson + 1) / 2) / 3


def gold_records(data_dir: str | Path, task: str, split: str) -> Records | None:
    """The gold (or test-input) records of a leaderboard task's split, None where the file does not exist; its bad
    rows are in .skipped (check_predictions reports them as the gold file's errors, GOLD:LINE)."""
    path = TASKS[task].path(data_dir, split)
    return TASKS[task].read(path) if path.is_file() else None


def raw_path(pred_dir: str | Path, task: str, split: str) -> Path:
    """PRED_DIR/{task}-{split}-raw.csv: a split's raw outputs (logits or scores), for ensembles."""
    return Path(pred_dir) / f"{task}-{split}-raw.csv"


def write_raw(path: str | Path, ids: Sequence[str], rows: torch.Tensor) -> Path:
    """id and the raw output (N,) or (N, C) of every record, one line each: `id , v1 v2 ...` (exact float reprs)."""
    rows = rows.reshape(len(ids), -1).tolist()                           # (N,) or (N, C) -> (N, C)
    return write_text(path, "id , output\n" + "".join(f"{i} , {' '.join(repr(float(x)) for x in r)}\n"
                                                      for i, r in zip(ids, rows)))


def read_raw(path: str | Path) -> dict[str, list[float]]:
    """id -> raw output values, from a file write_raw wrote; a line that is not `id , v1 v2 ...` of finite numbers, a
    row of another width than the first, or an id given twice is a DataError naming FILE:LINE."""
    try:
        lines = Path(path).read_bytes().decode("utf-8-sig").splitlines()
    except OSError as e:
        raise DataError(f"{path}: cannot read the raw outputs ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text (byte {e.start}): not a file --raw-outputs wrote") from None
    out: dict[str, list[float]] = {}
    first: dict[str, int] = {}
    width: tuple[int, int] | None = None                     # (values per row, the line that set it)
    for n, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        ident, sep, values = line.partition(" , ")
        ident = ident.strip()
        if not sep or not ident or not values.split():
            raise DataError(f"{path}:{n}: expected 'id , values' (written by --raw-outputs), got {_short(line)!r}")
        row = []
        for text in values.split():
            try:
                row.append(float(text))
            except ValueError:
                raise DataError(f"{path}:{n}: id {_short(ident)}: value {_short(text)!r} is not a number") from None
            if not math.isfinite(row[-1]):
                raise DataError(f"{path}:{n}: id {_short(ident)}: value {text!r} is not finite: the run's outputs "
                                "diverged; leave it out of the ensemble")
        if width is None:
            width = (len(row), n)
        elif len(row) != width[0]:
            raise DataError(f"{path}:{n}: id {_short(ident)}: {len(row)} values, where line {width[1]} has "
                            f"{width[0]}: write the file again with --raw-outputs")
        if ident in out:
            raise DataError(f"{path}:{n}: duplicate id {_short(ident)} (first on line {first[ident]})")
        out[ident], first[ident] = row, n
    return out
