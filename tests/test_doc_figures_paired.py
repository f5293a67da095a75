"""The paired-seed figures of benchmarks/README.md's index and of the docs pages that quote them, recomputed from the
per-seed values in benchmarks/results/ with benchmarks/stats.py and looked for in the page at the page's rounding; and
the registry every paired-figure file uses (Case, figures(), the templates, Pattern, check()): the topic pages' tables
are tests/test_doc_figures_paired_pages.py. No training."""

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


def check(case: Case) -> None:
    """The page states `case.says` filled with the figures recomputed from the results file with stats.py."""
    values = [figures(case.source, m, case.row, case.minus, case.scale) for m in case.metrics]
    said = case.says.format(*values)
    found = re.search(Pattern().format(case.says, *values), page(case.page)) is not None
    assert found, f"{case.page} should state: {said}"


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
]


@pytest.mark.parametrize("case", CASES, ids=[f"{i}-{case_id(c)}" for i, c in enumerate(CASES)])
def test_the_page_states_the_paired_figure_its_results_give(case: Case) -> None:
    """The index or docs page states `case.says` filled with the figures recomputed from the results file."""
    check(case)



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
