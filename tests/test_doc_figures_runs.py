"""The benchmark pages' figures read off the runs themselves rather than paired differences: leaderboard.md's table
of the main job's targets, the ensembles against their best member (leaderboard.md, search.md, the index), the
three-epoch runs' per-epoch table, and deebert.md's table of every threshold, each recomputed from the per-run values
in benchmarks/results/ at the page's rounding. No training."""

from __future__ import annotations

import re

from test_doc_figures import ROOT, four, page_table
from test_doc_figures_paired import LB, README, figures, main_job, page, result, stats

LEADERBOARD = ROOT / LB
WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}
PAGE_TASKS = ("sst_accuracy", "para_accuracy", "sts_pearson")


def pts(x: float) -> str:
    """A score in points, two decimals: 0.75222 -> 75.22."""
    return f"{x * 100:.2f}"


def test_leaderboard_md_the_main_jobs_targets_table() -> None:
    """The targets table: make train's mean, sd and seeds, the search's best against it, the distance to 0.765, each
    task against its single-task reference, the frozen word table's score and cost, and the best recipes' scores."""
    rows = {r[0]: r[1:] for r in page_table(LEADERBOARD, "| target | measured | met |")}
    seeds = main_job("overall")
    mean, sd = stats.mean_sd([seeds[s] for s in (11711, 1, 2)])
    t4 = figures("search", "overall", "search trial 4", "main job", 100.0)
    measured, met = rows["`make train` >= 0.765, mean of 3 seeds"]
    assert measured.startswith(f"{four(mean)} (sd {sd:.4f}; seeds 11711 / 1 / 2: "
                               + " / ".join(four(seeds[s]) for s in (11711, 1, 2)) + ")"), measured
    assert f"not resolved from it: {four(t4.rm1)}, {t4.m:+.2f} [{t4.lo:+.2f}, {t4.hi:+.2f}]" in measured
    assert met == f"no ({(0.765 - mean) * 100:.1f} points short)", met
    alone = {m: figures("single", m, "main job", f"{task} alone", 100.0).m
             for task, m in zip(("sst", "para", "sts"), PAGE_TASKS, strict=True)}
    assert rows["no task under its single-task reference"][0].startswith(
        f"main - alone: SST {alone['sst_accuracy']:+.2f}, Quora {alone['para_accuracy']:+.2f}, STS r "
        f"{alone['sts_pearson']:+.2f} points on the means; none resolved")
    ffw = figures("ffw", "overall", "frozen words", "main job", 100.0)
    measured, met = rows["<= 25 minutes on A (avx2)"]
    assert f"at {four(ffw.rm1)} overall, {ffw.m:+.2f} [{ffw.lo:+.2f}, {ffw.hi:+.2f}] points against full" in measured
    assert met.endswith(f"the frozen-table option meets the time and loses {ffw.am:.2f} points"), met
    full = result("ensemble-full-budget.json")["ensembles"]
    best = max(full, key=lambda e: e["dev"]["overall"])
    main = result("ensemble-main.json")["ensembles"]
    longer = [r["dev"]["overall"] for r in result("power.json") if r["row"] == "baseline 3 epochs"]
    measured = rows["a recipe at >= 0.78"][0]
    assert (f"an ensemble of {WORDS[len(full[-1]['members'])]} full-budget runs" in measured
            and f"{four(full[-1]['dev']['overall'])} (its first {WORDS[len(best['members'])]} "
            f"{four(best['dev']['overall'])}, the highest of {WORDS[len(full)]} nested ensembles" in measured), measured
    assert len(main) == 1 and f"of the three `make train` runs, {four(main[0]['dev']['overall'])} (below)" in measured
    assert f"three epochs, {four(stats.mean_sd(longer)[0])} on {WORDS[len(longer)]} seeds" in measured


def test_the_ensembles_against_their_best_member() -> None:
    """leaderboard.md: each one-epoch ensemble against the best of its three members (ensemble.json); search.md and
    the index: the nested full-budget ensembles' lead over the best of their members (ensemble-full-budget.json)."""
    data = result("ensemble.json")
    higher, lower = [], []
    for ensemble in data["ensembles"]:
        top = max(data["members"][str(s)]["overall"] for s in ensemble["seeds"])
        said = f"{four(ensemble['dev']['overall'])} against {four(top)}"
        (higher if ensemble["dev"]["overall"] > top else lower).append(said)
    said = (f"Against its best member the ensemble is higher on {WORDS[len(higher)]} of {WORDS[len(data['ensembles'])]}"
            f" ({', '.join(higher)}) and lower on {WORDS[len(lower)]} ({', '.join(lower)}).")
    assert said in page(LB), said
    full = result("ensemble-full-budget.json")
    leads = [(e["dev"]["overall"] - max(full["members"][m]["overall"] for m in e["members"])) * 100
             for e in full["ensembles"]]
    span = f"{min(leads):.1f}-{max(leads):.1f}"
    assert f"{span} points over the best member" in page(README), span
    assert f"The ensembles sit {span} points above their best member" in page("benchmarks/search.md"), span


