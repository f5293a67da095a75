"""The paired-seed figures the benchmark pages state (benchmarks/README.md's index, multitask.md, leaderboard.md,
smart-pals.md, simcse.md, bitfit.md, rdrop.md, search.md, deebert.md), recomputed from the per-seed values in
benchmarks/results/ with benchmarks/stats.py and looked for in the page at the page's rounding. No training."""

from __future__ import annotations

import json
import re
import statistics
import string
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "benchmarks"))

import stats

TASKS = ("overall", "sst_accuracy", "para_accuracy", "sts_pearson")
LABEL = {"overall": "overall", "sst_accuracy": "SST acc", "para_accuracy": "Quora acc", "sts_pearson": "STS r"}


def page(name: str) -> str:
    """A page's text, every run of whitespace one space and the bold marks (**) dropped."""
    return " ".join((ROOT / name).read_text().split()).replace("**", "")


def result(name: str):
    return json.loads((RESULTS / name).read_text())


def main_job(metric: str) -> dict[int, float]:
    """`make train`'s three seeds (multitask.md's main-job table): the single-task and frozen-word runs pair with it."""
    return {int(s): v[f"dev_{metric}"] for s, v in result("multitask-main-fused.json")["seeds"].items()}


def records_rows(records: list[dict], metric: str) -> dict[str, dict[int, float]]:
    """{row: {seed: metric}} from records already in memory (a results file whose paired list is one of its keys)."""
    rows: dict[str, dict[int, float]] = {}
    for record in records:
        rows.setdefault(record["row"], {})[int(record["seed"])] = stats.metric_of(record, metric)
    return rows


def ensemble_rows(metric: str) -> dict[str, dict[int, float]]:
    """Each of ensemble.json's ensembles (keyed by its position) and the mean of its own members' dev figures."""
    data = result("ensemble.json")
    return {"ensemble": {i: e["dev"][metric] for i, e in enumerate(data["ensembles"])},
            "members' mean": {i: statistics.fmean(data["members"][str(s)][metric] for s in e["seeds"])
                              for i, e in enumerate(data["ensembles"])}}


def ablation_rows(metric: str) -> dict[str, dict[int, float]]:
    """The ablation budget's cross-encoder round-robin row (1500 examples, 1 epoch, no extension) on its three seeds."""
    extra = ["--warmup-ratio", "0.1", "--max-grad-norm", "1.0", "--sts-head-bias", "2.5"]
    row = {r["seed"]: r["dev"][metric] for name in ("multitask-tables-sts-mid.json", "multitask-seeds.json")
           for r in result(name) if (r["design"], r["schedule"], r["mode"], r["extra"], r["max_train_examples"],
                                     r["epochs"]) == ("cross-encoder", "round-robin", "full-model", extra, 1500, 1)}
    return {"cross-encoder round-robin": row}


SOURCES = {  # name: (how its rows are read for a metric, the seed order the pages list them in)
    "power": (lambda m: stats.load_rows([RESULTS / "power.json"], m), (1, 2, 3)),
    "rdrop": (lambda m: stats.load_rows([RESULTS / "rdrop.json"], m), (1, 2, 3)),
    "search": (lambda m: stats.load_rows([RESULTS / "search-confirm.json"], m), (11711, 1, 2)),
    "bitfit": (lambda m: stats.load_rows([RESULTS / "bitfit-table3-e3.json"], m), (1, 2, 3)),
    "single": (lambda m: stats.load_rows([RESULTS / "single-task.json"], m) | {"main job": main_job(m)},
               (11711, 1, 2)),
    "ffw": (lambda m: {"frozen words": {int(s): v[f"dev_{m}"] for s, v in result("multitask-main-ffw.json")["seeds"]
                                        .items()}, "main job": main_job(m)}, (11711, 1, 2)),
    "sst2": (lambda m: records_rows(result("deebert-sst2.json")["paired"], m), (1, 2, 3)),
    "cfimdb": (lambda m: records_rows(result("deebert-cfimdb.json")["paired"], m), (1, 2, 3)),
    "ensemble": (ensemble_rows, (0, 1, 2)),
    "ablation": (ablation_rows, (11711, 1, 2)),
}


@cache
def rows_for(source: str, metric: str) -> dict[str, dict[int, float]]:
    """{row: {seed: value}} of one source and metric, read once."""
    return SOURCES[source][0](metric)


