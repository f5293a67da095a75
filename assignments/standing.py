"""The leaderboard's standing of one upload: the gold, the salted public/private split of the test set, the figures.

The gold is a folder the instructor keeps (never in the repository's data/, which every student tree copies) with
the labelled test files in the dev files' format of the board's tasks (assignments/boards.py): ids-sst-test.csv,
quora-test.csv, sts-test.csv for the multitask board, ids-sst-test.csv alone for part1's (the *-test-student.csv
names are accepted too when they carry the label column). The salt, a secret string kept beside
the gold, splits the test ids: an id is private when sha256(salt + "\\0" + id), read as a number in [0, 1), falls
below the private fraction. The split is fixed by the salt alone: the same for every upload, every row order and
every run, and unknown to students who have no salt.

Every message an upload gets names its own files and lines and the public files' names (ids-sst-test-student.csv),
never a gold label or the gold's location.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tasks.core.data import LABEL_COLUMNS, TASKS, DataError, Records
from tasks.core.evaluation import Report, accuracy, check_predictions, pearson, read_predictions

from .boards import FIGURES, MULTITASK, NAMES, Board
from .uploads import UploadError, find_upload

GOLD_NAMES = {"sst": ("ids-sst-test.csv", "ids-sst-test-student.csv"), "para": ("quora-test.csv", "quora-test-student.csv"),
              "sts": ("sts-test.csv", "sts-test-student.csv")}
MIN_SALT = 16
SALT_HINT = "make one with: python -c 'import secrets; print(secrets.token_hex(32))' > salt.txt"


class GoldError(ValueError):
    """The instructor's gold, salt or settings cannot be used; the message names the file and what to do."""


def gold_path(gold_dir: str | Path, task: str) -> Path:
    """The gold file of a task in gold_dir: the first of its accepted names that exists."""
    names = GOLD_NAMES[task]
    for name in names:
        if (Path(gold_dir) / name).is_file():
            return Path(gold_dir) / name
    raise GoldError(f"{Path(gold_dir) / names[0]}: no such file; the gold folder needs {names[0]} (or {names[1]} "
                    "with its label column): the labelled test file, in the dev file's format")


def _labelled(path: Path, task: str) -> Records:
    """A gold file read strictly: it must exist, have the label column, and have no bad row."""
    try:
        records = TASKS[task].read(path, strict=True)
    except DataError as e:
        raise GoldError(f"gold: {e}") from None
    if not records.labelled:
        raise GoldError(f"{path}:1: no label column ({' / '.join(LABEL_COLUMNS)}); the gold must be the labelled "
                        "test file, in the dev file's format")
    if len(records) < 2:
        raise GoldError(f"{path}: {len(records)} labelled rows; a gold file needs at least 2")
    return records


def load_gold(gold_dir: str | Path, data_dir: str | Path | None = None,
              board: Board = MULTITASK) -> dict[str, Records]:
    """task -> the board's labelled test records; their ids must be those of data_dir's test files (if it has them)."""
    gold = {task: _labelled(gold_path(gold_dir, task), task) for task in board.tasks}
    for task, records in gold.items():
        student = TASKS[task].path(data_dir, "test") if data_dir is not None else None
        if student is None or not student.is_file():
            continue
        ids = {e.id for e in TASKS[task].read(student)}
        gold_ids = {e.id for e in records}
        if ids != gold_ids:
            raise GoldError(f"{records.path}: its ids are not those of {student} ({len(gold_ids - ids)} only in the "
                            f"gold, {len(ids - gold_ids)} only in the students' file); students predict that file")
    return gold


def load_dev(data_dir: str | Path, board: Board = MULTITASK) -> dict[str, Records]:
    """task -> the labelled dev records of the board's tasks in the public data folder."""
    return {task: _labelled(TASKS[task].path(data_dir, "dev"), task) for task in board.tasks}


def read_salt(path: str | Path) -> str:
    """The salt: the file's text without surrounding whitespace; at least MIN_SALT characters."""
    try:
        salt = Path(path).read_text().strip()
    except OSError as e:
        raise GoldError(f"{path}: cannot read the salt file ({e.strerror}); {SALT_HINT}") from None
    if len(salt) < MIN_SALT:
        raise GoldError(f"{path}: the salt has {len(salt)} characters, fewer than {MIN_SALT}: too easy to guess; "
                        f"{SALT_HINT}")
    return salt


def check_fraction(fraction: float) -> float:
    """The private fraction, which must lie strictly between 0 and 1 (each part needs ids)."""
    if not 0 < fraction < 1:
        raise GoldError(f"the private fraction must lie strictly between 0 and 1, not {fraction}")
    return fraction