def test_leaderboard_md_the_three_epoch_runs_epoch_by_epoch() -> None:
    """The table of `baseline 3 epochs` (power.json): each seed's dev overall after each epoch, the kept epoch's
    scores, its minutes; the mean (sd) of the kept scores and of the last epoch's, and the epochs' training seconds."""
    runs = {r["seed"]: r for r in result("power.json") if r["row"] == "baseline 3 epochs"}
    rows = page_table(LEADERBOARD, "| seed | epoch 1 | epoch 2 | epoch 3 |")
    assert [int(row[0]) for row in rows] == sorted(runs)
    for row in rows:
        run = runs[int(row[0])]
        assert row[1:4] == [pts(h["dev_overall"]) for h in run["history"]], row
        assert run["history"][run["best_epoch"] - 1]["dev_overall"] == run["dev"]["overall"]
        assert row[4] == f"{pts(run['dev']['overall'])} (" + " / ".join(pts(run["dev"][m]) for m in PAGE_TASKS) + ")"
        assert row[5] == f"{run['minutes']:.1f}", row
    mean, sd = stats.mean_sd([r["dev"]["overall"] * 100 for r in runs.values()])
    last = stats.mean_sd([r["history"][-1]["dev_overall"] * 100 for r in runs.values()])[0]
    text = page(LB)
    assert f"Mean {mean:.2f} (sd {sd:.2f}; the last epoch's figures, no choice on dev: {last:.2f})" in text
    seconds = [h["train_seconds"] for r in runs.values() for h in r["history"]]
    assert f"(epoch training {min(seconds):.0f} s to {max(seconds):.0f} s," in text


def cell_says(cell: str, values: list[float]) -> bool:
    """A cell of deebert.md's threshold table ("0.0 / 0.5 / 0.0", "62.2 / 56.0 / 59.2%", one figure when the three
    agree) states `values` (points or percent) at its rounding: a figure with no decimals only for an exact 0 or 100."""
    said = cell.removesuffix("%").split(" / ")
    said = said * len(values) if len(said) == 1 else said
    if len(said) != len(values):
        return False
    for text, value in zip(said, values, strict=True):
        text = text.removesuffix("%").removeprefix("+")
        decimals = len(text.partition(".")[2])
        if decimals == 0 and value not in (0.0, 100.0) or f"{value:.{decimals}f}" != text:
            return False
    return True


def test_deebert_md_every_thresholds_table() -> None:
    """SST-2's table of every setting, seeds 1 / 2 / 3 (deebert-sst2.json's sweeps): the drop on the report and on the
    selection half, the layers run on the report half, the median time saved at batch 1 and at batch 32."""
    sweeps = {(s["seed"], s["eval_batch_size"]): s for s in result("deebert-sst2.json")["sweeps"]}
    seeds = (1, 2, 3)

    def report(seed: int, batch: int, setting: str) -> dict:
        return next(r for r in sweeps[seed, batch]["report"] if r["setting"] == setting)

    def selection(seed: int, setting: str) -> dict:
        return next(r for r in sweeps[seed, 1]["selection"] if r["setting"] == setting)

    rows = page_table(ROOT / "benchmarks" / "deebert.md", "| setting | drop, report half |")
    assert sorted(r[0] for r in rows) == sorted(r["setting"] for r in sweeps[1, 1]["report"] if r["setting"] != "plain")
    for setting, *cells in rows:
        expected = [[report(s, 1, setting)["quality_drop"] * 100 for s in seeds],
                    [selection(s, setting)["quality_drop"] * 100 for s in seeds],
                    [report(s, 1, setting)["layers_run"] * 100 for s in seeds],
                    [report(s, 1, setting)["time_saved_rounds_median"] * 100 for s in seeds],
                    [report(s, 32, setting)["time_saved_rounds_median"] * 100 for s in seeds]]
        for cell, values in zip(cells, expected, strict=True):
            assert cell_says(cell, values), f"deebert.md, {setting}: {cell!r} should state {values}"
    assert not re.search(r"\d\.\d\d", " ".join(c for r in rows for c in r[1:]))   # one decimal throughout


