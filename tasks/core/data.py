"""Readers for the CS224N task files: typed records, every bad row reported by file and line.

The four formats (tab-separated, Python-csv quoting, an unnamed pandas index first):

    single sentence, labelled     \\tid\\tsentence\\tsentiment                  (ids-sst-*, ids-cfimdb-*)
    single sentence, unlabelled   0\\t\\tid\\tsentence     (the malformed header of the *-test-student files)
    sentence pair, labelled       \\tid\\tsentence1\\tsentence2\\t{is_duplicate|similarity}
    sentence pair, unlabelled     \\tid\\tsentence1\\tsentence2

Columns are found by their header name, so the extra index column of the test-student files
needs no special case; a header naming a column twice, a comma-separated file and another task's
label column (an STS file given as Quora's) are refused. A row with the wrong number of columns,
the header line again (two files joined), an empty or repeated id, an empty sentence, an empty,
unparsable or out-of-range label, or lines run together by an unpaired quote mark is skipped and
recorded (file, line or lines, reason); the caller prints `records.summary()`, or passes strict=True
to stop at the first bad row. Rows are never dropped silently; empty lines are not rows, and are
only counted. (Batching the records: tasks/core/batching.py.)
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .errors import UserError

LABEL_COLUMNS = ("sentiment", "is_duplicate", "similarity")
LABELS_OF = {"sentiment": "SST and CFIMDB", "is_duplicate": "Quora", "similarity": "STS"}  # whose column


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
    """A row that was not loaded, and why; `end`, the last line of several that an unpaired quote mark ran together,
    `lost`, how many rows they held (their non-empty lines; 0: each line a row), `kind`, what the summary counts it
    as (none: the reason less its details)."""

    path: str
    line: int
    reason: str
    end: int = 0
    kind: str = ""
    lost: int = 0

    @property
    def rows(self) -> int:
        return self.lost or max(1, self.end - self.line + 1)

    def __str__(self) -> str:
        lines = f"{self.line}-{self.end}" if self.end > self.line else f"{self.line}"
        return f"{self.path}:{lines}: {self.reason}"


class Records(list):
    """The examples of one file (a list), with the file's path, whether it had labels, and the skipped rows."""

    def __init__(self, items: list, path: Path, labelled: bool, skipped: list[Skipped], empty_lines: int = 0):
        super().__init__(items)
        self.path, self.labelled, self.skipped, self.empty_lines = path, labelled, skipped, empty_lines

    def summary(self) -> str:
        """One line of counts, then one line per skipped row: what a CLI prints after loading."""
        head = f"{self.path}: {len(self)} examples loaded"
        empty = f", {self.empty_lines} empty line{'s' * (self.empty_lines != 1)} ignored" if self.empty_lines else ""
        if not self.skipped:
            return f"{head}, none skipped{empty}"
        why: Counter = Counter()
        for s in self.skipped:
            why[s.kind or re.sub(r" \(.*\)$|: '.*'$", "", s.reason)] += s.rows
        reasons = "; ".join(f"{n} {r}" for r, n in why.most_common())
        rows = sum(s.rows for s in self.skipped)
        return "\n".join([f"{head}, {rows} rows skipped ({reasons}){empty}:"] + [f"  {s}" for s in self.skipped])


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
    column: str = ""          # the header's name for it (one of LABEL_COLUMNS; none: any of them)

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


SENTIMENT5 = LabelSpec("class", num_classes=5, column="sentiment")
BINARY = LabelSpec("class", num_classes=2, column="is_duplicate")      # Quora's
BINARY_SENTIMENT = LabelSpec("class", num_classes=2, column="sentiment")   # CFIMDB's
SIMILARITY = LabelSpec("float", low=0.0, high=5.0, column="similarity")


NOT_UTF8 = re.compile("[\udc80-\udcff]")  # bytes that were not UTF-8, as decode(errors="surrogateescape") keeps them

# The task files read since the run began (tasks.core.runs.run_paths starts each run afresh): {path as given: its
# bytes, sha256 and whether it had labels}. A training checkpoint records them, and --resume refuses a labelled file
# (training's, selection's) changed since (tasks.core.checkpoints.check_data_files); a test file may change.
_FILES_READ: dict[str, dict] = {}


