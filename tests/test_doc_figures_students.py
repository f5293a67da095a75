"""The figures docs/students.md, docs/smart-pals.md and docs/bitfit.md copy, each read from the page within its phrase
and compared with its source (with test_doc_figures' helpers): the benchmarks page or results file it copies
(make train's time on machines A and B, the GPU sessions' main job, gradient checkpointing's memory and time,
SMART's paired cost), or the code (SMART's presets, PALs' width, BitFit's share of bert-base's parameters).
No training: results files, benchmark pages, dataclass defaults and a bert-base built on the meta device."""

from __future__ import annotations

import re

import torch
from test_doc_figures import ROOT, flat, page_table, result, sci
from test_doc_figures_gpu import BEFORE, CALL3, CALL4, EAGER_FP32, GRAPHS_BF16, GRAPHS_FP32, call3_tests, trained

import minbert
from minbert.bitfit import freeze
from minbert.bitfit_report import trainable_report
from minbert.pals import PalsConfig
from minbert.smart import PRESETS

STUDENTS = ROOT / "docs" / "students.md"
SMART_PALS = ROOT / "docs" / "smart-pals.md"
BITFIT = ROOT / "docs" / "bitfit.md"
BENCH = ROOT / "benchmarks"


def minutes(cell: str) -> float:
    """'16 min 42 s' (in a table cell, marks and notes around it) -> 16.7."""
    m = re.search(r"(\d+) min (\d+) s", cell)
    return int(m.group(1)) + int(m.group(2)) / 60


def one_decimal(x: float) -> str:
    return f"{x:.1f}"


def test_students_md_make_train_on_the_cpus_is_multitasks_runtime_table() -> None:
    """'make train 17 min (avx512) to 30 min (avx2)': machine B's (avx512_bf16) `time make train` and the slowest of
    machine A's (avx2 only), to the minute."""
    machines = flat(BENCH / "README.md")
    assert "**A**: a 2-core AMD EPYC with avx2 only" in machines and "**B**: a 2-core AMD EPYC with avx512" in machines
    rows = page_table(BENCH / "multitask.md", "| machine | training, epochs 1 / 2 |")
    b = [minutes(r[3]) for r in rows if r[0] == "B"]
    a = [minutes(r[3]) for r in rows if r[0].startswith("A")]
    assert len(b) == 1 and len(a) == 3
    assert f"`make train` {round(b[0])} min (avx512) to {round(max(a))} min (avx2)" in flat(STUDENTS)


def test_students_md_the_gpu_sessions_figures_are_the_results_files() -> None:
    """The H100 session's whole command (multitask-main-cuda.json) and the two H200 sessions' training times with
    and without --cuda-graphs (calls 2 and 4), the second's commit and test count."""
    page = flat(STUDENTS)
    fp32, bf16 = BEFORE["runs"]
    assert (fp32["precision"], bf16["precision"]) == ("fp32", "bf16")
    assert f"`make train` {fp32['wall_seconds']} s fp32, {bf16['wall_seconds']} s bf16" in page
    c4 = CALL4["main"]
    tests, _ = call3_tests()
    assert (f"second, at {CALL3['run']['commit']}: all {tests} passed") in page
    assert (f"the main job's training {trained(GRAPHS_FP32):.1f} s fp32, {trained(GRAPHS_BF16):.1f} s bf16 (first) "
            f"and {trained(c4['fp32-cuda-graphs']):.1f} s, {trained(c4['bf16-cuda-graphs']):.1f} s (second), against "
            f"{trained(EAGER_FP32):.1f} s and {trained(c4['fp32-off']):.1f} s eager on the same machines") in page