def test_deebert_md_the_chosen_settings_seeds_and_the_timing_noise() -> None:
    """SST-2 (deebert-sst2.json): per seed the chosen S, the layers run, the time saved with its range over the rounds
    and against "no exit"; the forced exit at each layer; the off-ramps' own cost and the timing noise. CFIMDB
    (deebert-cfimdb.json): each seed's range over the rounds, and "no exit" against plain in its six sweeps."""
    data = result("deebert-sst2.json")
    sweeps = {(s["seed"], s["eval_batch_size"]): {r["setting"]: r for r in s["report"]} for s in data["sweeps"]}
    chosen = {s["seed"]: s["chosen"] for s in data["sweeps"]}
    paired = {(r["row"], r["seed"]): r["dev"] for r in data["paired"]}
    rows = {r[0]: r[1:] for r in page_table(ROOT / "benchmarks" / "deebert.md", "| | seed 1 | seed 2 | seed 3 |")}
    seeds = (1, 2, 3)
    assert rows["S chosen on the selection half"][:3] == [chosen[s].removeprefix("S=") for s in seeds]
    layers = [paired["chosen-b1", s]["layers_run"] for s in seeds]
    assert rows["layers run"][:4] == [f"{x:.1%}" for x in layers] + [f"{sum(layers) / 3:.1%}"]
    for batch in (1, 32):
        said = [f"{r['time_saved_rounds_median']:.1%} [{r['time_saved_rounds_min'] * 100:.1f}, "
                f"{r['time_saved_rounds_max'] * 100:.1f}]" for r in (sweeps[s, batch][chosen[s]] for s in seeds)]
        assert rows[f"time saved against plain, batch {batch}"][:3] == said, batch
        vs = [paired[f"chosen-b{batch}", s]["time_saved_vs_no_exit"] for s in seeds]
        assert rows[f"time saved against \"no exit\", batch {batch}"][:4] == [f"{x:.1%}" for x in vs] + [
            f"{sum(vs) / 3:.1%}"], batch
    forced = ", ".join(f"{x:.3f}" for x in next(s for s in data["sweeps"] if s["seed"] == 1)["per_layer_report"])
    text = page("benchmarks/deebert.md")
    assert f"(report half, seed 1; the paper's Figure 3): {forced}:" in text, forced

    def span(values: list[float]) -> str:
        return f"{min(values):.0f}-{max(values):.0f}"

    cost = {b: [-sweeps[s, b]["no exit"]["time_saved_rounds_median"] * 100 for s in seeds] for b in (1, 32)}
    assert f"(no exit against plain) is {span(cost[1])}% at batch 1 and {span(cost[32])}% at batch 32" in text
    apart = {b: max(abs(sweeps[s, b]["no exit"]["time_saved_rounds_median"]
                        - sweeps[s, b]["S=0"]["time_saved_rounds_median"]) * 100 for s in seeds) for b in (1, 32)}
    assert f"differ by up to {apart[1]:.0f} points at batch 1 and {apart[32]:.0f} at batch 32" in text
    spread = max(((r["time_saved_rounds_max"] - r["time_saved_rounds_min"]) * 100, name, seed, b, r)
                 for (seed, b), report in sweeps.items() for name, r in report.items())
    width, name, seed, b, r = spread
    assert (f"spread by up to {width:.0f} points ({name}, seed {seed}, batch {b}: {r['time_saved_rounds_min']:.0%} to "
            f"{r['time_saved_rounds_max']:+.0%})") in text, spread[:4]
    cfimdb = result("deebert-cfimdb.json")["sweeps"]
    rows = page_table(ROOT / "benchmarks" / "deebert.md", "| seed | S chosen |")
    for row, sweep in zip(rows, sorted((s for s in cfimdb if s["eval_batch_size"] == 1), key=lambda s: s["seed"]),
                          strict=True):
        r = next(r for r in sweep["report"] if r["setting"] == sweep["chosen"])
        assert row[4].endswith(f"[{r['time_saved_rounds_min'] * 100:.1f}, {r['time_saved_rounds_max'] * 100:.1f}]"), row
    own = [(rep["no exit"]["seconds"] / rep["plain"]["seconds"] - 1) * 100
           for rep in ({r["setting"]: r for r in s["report"]} for s in cfimdb)]
    assert f"\"no exit\" timed {min(own):+.1f}% to {max(own):+.1f}% against plain (the off-ramps' own cost, " \
           f"{WORDS[len(own)]} sweeps)" in text
