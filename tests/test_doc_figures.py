"""The figures and defaults docs/training.md, docs/runs.md, docs/search.md, docs/simcse.md, docs/deebert.md and
benchmarks/gpu.md state, each read from the page within its phrase and compared with the results file or the code it
comes from: the GPU runs (--cuda-graphs on an H200, the step without host waits on an H100, the main job before that),
the student path's cost, what --save-every costs, the recipe's defaults in the reference and a student tree, the
search's defaults, SimCSE's and DeeBERT's defaults. No training: results files, dataclass defaults and source."""

from __future__ import annotations

import ast
import json
import re
import statistics
from decimal import ROUND_HALF_UP, Decimal
from itertools import pairwise
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
TRAINING = ROOT / "docs" / "training.md"
RUNS = ROOT / "docs" / "runs.md"
SEARCH = ROOT / "docs" / "search.md"
SIMCSE = ROOT / "docs" / "simcse.md"
DEEBERT = ROOT / "docs" / "deebert.md"
GPU = ROOT / "benchmarks" / "gpu.md"


def flat(path: Path) -> str:
    """The page's text with every run of whitespace (line breaks included) as one space."""
    return " ".join(path.read_text().split())


def result(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def sci(x: float) -> str:
    """A learning rate as the pages write it: 3e-05 -> 3e-5 (one digit times a power of ten)."""
    text = re.sub(r"e([+-])0*(\d)", r"e\1\2", f"{x:.0e}").replace("e+", "e")
    assert float(text) == x, f"{x!r} is not written as {text}"
    return text


def four(x: float) -> str:
    """A dev score to four decimals, its decimal digits rounded half up as the pages do (0.83375, 3335 of 4000, is
    0.8338, 0.83325 is 0.8333; f'{x:.4f}' rounds the binary float, which may lie just below, and writes 0.8337)."""
    return str(Decimal(repr(x)).quantize(Decimal("0.0001"), rounding=ROUND_HALF_UP))


def page_table(path: Path, header: str, whole: bool = False) -> list[list[str]]:
    """The rows (cells, bold marks removed) of the table whose header line starts with `header` (is `header`, whole)."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if (line == header if whole else line.startswith(header)))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip().replace("**", "") for c in line.strip().strip("|").split("|")])
    return rows


# ---------------------------------------------------------------- 1. the GPU runs

H200 = result("gpu-step-h200-graphs.json")          # call 2: --cuda-graphs, the main job on an H200
H100 = result("gpu-step-h100.json")                 # call 1: the step without host waits, the main job and bert-base
BEFORE = result("multitask-main-cuda.json")         # the main job on an H100 before the step lost its host waits
CALL3 = result("gpu-step-h200-speed.json")          # call 3: the tests, bert-base graphed, the compiled run's resume
CALL4 = result("gpu-step-h200-main.json")           # call 4: the main job again, on call 3's machine
GRAPHS_FP32, GRAPHS_BF16, EAGER_FP32 = (H200["main"][k] for k in ("fp32-cuda-graphs", "bf16-cuda-graphs", "fp32-off"))


def trained(run: dict) -> float:
    """A main-job run's training seconds: the sum of its epochs' (two, as main-job.json)."""
    assert run["exit"] == 0 and len(run["train_seconds"]) == 2, run
    return sum(run["train_seconds"])


def graph_steps(run: dict) -> dict[str, int]:
    """The run's last graphs line (the counts are the whole run's): shapes, steps replayed after their capture,
    the eager ones; every captured step runs as a replay too, so replays = replayed + shapes."""
    m = re.fullmatch(r"CUDA graphs: (\d+) shapes captured, (\d+) steps replayed, (\d+) eager \(each shape's first\)",
                     run["graphs"][-1])
    shapes, replayed, eager = (int(g) for g in m.groups())
    return {"shapes": shapes, "replays": replayed + shapes, "eager": eager, "total": replayed + shapes + eager}


def speed_rounds(call: dict = H100) -> dict[tuple[str, str], list[float]]:
    """{(implementation, precision): seq/s of each round, in round order} of a call's bert-base 32 x 128 step."""
    out: dict[tuple[str, str], dict[int, float]] = {}
    for line in call["speed"]["rounds"]:
        m = re.match(r"round (\d+)/\d+\s+(\S+)\s+(fp32|bf16)\s+32 x 128 train\s+([\d.]+) seq/s", line)
        out.setdefault((m.group(2), m.group(3)), {})[int(m.group(1))] = float(m.group(4))
    return {k: [v[r] for r in sorted(v)] for k, v in out.items()}


def speed_table(call: dict = H100) -> dict[str, str]:
    """A call's speed table (medians over the rounds, their ratios), column -> cell, as gpu_step.py wrote it."""
    header, _, row = call["speed"]["table"]
    cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in (header, row)]
    return dict(zip(*cells, strict=True))


IMPL = {"minbert": "minbert", "minbert-packed": "packed", "minbert-graphed": "graphed", "hf": "HF"}  # rounds -> table


