"""DeeBERT early exit: the threshold sweep at batch 1 (the paper's setting) and batched exit at batch 32, per seed.

    python benchmarks/deebert.py --task sst2 --seeds 1,2,3           # trains both stages per seed, then the sweeps
    python benchmarks/deebert.py --task cfimdb --seeds 1,2,3 -- --max-length 512
    python benchmarks/stats.py runs/deebert-bench/sst2-paired.json --baseline plain-b1 --metric time_saved
    python benchmarks/deebert.py --task cfimdb --seeds 1,2,3 --results benchmarks/results/deebert-cfimdb.json \
        --machine "A (2-core AMD EPYC, avx2 only), quiet" -- --no-progress   # also the table's JSON, at the end

Each part is `python -m tasks.deebert --seed S` (run directories OUT/{task}-s{S}-b1, which trains, and -b32,
which loads that model with --from-run) with its protocol: a seeded half of dev selects the epochs and the exit
setting (the fewest layers within --max-drop), the other half is timed and reported; every setting, plain
included, runs in a fresh seeded order in each of --rounds rounds after an untimed pass. For each seed and batch size this script prints the chosen setting's drop and
time saved on the report half (median over rounds, range) against plain and against "no exit", and appends
paired_runs-style rows to OUT/{task}-paired.json: row plain-bN (time_saved 0) and chosen-bN, with dev
{"quality", "time_saved", "time_saved_vs_no_exit", "layers_run"}, so that benchmarks/stats.py gives the mean
drop and saving over seeds with a 95% interval. The paper's targets on a binary task: at batch 1 at least 40%
time saved, at batch 32 at least 1.3x throughput. Not run by the tests.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import stats
from paired_runs import provenance

from tasks.core.evaluation import write_text
from tasks.deebert import parse_settings, run


def rows_of(summary: dict, batch: int, seed: int) -> list[dict]:
    """paired_runs-style rows of one run: the plain model and the setting chosen on the selection half."""
    plain, chosen = summary["rows"][0], summary["chosen"]
    out = [{"row": f"plain-b{batch}", "seed": seed, "dev": {"quality": plain["quality"], "time_saved": 0.0,
                                                            "time_saved_vs_no_exit": 0.0, "layers_run": 1.0}}]
    if chosen is not None:
        out.append({"row": f"chosen-b{batch}", "seed": seed, "setting": chosen["setting"], "dev": {
            "quality": chosen["quality"], "time_saved": chosen["time_saved_rounds_median"],
            "time_saved_vs_no_exit": chosen["time_saved_vs_no_exit_rounds_median"],
            "layers_run": chosen["layers_run"]}})
    return out


def sweep_record(sweep: dict, seed: int, trained: dict | None) -> dict:
    """One run's sweep.json, cut to what the results table keeps: the stages' best epochs (from the batch-1 run that
    trained them), forced exit per layer, the selection half's table, the chosen setting, the report half's rows."""
    return {"seed": seed, "eval_batch_size": sweep["eval_batch_size"], "rounds": sweep["rounds"],
            "examples": sweep["examples"],
            "training": {stage: {"best_epoch": v["best_epoch"]} for stage, v in (trained or {}).items()},
            "per_layer_report": sweep["per_layer"], "selection": (sweep.get("selection") or {}).get("rows"),
            "chosen": (sweep.get("chosen") or {}).get("setting"), "report": sweep["rows"]}


def write_results(path: Path, args: argparse.Namespace, out: Path, paired: Path, seeds: list[int]) -> None:
    """The committed table's JSON: the command, the machine, the commit, the paired rows and every sweep."""
    sweeps = []
    for seed in seeds:
        first = json.loads((out / f"{args.task}-s{seed}-b1" / "sweep.json").read_text())
        for batch in (1, args.batch_size):
            sweep = first if batch == 1 else json.loads((out / f"{args.task}-s{seed}-b{batch}" / "sweep.json").read_text())
            sweeps.append(sweep_record(sweep, seed, first.get("training")))
    made = provenance()
    write_text(path, json.dumps({"task": args.task, "machine": f"{args.machine} [{made['cpu']}]",
                                 "command": "python benchmarks/deebert.py " + " ".join(sys.argv[1:]),
                                 "commit": made["commit"], "code_modified": made["code_modified"],
                                 "paired": json.loads(paired.read_text()), "sweeps": sweeps}, indent=1))
    print(f"wrote {path}")


