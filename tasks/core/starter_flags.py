"""The course's starter-code spellings of the CLIs' flags (CS224N minBERT classifier.py, multitask_classifier.py).

One table, applied to argv before parsing: a student can reuse the starter's commands, e.g.

    python -m tasks.multitask --use_gpu --option finetune --batch_size 16 --sst_dev_out predictions/sst-dev-output.csv

Each alias becomes minbert's own flag; --option's values become fine-tune modes; a --*_out path must be the file
minbert writes ({task}-{split}-output.csv) and sets --predictions-dir to its folder.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigurationError


@dataclass(frozen=True)
class Alias:
    """One starter flag: its minbert counterpart, the CLIs that take it, and how its value translates."""

    starter: str
    ours: str
    clis: tuple[str, ...]
    takes_value: bool = True
    values: tuple[tuple[str, str], ...] = ()     # (starter value, our value); empty: the value passes as it is
    output: tuple[str, str] | None = None         # (task, split) of a prediction file path: becomes its folder
    note: str = ""


BOTH = ("classifier", "multitask")

STARTER_ALIASES: tuple[Alias, ...] = (
    Alias("--use_gpu", "--device cuda", BOTH, takes_value=False, note="the starter's GPU switch"),
    Alias("--option", "--fine-tune-mode", BOTH, values=(("pretrain", "last-linear-layer"), ("finetune", "full-model")),
          note="pretrain: BERT frozen, the head trains; finetune: every parameter trains"),
    Alias("--batch_size", "--batch-size", BOTH),
    Alias("--hidden_dropout_prob", "--dropout", BOTH, note="the dropout before the task heads, as in the starter"),
    Alias("--train", "--train-file", ("classifier",)),
    Alias("--dev", "--dev-file", ("classifier",)),
    Alias("--test", "--test-file", ("classifier",)),
    Alias("--dev_out", "--predictions-dir", ("classifier",), output=("", "dev")),   # "": the --task's file
    Alias("--test_out", "--predictions-dir", ("classifier",), output=("", "test")),
    *(Alias(f"--{t}_{s}_out", "--predictions-dir", ("multitask",), output=(t, s))
      for t in ("sst", "para", "sts") for s in ("dev", "test")),
)
# Spelled the same in the starter and here, so not in the table: --epochs, --lr, --seed; the multitask CLI takes
# --sst_train, --para_dev, --sts_test, ... (every --{task}_{split}) as aliases of its own --{task}-{split}.


def _outputs(argv: list[str], table: dict[str, Alias]) -> list[tuple[str, str, Alias]]:
    """The --*_out flags of argv: (flag, path, alias) each."""
    found = []
    for i, a in enumerate(argv):
        flag, sep, inline = a.partition("=")
        alias = table.get(flag)
        if alias is not None and alias.output is not None:
            if sep:
                found.append((flag, inline, alias))
            elif i + 1 < len(argv):
                found.append((flag, argv[i + 1], alias))
    return found


def _check_name(flag: str, value: str, task: str, split: str) -> None:
    want = f"{task}-{split}-output.csv"
    if Path(value).name != want:
        raise ConfigurationError(f"{flag} {value}: minbert writes the {task} {split} predictions to "
                                 f"--predictions-dir/{want}; name that file (e.g. {flag} predictions/{want})")


def check_outputs(argv: list[str] | None, cli: str, task: str) -> None:
    """The classifier's --dev_out/--test_out must name the file of the task the settings end with (from the flags,
    --config or a resumed run's run.json): {task}-{split}-output.csv."""
    argv = list(sys.argv[1:] if argv is None else argv)
    table = {a.starter: a for a in STARTER_ALIASES if cli in a.clis}
    for flag, value, alias in _outputs(argv, table):
        if not alias.output[0]:
            _check_name(flag, value, task, alias.output[1])


def translate(argv: list[str] | None, cli: str) -> list[str]:
    """argv (default sys.argv[1:]) with every starter spelling of this CLI's table replaced by minbert's own (the
    classifier's --dev_out/--test_out give the folder here; check_outputs checks their names against the task)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    table = {a.starter: a for a in STARTER_ALIASES if cli in a.clis}
    out: list[str] = []
    out_dirs: dict[str, str] = {}
    i = 0
    while i < len(argv):
        flag, sep, inline = argv[i].partition("=")
        alias = table.get(flag)
        if alias is None:
            out.append(argv[i])
            i += 1
            continue
        if not alias.takes_value:
            out.extend(alias.ours.split())
            i += 1
            continue
        if sep:
            value, i = inline, i + 1
        elif i + 1 < len(argv):
            value, i = argv[i + 1], i + 2
        else:
            raise ConfigurationError(f"{flag} (the starter's spelling of {alias.ours}) needs a value")
        if alias.values:
            value = dict(alias.values).get(value, value)
        if alias.output is not None:
            if alias.output[0]:                          # the multitask's flags name their task
                _check_name(flag, value, *alias.output)
            out_dirs[flag] = str(Path(value).parent)
            continue
        out.extend([alias.ours, value])
    if len(set(out_dirs.values())) > 1:
        raise ConfigurationError(f"the prediction files go to one folder here (--predictions-dir); got {out_dirs}")
    if out_dirs:
        out.extend(["--predictions-dir", next(iter(out_dirs.values()))])
    return out


def table_markdown(clis: tuple[str, ...] | None = None) -> str:
    """The alias table as Markdown, for the handout: every alias, or those of the given CLIs (a tree without
    tasks.multitask lists the classifier's)."""
    rows = ["| starter flag | minbert flag | CLIs | note |", "|---|---|---|---|"]
    for a in STARTER_ALIASES:
        shown = [c for c in a.clis if clis is None or c in clis]
        if not shown:
            continue
        ours = a.ours + ("" if not a.values else " (" + ", ".join(f"{s} -> {o}" for s, o in a.values) + ")")
        note = a.note or ("sets the folder of the file" if a.output else "")
        rows.append(f"| `{a.starter}` | `{ours}` | {', '.join(shown)} | {note} |")
    return "\n".join(rows)