def test_students_md_gradient_checkpointing_is_grad_checkpointing_json() -> None:
    """Activation memory per example (plain / checkpointed) at 512 and 128 tokens, the step's time ratio over both
    runs training.md reports (this JSON's rows and the earlier run's ratios it quotes), the batch that fits 16 GB."""
    measured = result("grad-checkpointing.json")
    fits = {row["T"]: row for row in measured["fits_16gb"]}
    saving = {t: row["plain_per_example_gib"] / row["ckpt_per_example_gib"] for t, row in fits.items()}
    training = flat(BENCH / "training.md")
    earlier = re.search(r"step time ratios ((?:[\d.]+ \(\d+ x \d+\),? )+)", training)
    ratios = [row["time_ratio"] for row in measured["rows"]]
    ratios += [float(x) for x in re.findall(r"([\d.]+) \(\d+ x \d+\)", earlier.group(1))]
    assert len(ratios) == 8
    assert f"the step time ratio is {min(ratios):.1f}-{max(ratios):.1f}x here" in training
    page = flat(STUDENTS)
    assert (f"took {one_decimal(saving[512])}x less activation memory per example at 512 tokens "
            f"({one_decimal(saving[128])}x at 128) and a step {min(ratios):.1f}-{max(ratios):.1f}x the time") in page
    assert (f"the batch that fits a 16 GB card, computed from that and not tried on one, goes from "
            f"{fits[512]['plain_batch_fits_16gb']} to {fits[512]['ckpt_batch_fits_16gb']} at 512 tokens") in page


def test_smart_pals_md_smarts_cost_is_the_benchmarks() -> None:
    """'lowered dev overall by 1.7 points ... at 2.2-2.7x the training time': benchmarks/smart-pals.md's paired
    difference (the interval excluding 0: shown) and its SMART and plain training times."""
    bench = flat(BENCH / "smart-pals.md")
    rows = {r[0]: r for r in page_table(BENCH / "smart-pals.md", "| row | overall | SST acc | Quora acc | STS r |")}
    diff = re.fullmatch(r"(-[\d.]+) \[(-[\d.]+), (-[\d.]+)\]", rows["smart-mt-dnn - baseline"][1])
    assert diff, rows["smart-mt-dnn - baseline"]                        # both ends below 0: the drop is shown
    times = re.search(r"Its training took (\d+)-(\d+) s a run against (\d+)-(\d+) s", bench)
    smart_fast, smart_slow, plain_fast, plain_slow = (int(g) for g in times.groups())
    low, high = smart_fast / plain_slow, smart_slow / plain_fast
    assert f"{low:.1f}-{high:.1f}x, as the step benchmark" in bench
    assert "At this budget SMART at lambda 5 lowers the dev score" in bench
    assert (f"SMART (mt-dnn preset, lambda 5) *lowered* dev overall by {-float(diff.group(1)):.1f} points (shown) at "
            f"{low:.1f}-{high:.1f}x the training time") in flat(SMART_PALS)


def test_smart_pals_md_the_presets_and_pals_shape_are_the_codes() -> None:
    page, pals = flat(SMART_PALS), PalsConfig()
    assert (f"They differ in the step size eta ({sci(PRESETS['mt-dnn'][1])} and {sci(PRESETS['vat'][1])})") in page
    assert f"(projected width {pals.size}, {pals.heads} heads, projections shared across layers)" in page


def test_bitfit_md_the_share_of_parameters_is_bert_bases() -> None:
    """'about 0.1% of the parameters' (every bias) and 'the paper's 0.04% setting' (bq and bm2), computed on
    bert-base-uncased's configuration, each to the decimals the page writes."""
    with torch.device("meta"):
        model = minbert.BertModel(minbert.BertConfig())
    page = flat(BITFIT)
    for terms, pattern in (("all", r"trains only the bias terms \(and the task head\): about ([\d.]+)% of the param"),
                           ("bq,bm2", r"--bitfit-terms bq,bm2 # the paper's ([\d.]+)% setting")):
        freeze(model, terms)
        [written] = re.findall(pattern, page)
        decimals = len(written.split(".")[1])
        assert f"{trainable_report(model).percent:.{decimals}f}" == written, (terms, trainable_report(model).percent)