def report(summary: dict) -> str:
    """One paragraph of figures for one sweep."""
    plain, metric, r = summary["rows"][0], summary["metric"], summary["chosen"]
    head = (f"batch {summary['eval_batch_size']}, {summary['examples']} report-half examples, {summary['rounds']} "
            f"round(s): plain model {metric} {plain['quality']:.4f}, {plain['seconds']:.2f} s; off-ramps' own cost "
            f"{summary['ramp_cost']:+.1%} (every ramp evaluated, no exit)")
    if r is None:
        return head + "\n  no swept setting chosen"
    return (head + f"\n  {r['setting']} (chosen on the selection half): {metric} {r['quality']:.4f} (drop "
            f"{r['quality_drop'] * 100:.2f} points), time saved {r['time_saved_rounds_median']:.1%} "
            f"[{r['time_saved_rounds_min']:.1%}, {r['time_saved_rounds_max']:.1%}] against plain, "
            f"{r['time_saved_vs_no_exit_rounds_median']:.1%} [{r['time_saved_vs_no_exit_rounds_min']:.1%}, "
            f"{r['time_saved_vs_no_exit_rounds_max']:.1%}] against no exit; layers run {r['layers_run']:.1%}, "
            f"mean exit layer {r['mean_exit_layer']:.2f} of {summary['num_layers']}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="sst2", choices=["sst", "sst2", "cfimdb", "sts"])
    p.add_argument("--out", default="runs/deebert-bench", help="where the runs' directories go")
    p.add_argument("--seeds", default="1,2,3", help="comma-separated seeds, one trained model each (default 1,2,3)")
    p.add_argument("--rounds", type=int, default=5, help="timing rounds of each sweep (default 5)")
    p.add_argument("--batch-size", type=int, default=32, help="the batched sweep's batch size (default 32)")
    p.add_argument("--max-drop", type=float, default=0.005, help="largest selection-half drop (default 0.005)")
    p.add_argument("--results", type=Path, help="at the end, also write the table's JSON here (paired rows and sweeps)")
    p.add_argument("--machine", default="", help="the machine, in words, for --results (e.g. 'A, quiet')")
    p.add_argument("extra", nargs="*", help="further tasks.deebert flags, after --")
    args = p.parse_args()
    out = Path(args.out)
    paired = out / f"{args.task}-paired.json"
    t0 = time.perf_counter()
    seeds = [int(s) for s in args.seeds.split(",")]
    for seed in seeds:
        done = json.loads(paired.read_text()) if paired.is_file() else []
        first = out / f"{args.task}-s{seed}-b1"
        for batch in (1, args.batch_size):
            if any(r["row"] == f"plain-b{batch}" and r["seed"] == seed for r in done):
                print(f"== seed {seed}, batch {batch}: already in {paired}", flush=True)
                continue
            argv = ["--task", args.task, "--seed", str(seed), "--rounds", str(args.rounds), "--max-drop",
                    str(args.max_drop), "--eval-batch-size", str(batch), "--out",
                    str(out / f"{args.task}-s{seed}-b{batch}"), *args.extra]
            argv += ["--from-run", str(first)] if batch != 1 else []   # the model seed S trained at batch 1
            print("python -m tasks.deebert " + " ".join(argv), flush=True)
            summary = run(parse_settings(argv))
            print(f"== seed {seed}: " + report(summary), flush=True)
            done = json.loads(paired.read_text()) if paired.is_file() else []
            write_text(paired, json.dumps(done + rows_of(summary, batch, seed), indent=1))
    print(f"\n== DeeBERT, {args.task}, {time.perf_counter() - t0:.0f} s in all; wrote {paired}")
    for metric in ("quality", "time_saved", "time_saved_vs_no_exit"):
        for batch in (1, args.batch_size):
            rows = {k: v for k, v in stats.load_rows([paired], metric).items() if k.endswith(f"-b{batch}")}
            if f"plain-b{batch}" in rows:
                print(f"\n{metric}, batch {batch}:\n" + stats.markdown_table(rows, f"plain-b{batch}", metric))
    if args.results:
        write_results(args.results, args, out, paired, seeds)


if __name__ == "__main__":
    main()
