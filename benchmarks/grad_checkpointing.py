"""Gradient checkpointing at bert-base's shape on the CPU: peak memory and step time against the plain step, one run.

A bert-base-shaped encoder (hidden 768, 12 layers, 12 heads, intermediate 3072; random weights, nothing downloaded),
train mode (dropout on), fp32, no padding. Each measurement is a fresh subprocess that builds the model, runs
a tiny step (1 x 8 tokens, for the one-time costs), `--warmup` untimed steps and one timed step (zero_grad, forward, a loss, backward; no optimiser step) on a
batch of B x T random token ids, and reports its peak resident memory (getrusage ru_maxrss of the child) and the
timed step's seconds. The shapes run in turn, plain and checkpointed interleaved (their order swapped every other
round), for `--rounds` rounds; the medians are printed with checkpointed / plain ratios.

Activation memory per example is computed, not read off one run: for each length T the difference of the peak RSS
between the two batch sizes measured at T, divided by the difference in batch size. What every process holds
whatever the batch (the interpreter, torch, the weights, the gradients) cancels. From it, the batch that fits a 16 GB
card is computed as (budget - fixed) / per example, budget the GiB left to tensors on a 16 GB card (default 14: a T4
shows torch 14.7 GiB, less the CUDA context), fixed the fp32 weights, gradients and AdamW's two moments (16 bytes a
parameter). That is an estimate from the CPU: there torch's attention keeps the (T, T) probabilities for the backward
pass, where CUDA's fused kernels do not, so at 512 tokens a GPU needs less than this and fits at least this batch.

    python benchmarks/grad_checkpointing.py --threads 2 --rounds 3 --shapes 128x2,128x8,512x1,512x4
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
GiB = 2**30
BERT_BASE = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
             "max_position_embeddings": 512}


def worker(T: int, B: int, checkpointing: bool, warmup: int, threads: int) -> dict:
    """One process's measurement: the timed step's seconds and the process's peak RSS, in GiB."""
    import torch

    import minbert
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = minbert.BertModel(minbert.BertConfig(**BERT_BASE)).train()
    model.gradient_checkpointing = checkpointing

    def step(B: int, T: int) -> float:
        ids = torch.randint(1000, 30000, (B, T))
        start = time.perf_counter()
        model.zero_grad(set_to_none=True)
        out = model(ids, torch.ones(B, T, dtype=torch.long))
        (out.last_hidden_state.square().mean() + out.pooler_output.sum()).backward()
        return time.perf_counter() - start
    step(1, 8)  # the one-time costs (a first checkpointed step pays about a second more) on a tiny batch
    for _ in range(warmup):
        step(B, T)
    seconds = step(B, T)
    return {"T": T, "B": B, "checkpointing": checkpointing, "step_s": seconds,
            "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GiB,
            "parameters": sum(p.numel() for p in model.parameters())}


def measure(T: int, B: int, checkpointing: bool, args: argparse.Namespace) -> dict:
    """worker() in a fresh subprocess, so that each peak RSS is its own."""
    cmd = [sys.executable, __file__, "--worker", f"{T}x{B}", "--warmup", str(args.warmup), "--threads", str(args.threads)]
    if checkpointing:
        cmd.append("--checkpointing")
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        return next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
    except (OSError, subprocess.CalledProcessError, StopIteration):
        return platform.processor() or "unknown"


