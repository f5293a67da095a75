"""benchmarks/search.md's trial tables and the prose that reads them, recomputed from the committed study at the page's
rounding: each trial's state, value and sampled params (benchmarks/search/trials.csv, main-job-full-trials.csv), each
epoch's dev score (the SQLite studies' intermediate values, read-only), the full-budget runs of trial 3 and 4 and of
gradual unfreezing against the main job (results/search-confirm.json). No training."""

from __future__ import annotations

import csv
import re
import sqlite3
from pathlib import Path

from test_doc_figures import ROOT, flat, four, page_table, result
from test_doc_figures_tables import fours

SEARCH = ROOT / "benchmarks" / "search"
PAGE = ROOT / "benchmarks" / "search.md"
PARAMS = ("training.lr", "recipe.layer_decay", "recipe.head_lr_scale", "recipe.warmup_ratio", "training.weight_decay",
          "design.sts_head_bias", "training.batch_size")


def trials(name: str) -> list[dict]:
    with open(SEARCH / name, newline="") as f:
        return list(csv.DictReader(f))


def epochs(db: str) -> dict[int, dict[int, float]]:
    """{trial number: {epoch: dev overall}}: the study's intermediate values (what the pruner read)."""
    with sqlite3.connect(f"file:{SEARCH / db}?mode=ro", uri=True) as study:
        rows = study.execute("select t.number, v.step, v.intermediate_value from trials t join "
                             "trial_intermediate_values v on t.trial_id = v.trial_id").fetchall()
    out: dict[int, dict[int, float]] = {}
    for number, step, value in rows:
        out.setdefault(number, {})[step] = value
    return out


def short(x: float, places: int) -> str:
    """x to `places` decimals, trailing zeros (and a bare point) dropped: 1.0 -> '1', 0.109 -> '0.109'."""
    return f"{x:.{places}f}".rstrip("0").rstrip(".")


def lr_first(x: float) -> str:
    """The first table's learning rate: 7.08e-05, 1.84e-04, and 5e-05 where the mantissa is whole."""
    text = f"{x:.2e}"
    return text.replace(".00e", "e") if float(text.replace(".00e", "e")) == x else text


def params_first(t: dict) -> list[str]:
    lr, decay, head, warmup, wd, bias, batch = (float(t[p]) for p in PARAMS)
    return [lr_first(lr), short(decay, 3), short(head, 2), short(warmup, 3), short(wd, 3), short(bias, 2),
            str(int(batch))]


def test_search_md_the_first_studys_table() -> None:
    """trials.csv: each trial's dev overall (complete ones) and its params; trial 4, trial 1's params again."""
    rows, study = page_table(PAGE, "| trial | state | dev overall | lr |"), trials("trials.csv")
    assert [re.match(r"\d+", r[0]).group() for r in rows] == [t["number"] for t in study]
    for row, t in zip(rows, study, strict=True):
        assert row[1].startswith("complete") == (t["state"] == "COMPLETE"), row
        assert row[2] == (f"{float(t['value']):.4f}" if t["state"] == "COMPLETE" else ""), row
        if row[3] == "(trial 1's params again)":
            assert [t[p] for p in PARAMS] == [study[1][p] for p in PARAMS] and set(row[4:]) == {""}
        else:
            assert row[3:] == params_first(t), row
    assert "resumed" in rows[3][0] and [study[3][p] for p in PARAMS] == [study[2][p] for p in PARAMS]


def test_search_md_the_first_studys_trials_2_and_4() -> None:
    """Trial 3 resumed trial 2's epoch-1 checkpoint (its best so far) to the trial's value; trial 4's first epoch
    matched trial 1's (main-job-study.db)."""
    by_epoch, page = epochs("main-job-study.db"), flat(PAGE)
    assert (f"1 epochs done, best dev overall {four(by_epoch[2][1])}`) to {four(by_epoch[3][2])}") in page
    assert by_epoch[3][1] == by_epoch[2][1] and by_epoch[4][1] == by_epoch[1][1]
    assert "(its first epoch matched trial 1's to the digit)" in page


def test_search_md_the_full_budget_table() -> None:
    """main-job-full-trials.csv and the study's epochs: the value (a pruned trial's in brackets), epoch 1, the params
    (lr to three figures, decay, warm-up, weight decay to three decimals, the heads' rate and STS bias to two)."""
    rows, study = page_table(PAGE, "| trial | state | dev overall | epoch 1 |"), trials("main-job-full-trials.csv")
    by_epoch = epochs("main-job-full-study.db")
    assert [r[0] for r in rows] == [t["number"] for t in study]
    for row, t in zip(rows, study, strict=True):
        state = {"COMPLETE": "complete", "PRUNED": "pruned", "FAIL": "fail"}[t["state"]]
        value = f"{float(t['value']):.4f}" if t["value"] else ""
        value = f"({value})" if state == "pruned" else value
        first = by_epoch.get(int(t["number"]), {}).get(1)
        lr, decay, head, warmup, wd, bias, batch = (float(t[p]) for p in PARAMS)
        assert row[1:11] == [state, value, four(first) if first else "", f"{lr:.3g}", f"{decay:.3f}", f"{head:.2f}",
                             f"{warmup:.3f}", f"{wd:.3f}", f"{bias:.2f}", str(int(batch))], row
    assert rows[1][-1] == "make train's run, recorded"
    assert float(study[1]["value"]) == result("multitask-main-fused.json")["seeds"]["11711"]["dev_overall"]


