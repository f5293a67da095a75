"""Ensembles of multitask runs against their members: train one run per seed with --raw-outputs (resumable: a seed
whose files exist is not trained again), average groups of `--size` consecutive seeds with tasks.ensemble, score
every member and every ensemble on dev, compare each ensemble with the mean of its own members (paired over the
ensembles, benchmarks/stats.py), and write the table to a results JSON.

    python benchmarks/ensemble_runs.py --out benchmarks/results/ensemble.json --runs-dir runs/ensemble \
        --seeds 1,2,3,4,5,6,7,8,9 --size 3 -- --lr 5e-5 --batch-size 16 --warmup-ratio 0.1 --max-grad-norm 1.0 \
        --sts-head-bias 2.5 --epochs 2 --symmetric-pairs --optimizer fused

    python benchmarks/ensemble_runs.py --out benchmarks/results/ensemble-full-budget.json \
        --members main=runs/ens/main t4=runs/ens/t4 ...       # finished runs' raw outputs: no training

--members NAME=DIR ... ensembles runs that already finished (each DIR a run directory or a directory of raw outputs,
e.g. written by `python -m tasks.predict RUN_DIR --raw-outputs --out DIR`): every member is scored, then the
ensembles of the first 2, 3, ..., all of them in the order given (fix the order before looking at dev).

An ensemble of k runs costs k runs' time: compare it with the main job at k times the budget (e.g. --epochs 6 for
k = 3, through benchmarks/paired_runs.py) as well as with its own members.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import stats

from tasks import multitask
from tasks.core.evaluation import write_text
from tasks.ensemble import ensemble, raw_dir
from tasks.score import score_directory


def dev_scores(pred_dir: Path, data_dir: str) -> dict[str, float]:
    """Each task's dev figure and the overall score of the prediction files in pred_dir."""
    result = score_directory(pred_dir, data_dir, "dev")
    names = {"sst": "sst_accuracy", "para": "para_accuracy", "sts": "sts_pearson"}
    return {names[t]: r.score for t, r in result["reports"].items()} | {"overall": result["overall"]}


def against_members(table: dict) -> dict[str, dict]:
    """Per dev metric, each ensemble minus the mean of its own members, paired over the ensembles
    (stats.paired_difference: n, mean, sd, 95% t interval, whether it excludes 0)."""
    result = {}
    for metric in stats.DEV_METRICS:
        ensembles = {i: e["dev"][metric] for i, e in enumerate(table["ensembles"])}
        members = {i: statistics.fmean(table["members"][s][metric] for s in e["seeds"])
                   for i, e in enumerate(table["ensembles"])}
        result[metric] = stats.paired_difference(ensembles, members)
    return result


def against_peer(table: dict, peer: dict[int, float], metric: str = "overall") -> dict:
    """The ensembles' metric against single runs of the same total budget (peer: {seed: value}), unpaired:
    stats.unpaired_difference (Welch)."""
    return stats.unpaired_difference([e["dev"][metric] for e in table["ensembles"]], list(peer.values()))


def add_peer(table: dict, results: str, row: str) -> None:
    """Put the ensembles' overall score against `row` of the paired_runs JSON `results` into table["against_peer"]."""
    peer = stats.load_rows([results], "overall").get(row, {})
    if len(peer) < 2 or len(table["ensembles"]) < 2:
        print(f"== against {row!r}: {len(peer)} runs of it and {len(table['ensembles'])} ensembles; "
              "an interval needs 2 of each", flush=True)
        return
    d = table["against_peer"] = {"row": row, "seeds": sorted(peer), **against_peer(table, peer)}
    print(f"== ensemble - {row}, overall: {100 * d['mean']:+.2f} points (unpaired, n={d['n']}), "
          f"95% interval [{100 * d['lo']:+.2f}, {100 * d['hi']:+.2f}]", flush=True)


def finished_members(members: list[str], data_dir: str, runs: Path) -> dict:
    """The table of --members: each member's dev scores, and the ensembles of its first k members, k = 2 .. all."""
    named = dict(m.split("=", 1) for m in members)
    if len(named) != len(members) or len(named) < 2:
        raise SystemExit(f"--members takes two or more distinct NAME=DIR, not {members}")
    table = {"members": {n: dev_scores(raw_dir(d), data_dir) for n, d in named.items()}, "dirs": named,
             "ensembles": []}
    for n, scores in table["members"].items():
        print(f"== member {n}: overall {scores['overall']:.4f}", flush=True)
    names = list(named)
    for k in range(2, len(names) + 1):
        out = runs / f"ensemble-first-{k}"
        ensemble([named[n] for n in names[:k]], out)
        scores = dev_scores(out, data_dir)
        table["ensembles"].append({"members": names[:k], "dev": scores})
        print(f"== ensemble of {', '.join(names[:k])}: overall {scores['overall']:.4f} (SST {scores['sst_accuracy']:.4f}, "
              f"Quora {scores['para_accuracy']:.4f}, STS r {scores['sts_pearson']:.4f})", flush=True)
    return table


