"""benchmarks/training.md's and epoch_speed.md's measured figures that no other test read, each recomputed from its
results file at the page's rounding: the optimiser's table and a training step with each optimiser (optimizer.json),
gradient checkpointing's table, its activation memory per example and the batches that fit 16 GB
(grad-checkpointing.json), what --save-every costs (save-every.json), the step on the main job's real batches
(epoch-speed.json); and the index's rows that quote them. No training."""

from __future__ import annotations

import statistics

from test_doc_figures import ROOT, page_table
from test_doc_figures_paired import README, page, result

TRAINING = ROOT / "benchmarks" / "training.md"


def test_training_md_the_optimisers_table_and_step() -> None:
    """optimizer.json: each optimiser's ms a step, its speed-up on minbert.AdamW and its largest difference from it;
    a training step with each, the optimiser's part and its share; the index's 6.21x and 1.18x."""
    data = result("optimizer.json")
    steps = data["optimizer_step"]
    base = steps["minbert"]["ms"]
    rows = page_table(TRAINING, "| optimiser | ms a step |")
    for row, kind in zip(rows, ("minbert", "torch single-tensor", "torch foreach", "torch fused"), strict=True):
        diff = steps[kind]["max_abs_diff_from_minbert"]
        assert row[1:] == [f"{steps[kind]['ms']:.1f}", f"{base / steps[kind]['ms']:.2f}x",
                           "0" if diff == 0 else f"{diff:.1e}".replace("e-0", "e-")], row
    train = data["training_step"]
    plain, fused = train["minbert"], train["fused"]
    text = page("benchmarks/training.md")
    assert (f"{plain['step_ms']:.1f} ms with `minbert.AdamW`, of which the optimiser {plain['optimizer_ms']:.1f} ms "
            f"({plain['optimizer_ms'] / plain['step_ms']:.0%}); {fused['step_ms']:.1f} ms with `fused`, of which "
            f"{fused['optimizer_ms']:.1f} ms ({fused['optimizer_ms'] / fused['step_ms']:.0%}): "
            f"{plain['step_ms'] / fused['step_ms']:.2f}x a step") in text
    assert (f"the AdamW step {base / steps['torch fused']['ms']:.2f}x faster than `minbert.AdamW`, a training step "
            f"{plain['step_ms'] / fused['step_ms']:.2f}x") in page(README)
    assert f"The optimiser alone on the multitask model's {data['parameters']:,} parameters" in text


def test_training_md_gradient_checkpointing() -> None:
    """grad-checkpointing.json: each shape's median step and peak RSS plain and checkpointed with their ratios, the
    load average at the start and the end, the activation memory per example and what fits 16 GB."""
    data = result("grad-checkpointing.json")
    rows = page_table(TRAINING, "| T x B | plain: step |")
    for row, r in zip(rows, data["rows"], strict=True):
        assert row == [f"{r['T']} x {r['B']}", f"{r['plain_step_s']:.2f} s", f"{r['ckpt_step_s']:.2f} s",
                       f"{r['time_ratio']:.2f}", f"{r['plain_peak_rss_gib']:.2f} GiB",
                       f"{r['ckpt_peak_rss_gib']:.2f} GiB", f"{r['rss_ratio']:.2f}"], row
    text = page("benchmarks/training.md")
    assert (f"(load average {data['load_average_before'][0]:.1f} at the start, {data['load_average_after'][0]:.1f} "
            "at the end)") in text
    fits = {f["T"]: f for f in data["fits_16gb"]}
    for t, words in ((128, "128 tokens"), (512, "512 tokens")):
        f = fits[t]
        plain, ckpt = f["plain_per_example_gib"], f["ckpt_per_example_gib"]
        assert (f"at {words} {plain:.3f} GiB plain, {ckpt:.3f} GiB checkpointed ({plain / ckpt:.1f}x less)") in text
        assert f"| {t} | batch {f['plain_batch_fits_16gb']} | batch {f['ckpt_batch_fits_16gb']} |" in text
        assert f["budget_gib"] == 14.0 and f"batch = ({f['budget_gib']:.0f} GiB - {f['fixed_gib']:.2f} GiB)" in text


