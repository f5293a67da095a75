"""Zip the leaderboard prediction files for upload, refusing an incomplete or invalid set.

    python -m tasks.submit [--pred-dir predictions] [--data-dir data] [--out submission.zip]

A complete set is one prediction file {sst,para,sts}-{split}-output.csv for every task and split
(dev, test) whose gold or test-input file exists in the data directory. With the files shipped
in data/ that is the leaderboard's six files: {sst,para,sts}-{dev,test}-output.csv.
Every file is checked as tasks.score checks it (ids missing, duplicate or unknown, bad values);
any error refuses the upload with the report, and so does a data directory missing or without any task file.
--out is a name ending in .zip that is none of the inputs (a prediction file it zips, a file of --data-dir) and no
existing file other than an earlier zip, which it replaces.
"""

from __future__ import annotations

if not __package__:  # run as a file (python tasks/submit.py): this tree is not on the path
    import sys
    print("error: run it as python -m tasks.submit from the tree's root (the folder holding minbert/ and tasks/), "
          "not as a file", file=sys.stderr)
    sys.exit(2)

import argparse
import os
import sys
import zipfile
from pathlib import Path

from .core.errors import ConfigurationError, file_to_write, run_cli, user_path
from .core.evaluation import check_predictions, gold_records, prediction_path, replacing

TASK_NAMES = ("sst", "para", "sts")   # minbert.multitask.TASK_NAMES (a test says so), without importing part 2

SPLITS = ("dev", "test")


def expected_files(data_dir: str | Path) -> list[tuple[str, str]]:
    """(task, split) for every leaderboard task and split whose gold or input file exists."""
    from .core.data import TASKS
    return [(t, s) for t in TASK_NAMES for s in SPLITS if TASKS[t].path(data_dir, s).is_file()]


def make_submission(pred_dir: str | Path, data_dir: str | Path, out: str | Path) -> tuple[Path | None, list[str]]:
    """Check the set and write the zip atomically; returns (zip path or None, the problems that refused it). A data
    folder missing, or holding no leaderboard task file, refuses it: there would be nothing to check or zip."""
    problems, files = [], []
    check_out(out, pred_dir, data_dir)
    if not Path(data_dir).is_dir():
        return None, [f"{data_dir}: no such data folder: run from the tree's root, or pass --data-dir DIR"]
    if not expected_files(data_dir):
        none = (f"{data_dir}: none of the leaderboard's task files (ids-sst-dev.csv, ...), so nothing to check or zip: "
                "pass --data-dir DIR, the folder holding them")
        return None, [none]
    for task, split in expected_files(data_dir):
        path = prediction_path(pred_dir, task, split)
        if not path.is_file():
            problems.append(f"{path}: missing (needed because {task} {split} data exists)")
            continue
        report = check_predictions(path, task, gold_records(data_dir, task, split))
        problems += report.errors
        files.append(path)
    if problems:
        return None, problems
    out = Path(out)
    with replacing(out) as tmp:          # the zip is meant to be read: the mode a new file gets
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
            for path in files:
                z.write(path, arcname=f"predictions/{path.name}")
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
    return out, []


def check_out(out: str | Path, pred_dir: str | Path, data_dir: str | Path) -> None:
    """Refuse an --out that would replace an input (a prediction file it zips, a file of the data folder), a file that
    is not a zip, or a name without .zip, before anything is checked or written."""
    path = Path(os.path.expanduser(out)).resolve()
    inputs = {prediction_path(pred_dir, t, s).resolve() for t in TASK_NAMES for s in SPLITS}
    if path in inputs:
        raise ConfigurationError(f"--out {out} is one of the prediction files the zip holds, which it would replace; "
                                 "give the zip its own name, such as --out submission.zip")
    data = Path(os.path.expanduser(data_dir)).resolve()
    if path == data or data in path.parents:
        raise ConfigurationError(f"--out {out} is inside --data-dir {data_dir}, the task files the set is checked "
                                 "against; write the zip elsewhere, such as --out submission.zip")
    if path.is_dir():
        raise ConfigurationError(f"--out {out} is a directory; give the zip's file name, such as "
                                 f"--out {Path(out) / 'submission.zip'}")
    if path.suffix.lower() != ".zip":
        raise ConfigurationError(f"--out {out}: the upload is a zip and its name ends in .zip; give --out "
                                 f"{Path(out).with_suffix('.zip') if path.suffix else f'{out}.zip'}")
    if path.exists() and not zipfile.is_zipfile(path):
        raise ConfigurationError(f"--out {out} exists and is not a zip, so it is not an earlier submission to "
                                 "replace; nothing was written: move it, or give another --out")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tasks.submit", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pred-dir", default="predictions", type=user_path, help="directory of the prediction files (default: predictions)")
    parser.add_argument("--data-dir", default="data", type=user_path, help="directory of the task files that define the set (default: data)")
    parser.add_argument("--out", default="submission.zip", type=file_to_write,
                        help="the zip to write (default: submission.zip); a name ending in .zip, not one of the "
                             "prediction files, nor in --data-dir, nor an existing file that is not a zip")
    args = parser.parse_args(argv)
    out, problems = make_submission(args.pred_dir, args.data_dir, args.out)
    if problems:
        print("refusing to build the submission:", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        return 1
    with zipfile.ZipFile(out) as z:
        names = z.namelist()
    print(f"wrote {out} with {len(names)} files: {', '.join(names)}")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
