"""The paired-seed figures of the benchmark topic pages (multitask.md, leaderboard.md, smart-pals.md, simcse.md's
Table 5, bitfit.md's Table 3, rdrop.md, search.md, deebert.md), recomputed from the per-seed values in
benchmarks/results/ with benchmarks/stats.py through test_doc_figures_paired's registry and looked for in the page at
the page's rounding. No training."""

from __future__ import annotations

import pytest
from test_doc_figures_paired import (
    B1,
    LABEL,
    LB,
    MT,
    RESULTS,
    SP,
    TASKS,
    Case,
    Q,
    case_id,
    check,
    dif,
    iv,
    msd,
    page,
    per,
    result,
    seeds_table,
    stats,
)

CASES = [
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


@pytest.mark.parametrize("case", CASES, ids=[f"{i}-{case_id(c)}" for i, c in enumerate(CASES)])
def test_the_page_states_the_paired_figure_its_results_give(case: Case) -> None:
    """The topic page states `case.says` filled with the figures recomputed from the results file."""
    check(case)


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