@pytest.mark.parametrize("call, gpu, impls, n_rounds", [(H100, "H100", ("minbert", "packed"), 2),
                                                        (CALL3, "H200", ("packed", "graphed"), 3)])
def test_the_speed_table_is_its_rounds(call, gpu, impls, n_rounds) -> None:
    """The medians the pages quote are the table's; each is the median of its rounds (to the rounds' rounding)."""
    rounds, table = speed_rounds(call), speed_table(call)
    assert table["batch"] == "32 x 128" and table["mode"] == "train" and gpu in call["facts"]["gpu"]
    assert len(rounds) == 6 and {len(r) for r in rounds.values()} == {n_rounds}
    for (impl, precision), seqs in rounds.items():
        assert abs(float(table[f"{IMPL[impl]} {precision} seq/s"]) - statistics.median(seqs)) <= 0.1, (impl, precision)
    for precision in ("fp32", "bf16"):
        for impl in impls:
            ratio = float(table[f"{impl} {precision} seq/s"]) / float(table[f"HF {precision} seq/s"])
            assert f"{ratio:.2f}" == table[f"{impl} {precision} / HF {precision}"]


def round_ratios(impl: str, precision: str, call: dict = H100) -> list[str]:
    """impl / transformers in each round, as the pages write them."""
    rounds = speed_rounds(call)
    return [f"{a / b:.2f}" for a, b in zip(rounds[(impl, precision)], rounds[("hf", precision)], strict=True)]


def speed_page_rows(call: dict, impls: tuple[str, str]) -> list[list[str]]:
    """A call's speed table as the page writes it: a row per precision, each implementation's median seq/s with its
    lowest and highest round (bf16's in whole seq/s), then impls' ratios to transformers with each round's."""
    table, rounds = speed_table(call), speed_rounds(call)

    def cell(impl: str, precision: str, spec: str) -> str:
        seqs = rounds[(impl, precision)]
        return f"{table[f'{IMPL[impl]} {precision} seq/s']} ({min(seqs):{spec}}-{max(seqs):{spec}})"

    return [[precision, *(cell(impl, precision, spec) for impl in (*impls, "hf")),
             *(f"{table[f'{IMPL[impl]} {precision} / HF {precision}']} "
               f"({', '.join(round_ratios(impl, precision, call))})" for impl in impls)]
            for precision, spec in (("fp32", ".1f"), ("bf16", ".0f"))]


def main_job_cells(run: dict) -> tuple[str, str]:
    """A main-job run's training cell (epoch 1 + 2 = total) and dev cell (overall, then SST / Quora / STS r)."""
    best = run["best"]
    scores = (f"{four(best['dev_overall'])} ({four(best['dev_sst_accuracy'])} / {four(best['dev_para_accuracy'])}"
              f" / {four(best['dev_sts_pearson'])})")
    return " + ".join(f"{s:.1f}" for s in run["train_seconds"]) + f" = {trained(run):.1f} s", scores


def test_training_md_the_main_job_on_an_h100_before_and_after_the_host_waits() -> None:
    page = flat(TRAINING)
    fp32, bf16 = BEFORE["runs"]
    assert (fp32["precision"], bf16["precision"]) == ("fp32", "bf16") and "H100" in BEFORE["device"]
    assert "--batch-size 16" in BEFORE["command"] and "--model minilm" in BEFORE["command"]
    after_fp32, after_bf16 = H100["main"]["fp32-off"], H100["main"]["bf16-off"]
    assert (f"On an H100 the main job (MiniLM, batch 16: small kernels, launch-bound) took {bf16['wall_seconds']:.0f} "
            f"s in bf16 against {fp32['wall_seconds']:.0f} s in fp32 before the step lost its host waits") in page
    assert (f"{after_bf16['command_seconds']:.1f} s against {after_fp32['command_seconds']:.1f} s after "
            "(the whole command, eager)") in page
    # --compile reduce-overhead: stopped at its limit (exit 124) without a finished epoch
    compiled = H100["main"]["bf16-reduce-overhead"]
    assert compiled["exit"] == 124
    assert (f"had not finished its first epoch after {compiled['command_seconds']:.0f} s (eager bf16: the whole "
            f"command in {after_bf16['command_seconds']:.0f} s)") in page


