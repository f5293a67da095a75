"""The report's Tables 1 and 2 (Qian & Yang, "Less is More", sec. 5) on the offline MiniLM, at one stated budget.

    python benchmarks/multitask.py --max-train-examples 1000 --epochs 2 --full-lr 5e-5 -- --warmup-ratio 0.1 --max-grad-norm 1.0

Eight rows: design 1 (bi-encoder) and design 2 (cross-encoder), each with sequential and round-robin
schedules, each with a frozen encoder ("pretrain": last-linear-layer, the heads alone train) and full
fine-tuning. Every row trains `python -m tasks.multitask` with the same seeded sample of N examples per
task and the same epochs, and is scored on the full dev sets: SST accuracy, Quora accuracy, STS Pearson r,
overall, and minutes. Extra flags after `--` go to every row (e.g. `-- --lr 5e-5`). Every row runs once per
seed of --seeds (paired: rows that share a seed share the data sample, the initial heads and the order).
Results are written to --out (paired_runs-style JSON, "row" and "seed" per record, a run at a time, so a
killed table keeps its finished runs; --resume-table skips them) and printed as a markdown table per seed,
then, for each metric, benchmarks/stats.py's table: each row's mean and sd over seeds and its paired
difference against --baseline (default: the first row) with a 95% interval.

    python benchmarks/multitask.py --seeds 1,2,3 --max-train-examples 0 --epochs 1 --full-lr 5e-5 \\
        -- --warmup-ratio 0.1 --max-grad-norm 1.0
"""

from __future__ import annotations

import argparse
import json
import os
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

ROWS = [(design, schedule, mode) for design in ("bi-encoder", "cross-encoder")
        for schedule in ("sequential", "round-robin") for mode in ("last-linear-layer", "full-model")]
MODE_NAMES = {"last-linear-layer": "frozen (pretrain)", "full-model": "full fine-tuning"}


def row_name(design: str, schedule: str, mode: str, extra: list[str]) -> str:
    return " ".join([design, schedule, mode, *extra])


def table(results: list[dict]) -> str:
    lines = [("| design | schedule | encoder | extra flags | seed | SST acc | Quora acc | STS r | overall | best epoch "
              "| trainable | minutes |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        d = r["dev"]
        lines.append(f"| {r['design']} | {r['schedule']} | {MODE_NAMES.get(r['mode'], r['mode'])} | "
                     f"{' '.join(r['extra']) or '-'} | {r['seed']} | {d['sst_accuracy']:.3f} | "
                     f"{d['para_accuracy']:.3f} | "
                     f"{d['sts_pearson']:.3f} | {d['overall']:.3f} | {r['best_epoch']} | {r['trainable']:,} | "
                     f"{r['minutes']:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--max-train-examples", type=int, default=1000, help="seeded sample per task (default 1000; "
                   "0: the whole training files)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--seeds", default="1,2,3", help="comma-separated seeds, each row once per seed (default 1,2,3)")
    p.add_argument("--baseline", default=None, help="the row the others are compared with (default: the first)")
    p.add_argument("--model", default="minilm")
    p.add_argument("--rows", default=None,
                   help="comma-separated row numbers 1-8 to run (default all): 1-4 bi-encoder, 5-8 cross-encoder; "
                        "odd rows frozen, even rows full; 1-2 and 5-6 sequential")
    p.add_argument("--full-lr", type=float, default=None,
                   help="learning rate of the full fine-tuning rows (default: the mode's own, 3e-5); frozen rows keep "
                        "theirs (1e-3)")
    p.add_argument("--out", default="benchmarks/results/multitask-paired.json")
    p.add_argument("--resume-table", action="store_true", help="skip rows already in --out")
    args = p.parse_args(argv)
    out = Path(args.out)
    results = json.loads(out.read_text()) if args.resume_table and out.is_file() else []
    done = {(r.get("row"), r["seed"]) for r in results}
    chosen = [ROWS[int(i) - 1] for i in args.rows.split(",")] if args.rows else ROWS
    limit = ["--max-train-examples", str(args.max_train_examples)] if args.max_train_examples else []
    for seed in [int(s) for s in args.seeds.split(",")]:
        for design, schedule, mode in chosen:
            lr = [f"lr={args.full_lr}"] if args.full_lr and mode == "full-model" else []
            row = row_name(design, schedule, mode, extra + lr)
            if (row, seed) in done:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                row_argv = ["--design", design, "--schedule", schedule, "--fine-tune-mode", mode,
                            *(["--model", args.model] if args.model != "minilm" else []), "--epochs", str(args.epochs),
                            "--seed", str(seed), *limit, "--no-progress", "--checkpoint", os.path.join(tmp, "run.pt"),
                            "--no-predictions", *(["--lr", str(args.full_lr)] if lr else []), *extra]
                print(f"== {row} seed {seed}", flush=True)
                t0 = time.perf_counter()
                summary = multitask.run(multitask.parse_settings(row_argv))
                minutes = (time.perf_counter() - t0) / 60
            results.append({"row": row, "name": f"{row} seed={seed}", "design": design, "schedule": schedule,
                            "mode": mode, "extra": extra, "seed": seed, "max_train_examples": args.max_train_examples,
                            "epochs": args.epochs, "dev": summary["dev"], "best_epoch": summary["best_epoch"],
                            "trainable": summary.get("trainable", 0), "minutes": minutes,
                            "history": summary["history"], "argv": row_argv})
            write_text(out, json.dumps(results, indent=1))
            print(table(results), flush=True)
    print(table(results))
    rows_seen = list(dict.fromkeys(r["row"] for r in results if "row" in r))
    for metric in ("overall", "sst_accuracy", "para_accuracy", "sts_pearson"):
        print(f"\n{metric}, paired over seeds:\n" + stats.markdown_table(
            stats.load_rows([out], metric), args.baseline or rows_seen[0], metric))
    return 0


if __name__ == "__main__":
    sys.exit(main())
