"""Average the raw outputs of several runs into the six leaderboard files, checked as tasks.submit checks them.

    python -m tasks.multitask --seed 1 --raw-outputs --run-dir runs/s1 ...   # or tasks.predict --raw-outputs
    python -m tasks.ensemble runs/s1 runs/s2 runs/s3 --out predictions-ensemble

Each RUN_DIR is a run directory (its run.json says where its predictions went) or a directory of
{task}-{split}-raw.csv files (written with --raw-outputs). The ensemble averages, per record,
the SST class probabilities (softmax of the logits) and the Quora paraphrase probabilities (sigmoid of the logit),
and the STS scores; it predicts the most probable class, a paraphrase where the mean probability is above 0.5,
and the mean score. The files go to OUT in the course's format, then tasks.submit's check runs on OUT (every file
whose gold or input file exists in the data directory, each id once, valid values) and, when it passes,
OUT/submission.zip. The data directory is the runs' own (their run.json's files.data_dir; runs with different ones are
refused, each named), or --data-dir, or data/ where no run says; the ids are checked against it before any file is
written. A run given twice (two paths to one folder) is refused: a run with itself is no ensemble.
"""

from __future__ import annotations

if not __package__:  # run as a file (python tasks/ensemble.py): this tree is not on the path
    import sys
    print("error: run it as python -m tasks.ensemble from the tree's root (the folder holding minbert/ and tasks/), "
          "not as a file", file=sys.stderr)
    sys.exit(2)

import argparse
import sys
from pathlib import Path

import torch

from minbert.multitask import TASK_NAMES

from .core.errors import ConfigurationError, MissingFileError, directory_to_write, run_cli, user_path
from .core.evaluation import gold_records, prediction_path, raw_path, read_raw, write_predictions
from .core.run_files import prediction_folder, trained_files
from .core.runs import RUN_FILE, read_run_json
from .score import score_directory
from .submit import SPLITS, make_submission


def average(task: str, runs: list[dict[str, list[float]]], paths: list[Path] | None = None) -> tuple[list[str], list]:
    """(ids, predictions) from the runs' raw outputs (id -> values) of one task and split (read from `paths`, which
    the refusals of runs with other ids or another number of values name)."""
    names = [str(p) for p in paths] if paths else [f"run {k}" for k in range(1, len(runs) + 1)]
    ids = list(runs[0])
    for name, r in zip(names[1:], runs[1:]):
        if set(r) != set(ids):
            missing, extra = [i for i in ids if i not in r], [i for i in r if i not in runs[0]]
            shown = "; ".join(f"{what} {', '.join(found[:3])}{', ...' if len(found) > 3 else ''}"
                              for what, found in (("missing", missing), ("extra", extra)) if found)
            raise ConfigurationError(f"{task}: {name} has other ids than {names[0]} ({shown}): ensemble runs that "
                                     "predicted the same files")
    widths = {name: len(next(iter(r.values()), [])) for name, r in zip(names, runs)}
    if len(set(widths.values())) > 1:
        raise ConfigurationError(f"{task}: the runs' raw outputs have different numbers of values per row ("
                                 + "; ".join(f"{n}: {w}" for n, w in widths.items()) + "): runs of the same task")
    x = torch.tensor([[r[i] for i in ids] for r in runs], dtype=torch.float64)  # (runs, N, C)
    if task == "sst":
        return ids, x.softmax(-1).mean(0).argmax(-1).tolist()                  # (N, C) -> class
    if task == "para":
        return ids, (x[..., 0].sigmoid().mean(0) > 0.5).long().tolist()        # (N,)
    return ids, x[..., 0].mean(0).tolist()                                     # (N,) the 0-5 score


def raw_dir(directory: str | Path) -> Path:
    """Where a run's raw outputs are: a run directory's predictions (from its run.json), or the directory itself."""
    directory = Path(directory)
    if not (directory / RUN_FILE).is_file():
        return directory
    return prediction_folder(directory)


def data_dir_of(run_dirs: list[str | Path], given: str | None) -> Path:
    """The data directory the ensemble is checked against: --data-dir where given, else the one every run directory's
    run.json names (files.data_dir, a relative one read from the folder the run trained in when run.json records it),
    else data/. Runs with different data directories, or a data directory that does not exist, are refused."""
    if given is not None:
        return existing_data_dir(Path(given), "--data-dir")
    named = {}
    for d in run_dirs:
        if (Path(d) / RUN_FILE).is_file():
            record = read_run_json(d)
            files = record["settings"].get("files", {})
            if files.get("data_dir") is not None:
                named[str(d)] = trained_files(record).get("files.data_dir", files["data_dir"])
    if len({Path(v).resolve() for v in named.values()}) > 1:       # "data" here and this folder's data: one folder
        raise ConfigurationError("the runs were trained on different data directories ("
                                 + "; ".join(f"{d}: {v}" for d, v in named.items())
                                 + "): ensemble runs of one data directory, or name the one to check with --data-dir")
    return existing_data_dir(Path(next(iter(named.values()), "data")),
                             "the runs' run.json (files.data_dir)" if named else "the default")