def test_training_md_cuda_graphs_on_an_h200() -> None:
    page = flat(TRAINING)
    assert "H200" in H200["facts"]["gpu"] and "H200" in CALL4["facts"]["gpu"]
    fp32, bf16, eager = trained(GRAPHS_FP32), trained(GRAPHS_BF16), trained(EAGER_FP32)
    c4 = {k: CALL4["main"][k] for k in ("fp32-cuda-graphs", "bf16-cuda-graphs", "fp32-off")}
    fp32_4, bf16_4, eager_4 = (trained(r) for r in c4.values())
    second = [f"{run['fp32-cuda-graphs']['train_seconds'][1] / run['bf16-cuda-graphs']['train_seconds'][1]:.2f}x"
              for run in (H200["main"], CALL4["main"])]
    assert (f"bf16 trained it {fp32 / bf16:.2f}x faster than fp32 ({bf16:.1f} s against {fp32:.1f} s on an H200) in "
            f"one call and {fp32_4 / bf16_4:.2f}x ({bf16_4:.1f} s against {fp32_4:.1f} s) in another, one run each: its "
            f"second epoch {second[0]} and {second[1]}") in page
    assert (f"On an H200 it trained the main job in {fp32:.1f} s in fp32 and {bf16:.1f} s in bf16, against "
            f"{eager:.1f} s eager fp32 on the same machine, dev overall {four(GRAPHS_FP32['best']['dev_overall'])} "
            f"and {four(GRAPHS_BF16['best']['dev_overall'])} (one run each;") in page
    assert (f"on another H200, in {fp32_4:.1f} s and {bf16_4:.1f} s against {eager_4:.1f} s, with the same dev "
            "figures to the last digit") in page
    for k in ("fp32-cuda-graphs", "bf16-cuda-graphs"):
        assert c4[k]["dev_overall"] == H200["main"][k]["dev_overall"] and c4[k]["best"] == H200["main"][k]["best"]
    steps = graph_steps(GRAPHS_FP32)
    assert graph_steps(GRAPHS_BF16) == steps
    assert (f"(the main job: {steps['shapes']} shapes; {steps['replays']} of its {steps['total']} steps ran as "
            f"replays, {steps['eager']} eager)") in page


def call3_tests() -> tuple[int, int]:
    """Call 3's tests part and compiled-resume part: their passed counts, each with nothing failed or skipped."""
    counts = []
    for part in ("tests", "compiled-resume"):
        row = CALL3[part]
        assert row["exit"] == 0 and len(row["summary"]) == 1, row
        m = re.fullmatch(r"(\d+) passed(, (\d+) deselected)?, \d+ warnings in .*", row["summary"][0])
        counts.append(int(m.group(1)))
    return counts[0], counts[1]


def test_training_md_the_bert_base_step_against_transformers() -> None:
    page, table, t3 = flat(TRAINING), speed_table(), speed_table(CALL3)
    assert f"it ran on an H100 and an H200 on {H100['run']['date']}/{H200['run']['date'][-2:]}" in page
    tests, _ = call3_tests()
    graphed = round_ratios("minbert-graphed", "bf16", CALL3)
    assert (f"at {CALL3['run']['commit']} the CUDA tests passed, {tests} of {tests} (the bf16 replay case included), "
            "and so did the exact resume of a run with `--compile reduce-overhead`; bert-base's 32 x 128 training step "
            f"ran {t3['graphed bf16 / HF bf16']}x transformers' in bf16 as one CUDA graph (`speed.py --impl "
            f"minbert-graphed`, what `--cuda-graphs` runs; {min(graphed)}-{max(graphed)} by round, "
            f"{len(graphed)} rounds on an H200) and {t3['packed fp32 / HF fp32']}x in fp32 through "
            f"`minbert.packed`. Eager, in bf16, the readable model ran {table['minbert bf16 / HF bf16']}x and the "
            f"packed path {table['packed bf16 / HF bf16']}x (H100, two rounds that disagree) and "
            f"{t3['packed bf16 / HF bf16']}x (H200, three rounds)") in page
    assert (f"32 x 128 training step {table['packed fp32 / HF fp32']}x transformers' in fp32 on an H100 and "
            f"{t3['packed fp32 / HF fp32']}x on an H200; in bf16, where an eager step waits on the host, "
            f"{table['packed bf16 / HF bf16']}x (H100, two rounds that disagree) and {t3['packed bf16 / HF bf16']}x "
            f"(H200, three rounds), where the same step as one CUDA graph ran {t3['graphed bf16 / HF bf16']}x") in page