@cache
def figures(source: str, metric: str, row: str, minus: str | None, scale: float) -> SimpleNamespace:
    """One metric's figures, scaled (points by default): the row's per-seed values r (the page's seed order), sorted
    rs, mean rm, sd rsd, rm1 the mean unscaled; with `minus`, the same of that row (b, bm, bsd, bm1) and
    stats.paired_difference(row, minus): m, lo, hi, ex ("yes"/"no"), the per-seed differences d, sorted ds, their
    sizes sorted ad, the mean's size am."""
    order, rows = SOURCES[source][1], rows_for(source, metric)
    values = rows[row]
    assert sorted(values) == sorted(order), f"{source} {row!r}: seeds {sorted(values)}, the page lists {order}"
    rm, rsd = stats.mean_sd([values[s] for s in order])
    f = SimpleNamespace(r=[values[s] * scale for s in order], rm=rm * scale, rsd=rsd * scale, rm1=rm,
                        rs=sorted(values[s] * scale for s in order))
    if minus is not None:
        base = rows[minus]
        assert sorted(base) == sorted(order), f"{source} {minus!r}: seeds {sorted(base)}, the page lists {order}"
        bm, bsd = stats.mean_sd([base[s] for s in order])
        d = stats.paired_difference(values, base)
        assert d["n"] == len(order)
        f.b, f.bm, f.bsd, f.bm1 = [base[s] * scale for s in order], bm * scale, bsd * scale, bm
        f.m, f.lo, f.hi, f.am = d["mean"] * scale, d["lo"] * scale, d["hi"] * scale, abs(d["mean"]) * scale
        f.ex = "yes" if d["excludes_zero"] else "no"
        f.d = [(values[s] - base[s]) * scale for s in order]
        f.ad, f.ds = sorted(abs(x) for x in f.d), sorted(f.d)
    return f


@dataclass(frozen=True)
class Case:
    """A figure a page states: `row - minus` (or the row alone) of `source` for each of `metrics`, written by
    `says`, a str.format template whose {0}, {1}, ... are those metrics' figures (see figures())."""

    page: str
    source: str
    row: str
    minus: str | None
    metrics: tuple[str, ...]
    says: str
    scale: float = 100.0


def iv(i: int = 0) -> str:
    """The template of an interval in points, signed: [-2.55, +1.30]."""
    return f"[{{{i}.lo:+.2f}}, {{{i}.hi:+.2f}}]"


def dif(i: int = 0) -> str:
    """A signed mean difference and its interval: -0.62 [-2.55, +1.30]."""
    return f"{{{i}.m:+.2f}} " + iv(i)


def per(i: int = 0, key: str = "r") -> str:
    """A row's per-seed values in the page's seed order: 72.83 / 72.98 / 73.48."""
    return " / ".join(f"{{{i}.{key}[{k}]:.2f}}" for k in range(3))


def msd(i: int = 0, key: str = "b") -> str:
    """A row's mean (sd): 73.20 (0.30)."""
    return f"{{{i}.{key}m:.2f}} ({{{i}.{key}sd:.2f}})"


def seeds_table(page_: str, row: str, minus: str, sd_col: bool = True, metrics=TASKS, source: str = "power"):
    """leaderboard.md's tables: | metric | baseline mean (sd) | row's seeds (sd overall) | diff | interval | ex |."""
    return [Case(page_, source, row, minus, (m,), f"| {LABEL[m]} | " + (msd() + " | " if sd_col else "") + per()
                 + (" (sd {0.rsd:.2f})" if m == "overall" else "") + " | {0.m:+.2f} | " + iv() + " | {0.ex} |")
            for m in metrics]