def summarise(runs: list[dict], shapes: list[tuple[int, int]], budget_gib: float) -> dict:
    """Medians per shape and arm, the ratios, the per-example activation memory and the batch that fits."""
    med = {}
    for T, B in shapes:
        for ck in (False, True):
            mine = [r for r in runs if (r["T"], r["B"], r["checkpointing"]) == (T, B, ck)]
            med[(T, B, ck)] = {"step_s": statistics.median(r["step_s"] for r in mine),
                               "peak_rss_gib": statistics.median(r["peak_rss_gib"] for r in mine), "n": len(mine)}
    rows = [{"T": T, "B": B, **{f"{arm}_{k}": med[(T, B, ck)][k] for arm, ck in (("plain", False), ("ckpt", True))
                                for k in ("step_s", "peak_rss_gib")},
             "time_ratio": med[(T, B, True)]["step_s"] / med[(T, B, False)]["step_s"],
             "rss_ratio": med[(T, B, True)]["peak_rss_gib"] / med[(T, B, False)]["peak_rss_gib"], "rounds": med[(T, B, False)]["n"]}
            for T, B in shapes]
    fixed_gib = runs[0]["parameters"] * 16 / GiB  # fp32 weights, gradients, AdamW's m and v
    fits = []
    for T in sorted({T for T, _ in shapes}):
        bs = sorted(B for t, B in shapes if t == T)
        if len(bs) < 2:
            continue
        lo, hi = bs[0], bs[-1]
        entry = {"T": T, "from_batches": [lo, hi], "budget_gib": budget_gib, "fixed_gib": fixed_gib}
        for arm, ck in (("plain", False), ("ckpt", True)):
            per = (med[(T, hi, ck)]["peak_rss_gib"] - med[(T, lo, ck)]["peak_rss_gib"]) / (hi - lo)
            entry[f"{arm}_per_example_gib"] = per
            entry[f"{arm}_batch_fits_16gb"] = int((budget_gib - fixed_gib) // per) if per > 0 else None
        fits.append(entry)
    return {"rows": rows, "fits_16gb": fits}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="128x2,128x8,512x1,512x4", help="TxB,... (two batch sizes per T give the per-example figure)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=0, help="untimed steps before the timed one, in each process (default 0)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--budget-gib", type=float, default=14.0, help="GiB left to tensors on a 16 GB card (default 14)")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "grad-checkpointing.json"))
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--checkpointing", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        T, B = map(int, args.worker.split("x"))
        print(json.dumps(worker(T, B, args.checkpointing, args.warmup, args.threads)))
        return 0
    shapes = [tuple(map(int, s.split("x"))) for s in args.shapes.split(",")]
    load_before, started, runs = os.getloadavg(), time.time(), []
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT,
                            check=False).stdout.strip()  # the code the run starts from
    for r in range(args.rounds):
        for T, B in shapes:
            for ck in ((False, True) if r % 2 == 0 else (True, False)):
                runs.append(measure(T, B, ck, args))
                x = runs[-1]
                print(f"round {r + 1} T={T} B={B} {'ckpt ' if ck else 'plain'}: {x['step_s']:6.2f} s, "
                      f"peak RSS {x['peak_rss_gib']:.2f} GiB", flush=True)
    summary = summarise(runs, shapes, args.budget_gib)
    print(f"\n{'T x B':>8} | plain s | ckpt s | time ratio | plain GiB | ckpt GiB | RSS ratio")
    for row in summary["rows"]:
        print(f"{row['T']:>4} x {row['B']:<2} | {row['plain_step_s']:7.2f} | {row['ckpt_step_s']:6.2f} | "
              f"{row['time_ratio']:10.2f} | {row['plain_peak_rss_gib']:9.2f} | {row['ckpt_peak_rss_gib']:8.2f} | "
              f"{row['rss_ratio']:9.2f}")
    for f in summary["fits_16gb"]:
        print(f"T={f['T']}: activation memory per example (computed, batches {f['from_batches']}): plain "
              f"{f['plain_per_example_gib']:.3f} GiB, checkpointed {f['ckpt_per_example_gib']:.3f} GiB; a 16 GB card "
              f"({f['budget_gib']} GiB for tensors, {f['fixed_gib']:.2f} GiB of weights, gradients and AdamW state) "
              f"fits batch {f['plain_batch_fits_16gb']} plain, {f['ckpt_batch_fits_16gb']} checkpointed")
    import torch
    record = {"args": {k: v for k, v in vars(args).items() if k not in ("worker", "checkpointing")},
              "cpu": cpu_name(), "torch": torch.__version__, "load_average_before": load_before,
              "load_average_after": os.getloadavg(), "minutes": (time.time() - started) / 60, "commit": commit,
              "runs": runs, **summary}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {args.out} (load average before {load_before[0]:.1f}, after {record['load_average_after'][0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