def test_gpu_md_the_targets_table() -> None:
    table, t3, rows = speed_table(), speed_table(CALL3), page_table(GPU, "| target | measured | met |")
    assert len(rows) == 5
    target = [float(re.search(r">= ([\d.]+)x", r[0]).group(1)) if ">=" in r[0] else None for r in rows]
    bf16, fp32, speedup, training, dev = rows
    # bert-base in bf16: call 3's graphed step (the target and the 2x stretch), the eager paths of calls 3 and 1
    graphed, by_round = t3["graphed bf16 / HF bf16"], round_ratios("minbert-graphed", "bf16", CALL3)
    assert bf16[1] == (f"{graphed} (graphed; {', '.join(by_round[:-1])} and {by_round[-1]} by round), H200; the eager "
                       f"paths {t3['packed bf16 / HF bf16']} (packed, H200), {table['minbert bf16 / HF bf16']} and "
                       f"{table['packed bf16 / HF bf16']} (H100)")
    assert "in bf16" in bf16[0] and bf16[2] == "yes, graphed; the 2x stretch too"
    assert min(float(r) for r in by_round) >= 2 > target[0]
    # fp32: call 3's packed path, every round, and call 1's
    packed, by_round = t3["packed fp32 / HF fp32"], round_ratios("minbert-packed", "fp32", CALL3)
    assert set(by_round) == {packed}
    assert fp32[1] == (f"{packed} (packed; {packed} in each of {len(by_round)} rounds), H200; "
                       f"{table['packed fp32 / HF fp32']} on the H100")
    assert "in fp32" in fp32[0] and min(float(packed), float(table["packed fp32 / HF fp32"])) >= target[1]
    assert fp32[2] == "yes, packed"
    # the main job: bf16 against fp32 with graphs (calls 2 and 4) and without (H100's eager runs, call 4's)
    c4 = CALL4["main"]
    graphs = [trained(GRAPHS_FP32) / trained(GRAPHS_BF16), trained(c4["fp32-cuda-graphs"]) / trained(c4["bf16-cuda-graphs"])]
    second = [run["fp32-cuda-graphs"]["train_seconds"][1] / run["bf16-cuda-graphs"]["train_seconds"][1]
              for run in (H200["main"], c4)]
    eager = [trained(H100["main"]["fp32-off"]) / trained(H100["main"]["bf16-off"]),
             trained(c4["fp32-off"]) / trained(c4["bf16-off"])]
    assert speedup[1] == (f"with `--cuda-graphs` {graphs[0]:.2f}x (call 2) and {graphs[1]:.2f}x (call 4), one run "
                          f"each on two H200s; {second[0]:.2f}x and {second[1]:.2f}x in the second epoch; eager "
                          f"{eager[0]:.2f}x (H100) and {eager[1]:.2f}x (call 4)")
    assert min(graphs) < target[2] <= max(graphs) and speedup[2] == "not shown: two runs, one each side"
    # its training against the fp32 figure of the run that filed the issue (given on the page, not in a results file)
    assert training[1] == (f"{trained(c4['bf16-cuda-graphs']):.1f} s bf16 and {trained(c4['fp32-cuda-graphs']):.1f} s "
                           f"fp32 with graphs, against {trained(c4['fp32-off']):.1f} s eager fp32 on the same H200 "
                           "(call 4)")
    issue = re.search(r"fp32 before \((\d+) s for both epochs, (\d+) \+ (\d+) s, in the run that filed the issue",
                      training[0])
    before, first, second_ = (int(g) for g in issue.groups())
    assert first + second_ == before
    assert before / max(trained(c4["fp32-cuda-graphs"]), trained(GRAPHS_FP32)) >= target[3] and training[2] == "yes"
    # its dev against make train's recorded run (seed 11711, the CPU)
    seed = json.loads((ROOT / "tasks" / "multitask" / "main-job.json").read_text())["training"]["seed"]
    make_train = result("multitask-main-fused.json")["seeds"][str(seed)]["dev_overall"]
    assert dev[0] == f"its dev within the seed noise of {four(make_train)}"
    scores = [GRAPHS_FP32["best"]["dev_overall"], GRAPHS_BF16["best"]["dev_overall"]]
    assert scores == [c4["fp32-cuda-graphs"]["best"]["dev_overall"], c4["bf16-cuda-graphs"]["best"]["dev_overall"]]
    assert dev[1] == f"{four(scores[0])} and {four(scores[1])}, one run each (the same in calls 2 and 4)"
    assert dev[2].startswith("within a point") and all(abs(s - make_train) < 0.01 for s in scores)


