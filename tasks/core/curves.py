"""Training curves: every optimiser step's loss and every epoch's dev figures, as JSON lines, a PNG, and (when the
tensorboard package is installed; it is not a dependency) a TensorBoard log.

fit() (tasks/core/train.py) writes them beside its checkpoint, for every CLI: CHECKPOINT.curves.jsonl, one line per
optimiser step {"kind": "step", "step", "epoch", "loss", "task"?} and one per epoch {"kind": "epoch", "epoch",
"train_loss", "dev_...", ...}, and, where a command gives them (mark_start: SimCSE's rounds), one "start" line
{"kind": "start", "epoch": 0, "unit", "dev_...": the scores before training}; CHECKPOINT.curves.png at the end of
the run (python -m tasks.curves FILE redraws it; given a run directory, its checkpoint's curves, the PNG inside it; a
missing or empty file is one error line); and, with tensorboard, the same scalars under CHECKPOINT.tensorboard/ (tensorboard --logdir ...). A resumed run keeps
the lines of the epochs it resumes after and appends.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

START = "start"     # a line's kind: the dev axis's unit and the dev figures before training, drawn at 0


def curves_path(checkpoint: str | Path) -> Path:
    """CHECKPOINT.curves.jsonl beside the checkpoint."""
    checkpoint = Path(checkpoint)
    return checkpoint.with_name(checkpoint.stem + ".curves.jsonl")


def summary_writer_class() -> type | None:
    """torch's TensorBoard SummaryWriter, or None when the tensorboard package is not installed (an optional extra):
    whether runs write a TensorBoard log beside their curves."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:                                  # tensorboard absent: the JSON lines and the PNG still come
        return None
    return SummaryWriter


def _summary_writer(logdir: Path):
    """A TensorBoard SummaryWriter writing under logdir, or None without the tensorboard package."""
    writer = summary_writer_class()
    return None if writer is None else writer(str(logdir))


class Curves:
    """The JSON-lines log of one run; close() draws the PNG."""

    def __init__(self, path: str | Path, keep_epochs: int = 0, tensorboard: bool = True, keep_steps: int | None = None):
        """A resumed run keeps the lines of the epochs it resumes after (and, resumed within an epoch, the steps up
        to keep_steps) and appends; a new run starts the file again."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

        def kept_line(line: dict) -> bool:
            if keep_steps is not None and line["kind"] == "step":
                return line["step"] <= keep_steps
            return line["epoch"] <= keep_epochs

        kept = [line for line in read_curves(self.path) if kept_line(line)] if keep_epochs or keep_steps else []
        self.path.write_text("".join(json.dumps(line) + "\n" for line in kept))
        self.file = self.path.open("a")
        stem = self.path.name[: -len(".curves.jsonl")] if self.path.name.endswith(".curves.jsonl") else self.path.stem
        self.writer = _summary_writer(self.path.with_name(stem + ".tensorboard")) if tensorboard else None

    def step(self, step: int, epoch: int, loss: float, task: str | None = None) -> None:
        """One optimiser step's mean training loss (step counts from 1 over the whole run)."""
        line = {"kind": "step", "step": step, "epoch": epoch, "loss": loss} | ({"task": task} if task else {})
        self.file.write(json.dumps(line) + "\n")
        if self.writer is not None:
            self.writer.add_scalar(f"train/loss{'_' + task if task else ''}", loss, step)

    def epoch(self, record: dict, step: int) -> None:
        """One epoch's record from fit(): training losses, seconds, dev figures."""
        self.file.write(json.dumps({"kind": "epoch", **record}) + "\n")
        self.sync()
        if self.writer is not None:
            for k, v in record.items():
                if k.startswith("dev_") and isinstance(v, (int, float)):
                    self.writer.add_scalar(f"dev/{k[4:]}", v, step)

    def sync(self) -> None:
        """The lines so far onto the disk (flushed and fsynced): once an epoch, before its checkpoint is written, so a
        crash loses no line the checkpoint has."""
        self.file.flush()
        os.fsync(self.file.fileno())

    def close(self) -> Path:
        """Close the log and draw it: returns the PNG's path."""
        self.file.close()
        if self.writer is not None:
            self.writer.close()
        return plot_curves(self.path)


def mark_start(path: str | Path, unit: str, scores: dict[str, float]) -> Path:
    """Give a run's curves file its dev axis's unit (a command whose "epochs" are rounds of N steps: "round of N
    optimiser steps") and the dev figures before training (drawn at 0), as a "start" line before the others (in
    place of an earlier one: a resumed run keeps it, epoch 0), and draw the file again; returns the PNG's path."""
    from minbert.files import write_text

    head = {"kind": START, "epoch": 0, "unit": unit} | {f"dev_{k}": v for k, v in scores.items()}
    lines = [head] + [x for x in read_curves(path, quiet=True) if x["kind"] != START]
    write_text(path, "".join(json.dumps(line) + "\n" for line in lines))
    return plot_curves(path)