def split_value(ident: str, salt: str) -> float:
    """sha256(salt + "\\0" + id)'s first 8 bytes as a number in [0, 1)."""
    digest = hashlib.sha256(f"{salt}\0{ident}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def is_private(ident: str, salt: str, fraction: float) -> bool:
    """Whether a test id is in the private part: its split value below the private fraction."""
    return split_value(ident, salt) < fraction


def split_ids(ids: list[str], salt: str, fraction: float) -> tuple[list[str], list[str]]:
    """(public ids, private ids), each in the given order; every id in exactly one."""
    public, private = [], []
    for ident in ids:
        (private if is_private(ident, salt, fraction) else public).append(ident)
    return public, private


@dataclass
class Figures:
    """The board's tasks' figures (accuracy, STS's Pearson r) on one set of ids, and how many ids each task has."""

    board: Board
    scores: dict[str, float]
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def overall(self) -> float:
        return self.board.overall(self.scores)

    def value(self, key: str) -> float:
        """The overall score ("overall") or a task's figure."""
        return self.overall if key == "overall" else self.scores[key]

    def line(self) -> str:
        """One line: overall, then each task's figure."""
        return f"overall {self.overall:.4f} (" + ", ".join(f"{FIGURES[t]} {self.scores[t]:.4f}"
                                                           for t in self.board.tasks) + ")"

    def count_line(self) -> str:
        """How many ids each figure was computed on."""
        return "ids: " + ", ".join(f"{NAMES[t]} {self.counts[t]}" for t in self.board.tasks if t in self.counts)


def figures(values: dict[str, dict], gold: dict[str, Records], board: Board,
            ids: dict[str, list[str]] | None = None) -> Figures:
    """The metrics of the predicted values against the gold, over ids (task -> ids; None: every gold id)."""
    out, counts = {}, {}
    for task in board.tasks:
        labels = {e.id: e.label for e in gold[task]}
        chosen = ids[task] if ids is not None else list(labels)
        preds, golds = [values[task][i] for i in chosen], [labels[i] for i in chosen]
        out[task] = pearson(preds, golds) if task == "sts" else accuracy(preds, golds)
        counts[task] = len(chosen)
    return Figures(board, out, counts)


@dataclass
class GoldSplit:
    """The gold test records of a board's tasks and their salted split: task -> public ids, task -> private ids."""

    gold: dict[str, Records]
    public: dict[str, list[str]]
    private: dict[str, list[str]]
    board: Board

    def answer_key(self) -> str:
        """A short sha256 of what uploads are scored against (the board, each task's gold labels by part): results.json
        records it, so that a result kept past the daily limit is one graded against the same labels and split."""
        digest = hashlib.sha256(self.board.name.encode())
        for task in self.board.tasks:
            labels = {e.id: e.label for e in self.gold[task]}
            for part in (self.public[task], self.private[task]):
                digest.update(repr(sorted((i, labels[i]) for i in part)).encode())
        return digest.hexdigest()[:16]


def split_gold(gold: dict[str, Records], salt: str, fraction: float, board: Board = MULTITASK) -> GoldSplit:
    """Split every task's test ids; each part must keep at least 2 ids a task (Pearson r needs 2)."""
    check_fraction(fraction)
    public, private = {}, {}
    for task in board.tasks:
        records = gold[task]
        public[task], private[task] = split_ids([e.id for e in records], salt, fraction)
        for part, ids in (("public", public[task]), ("private", private[task])):
            if len(ids) < 2:
                raise GoldError(f"{records.path}: the split leaves {len(ids)} ids in the {part} part of {task}; "
                                "use more test rows or a private fraction nearer 0.5")
    return GoldSplit(gold, public, private, board)


@dataclass
class Standing:
    """What one upload earned: valid or not with every problem, and the dev, public and private figures."""

    valid: bool
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)            # the files read, as named in the upload
    notes: list[str] = field(default_factory=list)            # where they were found, when it is worth saying
    dev: Figures | None = None
    public: Figures | None = None
    private: Figures | None = None


def _shown(records: Records, task: str, split: str) -> Records:
    """The gold records under the public file's name, so that messages name ids-sst-test-student.csv, not the gold."""
    return Records(list(records), Path(TASKS[task].path(".", split).name), records.labelled, [])


def _named(message: str, shown: str) -> str:
    """A message about a file, led by the file's name as in the upload (whole-file messages name no file)."""
    return message if message.startswith(shown) else f"{shown}: {message}"


def score_upload(submission: str | Path, tests: GoldSplit, dev: dict[str, Records] | None = None) -> Standing:
    """Find, check and score an upload: every file's problems with file and line; figures only when all are valid.
    The dev files are required and scored when dev gold is given."""
    board = tests.board
    splits = {"test": tests.gold, **({"dev": dev} if dev is not None else {})}
    standing = Standing(valid=False)
    with tempfile.TemporaryDirectory(prefix="minbert-upload-") as work:
        try:
            upload = find_upload(submission, work, board)
        except UploadError as e:
            standing.problems.append(str(e))
            return standing
        standing.notes += upload.notes
        values: dict[str, dict[str, dict]] = {split: {} for split in splits}
        for split, gold in sorted(splits.items()):
            for task in board.tasks:
                name = f"{task}-{split}-output.csv"
                path = upload.files.get(name)
                if path is None:
                    standing.problems.append(f"{name}: not in the upload; upload {board.wanted} ({board.made_by})")
                    continue
                standing.files.append(upload.shown[path])
                report = check_predictions(path, task, _shown(gold[task], task, split))
                shown = upload.shown[path]
                standing.problems += [_named(upload.display(e), shown) for e in report.errors]
                standing.warnings += [_named(upload.display(w), shown) for w in report.warnings]
                if report.ok:
                    values[split][task] = read_predictions(path, task, Report(task, str(path), ""))
                    if task == "sts" and len(set(values[split][task].values())) == 1:
                        standing.notes.append(f"{shown}: every similarity is {next(iter(values[split][task].values())):g}, "
                                              "so Pearson r is undefined (a constant correlates with nothing); it is "
                                              "scored as r = 0")
    if standing.problems:
        return standing
    standing.valid = True
    standing.public = figures(values["test"], tests.gold, board, tests.public)
    standing.private = figures(values["test"], tests.gold, board, tests.private)
    if dev is not None:
        standing.dev = figures(values["dev"], dev, board)
    return standing