def test_gpu_md_calls_3_and_4() -> None:
    page, table, rounds = flat(GPU), speed_table(CALL3), speed_rounds(CALL3)
    assert CALL3["run"]["commit"] == CALL4["run"]["commit"] and "H200" in CALL3["facts"]["gpu"]
    tests, resumed = call3_tests()
    assert f"The tests part: {tests} passed, none skipped or failed, {CALL3['tests']['seconds']:.0f} s in 4" in page
    assert f"uninterrupted run (tests/test_cuda_step.py, `-k cuda_graphs`): passed, {CALL3['compiled-resume']['seconds']:.0f} s" in page
    assert resumed == 1
    assert f"`{CALL3['run']['command']}`" in page and f"`{CALL4['run']['command']}`" in page
    assert f"speed.py's protocol, {len(rounds[('hf', 'bf16')])} rounds of 10 warm-up and 30 timed steps" in page
    assert "--speed-rounds 3" in CALL3["run"]["command"] and len(rounds[("hf", "bf16")]) == 3

    assert (page_table(GPU, "| precision | minbert-packed | minbert-graphed | transformers |")
            == speed_page_rows(CALL3, ("minbert-packed", "minbert-graphed")))
    own = float(table["graphed bf16 seq/s"]) / float(table["graphed fp32 seq/s"])
    assert f"the graphed step runs {float(table['graphed bf16 seq/s']):.0f} seq/s, {own:.1f}x its own fp32" in page
    assert (f"graphs gain {(float(table['graphed fp32 / HF fp32']) - 1) * 100:.0f}%") in page
    peak = {k: table[f"{k} peak MiB"] for k in ("graphed bf16", "HF bf16", "packed fp32", "HF fp32")}
    assert (f"graphed {peak['graphed bf16']} in bf16 against transformers' {peak['HF bf16']}, packed "
            f"{peak['packed fp32']} in fp32 against {peak['HF fp32']}") in page

    c4, eager = CALL4["main"], trained(CALL4["main"]["fp32-off"])

    rows = page_table(GPU, "| run | training, epoch 1 + 2 | against eager fp32 | dev overall (SST / Quora / STS r) |",
                      whole=True)
    names = {"fp32-cuda-graphs": "fp32, `--cuda-graphs`", "bf16-cuda-graphs": "bf16, `--cuda-graphs`",
             "fp32-off": "fp32, eager", "bf16-off": "bf16, eager"}
    expected = []
    for key, name in names.items():
        ratio = eager / trained(c4[key])
        versus = "1" if key == "fp32-off" else (f"{ratio:.2f}x" if ratio < 1 else f"{ratio:.1f}x faster")
        expected.append([name, *main_job_cells(c4[key])[:1], versus, main_job_cells(c4[key])[1]])
    assert rows == expected
    f1, f2 = c4["fp32-cuda-graphs"]["train_seconds"]
    b1, b2 = c4["bf16-cuda-graphs"]["train_seconds"]
    g = graph_steps(c4["fp32-cuda-graphs"])
    first = re.fullmatch(r"CUDA graphs: (\d+) shapes captured, \d+ steps replayed, (\d+) eager \(each shape's first\)",
                         c4["fp32-cuda-graphs"]["graphs"][0])
    assert g == graph_steps(GRAPHS_FP32)
    assert (f"With graphs bf16 trained {(f1 + f2) / (b1 + b2):.2f}x faster than fp32 ({f2 / b2:.2f}x in the second "
            f"epoch; {trained(GRAPHS_FP32) / trained(GRAPHS_BF16):.2f}x and "
            f"{GRAPHS_FP32['train_seconds'][1] / GRAPHS_BF16['train_seconds'][1]:.2f}x in call 2)") in page
    assert (f"which hold {first.group(2)} eager first steps (one a shape) and {first.group(1)} captures, do not "
            f"({f1:.1f} against {GRAPHS_FP32['train_seconds'][0]:.1f} s fp32, {b1:.1f} against "
            f"{GRAPHS_BF16['train_seconds'][0]:.1f} s bf16)") in page
    assert (f"The eager fp32 run trained {(eager / trained(EAGER_FP32) - 1) * 100:.0f}% slower than call 2's "
            f"({eager:.1f} against {trained(EAGER_FP32):.1f} s), the graphed runs "
            f"{(trained(c4['fp32-cuda-graphs']) / trained(GRAPHS_FP32) - 1) * 100:.0f}% (fp32) and "
            f"{(trained(c4['bf16-cuda-graphs']) / trained(GRAPHS_BF16) - 1) * 100:.0f}% (bf16)") in page


def test_gpu_md_call_1_the_main_job_and_the_speed_table() -> None:
    page, rounds = flat(GPU), speed_rounds()
    fp32, bf16 = H100["main"]["fp32-off"], H100["main"]["bf16-off"]
    assert (f"fp32 {fp32['train_seconds'][0]:.1f} + {fp32['train_seconds'][1]:.1f} s training (dev overall "
            f"{four(fp32['best']['dev_overall'])}), bf16 {bf16['train_seconds'][0]:.1f} + "
            f"{bf16['train_seconds'][1]:.1f} s ({four(bf16['best']['dev_overall'])}): bf16 is no faster "
            f"({trained(fp32) / trained(bf16):.2f}x)") in page
    compiled = H100["main"]["bf16-reduce-overhead"]
    assert (f"did not finish in {compiled['command_seconds']:.0f} s (the eager bf16 command took "
            f"{bf16['command_seconds']:.1f} s, fp32 {fp32['command_seconds']:.1f} s)") in page
    assert f"(speed.py's protocol, {len(rounds[('hf', 'fp32')])} rounds of " in page

    assert (page_table(GPU, "| precision | minbert | minbert-packed | transformers |")
            == speed_page_rows(H100, ("minbert", "minbert-packed")))