def write_table(path: Path, table: dict) -> None:
    """Write the results JSON atomically (write_text: fsynced, renamed; a failed write keeps the previous one)."""
    write_text(path, json.dumps(table, indent=1))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="results JSON")
    p.add_argument("--runs-dir", default="runs/ensemble", help="one prediction directory and checkpoint per seed")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--size", type=int, default=3, help="runs per ensemble (consecutive seeds)")
    p.add_argument("--data-dir", default="data")
    p.add_argument("--peer", nargs=2, metavar=("RESULTS", "ROW"), default=None,
                   help="also compare the ensembles' overall score with this row of a paired_runs JSON, unpaired "
                        "(one run at the ensemble's total budget, e.g. power.json 'baseline 3 epochs')")
    p.add_argument("--members", nargs="+", metavar="NAME=DIR", default=None,
                   help="no training: ensemble these finished runs' raw outputs, the first 2, 3, ..., all in this order")
    p.add_argument("--peer-only", action="store_true",
                   help="no training and no runs dir: read the table already in --out and add --peer's comparison")
    args = p.parse_args(argv)
    if args.peer_only:
        if args.peer is None or not Path(args.out).is_file():
            p.error(f"--peer-only needs --peer and an existing --out table ({args.out} "
                    f"{'exists' if Path(args.out).is_file() else 'does not exist'})")
        table = json.loads(Path(args.out).read_text())
        add_peer(table, *args.peer)
        write_table(Path(args.out), table)
        return 0
    if args.members is not None:
        write_table(Path(args.out), finished_members(args.members, args.data_dir, Path(args.runs_dir)))
        return 0
    seeds = [int(s) for s in args.seeds.split(",")]
    runs, minutes = Path(args.runs_dir), {}
    for seed in seeds:
        pred = runs / f"seed-{seed}"
        if (pred / "multitask-summary.json").is_file() and (pred / "sts-dev-raw.csv").is_file():
            print(f"== seed {seed}: already in {pred}", flush=True)
            minutes[seed] = json.loads((pred / "minutes.json").read_text()) if (pred / "minutes.json").is_file() else None
            continue
        t0 = time.perf_counter()
        multitask.run(multitask.parse_settings([
            *extra, "--seed", str(seed), "--no-progress", "--raw-outputs", "--predictions-dir", str(pred),
            "--checkpoint", str(runs / f"seed-{seed}.pt")]))
        minutes[seed] = (time.perf_counter() - t0) / 60
        (pred / "minutes.json").write_text(json.dumps(minutes[seed]))
    table = {"flags": extra, "members": {s: dev_scores(runs / f"seed-{s}", args.data_dir) for s in seeds},
             "minutes": minutes, "ensembles": []}
    for g in range(0, len(seeds) - args.size + 1, args.size):
        group = seeds[g:g + args.size]
        out = runs / f"ensemble-{'-'.join(map(str, group))}"
        ensemble([runs / f"seed-{s}" for s in group], out)
        scores = dev_scores(out, args.data_dir)
        table["ensembles"].append({"seeds": group, "dev": scores})
        best = max(table["members"][s]["overall"] for s in group)
        print(f"== ensemble {group}: overall {scores['overall']:.4f} (best member {best:.4f})", flush=True)
    table["against_members"] = against_members(table)
    for metric, d in table["against_members"].items():
        interval = (f"95% interval [{100 * d['lo']:+.2f}, {100 * d['hi']:+.2f}]" if d["n"] > 1
                    else "no interval from one ensemble")
        print(f"== ensemble - its members' mean, {metric}: {100 * d['mean']:+.2f} points (n={d['n']}), {interval}",
              flush=True)
        if d["n"] < 2:
            d.update(sd=None, lo=None, hi=None)          # JSON has no NaN
    if args.peer is not None:
        add_peer(table, *args.peer)
    write_table(Path(args.out), table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