def test_training_md_what_save_every_costs() -> None:
    """save-every.json: a checkpoint's size and its median write with the range, a step's median with the range, the
    share of the training time at 100, 500 and 1000 steps; the index's row."""
    data = result("save-every.json")
    writes, steps, share = data["writes_s"], data["steps_s"], data["share"]
    text = page("benchmarks/training.md")
    mib, write = data["size_bytes"] / 2**20, statistics.median(writes)
    assert (f"{mib:.0f} MiB, {write:.2f} s median of {len(writes)} writes ({min(writes):.2f}-{max(writes):.2f} s)"
            in text)
    assert (f"({data['batch'][0]} x {data['batch'][1]} tokens): {statistics.median(steps) * 1000:.0f} ms median "
            f"({min(steps) * 1000:.0f}-{max(steps) * 1000:.0f})") in text
    assert (f"`--save-every 100` adds {share['100']:.1%} to the training time, 500 adds {share['500']:.1%}, 1000 adds "
            f"{share['1000']:.1%}") in text
    assert (f"one checkpoint of the main job {mib:.0f} MiB, written in {write:.2f} s; +{share['100']:.1%} of the "
            f"training time at N = 100, +{share['500']:.1%} at 500") in page(README)


def test_epoch_speed_md_the_table() -> None:
    """epoch-speed.json: positions per real token and the T^2 work grouped and at random, the FLOPs a step, each
    tree's step median [range], its rate against torch.mm's, the per-round ratio; mm's range in the prose; the
    index's row."""
    data = result("epoch-speed.json")
    stats_, trees, ratio = data["stats"], data["trees"], data["speedup"]["116f628"]
    rows = {r[0]: r[1:] for r in page_table(ROOT / "benchmarks" / "epoch_speed.md", "| | this tree (f2b75ef) |")}
    grouped, random = stats_["bucketed"], stats_["unbucketed"]

    def both(cell: str) -> list[str]:
        return [cell, cell]

    assert rows["positions computed per real token (epoch 1, length-grouped batches)"] == both(
        f"{grouped['positions_per_real_token']:.3f}")
    assert rows["the same at random (`--no-bucket`)"] == both(f"{random['positions_per_real_token']:.3f}")
    assert rows["attention-score work, T^2, against the real lengths' (grouped / random)"] == both(
        f"{grouped['t2_work_ratio']:.2f}x / {random['t2_work_ratio']:.2f}x")
    assert rows["matrix-product work per step on real tokens (epoch mean)"] == both(
        f"{stats_['flops_per_step'] / 1e9:.2f} GFLOP")
    steps, rates = [], []
    for name in ("this tree", "116f628"):
        s, t = trees[name]["step_seconds"], trees[name]
        steps.append(f"{s['median'] * 1000:.1f} ms [{s['min'] * 1000:.1f}, {s['max'] * 1000:.1f}]")
        rates.append(f"{t['gflops']['median']:.1f} / {t['mm_gflops']['median']:.1f} GFLOP/s ({t['share_of_mm']:.0%})")
    assert rows["step, median [range] over 5 rounds"] == steps
    assert rows["rate on real tokens / torch.mm's in the same processes"] == rates
    said = f"{ratio['median']:.3f}x [{ratio['min']:.3f}, {ratio['max']:.3f}]"
    assert rows["this tree / 116f628, per round"][0] == said
    mm = [v for t in trees.values() for v in (t["mm_gflops"]["min"], t["mm_gflops"]["max"])]
    assert f"moved between {min(mm):.0f} and {max(mm):.0f} GFLOP/s" in page("benchmarks/epoch_speed.md")
    shares = sorted(t["share_of_mm"] for t in trees.values())
    assert (f"{grouped['positions_per_real_token']:.3f} positions per real token (the batches are length-grouped "
            f"already; {random['positions_per_real_token']:.3f} at random), {stats_['flops_per_step'] / 1e9:.1f} "
            f"GFLOP on real tokens") in page(README)
    assert f"{shares[0]:.0%}".rstrip("%") + f"-{shares[1]:.0%} of torch.mm's rate; this session's tree against " \
        f"116f628 {said}" in page(README)