def test_gpu_md_call_2_the_main_job_with_and_without_graphs() -> None:
    page, steps = flat(GPU), graph_steps(GRAPHS_FP32)
    eager = trained(EAGER_FP32)

    fp32, bf16, off = main_job_cells(GRAPHS_FP32), main_job_cells(GRAPHS_BF16), main_job_cells(EAGER_FP32)
    log = H200["main"]["bf16-off"]
    assert log["exit"] == 124 and len(log["log"]) == 1       # stopped at the call's budget, one epoch logged
    epoch = re.search(r"epoch 1/2: .* dev overall ([\d.]+) .*, (\d+)s training", log["log"][0])
    assert page_table(GPU, "| run | training, epoch 1 + 2 | against eager fp32 |") == [
        ["fp32, `--cuda-graphs`", fp32[0], f"{eager / trained(GRAPHS_FP32):.1f}x faster", fp32[1],
         (f"{steps['shapes']} shapes captured; {steps['replays']} of {steps['total']} steps ran as graph replays "
          f"({steps['shapes']} of them right after their capture), {steps['eager']} eager")],
        ["bf16, `--cuda-graphs`", bf16[0], f"{eager / trained(GRAPHS_BF16):.1f}x faster", bf16[1], "the same"],
        ["fp32, eager", off[0], "1", off[1], "all eager"],
        ["bf16, eager", f"{epoch.group(2)} s in epoch 1 (its log), then stopped at the call's budget", "",
         f"{epoch.group(1)} after epoch 1", "all eager"]]
    assert graph_steps(GRAPHS_BF16) == steps and EAGER_FP32["graphs"] == []
    f1, f2 = GRAPHS_FP32["train_seconds"]
    b2 = GRAPHS_BF16["train_seconds"][1]
    assert (f"With graphs, bf16 trained {trained(GRAPHS_FP32) / trained(GRAPHS_BF16):.2f}x faster than fp32 "
            f"({f2 / b2:.2f}x in the second epoch; the first holds each shape's eager step and its capture, about "
            f"{f1 - f2:.1f} s more than the second in fp32, not broken down)") in page
    assert (f"The whole fp32 command took {GRAPHS_FP32['command_seconds']:.1f} s with graphs and "
            f"{EAGER_FP32['command_seconds']:.1f} s without") in page
    # the eager fp32 run's dev in both calls, the same to 7 digits
    both = [H100["main"]["fp32-off"]["best"]["dev_overall"], EAGER_FP32["best"]["dev_overall"]]
    assert f"{both[0]:.7f}" == f"{both[1]:.7f}"
    assert f"the eager fp32 run gives {four(both[0])} on these weights in both calls (the same to 7 digits)" in page


# ---------------------------------------------------------------- 2. the student path's cost

def test_training_md_the_student_path_s_cost() -> None:
    page, measured = flat(TRAINING), result("student-path.json")
    settings, ms, ratio = measured["settings"], measured["ms_per_step"], measured["ratio"]
    assert ratio["of"] == "eager+course / fused+fused" and ratio["n"] == settings["rounds"]
    assert (f"`benchmarks/student_path.py --rounds {settings['rounds']} --steps {settings['steps']} --threads "
            f"{settings['threads']}`, a {measured['cpu']['cores']}-core Intel Xeon with AMX, torch "
            f"{measured['torch']}, fp32") in page
    assert measured["cpu"]["model"].startswith("Intel(R) Xeon(R)") and measured["cpu"]["amx_bf16"]
    assert (f"eager + course {ms['eager+course']['median']:.0f} ms a step, fused + fused "
            f"{ms['fused+fused']['median']:.0f} ms, **{ratio['median']:.2f}x** (median of {ratio['n']} interleaved "
            f"rounds; the per-round ratio {ratio['min']:.2f}-{ratio['max']:.2f})") in page
    # the earlier run of four arms: the medians its report printed
    arms = {}
    for line in (RESULTS / "student-path-four-arms.txt").read_text().splitlines():
        m = re.fullmatch(r"(\w+)\+(\w+)\s+([\d.]+) ms a step, range \[[\d.]+, [\d.]+\] over (\d+) rounds", line)
        if m:
            arms[f"{m.group(1)} + {m.group(2)}"] = (float(m.group(3)), int(m.group(4)))
    assert len(arms) == 4 and len({n for _, n in arms.values()}) == 1
    n = arms["fused + fused"][1]
    said = ", ".join(f"{arm} {arms[arm][0]:.0f} ms" for arm in ("eager + fused", "fused + course", "fused + fused"))
    assert f"put most of that in the optimiser: {said} (medians of {n} rounds)" in page


# ---------------------------------------------------------------- 3. what --save-every costs

def test_training_md_what_save_every_costs() -> None:
    measured = result("save-every.json")
    write, step = statistics.median(measured["writes_s"]), statistics.median(measured["steps_s"])
    share = measured["share"]
    assert share == {str(n): write / (n * step) for n in (100, 500, 1000)}     # as benchmarks/save_every.py computes it
    assert (f"the best epoch's weights: {measured['size_bytes'] / 2**20:.0f} MiB for the main job, {write:.2f} s to "
            f"write on machine A, +{share['100']:.1%} of the training time at `--save-every 100`, "
            f"+{share['500']:.1%} at 500") in flat(TRAINING)


# ---------------------------------------------------------------- 4. the recipe's defaults

