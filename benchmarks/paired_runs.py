"""Paired-seed rows of the multitask CLI, one (row, seed) at a time, appended to a results JSON as each ends.

    python benchmarks/paired_runs.py --out benchmarks/results/power.json --row baseline --seeds 1,2,3 -- \
        --epochs 1 --lr 5e-5 --batch-size 16 --warmup-ratio 0.1 --max-grad-norm 1.0 --sts-head-bias 2.5

Every row is `python -m tasks.multitask` with the flags after `--`, run once per seed with --seed S; a
(row, seed) already in --out is skipped, so a killed table resumes where it stopped. Rows that share a seed
share the data sample, the initial heads and the data order: their difference is a paired comparison
(benchmarks/stats.py computes the mean, sd and 95% interval of it; --baseline ROW prints its table at the end).
A SMART row also records its per-epoch R_s and D_Breg means and their shares of the loss ("smart"); a row of the
toolkit's embedding losses or gradient surgery their per-epoch values and shares ("toolkit"); an R-Drop row its
divergence and share ("rdrop").
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "benchmarks"))

import stats

from tasks import multitask
from tasks.core.evaluation import write_text


def dev_line(dev: dict) -> str:
    """The row's dev figures: overall with the three tasks in brackets, or the one task a single-task row trains."""
    names = {"sst_accuracy": "SST", "para_accuracy": "Quora", "sts_pearson": "STS r"}
    tasks = ", ".join(f"{name} {dev[key]:.4f}" for key, name in names.items() if key in dev)
    return f"overall {dev['overall']:.4f} ({tasks})" if "overall" in dev else tasks


def slug(row: str) -> str:
    """A row's name as a directory name: runs of anything but letters, digits and dots become one dash."""
    return re.sub(r"[^A-Za-z0-9.]+", "-", row).strip("-")


def provenance() -> dict:
    """The commit this process loaded, whether minbert/ or tasks/ had uncommitted changes, and the CPU's bf16 support, model name and core count."""
    def git(*cmd: str) -> str:
        try:
            return subprocess.run(["git", *cmd], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    model = next((line.split(":", 1)[1].strip() for line in flags.splitlines() if line.startswith("model name")), "")
    return {"commit": git("rev-parse", "--short", "HEAD") or None,
            "code_modified": bool(git("status", "--porcelain", "--", "minbert", "tasks")),
            "cpu": "avx512_bf16" if "avx512_bf16" in flags else "avx2" if "avx2" in flags else "other",
            "cpu_model": model or None, "cores": os.cpu_count()}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="results JSON (a list of rows; appended to, atomically)")
    p.add_argument("--row", required=True, help="the row's name in the table, e.g. baseline or smart-vat")
    p.add_argument("--seeds", default="1,2,3", help="comma-separated seeds (default 1,2,3)")
    p.add_argument("--baseline", default=None, help="print benchmarks/stats.py's paired table against this row")
    p.add_argument("--keep-runs", default=None, metavar="DIR",
                   help="keep each run's directory as DIR/ROW-sSEED, with its checkpoint, predictions and raw outputs "
                        "(for tasks.ensemble; default: a temporary checkpoint, no predictions)")
    args = p.parse_args(argv)
    out = Path(args.out)
    started = provenance()          # the code this process loaded, not whatever is checked out when a seed starts
    for seed in [int(s) for s in args.seeds.split(",")]:
        results = json.loads(out.read_text()) if out.is_file() else []
        if any(r["row"] == args.row and r["seed"] == seed for r in results):
            print(f"== {args.row} seed {seed}: already in {out}", flush=True)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            if args.keep_runs is None:
                kept = ["--no-predictions", "--checkpoint", os.path.join(tmp, "run.pt")]
            else:
                kept = ["--raw-outputs", "--run-dir", str(Path(args.keep_runs) / f"{slug(args.row)}-s{seed}")]
            row_argv = [*extra, "--seed", str(seed), "--no-progress", *kept]
            print(f"== {args.row} seed {seed}: python -m tasks.multitask {' '.join(extra)}", flush=True)
            t0 = time.perf_counter()
            summary = multitask.run(multitask.parse_settings(row_argv))
            minutes = (time.perf_counter() - t0) / 60
        results = json.loads(out.read_text()) if out.is_file() else []
        results.append({"row": args.row, "seed": seed, "flags": extra, "dev": summary["dev"],
                        "best_epoch": summary["best_epoch"], "minutes": minutes, "history": summary["history"],
                        **started, **{k: summary[k] for k in ("smart", "toolkit", "rdrop") if k in summary}})
        write_text(out, json.dumps(results, indent=1))
        print(f"== {args.row} seed {seed}: {dev_line(summary['dev'])}, {minutes:.1f} min", flush=True)
    if args.baseline is not None:
        print(stats.markdown_table(stats.load_rows([out], "overall"), args.baseline, "overall"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
