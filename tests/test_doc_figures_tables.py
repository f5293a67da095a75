"""The per-seed and per-run tables of benchmarks/multitask.md, training.md, leaderboard.md and search.md that no
other test read, each row recomputed from its results file at the page's rounding: the main job's seeds, its dev by
epoch, the frozen word table's runs, pairs in both orders, `baseline 1 epoch`'s seeds, the eight cells of Tables 1-2,
the main job's bf16 rows, the ensemble of three `make train` runs and its nine one-epoch members, the full-budget
ensembles. No training."""

from __future__ import annotations

import statistics
from pathlib import Path

from test_doc_figures import ROOT, four
from test_doc_figures_paired import B1, LB, MT, RESULTS, main_job, page, result, stats

MULTITASK, LEADERBOARD = ROOT / MT, ROOT / LB
DEV = ("sst_accuracy", "para_accuracy", "sts_pearson", "overall")


def table_after(path: Path, anchor: str) -> dict[str, list[str]]:
    """{first cell: the other cells} of the first table after the first line holding `anchor` (bold marks dropped)."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if anchor in line)
    start = next(i for i in range(start, len(lines)) if lines[i].startswith("|"))
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip().replace("**", "") for c in line.strip().strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


def fours(x: float) -> set[str]:
    """A score to four decimals either way where it lies on a rounding half (0.83375, 3335 of 4000: the runs printed
    0.8337, a binary float's rounding; a page rounding the decimal half up writes 0.8338)."""
    return {f"{x - 1e-9:.4f}", f"{x + 1e-9:.4f}", four(x)}


def says(cells: list[str], values: list[float]) -> bool:
    """Each cell is its value to four decimals (see fours())."""
    return len(cells) == len(values) and all(c in fours(v) for c, v in zip(cells, values, strict=True))


def pts(x: float) -> str:
    return f"{x * 100:.2f}"


def minutes(seconds: float) -> str:
    """A whole command's wall time as the pages write it: 1474.2 -> 24 min 34 s."""
    m, s = divmod(round(seconds), 60)
    return f"{m} min {s} s"


def test_multitask_md_the_main_jobs_seeds_and_its_dev_by_epoch() -> None:
    """The main job's table (multitask-main-fused.json): each seed's dev scores, their means and the overall sd; the
    dev table of seed 11711 by epoch (multitask-main-bf16.json's fp32 run)."""
    rows = table_after(MULTITASK, "in [results/multitask-main-fused.json](results/multitask-main-fused.json):")
    seeds = {s: {m: main_job(m)[s] for m in DEV} for s in (11711, 1, 2)}
    for s, dev in seeds.items():
        assert says(rows[str(s)], [dev[m] for m in DEV]), s
    means = [statistics.fmean(dev[m] for dev in seeds.values()) for m in DEV]
    sd = stats.mean_sd([dev["overall"] for dev in seeds.values()])[1]
    assert says(rows["mean"][:3], means[:3]) and rows["mean"][3] == f"{four(means[3])} (sd {sd:.4f})"
    by_epoch = result("multitask-main-bf16.json")["runs"]["fp32, 2 epochs (make train)"]["dev_by_epoch"]
    said = ", ".join(" / ".join(f"{x:.4f}" for x in dev) + f" after epoch {e}" for e, dev in enumerate(by_epoch, 1))
    assert said in page(MT), said


def test_multitask_md_the_frozen_word_tables_runs() -> None:
    """make train FINE_TUNE=full-frozen-words (multitask-main-ffw.json): each seed's dev scores, training and dev
    evaluation seconds an epoch and whole command, and the means."""
    data = result("multitask-main-ffw.json")["seeds"]
    rows = table_after(MULTITASK, "[results/multitask-main-ffw.json](results/multitask-main-ffw.json):")
    for s, run in data.items():
        cells = rows[s]
        assert says(cells[:4], [run[f"dev_{m}"] for m in DEV]), s
        assert cells[4] == " / ".join(f"{x} s" for x in run["train_seconds"])
        assert cells[5] == " / ".join(f"{x} s" for x in run["eval_seconds"])
        assert cells[6].startswith(minutes(run["wall_seconds"])), cells[6]
    assert says(rows["mean"][:4], [statistics.fmean(r[f"dev_{m}"] for r in data.values()) for m in DEV])


def test_multitask_md_pairs_in_both_orders() -> None:
    """benchmarks/pair_order.py's table (multitask-main-seeds.json): Quora and STS r given, swapped and both, overall
    given and both, each seed and the means; the `--swap-pairs` run against the main job's seed 11711."""
    data = result("multitask-main-seeds.json")
    keys = ("para_given", "para_swapped", "para_mean", "sts_given", "sts_swapped", "sts_mean", "overall_given",
            "overall_mean")
    rows = table_after(MULTITASK, "| seed | Quora given |")
    for s, run in data["seeds"].items():
        assert says(rows[s], [run[k] for k in keys]), s
    assert says(rows["mean"], [statistics.fmean(r[k] for r in data["seeds"].values()) for k in keys])
    swap = data["swap_pairs_seed_11711"]["overall"]
    assert f"overall {swap:.4f} against {four(data['seeds']['11711']['overall_mean'])} without it" in page(MT)


def test_multitask_md_baseline_1_epochs_seeds_and_tables_1_2s_cells() -> None:
    """power.json: `baseline 1 epoch`'s seeds with each metric's mean (sd); the eight cells of Tables 1-2, mean (sd)
    in points of overall and STS r over the three seeds, each design and schedule, full and frozen."""
    runs = {r["seed"]: r["dev"] for r in result("power.json") if r["row"] == B1}
    rows = table_after(MULTITASK, "7-11 minutes a seed")
    for s, dev in runs.items():
        assert says(rows[str(s)], [dev[m] for m in DEV]), s
    assert rows["mean (sd)"] == [f"{four(m)} ({sd:.4f})" for m, sd in
                                 (stats.mean_sd([d[k] for d in runs.values()]) for k in DEV)]
    cells = {(r[0], r[1]): r[2:] for r in (line.strip().strip("|").split("|") for line in MULTITASK.read_text()
             .splitlines() if line.startswith(("| cross-encoder |", "| bi-encoder |")))}
    rows_of = {("cross-encoder", "round-robin"): (B1, "last-linear-layer round-robin"),
               ("cross-encoder", "sequential"): ("sequential 1 epoch", "last-linear-layer sequential"),
               ("bi-encoder", "round-robin"): ("bi-encoder round-robin", "last-linear-layer bi-encoder round-robin"),
               ("bi-encoder", "sequential"): ("bi-encoder sequential", "last-linear-layer bi-encoder sequential")}
    power = {m: stats.load_rows([RESULTS / "power.json"], m) for m in ("overall", "sts_pearson")}
    for (design, schedule), names in rows_of.items():
        said = [c.strip().replace("**", "") for c in cells[f" {design} ", f" {schedule} "]]
        want = []
        for name in names:
            for m in ("overall", "sts_pearson"):
                mean, sd = stats.mean_sd([v * 100 for v in power[m][name].values()])
                want.append(f"{mean:.2f} ({sd:.2f})")
        assert said == want, (design, schedule)


def test_training_md_the_main_jobs_rows_of_the_precision_table() -> None:
    """The main job's rows (multitask-main-bf16.json): training seconds an epoch, the whole command, bf16's speed-up
    on it, the kept epoch's dev overall."""
    runs = result("multitask-main-bf16.json")["runs"]
    rows = [line for line in (ROOT / "benchmarks" / "training.md").read_text().splitlines()
            if line.startswith(("| main job", "| | bf16 (`make train"))]
    fp32, bf16, three = runs["fp32, 2 epochs (make train)"], runs["bf16, 2 epochs"], runs["bf16, 3 epochs"]
    for line, run in zip(rows, (fp32, bf16, three), strict=True):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert cells[2] == " / ".join(str(s) for s in run["train_seconds"]) + " s", line
        assert cells[3].startswith(minutes(run["wall_seconds"])), line
        assert cells[4] == f"{max(dev[3] for dev in run['dev_by_epoch']):.4f}", line
    assert f"9 min 35 s ({fp32['wall_seconds'] / bf16['wall_seconds']:.2f}x)" in rows[1]


def test_leaderboard_md_the_ensemble_of_three_make_train_runs() -> None:
    """ensemble-main.json: the members' and the ensemble's dev scores, the runs' minutes and their sum, the gain over
    the members' mean; the nine one-epoch members' mean (sd) (ensemble.json); the three-epoch runs against make
    train's mean and its seeds 1 and 2, and how far they stay from 0.78 (power.json)."""
    data = result("ensemble-main.json")
    members, ensemble = data["members"], data["ensembles"][0]
    rows = table_after(LEADERBOARD, "**An ensemble of three `make train` runs**")
    assert rows["members 11711 / 1 / 2"] == [" / ".join(pts(members[s][m]) for s in ("11711", "1", "2")) for m in DEV]
    assert rows["ensemble"] == [pts(ensemble["dev"][m]) for m in DEV]
    text, mins = page(LB), [data["minutes"][s] for s in ("11711", "1", "2")]
    assert (f"Wall time: {mins[0]:.1f}, {mins[1]:.1f} and {mins[2]:.1f} minutes for the three runs on B, one after "
            f"another ({sum(mins):.1f} minutes;") in text
    assert f"its members' mean ({data['against_members']['overall']['mean'] * 100:+.2f} points here)" in text
    nine = result("ensemble.json")["members"].values()
    said = " | ".join("{:.2f} ({:.2f})".format(*stats.mean_sd([r[m] * 100 for r in nine])) for m in DEV)
    assert f"| the nine members, mean (sd) | {said} |" in text, said
    longer = {r["seed"]: r["dev"]["overall"] for r in result("power.json") if r["row"] == "baseline 3 epochs"}
    mean, sd = stats.mean_sd(list(longer.values()))
    main = main_job("overall")
    assert (f"reach {four(mean)} (sd {sd:.4f}, seeds 1-3, above), "
            f"{(mean - statistics.fmean(main.values())) * 100:+.2f} points over `make train`'s two-epoch mean") in text
    gains = [(longer[s] - main[s]) * 100 for s in (1, 2)]
    assert f"{gains[0]:+.2f} and {gains[1]:+.2f} on the two seeds both ran" in text
    assert f"still {(0.78 - mean) * 100:.1f} points short of 0.78" in text
    minutes3 = sorted(r["minutes"] for r in result("power.json") if r["row"] == "baseline 3 epochs")
    assert f"three runs of {minutes3[0]:.1f}-{minutes3[-1]:.1f} minutes on C" in text


def test_search_md_the_full_budget_ensembles() -> None:
    """ensemble-full-budget.json: each member's dev overall, each nested ensemble's four scores, the all-8 and the
    highest figure, and how far each stays from 0.78."""
    data = result("ensemble-full-budget.json")
    rows = table_after(ROOT / "benchmarks" / "search.md", "| members (dev, points) |")
    overall = {name: pts(m["overall"]) for name, m in data["members"].items()}
    t4 = " / ".join(overall[f"t4-{s}"] for s in (11711, 1, 2))
    assert (f"each: main {overall['main']}, t4 {t4}, gu {overall['gu-11711']}, t7 {overall['t7']}, t10 "
            f"{overall['t10']}, t0 {overall['t0']}") in rows, list(rows)
    ensembles = data["ensembles"]
    for e in ensembles:
        k = len(e["members"])
        assert rows["all 8" if k == len(data["members"]) else f"first {k}"] == [pts(e["dev"][m]) for m in DEV], k
    text = page("benchmarks/search.md")
    top, last = max(e["dev"]["overall"] for e in ensembles), ensembles[-1]["dev"]["overall"]
    assert f"the all-8 figure, {four(last)}, is the one to quote; the" in text
    assert f"5-member {four(top)} is the highest" in text
    short = [(0.78 - x) * 100 for x in (top, last)]
    assert f"{short[0]:.1f} points beyond the highest of them ({short[1]:.1f} beyond all 8)" in text