def tree_defaults() -> dict[str, tuple[str, str]]:
    """{field: (student tree's default, reference's)} for the Recipe fields whose default is
    `STUDENT_VALUE if STUDENT else REFERENCE_VALUE` in tasks/core/recipe.py."""
    tree = ast.parse((ROOT / "tasks" / "core" / "recipe.py").read_text())
    recipe = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Recipe")
    named = {t.id: n.value for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    out = {}
    for node in recipe.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.value, ast.Call) and node.value.args:
            default = node.value.args[0]
            if isinstance(default, ast.Name) and default.id in named:     # a module constant, e.g. DEFAULT_ATTENTION
                default = named[default.id]
            if isinstance(default, ast.IfExp):
                assert ast.unparse(default.test) == "STUDENT", ast.unparse(default)
                out[node.target.id] = (ast.literal_eval(default.body), ast.literal_eval(default.orelse))
    return out


def test_the_recipe_defaults_the_pages_state() -> None:
    from tasks.core.recipe import Recipe
    from tasks.core.tree import STUDENT

    assert not STUDENT                                  # this is the reference tree: Recipe() has the reference's
    recipe, per_tree = Recipe(), tree_defaults()
    assert set(per_tree) == {"attention", "optimizer"}
    (student_attention, attention), (student_optimizer, optimizer) = per_tree["attention"], per_tree["optimizer"]
    assert (recipe.attention, recipe.optimizer) == (attention, optimizer)
    training, runs = flat(TRAINING), flat(RUNS)
    warmup, clip, precision = recipe.warmup_ratio, recipe.max_grad_norm, recipe.precision
    assert (f"The defaults are BERT's fine-tuning recipe in {precision} (warm-up over {warmup:.0%} of the steps then "
            f"linear decay, clipping at {clip}) with torch's {attention} attention and AdamW; a student tree defaults "
            "to its own `attention()` and the course's AdamW instead") in training
    assert f"Plain {precision} stays the default" in training
    assert f"(BERT's recipe uses {warmup};" in training and f"(the recipe: {clip})." in training
    assert f"`--attention eager|fused` (reference: {attention}; student tree: {student_attention})" in training
    assert f"`--optimizer course|torch|fused` (reference: {optimizer}; student tree: {student_optimizer})" in training
    assert (f"linear warm-up over {warmup:.0%} of the optimiser steps then linear decay to 0, gradient clipping at "
            f"{clip}, torch's {optimizer} AdamW (Devlin et al., 2019, A.2), all in {precision}") in runs
    # the plain loop of the assignment: the recipe switched off and the student tree's attention and AdamW
    plain = f"--warmup-ratio none --max-grad-norm none --attention {student_attention} --optimizer {student_optimizer}"
    assert f"python -m tasks.classifier --task sst {plain}" in training
    assert f"`{plain}` is the plain loop of the assignment" in runs


# ---------------------------------------------------------------- 5. the search's defaults

def fake_optuna() -> SimpleNamespace:
    """What tasks/search/study.py asks of Optuna, recording the arguments it passes."""

    def storage(url, engine_kwargs=None, heartbeat_interval=None, grace_period=None,
                heartbeat_stale_trial_callback=None):
        return {"url": url, "engine_kwargs": engine_kwargs, "heartbeat_interval": heartbeat_interval,
                "grace_period": grace_period, "retry": heartbeat_stale_trial_callback}

    return SimpleNamespace(
        storages=SimpleNamespace(RDBStorage=storage, RetryHeartbeatStaleTrialCallback=lambda max_retry: max_retry),
        samplers=SimpleNamespace(TPESampler=lambda **kw: kw),
        pruners=SimpleNamespace(MedianPruner=lambda **kw: ("median", kw)))


def test_the_search_page_states_the_searchs_defaults() -> None:
    pytest.importorskip("sqlalchemy")              # study.open_storage imports it (Optuna brings it)
    from tasks.search import Settings, build_parser
    from tasks.search.study import SQLITE_TIMEOUT, open_storage, sampler_and_pruner

    s, page = Settings(), flat(SEARCH)
    flags = build_parser()._option_string_actions
    assert {"--pruner", "--startup-trials", "--warmup-epochs", "--heartbeat", "--retries"} <= set(flags)
    # the pruner: median, waiting for --startup-trials complete trials, none in its first --warmup-epochs epochs
    sampler, (pruner, kw) = sampler_and_pruner(fake_optuna(), s.pruner, s.seed, s.startup_trials, s.warmup_epochs)
    assert pruner == "median" and kw == {"n_startup_trials": s.startup_trials, "n_warmup_steps": s.warmup_epochs + 1}
    assert sampler["n_startup_trials"] == s.startup_trials
    assert f"`--pruner {s.pruner}` (the default) stops a trial" in page
    assert (f"once `--startup-trials` ({s.startup_trials}) have completed and after `--warmup-epochs` "
            f"({s.warmup_epochs})") in page
    # the heartbeat, its grace, the retries and SQLite's wait, as the storage is opened
    storage = open_storage(fake_optuna(), "sqlite:///study.db", s.heartbeat, s.retries)
    assert storage["heartbeat_interval"] == s.heartbeat and storage["retry"] == s.retries
    beats, rest = divmod(storage["grace_period"], s.heartbeat)
    assert rest == 0
    word = {2: "two", 3: "three", 4: "four", 5: "five"}[beats]
    assert f"every `--heartbeat` seconds ({s.heartbeat}); a trial silent for {word} heartbeats" in page
    assert f"(`--retries`, {s.retries}; Optuna's `RetryHeartbeatStaleTrialCallback`)" in page
    assert storage["engine_kwargs"] == {"connect_args": {"timeout": SQLITE_TIMEOUT}}
    assert f"each connection waits up to {SQLITE_TIMEOUT} s for another's write" in page