def files_read() -> dict[str, dict]:
    """{path: {"bytes": size, "sha256": hex digest, "labelled": bool}} of each task file read since
    forget_files_read() ("labelled" once its header was read)."""
    return {path: dict(mark) for path, mark in _FILES_READ.items()}


def forget_files_read() -> None:
    """Start a new run's record of the task files it reads (files_read)."""
    _FILES_READ.clear()


def _text(path: Path) -> str:
    """The file's text: UTF-8, a leading BOM dropped, bytes that are not UTF-8 kept as surrogates (rows with them
    are skipped and reported); its size and sha256 go into files_read()."""
    if not path.is_file():
        raise DataError(f"{path}: no such file" + ("; it is a directory" if path.is_dir() else
                                                   "; check the path, or --data-dir for the default files"))
    try:
        data = path.read_bytes()
    except OSError as e:
        raise DataError(f"{path}: cannot read the file ({e.strerror}); check its permissions") from None
    _FILES_READ[str(path)] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    return data.decode("utf-8-sig", errors="surrogateescape")


def file_row_spans(path: Path) -> Iterator[tuple[int, int, list[str] | str]]:
    """(first line, last line, cells) for every row, header first; line numbers count physical lines, from 1 (a
    quoted cell may hold line breaks). A row the csv module cannot split (a cell over its size limit: a very long
    line, or an unclosed quote) comes as (line, line, why)."""
    reader = csv.reader(io.StringIO(_text(path), newline=""), delimiter="\t")
    start = 1
    while True:
        try:
            cells: list[str] | str = next(reader)
        except StopIteration:
            return
        except csv.Error as e:   # the reader goes on with the next line
            cells = f"cannot split the row into cells ({e}): a very long line, or an unclosed quote mark?"
        yield start, max(start, reader.line_num), cells
        start = reader.line_num + 1


def file_rows(path: Path) -> Iterator[tuple[int, list[str] | str]]:
    """(line number, cells) for every row, header first, as file_row_spans gives them."""
    return ((start, cells) for start, _, cells in file_row_spans(path))


LINE_BREAK = re.compile(r"\r\n|\r|\n")
UNPAIRED = "lines run together by an unpaired quote mark"


def _run_on(start: int, end: int, cells: list[str]) -> str | None:
    """Why a row is lines that an unpaired quote mark ran together (None: it is not): a cell holds a tab (in a
    tab-separated file only quoting puts one there), or the row spans more lines than its cells' line breaks."""
    breaks = sum(len(LINE_BREAK.findall(c)) for c in cells)
    if end > start and (end - start > breaks or any("\t" in c for c in cells)):
        return f'a quote mark opened on line {start} runs to line {end} (an unpaired "?)'
    if any("\t" in c for c in cells):
        return 'a tab inside a quoted cell (an unpaired "?)'
    return None


def _check_cells(cells: list[str]) -> None:
    """ValueError for a row with bytes that are not UTF-8 or with NUL characters."""
    text = "\t".join(cells)
    if NOT_UTF8.search(text):
        raise ValueError("bytes that are not UTF-8 text (save the file as UTF-8)")
    if "\x00" in text:
        raise ValueError("a NUL byte (a binary or UTF-16 file?)")


def _label_column(path: Path, header: list[str], label: LabelSpec) -> int | None:
    """The index of the file's label column (None: unlabelled); another task's label column alone is refused."""
    if not label.column:
        names = [c for c in header if c in LABEL_COLUMNS]
        return header.index(names[0]) if names else None
    if label.column in header:
        return header.index(label.column)
    other = next((c for c in header if c in LABEL_COLUMNS), None)
    if other is not None:
        raise DataError(f"{path}:1: its label column is {other!r}, {LABELS_OF[other]}'s; the {LABELS_OF[label.column]} "
                        f"files label each row in {label.column!r} (a file of another task?)")
    return None


