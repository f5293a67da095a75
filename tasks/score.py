"""The leaderboard's scorer: check prediction files against the gold files and score them.

    python -m tasks.score predictions/ [--data-dir data] [--split dev] [--json]

The tasks are those whose {split} file is in the data directory (as for tasks.submit): SST, Quora
and STS with the three tasks' data, SST alone in a part1 tree. Reads whichever of their
{task}-{split}-output.csv files are present, reports every missing, duplicate or unknown id and
every unparsable or out-of-range value with file and line, and prints each task's figure (SST
accuracy, Quora accuracy, STS Pearson r) and the overall score: (SST + Quora + (r + 1) / 2) / 3
for the three tasks, the mean of the tasks' figures (r as (r + 1) / 2) otherwise, so SST accuracy
for SST alone (the part1 leaderboard's). Exit status 1 when a file has errors or none is found.
"""

from __future__ import annotations

if not __package__:  # run as a file (python tasks/score.py): this tree is not on the path
    import sys
    print("error: run it as python -m tasks.score from the tree's root (the folder holding minbert/ and tasks/), "
          "not as a file", file=sys.stderr)
    sys.exit(2)

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from .core.errors import existing_dir, run_cli, user_path
from .core.evaluation import LEADERBOARD, Report, check_predictions, gold_records, overall_score, prediction_path

TASK_NAMES = ("sst", "para", "sts")   # minbert.multitask.TASK_NAMES (a test says so), without importing part 2

NAMES = {"sst": "SST accuracy", "para": "Quora accuracy", "sts": "STS Pearson r"}


def data_tasks(data_dir: str | Path, split: str) -> tuple[str, ...]:
    """The leaderboard tasks whose {split} file is in data_dir (tasks.submit's source of truth too); all three when
    none is, so that a prediction file is still reported as having no gold file."""
    from .core.data import TASKS
    found = tuple(t for t in TASK_NAMES if TASKS[t].path(data_dir, split).is_file())
    return found or TASK_NAMES


def score_directory(pred_dir: str | Path, data_dir: str | Path = "data", split: str = "dev") -> dict:
    """{'tasks': (task, ...), 'reports': {task: Report}, 'overall': float | None, 'problems': [...]} for the files
    present; tasks are those the data directory has (data_tasks)."""
    tasks = data_tasks(data_dir, split)
    reports: dict[str, Report] = {}
    problems = []
    unchecked: dict[str, Path] = {}          # task -> its prediction file, present but with no gold file to check
    for task in TASK_NAMES:
        path = prediction_path(pred_dir, task, split)
        if not path.is_file():
            continue
        gold = gold_records(data_dir, task, split)
        if gold is None:
            unchecked[task] = path
            continue
        reports[task] = check_predictions(path, task, gold)
    if unchecked:
        problems.append(no_gold_line(unchecked, data_dir, split))
    if not reports and not problems:
        problems.append(f"{pred_dir}: no prediction files ({', '.join(f'{t}-{split}-output.csv' for t in tasks)})")
    scores = {t: r.score for t, r in reports.items()}
    overall = None
    if tasks == TASK_NAMES and all(scores.get(t) is not None for t in TASK_NAMES):
        overall = overall_score(scores["sst"], scores["para"], scores["sts"])
    elif all(scores.get(t) is not None for t in tasks):
        parts = [(scores[t] + 1) / 2 if LEADERBOARD[t].metric == "pearson" else scores[t] for t in tasks]
        overall = sum(parts) / len(parts)
    if unchecked:                                  # a prediction file without gold: no overall of the others alone
        overall = None
    return {"tasks": tasks, "reports": reports, "overall": overall, "problems": problems,
            "unchecked": {t: str(p) for t, p in unchecked.items()}}


def no_gold_line(unchecked: dict[str, Path], data_dir: str | Path, split: str) -> str:
    """One line for the prediction files that have no gold file: the first missing gold path (and the others), the
    files left unchecked, and what to do."""
    from .core.data import TASKS
    golds = [TASKS[t].path(data_dir, split) for t in unchecked]
    others = f" (nor {', '.join(map(str, golds[1:]))})" if len(golds) > 1 else ""
    files = ", ".join(map(str, unchecked.values()))
    verb = "is" if len(unchecked) == 1 else "are"
    return (f"{golds[0]}: no such gold file{others}, so {files} {verb} not checked; give --data-dir DIR, the folder "
            f"holding {', '.join(g.name for g in golds)}")


def overall_cell(result: dict, split: str) -> str:
    """The overall score, or why there is none: files absent, files with errors, or files without gold labels."""
    if result["overall"] is not None:
        return f"{result['overall']:.4f}"
    reports, tasks = result["reports"], result.get("tasks", TASK_NAMES)
    if result.get("unchecked"):
        return "n/a (files not checked)"
    missing = [t for t in tasks if t not in reports]
    if missing:
        return ("n/a (needs all three files)" if len(tasks) == 3
                else f"n/a (needs {', '.join(f'{t}-{split}-output.csv' for t in missing)})")
    if any(r.errors for r in reports.values()):
        return "n/a (a file has errors)"
    return f"n/a (the {split} files have no gold labels: ids and values checked only)"


def format_table(result: dict, split: str) -> str:
    """The human-readable report: each file's problems, then the table of scores."""
    out = []
    for p in result["problems"]:
        out.append(f"error: {p}")
    for task, r in result["reports"].items():
        for w in r.warnings:
            out.append(f"warning: {w}")
        for e in r.errors:
            out.append(f"error: {e}")
    rows = [("task", "file", "predictions", "score")]
    listed = result.get("tasks", TASK_NAMES)
    for task in [t for t in TASK_NAMES if t in listed or t in result.get("unchecked", {})]:
        r = result["reports"].get(task)
        if task in result.get("unchecked", {}):
            rows.append((NAMES[task], Path(result["unchecked"][task]).name, "-", "not checked"))
            continue
        if r is None:
            rows.append((NAMES[task], "(absent)", "-", "-"))
            continue
        if r.errors:
            shown = f"invalid ({len(r.errors)} errors)"
        elif r.score is None:
            shown = "ids ok (no gold labels)"
        else:
            shown = f"{r.score:.4f}"
        rows.append((NAMES[task], Path(r.path).name, f"{r.n_predictions}/{r.n_gold}", shown))
    rows.append(("overall", f"({split})", "", overall_cell(result, split)))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out + ([""] if out else []) + lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tasks.score", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pred_dir", type=existing_dir, help="directory holding {sst,para,sts}-{split}-output.csv")
    parser.add_argument("--data-dir", default="data", type=user_path, help="directory of the gold task files (default: data)")
    parser.add_argument("--split", default="dev", choices=("dev", "train", "test"), help="dev (default), train or test; test files have no "
                        "labels, so only ids and values are checked")
    parser.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")
    args = parser.parse_args(argv)
    result = score_directory(args.pred_dir, args.data_dir, args.split)
    if args.json:
        payload = {"split": args.split, "overall": result["overall"], "problems": result["problems"],
                   "tasks": {t: {**asdict(r), "column": LEADERBOARD[t].column} for t, r in result["reports"].items()}}
        print(json.dumps(payload, indent=2))
    else:
        print(format_table(result, args.split))
    failed = result["problems"] or any(r.errors for r in result["reports"].values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
