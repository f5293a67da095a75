"""The figures docs/training.md and benchmarks/gpu.md state of the GPU runs, each read from the page within its phrase
and compared with the results file it comes from: calls 3 and 4 on an H200 (the graphed bert-base step, the main job
again), --cuda-graphs on an H200 (call 2), the step without host waits on an H100 (call 1), the main job before that,
and the issue's targets table."""

from __future__ import annotations

import json
import re
import statistics

import pytest
from test_doc_figures import GPU, ROOT, TRAINING, flat, four, page_table, result

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