def _read(path: str | Path, sentence_columns: tuple[str, ...], label: LabelSpec, strict: bool, ptb: bool) -> Records:
    path = Path(path)
    rows = file_row_spans(path)
    try:
        _, _, header = next(rows)
    except StopIteration:
        raise DataError(f"{path}:1: the file is empty; expected a header with id and {', '.join(sentence_columns)}")
    if isinstance(header, str):
        raise DataError(f"{path}:1: the header: {header}")
    if len(header) == 1 and ("," in header[0] or ";" in header[0]):
        raise DataError(f"{path}:1: the file is not tab-separated (its header is one cell, {header[0][:80]!r}): the "
                        "course's files separate columns with tabs; save it as TSV (pandas: to_csv(path, sep='\\t'))")
    try:
        _check_cells(header)
    except ValueError as e:
        raise DataError(f"{path}:1: the header has {e}") from None
    twice = next((c for i, c in enumerate(header) if c.strip() and c in header[:i]), None)
    if twice is not None:
        raise DataError(f"{path}:1: the header names the column {twice!r} twice; give each column its own name")
    missing = [c for c in ("id", *sentence_columns) if c not in header]
    if missing:
        raise DataError(f"{path}:1: the header {str(header)[:200]} has no {' or '.join(missing)} column; "
                        f"expected id and {', '.join(sentence_columns)}")
    label_col = _label_column(path, header, label)
    id_col, text_cols = header.index("id"), [header.index(c) for c in sentence_columns]
    items, skipped, seen, empty = [], [], {}, 0
    for line, end, cells in rows:
        if cells == []:                      # an empty line (one at the end of a file, most often): not a row
            empty += 1
            continue
        kind = ""
        try:
            if isinstance(cells, str):
                raise ValueError(cells)
            _check_cells(cells)
            run_on = _run_on(line, end, cells)
            if run_on is not None:
                kind = UNPAIRED
                raise ValueError(run_on)
            if len(cells) != len(header):
                kind = "with the wrong number of columns"
                raise ValueError(f"{len(cells)} columns, the header has {len(header)}")
            if [c.strip().lstrip("\ufeff") for c in cells] == [c.strip() for c in header]:
                raise ValueError("the header line again (files joined?)")
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
            run = kind == UNPAIRED                 # an empty line inside the run is not a row: not counted
            lost = sum(1 for part in LINE_BREAK.split("\t".join(cells)) if part) if run else 0
            bad = Skipped(str(path), line, str(e), end if run else 0, kind, lost)
            if strict:
                raise DataError(str(bad)) from None
            skipped.append(bad)
            continue
        seen[ident] = line
        if len(texts) == 1:
            items.append(SentenceExample(ident, texts[0], value, line))
        else:
            items.append(PairExample(ident, texts[0], texts[1], value, line))
    if str(path) in _FILES_READ:        # a resume checks the labelled files (what training and selection read)
        _FILES_READ[str(path)]["labelled"] = label_col is not None
    return Records(items, path, label_col is not None, skipped, empty)


def read_sentences(path: str | Path, num_classes: int = 5, strict: bool = False, ptb: bool = True) -> Records:
    """A single-sentence file (labelled or not, found from the header) -> SentenceExample records."""
    return _read(path, ("sentence",), LabelSpec("class", num_classes=num_classes, column="sentiment"), strict, ptb)


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


SIMCSE_QUORA_REST = "quora-train-rest.csv"  # the Quora training pairs a tasks.simcse stage left to tasks.multitask

TASKS = {
    "sst": TaskFiles("sst", "ids-sst", False, SENTIMENT5),
    "cfimdb": TaskFiles("cfimdb", "ids-cfimdb", False, BINARY_SENTIMENT),
    "para": TaskFiles("para", "quora", True, BINARY),
    "sts": TaskFiles("sts", "sts", True, SIMILARITY),
}


def unlabelled(path: str | Path, task: str, files: str = "training and dev") -> DataError:
    """The error for a file `task` needs labels from that has no label column: it names the column it needs."""
    column = TASKS[task].label.column
    text = Path(path).read_bytes().decode("utf-8-sig", errors="replace")
    header = next(csv.reader(io.StringIO(text.splitlines()[0] if text else ""), delimiter="\t"), [])
    return DataError(f"{path}:1: no {column!r} column (header {str(header)[:200]}); the {task} {files} files label "
                     f"each row in a column named {column!r}")
