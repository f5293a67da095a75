"""DeeBERT early exit on a dev set: the threshold sweep at batch 1 (the paper's setting), then batched exit at
batch 32 against the plain model at batch 32, in the same run.

    python benchmarks/deebert.py --task sst2                       # trains both stages, then the two sweeps
    python benchmarks/deebert.py --task sst2 --resume runs/deebert-bench/sst2-b1    # a trained model
    python benchmarks/deebert.py --task sts -- --exit patience      # further tasks.deebert flags after --

Each part is `python -m tasks.deebert` (its files go to OUT/{task}-b1 and OUT/{task}-b32); this script
prints the figures the paper reports: for every batch size, the setting with the most measured time saved
at a quality drop of at most --max-drop against the model without exits, with the honest fraction of
layers run beside it, and the off-ramps' own cost. Targets (the paper's, on a binary task): at batch 1 at
least 40% wall-clock saved; at batch 32 at least 1.3x the plain model's throughput. Not run by the tests.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from tasks.deebert import build_parser, run, write_text


def best(summary: dict, max_drop: float) -> dict | None:
    """The swept setting with the most measured time saved whose quality drop is at most max_drop."""
    ok = [r for r in summary["rows"][1:-1] if r["quality_drop"] <= max_drop + 1e-12]
    return max(ok, key=lambda r: r["time_saved"], default=None)


def report(summary: dict, max_drop: float) -> str:
    """One paragraph of figures for one sweep."""
    plain, metric = summary["rows"][0], summary["metric"]
    head = (f"batch {summary['eval_batch_size']}, {summary['examples']} dev examples, {summary['rounds']} round(s): "
            f"plain model {metric} {plain['quality']:.4f}, {plain['seconds']:.2f} s; off-ramps' own cost "
            f"{summary['ramp_cost']:+.1%} (every ramp evaluated, no exit)")
    r = best(summary, max_drop)
    if r is None:
        return head + f"\n  no setting keeps the drop within {max_drop * 100:g} points"
    return (head + f"\n  {r['setting']}: {metric} {r['quality']:.4f} (drop {r['quality_drop'] * 100:.2f} points), "
            f"time saved {r['time_saved']:.1%} = {r['speedup']:.2f}x throughput, layers run {r['layers_run']:.1%} "
            f"(saved {r['layers_saved']:.1%}), mean exit layer {r['mean_exit_layer']:.2f} of {summary['num_layers']}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="sst2", choices=["sst", "sst2", "cfimdb", "sts"])
    p.add_argument("--out", default="runs/deebert-bench", help="where the two runs' directories go")
    p.add_argument("--rounds", type=int, default=3, help="timing rounds of each sweep (the median is reported)")
    p.add_argument("--batch-size", type=int, default=32, help="the batched sweep's batch size (default 32)")
    p.add_argument("--resume", default=None, help="a trained model (a tasks.deebert --out directory): skip training")
    p.add_argument("--max-drop", type=float, default=0.005, help="largest quality drop reported (default 0.005)")
    p.add_argument("extra", nargs="*", help="further tasks.deebert flags, after --")
    args = p.parse_args()
    out = Path(args.out)
    first = out / f"{args.task}-b1"
    common = ["--task", args.task, "--rounds", str(args.rounds), "--max-drop", str(args.max_drop)]
    t0 = time.perf_counter()
    summaries = {}
    for batch, target, resume in ((1, first, args.resume), (args.batch_size, out / f"{args.task}-b{args.batch_size}",
                                                             args.resume or str(first))):
        argv = common + ["--eval-batch-size", str(batch), "--out", str(target), *args.extra]
        argv += ["--resume", resume] if resume else []
        print("python -m tasks.deebert " + " ".join(argv), flush=True)
        summaries[batch] = run(build_parser().parse_args(argv))
    print(f"\n== DeeBERT, {args.task}, {time.perf_counter() - t0:.0f} s in all")
    for batch, summary in summaries.items():
        print(report(summary, args.max_drop))
    one, many = best(summaries[1], args.max_drop), best(summaries[args.batch_size], args.max_drop)
    if args.task != "sts":
        print(f"target, batch 1: >= 40% time saved at <= {args.max_drop * 100:g} points: "
              f"{'met' if one and one['time_saved'] >= 0.4 else 'not met'}; batch {args.batch_size}: >= 1.3x "
              f"throughput: {'met' if many and many['speedup'] >= 1.3 else 'not met'}")
    write_text(out / f"{args.task}-summary.json", json.dumps(
        {"task": args.task, "max_drop": args.max_drop, "argv": sys.argv[1:],
         "best": {str(b): best(s, args.max_drop) for b, s in summaries.items()},
         "runs": {str(b): {k: s[k] for k in ("rows", "ramp_cost", "per_layer", "examples")} for b, s in summaries.items()}},
        indent=2))
    print(f"wrote {out / f'{args.task}-summary.json'}")


if __name__ == "__main__":
    main()