def existing_data_dir(path: Path, source: str) -> Path:
    """path, refused when it is not a folder: the ensemble's files would be checked against nothing."""
    if not path.is_dir():
        raise MissingFileError(f"{path}: no such data folder (from {source}), so the ensemble cannot be checked: run "
                               "from the folder the runs trained in, or pass --data-dir DIR")
    return path


def ensemble(run_dirs: list[str | Path], out: str | Path, data_dir: str | Path | None = None) -> list[Path]:
    """Write OUT/{task}-{split}-output.csv for every task and split whose raw file every run has; with data_dir,
    each averaged split's ids are first checked against that directory's file of the split (nothing is written if
    one differs)."""
    absent = [str(d) for d in run_dirs if not Path(d).is_dir()]
    if absent:
        raise MissingFileError(f"{', '.join(absent)}: no such run directory (give the folders the runs wrote, or "
                               "the folders tasks.predict --raw-outputs wrote)")
    given, run_dirs = run_dirs, [raw_dir(d) for d in run_dirs]
    seen: dict[Path, str] = {}
    for g, d in zip(given, run_dirs):
        first, this = (Path(seen[d.resolve()]).resolve(), Path(g).resolve()) if d.resolve() in seen else (None, None)
        if first is not None and (first == this or d.resolve() in (first, this)):
            raise ConfigurationError(f"{seen[d.resolve()]} and {g} are the same run (its raw outputs in {d}): an "
                                     "ensemble of a run with itself is that run; give each run once")
        if first is not None:                # two runs that wrote one --predictions-dir: the later's files replaced
            raise ConfigurationError(f"{seen[d.resolve()]} and {g} wrote their raw outputs to the same folder {d}, so "
                                     "it holds the later run's alone: write each run's with python -m tasks.predict "
                                     "RUN --raw-outputs --out DIR and give those folders")
        seen[d.resolve()] = str(g)
    averaged = []
    for task in TASK_NAMES:
        for split in SPLITS:
            paths = [raw_path(d, task, split) for d in run_dirs]
            present = [p.is_file() for p in paths]
            if not any(present):
                continue
            if not all(present):
                missing = [str(g) for g, ok in zip(given, present) if not ok]
                have = [str(g) for g, ok in zip(given, present) if ok]
                raise ConfigurationError(
                    f"{task} {split}: {', '.join(missing)} {'has' if len(missing) == 1 else 'have'} no raw outputs "
                    f"of the {split} split ({raw_path('', task, split).name}), which {', '.join(have)} "
                    f"{'has' if len(have) == 1 else 'have'}: ensemble runs that wrote the same splits (tasks.predict "
                    f"--splits, --raw-outputs)")
            ids, preds = average(task, [read_raw(p) for p in paths], paths)
            if data_dir is not None and (gold := gold_records(data_dir, task, split)) is not None:
                expected = {e.id for e in gold}
                if set(ids) != expected and gold.skipped:
                    raise ConfigurationError(
                        f"{task} {split}: the runs' ids are not those of {gold.path}, whose {len(gold.skipped)} bad "
                        f"row(s) were skipped (the first: {gold.skipped[0]}): fix the gold file or get it again")
                if set(ids) != expected:
                    raise ConfigurationError(
                        f"{task} {split}: the runs' ids are not those of {gold.path} ({len(expected - set(ids))} "
                        f"missing, {len(set(ids) - expected)} unknown): were the runs trained with another "
                        "--data-dir? Name it with --data-dir")
            averaged.append((task, split, ids, preds))
    if not averaged:
        raise ConfigurationError(f"no {{task}}-{{split}}-raw.csv files in {', '.join(map(str, run_dirs))}: write them with "
                         "--raw-outputs")
    return [write_predictions(prediction_path(out, task, split), task, ids, preds)
            for task, split, ids, preds in averaged]


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(prog="python -m tasks.ensemble", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", type=user_path,
                   help="a run directory (its run.json says where its predictions went) or a folder of "
                        "{task}-{split}-raw.csv files (written with --raw-outputs)")
    p.add_argument("--out", type=directory_to_write, default="predictions-ensemble", help="where the six files go (default predictions-ensemble)")
    p.add_argument("--data-dir", default=None, type=user_path,
                   help="the task files the set is checked against (default: the runs' own, from their run.json; "
                        "else data)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    data_dir = data_dir_of(args.runs, args.data_dir)
    for path in ensemble(args.runs, args.out, data_dir):
        print(f"wrote {path}")
    scores = score_directory(args.out, data_dir, "dev")
    if scores.get("overall") is not None:
        print(f"dev overall {scores['overall']:.4f} (ensemble of {len(args.runs)})")
    zipped, problems = make_submission(args.out, data_dir, Path(args.out) / "submission.zip")
    if problems:
        print("the ensemble's files do not pass tasks.submit's check:", file=sys.stderr)
        for line in problems:
            print(f"  {line}", file=sys.stderr)
        return 1
    print(f"checked as tasks.submit checks; wrote {zipped}")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