# ---------------------------------------------------------------- 6. SimCSE's and DeeBERT's defaults

def test_the_simcse_page_states_the_stages_defaults() -> None:
    import inspect

    from minbert.simcse import SimCSEConfig, sup_simcse_loss, unsup_simcse_loss
    from tasks.simcse.settings import DEFAULTS, Stage, StageTraining

    stage, training, page = Stage(), StageTraining(), flat(SIMCSE)
    assert f"`--quora-fraction` (default {stage.quora_fraction:g}, as the report)" in page
    # epochs and lr left to the objective (tasks.simcse reads DEFAULTS for None); sup and margin alike
    assert training.epochs is None and training.lr is None and DEFAULTS["margin"] == DEFAULTS["sup"]
    unsup, sup = DEFAULTS["unsup"], DEFAULTS["sup"]

    def epochs(n: int) -> str:
        return f"{n} epoch" + ("s" if n != 1 else "")

    assert (f"Defaults follow SimCSE's appendix A for unsup (batch 64, t = {stage.temperature:g}, "
            f"{epochs(unsup['epochs'])} at {sci(unsup['lr'])}) and its epochs and rate for sup and margin "
            f"({sup['epochs']} at {sci(sup['lr'])}), but at batch {training.batch_size} for every objective "
            f"(SimCSE's supervised batch is 512: fewer in-batch negatives here), max length {training.max_length} "
            f"(their scripts' 32 would truncate Quora questions) and weight decay {training.weight_decay:g} "
            "(their scripts leave transformers' 0)") in page
    # the losses' own default temperature is the stage's
    for loss in (unsup_simcse_loss, sup_simcse_loss):
        t = inspect.signature(loss).parameters["temperature"].default
        assert t == stage.temperature == SimCSEConfig.temperature
        assert f"`{loss.__name__}(" in page and f"temperature={t:g}" in page


def test_the_deebert_page_states_the_runs_defaults() -> None:
    import math

    from tasks.deebert.settings import DEFAULT_THRESHOLDS, NUM_LABELS, Settings, Sweep

    settings, sweep, page = Settings(), Sweep(), flat(DEEBERT)
    # the thresholds: the list itself (steps of 0.05 to 0.3, then of 0.1), for two classes; scaled for C classes
    listed = ", ".join(f"{t:g}" for t in DEFAULT_THRESHOLDS)
    steps = [round(b - a, 4) for a, b in pairwise(DEFAULT_THRESHOLDS)]
    fine = steps.index(max(steps))
    assert set(steps[:fine]) == {min(steps)} and set(steps[fine:]) == {max(steps)}
    assert (f"The default thresholds are minbert's {listed} (steps of {min(steps):g} up to "
            f"{DEFAULT_THRESHOLDS[fine]:g}, then of {max(steps):g}) for two classes, scaled by ln C / ln 2 for C "
            "classes") in page
    assert sweep.thresholds is None
    assert sweep.resolved("sst2").thresholds == DEFAULT_THRESHOLDS
    scale = math.log(NUM_LABELS["sst"]) / math.log(2)
    assert sweep.resolved("sst").thresholds == [round(t * scale, 4) for t in DEFAULT_THRESHOLDS]
    assert f"`--rounds` (default {sweep.rounds}) timing rounds" in page
    assert f"With `--dev-protocol {settings.dev_protocol}` (the default) a seeded half of dev" in page
    assert f"within `--max-drop`, default {sweep.max_drop:g}, of the plain model's dev quality" in page


def test_the_multitask_page_states_the_frozen_word_tables_paired_cost() -> None:
    """docs/multitask.md: full-frozen-words against full fine-tuning, the mean paired difference over three seeds and
    its 95% interval, in points, as benchmarks/results/multitask-main-ffw.json holds them."""
    paired = json.loads((ROOT / "benchmarks" / "results" / "multitask-main-ffw.json").read_text())
    overall = paired["paired_against_main_job"]["dev_overall"]
    assert overall["n"] == 3 and overall["excludes_zero"]
    said = f"{overall['mean'] * 100:.2f} points [{overall['lo'] * 100:.2f}, {overall['hi'] * 100:.2f}] overall"
    assert said in flat(ROOT / "docs" / "multitask.md"), said
