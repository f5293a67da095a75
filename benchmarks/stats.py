"""Paired-seed statistics for the comparison tables: each row's mean and sd over the seeds it shares with a baseline
row, and its paired difference against it (mean, sd, 95% t interval, whether the interval excludes 0), as a markdown
table.

    python benchmarks/stats.py benchmarks/results/power.json --baseline baseline [--metric overall]

Reads the JSON lists benchmarks/paired_runs.py writes (rows {"row", "seed", "dev": {...}, ...}; any list of
dicts with "row", "seed" and the metric works). The metric is looked up in the row's "dev" dict first, then at
the top level; a dotted name ("test.sst_accuracy") walks nested dicts. The difference pairs a row with the
baseline on the seeds both have (same seed: same data sample, initial heads and data order), so the
seed-to-seed variation both share cancels; a seed the baseline lacks is named in the table and left out. A NaN
or infinite value is an error naming its file, row and seed. No scipy: the t quantiles for 1-30 degrees of freedom
are a table, beyond it a Cornish-Fisher expansion (error < 1e-4).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

# t_{0.975, df}: the two-sided 95% quantile of Student's t, df = 1..30
T975 = (12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
        2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
        2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423)


def t975(df: int) -> float:
    """The 97.5% quantile of Student's t with df degrees of freedom (table to 30, Cornish-Fisher beyond)."""
    if df < 1:
        raise ValueError(f"a t interval needs at least 1 degree of freedom (2 seeds), not {df}")
    if df <= len(T975):
        return T975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def mean_sd(values: list[float]) -> tuple[float, float]:
    """Mean and sample sd (n - 1); the sd is nan for one value."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else math.nan


def paired_difference(row: dict[int, float], baseline: dict[int, float]) -> dict:
    """row - baseline on their shared seeds: n, mean, sd, the 95% t interval (lo, hi), and whether it excludes 0."""
    seeds = sorted(set(row) & set(baseline))
    diffs = [row[s] - baseline[s] for s in seeds]
    if len(diffs) < 2:
        return {"n": len(diffs), "mean": diffs[0] if diffs else math.nan, "sd": math.nan, "lo": math.nan,
                "hi": math.nan, "excludes_zero": False}
    mean, sd = mean_sd(diffs)
    half = t975(len(diffs) - 1) * sd / math.sqrt(len(diffs))
    return {"n": len(diffs), "mean": mean, "sd": sd, "lo": mean - half, "hi": mean + half,
            "excludes_zero": mean - half > 0 or mean + half < 0}


def unpaired_difference(row: list[float], other: list[float]) -> dict:
    """mean(row) - mean(other) for runs that share no pairing (e.g. an ensemble against one longer run): Welch's
    interval, its degrees of freedom rounded down (a wider interval); n is (len(row), len(other))."""
    if len(row) < 2 or len(other) < 2:
        raise ValueError(f"an unpaired interval needs at least 2 runs a side, not {len(row)} and {len(other)}")
    (ma, sa), (mb, sb) = mean_sd(row), mean_sd(other)
    va, vb = sa**2 / len(row), sb**2 / len(other)                     # the squared standard errors
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(row) - 1) + vb**2 / (len(other) - 1)) if se > 0 else len(row) + len(other) - 2
    half = t975(max(1, math.floor(df))) * se
    mean = ma - mb
    return {"n": (len(row), len(other)), "mean": mean, "df": df, "lo": mean - half, "hi": mean + half,
            "excludes_zero": mean - half > 0 or mean + half < 0}


DEV_METRICS = ("overall", "sst_accuracy", "para_accuracy", "sts_pearson")


def metric_of(record: dict, metric: str) -> float:
    """The metric of one result record: record["dev"][metric], else record[metric]; dots walk nested dicts."""
    if "." not in metric and metric in record.get("dev", {}):
        return float(record["dev"][metric])
    value: object = record
    for key in metric.split("."):
        value = value[key]  # type: ignore[index]
    return float(value)  # type: ignore[arg-type]


def load_rows(paths: list[str | Path], metric: str) -> dict[str, dict[int, float]]:
    """{row: {seed: metric}} from paired_runs-style JSON files (rows in first-seen order).

    A record whose dev figures lack a dev metric (a single-task row has no overall score and one task's figure)
    is left out of that metric's rows; any other missing key raises, and so does a NaN or infinite value (ValueError
    naming the file, row and seed)."""
    rows: dict[str, dict[int, float]] = {}
    for path in paths:
        for record in json.loads(Path(path).read_text()):
            if metric in DEV_METRICS and "dev" in record and metric not in record["dev"]:
                continue
            value = metric_of(record, metric)
            if not math.isfinite(value):
                raise ValueError(f"{path}: row {record['row']!r}, seed {record['seed']}: {metric} is {value}; "
                                 "rerun that seed or remove its record")
            rows.setdefault(record["row"], {})[int(record["seed"])] = value
    return rows


def markdown_table(rows: dict[str, dict[int, float]], baseline: str, metric: str, scale: float = 100.0) -> str:
    """One line per row: seeds, mean +- sd, and the paired difference against `baseline` with its 95% interval.

    A row's mean and sd are over the seeds it shares with the baseline (those its difference uses); its other seeds
    are named as left out. A row sharing no seed shows its own seeds' mean."""
    if baseline not in rows:
        raise ValueError(f"no baseline row {baseline!r}; rows: {', '.join(rows)}")
    lines = [f"| row | seeds | {metric} mean | sd | diff vs {baseline} | 95% interval | excludes 0 |",
             "|---|---|---|---|---|---|---|"]
    for name, values in rows.items():
        paired = sorted(set(values) & set(rows[baseline])) or sorted(values)
        unpaired = sorted(set(values) - set(paired))
        mean, sd = mean_sd([values[s] for s in paired])
        seeds = ",".join(str(s) for s in paired)
        if unpaired:
            seeds += f" ({','.join(str(s) for s in unpaired)} unpaired, left out)"
        cells = [name, seeds, f"{mean * scale:.2f}", "-" if math.isnan(sd) else f"{sd * scale:.2f}"]
        if name == baseline:
            cells += ["-", "-", "-"]
        else:
            d = paired_difference(values, rows[baseline])
            diff = "no shared seed" if d["n"] == 0 else f"{d['mean'] * scale:+.2f} (n={d['n']})"
            if d["n"] < 2:  # no interval from fewer than two paired seeds
                cells += [diff, "needs 2 paired seeds", "-"]
            else:
                cells += [diff, f"[{d['lo'] * scale:+.2f}, {d['hi'] * scale:+.2f}]",
                          "yes" if d["excludes_zero"] else "no"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", nargs="+", help="paired_runs.py JSON files")
    p.add_argument("--baseline", required=True, help="the row every other row is compared with")
    p.add_argument("--metric", default="overall", help="dev metric (default overall), or a dotted key")
    p.add_argument("--scale", type=float, default=100.0, help="multiply values by this (default 100: points)")
    args = p.parse_args(argv)
    try:
        print(markdown_table(load_rows(args.results, args.metric), args.baseline, args.metric, args.scale))
    except ValueError as e:                                         # a bad value or row: one line, exit 2
        p.error(str(e))
    return 0


if __name__ == "__main__":
    sys.exit(main())