def read_curves(path: str | Path, quiet: bool = False) -> list[dict]:
    """The lines of a curves file (none if it does not exist). A last line cut short (an append the run did not
    finish: a kill or a full disk mid-write) is left out with a note (quiet: without); any other line that is not
    JSON, or not an object with a "kind" and an "epoch" (a step's with its "step" and "loss"), is one error naming
    FILE:LINE."""
    from .errors import ConfigurationError

    path = Path(path)
    if not path.is_file():
        return []
    numbered = [(n, line) for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1) if line.strip()]
    out = []
    for n, line in numbered:
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            if n == numbered[-1][0]:
                if not quiet:
                    print(f"note: {path}:{n}: the last line is cut short (a write the run did not finish); left "
                          "out", file=sys.stderr)
                break
            raise ConfigurationError(f"{path}:{n}: not valid JSON ({e.msg}): a curves file is one JSON object a "
                                     "line, as a training run writes it") from None
        if not _curves_line(row):
            raise ConfigurationError(f'{path}:{n}: not a curves line (a JSON object with "kind" and "epoch", and a '
                                     'step\'s "step" and "loss"), as a training run writes it')
        out.append(row)
    return out


def _curves_line(row: object) -> bool:
    """Whether a parsed line is one the curves' readers can use."""
    def number(key: str) -> bool:
        return isinstance(row.get(key), (int, float)) and not isinstance(row.get(key), bool)
    if not isinstance(row, dict) or not isinstance(row.get("kind"), str) or not number("epoch"):
        return False
    return row["kind"] != "step" or (number("step") and number("loss"))


def plot_curves(path: str | Path, out: str | Path | None = None) -> Path:
    """Training loss per step (each task's own where batches name one) and the dev figures per epoch (per the unit
    and from the start point a "start" line gives), as a PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    from .evaluation import DEV_NAMES
    from .figures import save_figure

    lines = read_curves(path)
    steps = [x for x in lines if x["kind"] == "step"]
    start = next((x for x in reversed(lines) if x["kind"] == START), {})
    dev = [x for x in lines if x["kind"] == "epoch" or x is start]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.4), layout="constrained")
    for task in sorted({x.get("task", "") for x in steps}):
        mine = [x for x in steps if x.get("task", "") == task]      # one point alone gets a marker, or is not seen
        left.plot([x["step"] for x in mine], [x["loss"] for x in mine], lw=0.6, marker="." if len(mine) < 2 else None,
                  label=task or "loss")
    left.set(xlabel="optimiser step", ylabel="training loss", title="training loss")
    keys = sorted({k for x in dev for k in x if k.startswith("dev_")})
    for key in keys:
        mine = [x for x in dev if key in x]
        right.plot([x["epoch"] for x in mine], [x[key] for x in mine], marker="o", label=DEV_NAMES.get(key[4:], key[4:]))
    right.set(xlabel=start.get("unit", "epoch") + (" (0: before training)" if any(k in start for k in keys) else ""),
              ylabel=dev_label(keys), title="dev figures")
    for ax, shown in ((left, steps), (right, keys)):
        xs = {x for line in ax.get_lines() for x in line.get_xdata()}
        if len(xs) <= 10:                   # steps and epochs are whole numbers: a few, each its tick
            ax.set_xticks(sorted(xs))
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.ticklabel_format(axis="y", useOffset=False)
        if shown:                                                   # below the panel: over it, it hides points
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=4, frameon=False)
    return save_figure(fig, out or Path(path).with_suffix(".png"), dpi=100)


def dev_label(keys: list[str]) -> str:
    """The dev panel's y label: what its figures measure (accuracies and Pearson r share the axis)."""
    kinds = [name for word, name in (("accuracy", "accuracy"), ("pearson", "Pearson r")) if any(word in k for k in keys)]
    return f"dev score ({'; '.join(kinds)})" if kinds else "dev score"


def curves_file(given: str | Path) -> Path:
    """The curves file `python -m tasks.curves` draws: the file named, or a run directory's CHECKPOINT.curves.jsonl
    (its only *.curves.jsonl where the checkpoint has another name); a missing or empty one is a user error."""
    from .errors import ConfigurationError, MissingFileError
    from .runs import CHECKPOINT

    path = Path(given)
    if path.is_dir():
        found = sorted(path.glob("*.curves.jsonl"))
        main = curves_path(path / CHECKPOINT)
        if main in found or len(found) == 1:
            path = main if main in found else found[0]
        elif found:
            raise ConfigurationError(f"{given}: the run directory has several curves files "
                                     f"({', '.join(f.name for f in found)}): name one")
        else:
            raise MissingFileError(f"{given}: the run directory has no curves file (*.curves.jsonl): a training run "
                                   "writes CHECKPOINT.curves.jsonl beside its checkpoint")
    elif not path.is_file():
        raise MissingFileError(f"{given}: no such file or directory (give a CHECKPOINT.curves.jsonl or a run "
                               "directory)")
    if not read_curves(path, quiet=True):           # plot_curves reads it again, and says a cut line once
        raise ConfigurationError(f"{path}: the curves file is empty (no step or epoch lines): nothing to draw")
    return path


def main(argv: list[str] | None = None) -> int:
    from .errors import figure_to_write, user_path
    p = argparse.ArgumentParser(prog="python -m tasks.curves", description="Draw a run's curves file as a PNG.")
    p.add_argument("path", type=user_path, help="a CHECKPOINT.curves.jsonl file, or a run directory (its checkpoint's curves)")
    p.add_argument("--out", default=None, type=figure_to_write,
                   help="the PNG (default: beside the curves file, .png); a name without an extension gets .png")
    args = p.parse_args(argv)
    print(f"wrote {plot_curves(curves_file(args.path), args.out)}")
    return 0


if __name__ == "__main__":
    from .errors import run_cli
    sys.exit(run_cli(main))