README = "benchmarks/README.md"
MT, LB, SP = "benchmarks/multitask.md", "benchmarks/leaderboard.md", "benchmarks/smart-pals.md"
B1 = "baseline 1 epoch"
Q = ("overall", "sst_accuracy", "para_accuracy", "sts_pearson")
CASES = [
    # benchmarks/README.md's index rows that quote paired results
    Case(README, "single", "main job", "sst alone", ("sst_accuracy",), "main job - alone SST " + dif()),
    Case(README, "single", "main job", "sts alone", ("sts_pearson",), "STS r " + dif()),
    Case(README, "single", "main job", "para alone", ("para_accuracy",), "Quora " + dif()),
    Case(README, "rdrop", "rdrop 1.0", "baseline", TASKS, "(baseline sd {0.bsd:.2f}): overall {0.m:+.2f} " + iv(0)
         + ", SST {1.m:+.2f}, Quora {2.m:+.2f}, STS r {3.m:+.2f} (none resolved)"),
    Case(README, "search", "search trial 4", "main job", TASKS, "mean {0.rm1:.4f} against {0.bm1:.4f}, "
         "{0.m:+.2f} points " + iv(0) + ", not resolved (SST {1.m:+.2f}, Quora {2.m:+.2f}, STS r {3.m:+.2f}, none resolved)"),
    Case(README, "search", "main job, gradual unfreezing 0.1", "main job", ("overall",),
         "{0.m:+.2f} points " + iv()),
    Case(README, "bitfit", "bitfit all", "frozen", ("accuracy",),
         "BitFit `all` {0.rm:.2f} beats the head alone by {0.m:.2f} points [{0.lo:.2f}, {0.hi:.2f}]"),
    Case(README, "bitfit", "full-model", "bitfit all", ("accuracy",),
         "full fine-tuning beats it by {0.m:.2f} [{0.lo:.2f}, {0.hi:.2f}]"),
    Case(README, "power", "pcgrad", B1, ("overall",), "3 paired seeds: overall " + dif()),
    Case(README, "power", "pcgrad-sum", B1, ("overall",), "(same rounds and steps, no projection) " + dif()),
    Case(README, "power", "pcgrad", "pcgrad-sum", ("overall",), "pcgrad - sum, " + dif()),
    Case(README, "power", "sts-cosine-aux", B1, ("overall", "sts_pearson", "sst_accuracy"),
         "overall " + dif(0) + ", STS r " + dif(1) + " (neither resolved), SST " + dif(2)),
    Case(README, "power", "sts-cosent-aux", B1, ("overall", "sts_pearson"), "overall " + dif(0) + ", STS r " + dif(1)),
    Case(README, "power", "mnrl", B1, ("overall", "para_accuracy"), "overall " + dif(0) + ", Quora " + dif(1)),
    Case(README, "power", "sts-cosent-bi", B1, ("sts_pearson", "overall"), "STS r " + dif(0)),
    Case(README, "power", "sts-cosent-bi", "bi-encoder round-robin", ("sts_pearson",),
         "against the cross-encoder (shown), " + dif() + " against the bi-encoder's regression head"),
    Case(README, "power", "sts-cosent-bi", B1, ("overall",), "(not resolved); overall " + dif()),
    Case(README, "ensemble", "ensemble", "members' mean", ("overall", "sts_pearson"),
         "members' mean: overall " + dif(0) + " (not resolved), STS r " + dif(1) + " (shown)"),
    Case(README, "power", "baseline 3 epochs", B1, TASKS, "overall " + dif(0) + ", Quora " + dif(2)
         + " (both shown); SST {1.m:+.2f}, STS r {3.m:+.2f} (not resolved); {0.rm1:.4f} mean"),
    Case(README, "ffw", "frozen words", "main job", ("overall",),
         "overall {0.rm1:.4f}, {0.m:+.2f} " + iv() + " points against full fine-tuning (shown)"),
    Case(README, "sst2", "chosen-b1", "plain-b1", ("time_saved",),
         "time saved at batch 1 {0.m:.1f}% [{0.lo:.1f}, {0.hi:.1f}] against the plain model"),
    Case(README, "sst2", "chosen-b1", "plain-b1", ("time_saved_vs_no_exit",), "{0.m:.1f}% against \"no exit\""),
    Case(README, "sst2", "chosen-b32", "plain-b32", ("time_saved",),
         "at batch 32 {0.m:.1f}% [{0.lo:.1f}, {0.hi:.1f}]"),
    # the drop is plain - chosen
    Case(README, "sst2", "plain-b1", "chosen-b1", ("quality",),
         "accuracy drop {0.m:.2f} points " + iv() + " ({0.ad[0]:.1f}-{0.ad[2]:.1f} on every seed"),
    Case(README, "cfimdb", "chosen-b1", "plain-b1", ("time_saved",),
         "time saved at batch 1 {0.m:.1f}% [{0.lo:.1f}, {0.hi:.1f}] against the plain model"),
    Case(README, "cfimdb", "chosen-b32", "plain-b32", ("time_saved",), "at batch 32 {0.rs[0]:.1f}-{0.rs[2]:.1f}%"),
    Case(README, "cfimdb", "plain-b1", "chosen-b1", ("quality",), "accuracy drop {0.m:.2f} points " + iv()),
    Case(README, "power", "simcse-sup", B1, ("overall",), "overall " + dif() + " against the baseline"),
    Case(README, "power", "simcse-sup", "quora rest", ("overall",), dif() + " against its same-data control"),
    Case(README, "power", "sequential 1 epoch", B1, ("overall", "sts_pearson"),
         "overall {0.m:+.2f} points, 95% interval " + iv(0) + " (not shown); STS r " + dif(1)),
    Case(README, "power", "smart-mt-dnn", B1, ("overall", "para_accuracy", "sts_pearson"),
         "overall " + dif(0) + ", Quora {1.m:+.2f}, STS r {2.m:+.2f} (all shown)"),
    Case(README, "power", "smart-vat", B1, ("overall",), "the vat preset " + dif()),
    Case(README, "power", "smart-paper", B1, ("overall",), "(a dropout-consistency term in effect) " + dif()),
    Case(README, "power", "smart-mt-dnn-nodropout", B1, ("overall",), "the perturbation with dropout off " + dif()),
    Case(README, "power", "smart-mt-dnn-bregman", B1, ("overall",), "(the full Algorithm 1) " + dif()),
    Case(README, "power", "smart-mt-dnn-bregman", "smart-mt-dnn", ("overall",), ", " + dif() + " against mt-dnn alone"),
    Case(README, "power", "pals-standard", B1, ("overall",), "overall standard " + dif()),
    Case(README, "power", "pals-concat", B1, ("overall", "para_accuracy", "sts_pearson"),
         "concat " + dif(0) + " (neither shown); concat raises Quora " + dif(1) + " and STS r " + dif(2)),
    Case(README, "power", "last-linear-layer sequential", "last-linear-layer round-robin", ("overall", "sts_pearson"),
         "sequential - round-robin overall " + dif(0) + ", all of it STS r " + dif(1)),
    Case(README, "power", "sequential constant lr", "round-robin constant lr", ("sst_accuracy", "sts_pearson", "overall"),
         "sequential - round-robin SST {0.m:+.2f} points " + iv(0) + ", STS r " + dif(1)),
    Case(README, "power", "sequential constant lr", "round-robin constant lr", ("overall",), "overall " + dif()),
    Case(README, "power", "bi-encoder round-robin", B1, ("overall", "sts_pearson"),
         "(full, round-robin) overall " + dif(0) + " (not shown), STS r " + dif(1)),
    Case(README, "power", "last-linear-layer bi-encoder round-robin", "last-linear-layer round-robin", ("overall",),
         "the bi-encoder leads by {0.m:.1f} points [{0.lo:.2f}, {0.hi:.2f}]"),
    Case(README, "power", "bi-encoder sequential", "bi-encoder round-robin", ("overall", "sts_pearson"),
         "for the bi-encoder " + dif(0) + " overall (shown), most of it STS r, " + dif(1)),
    Case(README, "power", B1, B1, ("overall",), "sd {0.rsd:.2f} points overall over 3 seeds, mean {0.rm1:.4f}"),
    # the docs pages that quote them
    Case("docs/leaderboard.md", "power", "pcgrad", "pcgrad-sum", ("overall",), "that control is {0.m:+.2f} points " + iv()),
    *[Case("docs/leaderboard.md", "power", row, B1, ("overall",), f"{label} {{0.m:+.2f}}")
      for row, label in (("sts-cosine-aux", "(cosine"), ("sts-cosent-aux", "CoSENT"), ("mnrl", "MNRL"),
                         ("sts-cosent-bi", "bi-encoder CoSENT"))],
    Case("docs/leaderboard.md", "ensemble", "ensemble", "members' mean", ("sts_pearson", "overall"),
         "members' mean on STS r by {0.m:.1f} points (shown) and on the overall score by {1.m:.2f} points"),
    Case("docs/bitfit.md", "bitfit", "bitfit all", "frozen", ("accuracy",), "beats the head alone by {0.m:.1f} points"),
    Case("docs/bitfit.md", "bitfit", "bitfit all", "full-model", ("accuracy",), "trails full fine-tuning by {0.am:.1f}"),
    Case("docs/training.md", "search", "main job, gradual unfreezing 0.1", "main job", ("overall",),
         "three paired seeds, {0.m:+.2f} points overall " + iv()),
    # benchmarks/multitask.md
    *[Case(MT, "single", "main job", alone, (m,), f"| {LABEL[m]} | " + per(0, "b") + " | " + msd() + " | " + per()
           + " | {0.m:+.2f} | " + iv() + " | {0.ex} |")
      for alone, m in (("sst alone", "sst_accuracy"), ("sts alone", "sts_pearson"), ("para alone", "para_accuracy"))],
    Case(MT, "ffw", "frozen words", "main job", TASKS, "overall " + dif(0) + " (excludes 0: the frozen table costs "
         "a third of a point), SST " + dif(1) + ", Quora " + dif(2) + ", STS r " + dif(3) + " (none resolved alone)"),
    *[Case(MT, "power", "sequential 1 epoch", B1, (m,), f"| {LABEL[m]} | "
           + ("{0.bm:.2f} ({0.bsd:.2f})" if m == "overall" else "{0.bm:.2f}")
           + " | {0.rm:.2f} ({0.rsd:.2f}) | {0.m:+.2f} | " + iv() + " | {0.ex} |") for m in TASKS],
    *[Case(MT, "power", "sequential constant lr", "round-robin constant lr", (m,), f"| {LABEL[m]} | " + per(0, "b")
           + (" (sd {0.bsd:.2f})" if m == "overall" else "") + " | " + per()
           + (" (sd {0.rsd:.2f})" if m == "overall" else "") + " | {0.m:+.2f} | " + iv() + " | {0.ex} |")
      for m in TASKS],
    Case(MT, "power", "round-robin constant lr", B1, ("overall",), "({0.rm:.2f} against {0.bm:.2f}, " + dif() + ")"),
    *[Case(MT, "power", "last-linear-layer sequential", "last-linear-layer round-robin", (m,), f"| {LABEL[m]} | "
           + msd() + " | " + msd(0, "r") + " | {0.m:+.2f} | " + iv() + " | {0.ex} |") for m in TASKS],
    Case(MT, "power", B1, "last-linear-layer round-robin", ("overall",), "is {0.m:.1f} points overall above the frozen "
         "encoder at this budget ({0.rm:.2f} against {0.bm:.2f}, [{0.lo:.2f}, {0.hi:.2f}])"),
    *[Case(MT, "power", row, minus, Q, f"| {label} | " + " | ".join(dif(i) for i in range(4)) + " |")
      for label, row, minus in (
          ("bi - cross, full, round-robin", "bi-encoder round-robin", B1),
          ("bi - cross, frozen, round-robin", "last-linear-layer bi-encoder round-robin", "last-linear-layer round-robin"),
          ("bi - cross, full, sequential", "bi-encoder sequential", "sequential 1 epoch"),
          ("sequential - round-robin, bi, full", "bi-encoder sequential", "bi-encoder round-robin"),
          ("sequential - round-robin, bi, frozen", "last-linear-layer bi-encoder sequential",
           "last-linear-layer bi-encoder round-robin"),
          ("full - frozen, bi, round-robin", "bi-encoder round-robin", "last-linear-layer bi-encoder round-robin"),
          ("full - frozen, bi, sequential", "bi-encoder sequential", "last-linear-layer bi-encoder sequential"))],
    *[Case(MT, "ablation", "cross-encoder round-robin", None, Q[1:] + Q[:1], f"| {seed} | "
           + " | ".join(f"{{{i}.r[{k}]:.3f}}" for i in range(4)) + " |", scale=1.0)
      for k, seed in enumerate((11711, 1, 2))],
    Case(MT, "ablation", "cross-encoder round-robin", None, Q[1:] + Q[:1], "| mean (sd) | "
         + " | ".join(f"{{{i}.rm:.3f}} ({{{i}.rsd:.3f}})" for i in range(4)) + " |", scale=1.0),
    # benchmarks/leaderboard.md
    *seeds_table(LB, "pcgrad", B1),
    *[Case(LB, "power", "pcgrad-sum", B1, (m,), f"| {LABEL[m]} | " + per()
           + (" (sd {0.rsd:.2f})" if m == "overall" else "") + " | {0.m:+.2f} | " + iv() + " |") for m in TASKS],
    *[Case(LB, "power", "pcgrad", "pcgrad-sum", (m,), " | {0.m:+.2f} | " + iv() + " | {0.ex} |") for m in TASKS],
    *seeds_table(LB, "sts-cosine-aux", B1),
    *seeds_table(LB, "sts-cosent-aux", B1),
    Case(LB, "power", "sts-cosent-aux", B1, ("sts_pearson",),
         "lower on all three seeds (by {0.ad[0]:.1f}-{0.ad[2]:.1f} points)"),
    *seeds_table(LB, "mnrl", B1),
    *seeds_table(LB, "sts-cosent-bi", B1),
    Case(LB, "power", "sts-cosent-bi", "bi-encoder round-robin", ("sts_pearson",),
         "| STS r, against the bi-encoder's head ({0.bm:.2f}, sd {0.bsd:.2f}) | | | {0.m:+.2f} | " + iv() + " | {0.ex} |"),
    Case(LB, "power", "sts-cosent-bi", "bi-encoder round-robin", ("overall",),
         "| overall, against the bi-encoder's head ({0.bm:.2f}, sd {0.bsd:.2f}) | | | {0.m:+.2f} | " + iv()
         + " | {0.ex} |"),
    *[Case(LB, "ensemble", "ensemble", "members' mean", Q[1:] + Q[:1], f"| ensemble {label} | "
           + " | ".join(f"{{{i}.r[{k}]:.2f}} ({{{i}.b[{k}]:.2f}})" for i in range(4)) + " |")
      for k, label in enumerate(("{{1, 2, 3}} (members' mean)", "{{4, 5, 6}}", "{{7, 8, 9}}"))],
    Case(LB, "ensemble", "ensemble", "members' mean", Q[1:] + Q[:1],
         "| ensemble - its members' mean, 3 ensembles | " + " | ".join(dif(i) for i in range(4)) + " |"),
    Case(LB, "ensemble", "ensemble", "members' mean", ("overall",), "rises by {0.m:.2f} points on the mean, "
         "{0.ds[0]:.2f}-{0.ds[2]:.2f} against the members' mean on each ensemble"),
    Case(LB, "power", "baseline 3 epochs", B1, TASKS, "Against `baseline 1 epoch` (paired): overall " + dif(0)
         + ", Quora " + dif(2) + " (both shown), SST " + dif(1) + ", STS r " + dif(3) + " (not resolved)"),
    # benchmarks/smart-pals.md
    *[Case(SP, "power", row, B1, Q, f"| {row}, mean | " + " | ".join(f"{{{i}.rm:.2f}}" for i in range(4)) + f" | | {row}"
           " - baseline | " + " | ".join(dif(i) for i in range(4)) + " |")
      for row in ("smart-mt-dnn", "smart-vat", "smart-paper", "smart-mt-dnn-nodropout", "smart-mt-dnn-bregman")],
    Case(SP, "power", B1, B1, Q, "| baseline 1 epoch, mean (sd) | " + " | ".join(msd(i, "r") for i in range(4)) + " |"),
    Case(SP, "power", "smart-mt-dnn", "smart-paper", ("overall",), "costs a further {0.am:.2f} " + iv()),
    Case(SP, "power", "smart-vat", "smart-paper", ("overall",), "and {0.am:.2f} " + iv()),
    Case(SP, "power", "smart-mt-dnn-bregman", "smart-mt-dnn", ("overall", "para_accuracy"),
         "the Bregman term adds " + dif(0) + " overall and " + dif(1)),
    *[Case(SP, "power", "pals-standard", B1, (m,), f"| {LABEL[m]} | " + msd() + " | " + per() + " | " + dif() + " |")
      for m in TASKS],
    *[Case(SP, "power", "pals-concat", B1, (m,), " | " + per() + " | " + dif() + " |") for m in TASKS],
    # benchmarks/simcse.md, Table 5
    Case("benchmarks/simcse.md", "power", "simcse-sup", B1, ("overall",), "| simcse-sup | " + msd(0, "r") + " | "
         + dif() + " |"),
    Case("benchmarks/simcse.md", "power", "simcse-sup", "quora rest", ("overall",), " | " + dif() + " |"),
    Case("benchmarks/simcse.md", "power", "quora rest", B1, ("overall",), "| quora rest | " + msd(0, "r") + " | "
         + dif() + " | - |"),
    # benchmarks/bitfit.md, Table 3 (each row against BitFit `all`)
    *[Case("benchmarks/bitfit.md", "bitfit", row, "bitfit all", ("accuracy",), f"| {label} | {trainable} | "
           "{0.r[0]:.2f} | {0.r[1]:.2f} | {0.r[2]:.2f} | {0.rm:.2f} | {0.rsd:.2f} | " + dif() + " | {0.ex} |")
      for row, label, trainable in (
          ("full-model", "full fine-tuning", "22,715,141"), ("frozen", "frozen (head alone)", "1,925"),
          ("rand_uniform", "rand_uniform", "28,037"), ("rand_row_col", "rand_row_col", "28,026"),
          ("rand_row_col_ref", "rand_row_col_ref", "27,653"), ("bitfit bq,bm2", "BitFit `bq,bm2`", "13,445"),
          ("bitfit bm2", "BitFit `bm2`", "11,141"), ("bitfit bq", "BitFit `bq`", "4,229"))],
    Case("benchmarks/bitfit.md", "bitfit", "bitfit all", "frozen", ("accuracy",), "| BitFit `all` | 28,037 | "
         "{0.r[0]:.2f} | {0.r[1]:.2f} | {0.r[2]:.2f} | {0.rm:.2f} | {0.rsd:.2f} | - | - |"),
    Case("benchmarks/bitfit.md", "bitfit", "bitfit all", "frozen", ("accuracy",),
         "beats training the head alone by {0.m:.1f} points [{0.lo:.1f}, {0.hi:.1f}]"),
    Case("benchmarks/bitfit.md", "bitfit", "full-model", "bitfit all", ("accuracy",),
         "beats BitFit `all` by {0.m:.2f} points [{0.lo:.2f}, {0.hi:.2f}] (both shown)"),
    # benchmarks/rdrop.md
    *[Case("benchmarks/rdrop.md", "rdrop", "rdrop 1.0", "baseline", (m,), f"| {label} | {{0.bm:.2f}} (sd {{0.bsd:.2f}}) "
           "| {0.rm:.2f} (sd {0.rsd:.2f}) | " + dif() + " | {0.ex} |")
      for m, label in zip(TASKS, ("overall", "SST accuracy", "Quora accuracy", "STS r"), strict=True)],
    # benchmarks/search.md: the confirmation of trial 4 and gradual unfreezing, each against make train's settings
    *[Case("benchmarks/search.md", "search", row, "main job", (m,), f"| {LABEL[m]} | " + per() + " | " + msd(0, "r")
           + " | " + per(0, "b") + (" ({0.bm:.2f}, {0.bsd:.2f})" if m == "overall" and row == "search trial 4" else "")
           + " | {0.m:+.2f} | " + iv() + " | {0.ex} |")
      for row in ("search trial 4", "main job, gradual unfreezing 0.1") for m in TASKS],
    # benchmarks/deebert.md: the drop is plain - chosen; the time saved, chosen - plain (plain saves 0)
    Case("benchmarks/deebert.md", "sst2", "plain-b1", "chosen-b1", ("quality",), "| accuracy drop at S | "
         "{0.d[0]:.2f} | {0.d[1]:.2f} | {0.d[2]:.2f} | {0.m:.2f} | " + iv() + " | {0.ex} |"),
    Case("benchmarks/deebert.md", "sst2", "plain-b1", "chosen-b1", ("quality",), "| plain model accuracy | "
         "{0.r[0]:.2f} | {0.r[1]:.2f} | {0.r[2]:.2f} | {0.rm:.2f} (sd {0.rsd:.2f}) |"),
    *[Case("benchmarks/deebert.md", "sst2", f"chosen-{b}", f"plain-{b}", (m,),
           "{0.m:.1f}% | [{0.lo:.1f}, {0.hi:.1f}] | {0.ex} |")
      for b in ("b1", "b32") for m in ("time_saved", "time_saved_vs_no_exit")],
    Case("benchmarks/deebert.md", "cfimdb", "plain-b1", "chosen-b1", ("quality",),
         "Mean drop {0.m:.2f} " + iv() + " (not resolved); time saved at batch 1"),
    Case("benchmarks/deebert.md", "cfimdb", "chosen-b1", "plain-b1", ("time_saved",),
         "time saved at batch 1 {0.m:.1f}% [{0.lo:.1f}, {0.hi:.1f}] (shown"),
]


