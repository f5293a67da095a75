"""The step cost of PCGrad and of the sentence-embedding objectives against the main job's plain steps, in one run.

One batch of each task (the first `--batch-size` rows of each training file, seeded) and copies of the same
multitask model. Per round of the three tasks, timed alternately after `--warmup` untimed rounds:
    plain     what round-robin does: three optimiser steps, one per task (zero_grad, loss, backward, AdamW)
    pcgrad    one step on the round: three losses, three gradients at the same weights, the projection
              (minbert.pcgrad, Yu et al., 2020, Alg. 1) on the shared parameters, one AdamW step
    embedding plain, with --sts-embedding-loss cosent and --para-embedding-loss mnrl added (2 more encoder
              passes per pair batch with the cross-encoder)
It prints the median time of a round of each and the ratios to plain. PCGrad does the same forward and backward
work as plain plus the projection, and two AdamW steps fewer; expect a ratio near 1 plus the projection's cost
(a few passes over the shared gradients, 3 x 22.7M floats on MiniLM).

    python benchmarks/pcgrad_cost.py --model minilm --batch-size 16 --steps 10 --optimizer fused
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import minbert
from minbert.multitask import MultitaskBert, MultitaskConfig
from tasks.core.distributed import pick_device
from tasks.core.recipe import autocast, make_optimizer
from tasks.core.terms import Context, build_terms
from tasks.multitask import Settings, collate, load
from tasks.multitask.model import multitask_loss
from tasks.multitask.toolkit import ToolkitSettings

FILES = {"sst": "ids-sst-train.csv", "para": "quora-train.csv", "sts": "sts-train.csv"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="minilm")
    p.add_argument("--design", choices=("bi-encoder", "cross-encoder"), default="cross-encoder")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--steps", type=int, default=10, help="timed rounds of each kind (default 10)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--optimizer", choices=("minbert", "fused"), default="fused")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--data-dir", default=str(ROOT / "data"))
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="after the timing, N more rounds of plain and of pcgrad under torch.profiler: each kind's "
                        "operators by their own CPU time, where a round's time goes (default 0: no profile)")
    args = p.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    tokenizer = minbert.Tokenizer.from_pretrained(args.model)
    batch = {}
    for t, name in FILES.items():
        data = load(t, "train", Path(args.data_dir) / name, tokenizer, limit=args.batch_size, seed=0)
        batch[t] = {k: v.to(device) if isinstance(v, torch.Tensor) else v
                    for k, v in collate(data, range(len(data.records))).items()}
    torch.manual_seed(0)
    base = MultitaskBert(minbert.load_pretrained(args.model), MultitaskConfig(design=args.design)).to(device).train()
    kinds = ("plain", "pcgrad", "embedding")
    models = {k: copy.deepcopy(base) for k in kinds}
    opts = {k: make_optimizer(list(m.parameters()), 1e-5, 0.0, args.optimizer) for k, m in models.items()}
    # the "pcgrad" row projects, as the docstring says (before the terms of tasks/multitask/terms.py its round went
    # through surgery_loss with project=False: the same work but the 3 x 3 coefficients)
    toolkit = {"plain": ToolkitSettings(), "pcgrad": ToolkitSettings(gradient_surgery="pcgrad"),
               "embedding": ToolkitSettings(sts_embedding_loss="cosent", para_embedding_loss="mnrl")}
    losses = {k: multitask_loss(build_terms("multitask", Settings(toolkit=toolkit[k]),
                                            Context(models[k], list(models[k].parameters()), device, None)), device)
              for k in kinds}
    encoder_passes = {k: [0] for k in kinds}
    for k, m in models.items():
        m.bert.register_forward_pre_hook(lambda mod, a, c=encoder_passes[k]: c.__setitem__(0, c[0] + 1))

    def round_of(kind: str) -> float:
        m, opt, loss_fn = models[kind], opts[kind], losses[kind]
        t0 = time.perf_counter()
        steps = [{"round": batch, "rows": torch.zeros(3)}] if kind == "pcgrad" else list(batch.values())
        for b in steps:
            opt.zero_grad(set_to_none=True)
            with autocast(device, args.precision):
                loss = loss_fn(m, b)
            loss.backward()
            opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - t0

    for t, b in batch.items():
        b["task"] = t
    times: dict[str, list[float]] = {k: [] for k in kinds}
    per_round = {}
    for r in range(args.warmup + args.steps):
        for kind in kinds if r % 2 == 0 else tuple(reversed(kinds)):
            before = encoder_passes[kind][0]
            took = round_of(kind)
            per_round[kind] = encoder_passes[kind][0] - before
            if r >= args.warmup:
                times[kind].append(took)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.model} ({args.design}), batch {args.batch_size} per task, {device}, {args.precision}, "
          f"{torch.get_num_threads()} threads, optimizer {args.optimizer}; median of {args.steps} rounds")
    for k in kinds:
        print(f"{k:10s} {med[k] * 1000:8.1f} ms per round of 3 tasks (min {min(times[k]) * 1000:.1f}, max "
              f"{max(times[k]) * 1000:.1f}; {per_round[k]} encoder passes), {med[k] / med['plain']:.2f}x plain")
    for kind in ("plain", "pcgrad")[:2 if args.profile else 0]:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            took = [round_of(kind) for _ in range(args.profile)]
        print(f"\n{kind}: {args.profile} rounds under the profiler, median {statistics.median(took) * 1000:.1f} ms a "
              f"round; operators by own CPU time (ms a round):")
        rows = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
        for e in rows[:14]:
            print(f"  {e.key[:48]:48s} {e.self_cpu_time_total / 1000 / args.profile:9.1f}  ({e.count // args.profile} calls)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