def confirm(row: str, seed: int) -> dict:
    [record] = [r for r in result("search-confirm.json") if r["row"] == row and r["seed"] == seed]
    return record


def f4(x: float) -> str:
    """A dev score to four decimals as a regex, a half (0.83375) either way."""
    return f"(?:{'|'.join(sorted(fours(x)))})"


def dev4(record: dict) -> list[str]:
    return [f4(record["dev"][k]) for k in ("sst_accuracy", "para_accuracy", "sts_pearson")]


def test_search_md_trial_3_at_the_full_budget() -> None:
    """Seed 11711 of `search trial 3` against the main job's recorded run: its minutes, dev figures, the differences
    in points, epoch 1 of each, and the reduced budget's gain it did not keep (trials.csv's trials 3 and 0)."""
    t3, main = confirm("search trial 3", 11711), confirm("main job", 11711)
    page = flat(PAGE).replace("**", "")
    d = {k: re.escape(f"{(t3['dev'][k] - main['dev'][k]) * 100:+.2f}")
         for k in ("overall", "sst_accuracy", "para_accuracy", "sts_pearson")}
    main_epoch1 = epochs("main-job-full-study.db")[1][1]                 # make train's run, recorded as trial 1
    sst, quora, sts = dev4(t3)
    assert re.search(rf"{t3['minutes']:.1f} min wall with nothing else running but this session's light editing\): "
                     rf"dev SST {sst}, Quora {quora}, STS r {sts}, overall {four(t3['dev']['overall'])}, against the "
                     rf"main job's {' / '.join(dev4(main))} / {four(main['dev']['overall'])} on the same seed: "
                     rf"{d['overall']} points overall \(SST {d['sst_accuracy']}, Quora "
                     rf"{d['para_accuracy']}, STS {d['sts_pearson']}\); epoch 1 "
                     rf"{four(t3['history'][0]['dev_overall'])} against the main job's {four(main_epoch1)}", page)
    first = {t["number"]: float(t["value"] or 0) for t in trials("trials.csv")}
    assert f"the reduced budget's +{(first['3'] - first['0']) * 100:.1f} points over the main job's settings" in page


def test_search_md_what_the_full_budget_search_shows() -> None:
    """Trial 7's two epochs, trial 4's tie with make train (its dev figures, search-confirm.json's seed 11711), how
    far behind the low learning rates end (trials 0 and 10), trial 5's rate and the strong layer decay."""
    page = flat(PAGE).replace("**", "")
    study = {int(t["number"]): t for t in trials("main-job-full-trials.csv")}
    assert f"Trial 7 ran both its epochs ({four(float(study[7]['value']))}) and was then marked PRUNED" in page
    t4, main = confirm("search trial 4", 11711), confirm("main job", 11711)
    assert float(study[4]["value"]) == t4["dev"]["overall"]
    sst, quora, sts = dev4(t4)
    assert re.search(rf"heads at {float(study[4]['recipe.head_lr_scale']):.0f}x the rate, a little weight decay, "
                     rf"layer decay {float(study[4]['recipe.layer_decay']):.2f}\), ties it \("
                     rf"{four(t4['dev']['overall'])} against {four(main['dev']['overall'])}; SST {sst} / Quora "
                     rf"{quora} / STS {sts} against {' / '.join(dev4(main))}\)", page)
    behind = sorted((main["dev"]["overall"] - float(study[n]["value"])) * 100 for n in (0, 10))
    low = sorted(float(study[n]["training.lr"]) for n in (0, 3, 6, 9, 10))
    assert (f"Low learning rates ({low[0]:.1e} to {low[-1]:.1e}) end {behind[0]:.1f}-{behind[1]:.1f} points behind "
            f"(trials 0 and 10)").replace("e-05", "e-5") in page
    assert f"as was a high one ({float(study[5]['training.lr']):.1e}, trial 5)".replace("e-04", "e-4") in page
    strong = [float(t["recipe.layer_decay"]) for t in study.values() if float(t["recipe.layer_decay"]) < 0.8
              and t["value"]]                                              # trial 2, failed, was retried as 3
    assert len(strong) == 2 and f"a strong layer decay ({min(strong):.2f}) was behind in both trials" in page


def test_search_md_the_confirmations_minutes() -> None:
    """The paired runs' minutes: trial 4 on seeds 1 and 2, gradual unfreezing on its three seeds."""
    page = flat(PAGE)
    t4 = [confirm("search trial 4", s)["minutes"] for s in (1, 2)]
    assert f"ran beside part of seed 1's first epoch): {t4[0]:.1f} and {t4[1]:.1f} minutes a run" in page
    gu = [confirm("main job, gradual unfreezing 0.1", s)["minutes"] for s in (11711, 1, 2)]
    assert f"nothing else running: {gu[0]:.1f}, {gu[1]:.1f} and {gu[2]:.1f} minutes" in page


def test_search_md_the_study_files_exist() -> None:
    for name in ("trials.csv", "main-job-full-trials.csv", "main-job-study.db", "main-job-full-study.db"):
        assert Path(SEARCH / name).is_file(), name