class Pattern(string.Formatter):
    """A template as a regular expression: its text literal, each figure the page's rounding of it; a figure within
    1e-9 of a rounding half (83.575, a decimal half that binary floats hold just above or below) may go either way."""

    def parse(self, format_string):
        for literal, field, spec, conversion in super().parse(format_string):
            yield re.escape(literal), field, spec, conversion

    def format_field(self, value, format_spec):
        format_spec = re.sub(r"\\(.)", r"\1", format_spec)  # the spec went through parse() too
        if not isinstance(value, float):
            return re.escape(format(value, format_spec))
        eps = 1e-9 * max(1.0, abs(value))
        ways = dict.fromkeys(format(x, format_spec) for x in (value, value - eps, value + eps))
        return "(?:" + "|".join(map(re.escape, ways)) + ")"


def case_id(case: Case) -> str:
    return f"{Path(case.page).stem}:{case.row}" + (f" - {case.minus}" if case.minus else "") + ":" + ",".join(case.metrics)


@pytest.mark.parametrize("case", CASES, ids=[f"{i}-{case_id(c)}" for i, c in enumerate(CASES)])
def test_the_page_states_the_paired_figure_its_results_give(case: Case) -> None:
    """The page states `case.says` filled with the figures recomputed from the results file with stats.py."""
    values = [figures(case.source, m, case.row, case.minus, case.scale) for m in case.metrics]
    said = case.says.format(*values)
    found = re.search(Pattern().format(case.says, *values), page(case.page)) is not None
    assert found, f"{case.page} should state: {said}"


def test_the_pages_state_the_ensembles_against_their_same_budget_peer() -> None:
    """leaderboard.md and the index: the three ensembles against `baseline 3 epochs` (unpaired: Welch), recomputed with
    stats.unpaired_difference from the ensembles' and the peer's per-seed overall scores."""
    ensembles = [e["dev"]["overall"] for e in result("ensemble.json")["ensembles"]]
    peer = stats.load_rows([RESULTS / "power.json"], "overall")["baseline 3 epochs"]
    d = stats.unpaired_difference(ensembles, list(peer.values()))
    said = f"{d['mean'] * 100:+.2f} [{d['lo'] * 100:+.2f}, {d['hi'] * 100:+.2f}]"
    assert d["excludes_zero"]
    assert f"{said} (shown, unpaired)" in page(README), said
    assert f"(unpaired, Welch): {d['mean'] * 100:+.2f} points [{d['lo'] * 100:+.2f}, {d['hi'] * 100:+.2f}] (shown)" \
        in page(LB), said


def test_the_index_states_the_range_of_bitfits_random_controls() -> None:
    """benchmarks/README.md: BitFit `all` against the three random controls, the lowest and highest mean difference."""
    rows = stats.load_rows([RESULTS / "bitfit-table3-e3.json"], "accuracy")
    means = sorted(stats.paired_difference(rows[c], rows["bitfit all"])["mean"] * 100
                   for c in ("rand_uniform", "rand_row_col", "rand_row_col_ref"))
    assert f"against the three random controls {means[0]:+.2f} to {means[-1]:+.2f}, none resolved" in page(README)
    highs = sorted(stats.paired_difference(rows["bitfit all"], rows[c])["hi"] * 100     # how far ahead each allows
                   for c in ("rand_uniform", "rand_row_col", "rand_row_col_ref"))
    assert f"allow BitFit ahead of a control by up to {highs[0]:.1f}-{highs[-1]:.1f} points" in " ".join(
        page("benchmarks/bitfit.md").split())


def test_the_multitask_page_counts_the_seeds_the_cross_encoder_leads_on() -> None:
    """multitask.md, the design bullet: on how many of the three seeds the cross-encoder (`baseline 1 epoch`) is ahead
    of the bi-encoder overall (full fine-tuning, round-robin)."""
    rows = stats.load_rows([RESULTS / "power.json"], "overall")
    ahead = sum(rows[B1][s] > rows["bi-encoder round-robin"][s] for s in rows[B1])
    text = page(MT)
    bullet = text[text.index("Design, full fine-tuning, round-robin"):text.index("Design, encoder frozen")]
    said = {1: ["one seed of three"], 2: ["two seeds of three"], 3: ["every seed", "all three seeds"]}
    assert any(f"ahead on {w}" in bullet for w in said[ahead]), f"{MT}: the cross-encoder leads on {ahead} seeds"
    assert not any(f"ahead on {w}" in bullet for n, ws in said.items() if n != ahead for w in ws)
    by = sorted((rows[B1][s] - rows["bi-encoder round-robin"][s]) * 100 for s in rows[B1])   # its margins, points
    assert f"(by {by[0]:.2f}-{by[-1]:.2f} points)" in " ".join(bullet.split())


def test_the_deebert_page_states_cfimdbs_seeds() -> None:
    """deebert.md, CFIMDB's table: per seed the chosen threshold, the accuracy drop (plain - chosen, points), the layers
    run and the time saved against the plain model at batch 1 (batch 32 in the last column), from the paired records."""
    records = result("deebert-cfimdb.json")["paired"]
    got = {(r["row"], r["seed"]): r for r in records}
    for seed in (1, 2, 3):
        plain, chosen, b32 = got["plain-b1", seed], got["chosen-b1", seed], got["chosen-b32", seed]
        drop = (plain["dev"]["quality"] - chosen["dev"]["quality"]) * 100
        said = (f"| {seed} | {chosen['setting'].removeprefix('S=')} | {drop:.2f} | {chosen['dev']['layers_run']:.1%} | "
                f"{chosen['dev']['time_saved']:.1%} [")
        assert said in page("benchmarks/deebert.md"), said
        assert f"| {chosen['dev']['time_saved_vs_no_exit']:.1%} | {b32['dev']['time_saved']:.1%} |" in page(
            "benchmarks/deebert.md")
