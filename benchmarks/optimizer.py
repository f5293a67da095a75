"""What the AdamW step costs: the course's minbert.AdamW (written out) against torch's AdamW, and in a whole
training step.

Part 1, the optimiser step alone: the multitask model's parameters (MiniLM and the three heads, every one
trainable as in full fine-tuning) get fixed random gradients, and each optimiser takes `--steps` steps on
them after `--warmup` untimed ones: minbert.AdamW (the course's update, `--optimizer course`); torch.optim.AdamW one
tensor at a time (foreach=False, `--optimizer torch` on a CPU), over lists of tensors (foreach=True) and in one fused
kernel (fused=True, `--optimizer fused`). The kinds alternate round by round so that a drift in the machine's speed
touches them all alike. It prints the median ms per step, the ratio to minbert.AdamW, and the largest difference in
any parameter from torch's single-tensor AdamW after the runs (all start from the same weights and see the same
gradients: torch's kinds differ by rounding only, the course's update by its eps and the order of its decay too).

Part 2, a whole step of the main job (`make train`): a cross-encoder batch of `--batch-size` real Quora pairs
(the first rows of data/quora-train.csv), loss, backward, clipping to norm 1 and the optimiser step, with
`--optimizer course`, `torch` and `fused`; the median ms of each and the share of the step the optimiser takes.

    python benchmarks/optimizer.py --steps 20
    python benchmarks/optimizer.py --steps 20 --json benchmarks/results/optimizer.json
"""

from __future__ import annotations

import argparse
import copy
import json
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
from tasks.core.recipe import OPTIMIZERS, make_optimizer
from tasks.multitask import collate, load

KINDS = {"course": lambda ps: minbert.AdamW(ps, lr=5e-5, weight_decay=0.01),
         "torch single-tensor": lambda ps: torch.optim.AdamW(ps, lr=5e-5, weight_decay=0.01, foreach=False),
         "torch foreach": lambda ps: torch.optim.AdamW(ps, lr=5e-5, weight_decay=0.01, foreach=True),
         "torch fused": lambda ps: torch.optim.AdamW(ps, lr=5e-5, weight_decay=0.01, fused=True)}


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def optimizer_steps(base: MultitaskBert, steps: int, warmup: int) -> dict[str, dict]:
    """Part 1: the median seconds of each kind's step on the same parameters and gradients, and its drift."""
    models = {k: copy.deepcopy(base) for k in KINDS}
    g = torch.Generator().manual_seed(0)
    grads = [torch.randn(p.shape, generator=g) * 1e-3 for p in base.parameters()]
    optimizers = {}
    for k, m in models.items():
        for p, grad in zip(m.parameters(), grads):
            p.grad = grad.clone()
        optimizers[k] = KINDS[k](list(m.parameters()))
    times: dict[str, list[float]] = {k: [] for k in KINDS}
    names = list(KINDS)
    for r in range(warmup + steps):
        for k in names if r % 2 == 0 else names[::-1]:
            t = timed(optimizers[k].step)
            if r >= warmup:
                times[k].append(t)
    ref = list(models["torch single-tensor"].parameters())
    out = {}
    for k, m in models.items():
        drift = max((p - q).abs().max().item() for p, q in zip(m.parameters(), ref))
        out[k] = {"ms": 1000 * statistics.median(times[k]), "max_abs_diff_from_torch": drift}
    return out


def training_steps(base: MultitaskBert, batch: dict, steps: int, warmup: int) -> dict[str, dict]:
    """Part 2: the median seconds of a whole training step (and of its optimiser step) with each optimiser."""
    runs = {}
    for kind in OPTIMIZERS:
        model = copy.deepcopy(base).train()
        params = [p for p in model.parameters() if p.requires_grad]
        runs[kind] = (model, params, make_optimizer(params, 5e-5, 0.01, kind))
    whole: dict[str, list[float]] = {k: [] for k in runs}
    opt: dict[str, list[float]] = {k: [] for k in runs}
    for r in range(warmup + steps):
        for kind in OPTIMIZERS if r % 2 == 0 else OPTIMIZERS[::-1]:
            model, params, optimizer = runs[kind]
            torch.manual_seed(r)                                    # the same dropout for both
            t0 = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            model.loss("para", batch).backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            t_opt = timed(optimizer.step)
            if r >= warmup:
                whole[kind].append(time.perf_counter() - t0)
                opt[kind].append(t_opt)
    return {k: {"step_ms": 1000 * statistics.median(whole[k]), "optimizer_ms": 1000 * statistics.median(opt[k])}
            for k in runs}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="minilm", help="checkpoint: minilm (default), a Hub name or a directory")
    p.add_argument("--batch-size", type=int, default=16, help="Quora pairs per training step (default 16, make train's)")
    p.add_argument("--steps", type=int, default=20, help="timed steps of each kind (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps of each kind first (default 3)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's, one per core)")
    p.add_argument("--data", default=str(ROOT / "data" / "quora-train.csv"), help="the Quora file for part 2")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    args = p.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    base = MultitaskBert(minbert.load_pretrained(args.model), MultitaskConfig(design="cross-encoder"))
    n_params = sum(p.numel() for p in base.parameters())
    print(f"{args.model} multitask model, {n_params:,} parameters in {len(list(base.parameters()))} tensors; cpu, "
          f"{torch.get_num_threads()} threads; median of {args.steps} steps after {args.warmup} untimed")

    alone = optimizer_steps(base, args.steps, args.warmup)
    print("\noptimiser step alone           ms   vs course   max |diff| from torch single-tensor")
    for k, r in alone.items():
        print(f"  {k:<22} {r['ms']:8.1f}   {alone['course']['ms'] / r['ms']:6.2f}x    {r['max_abs_diff_from_torch']:.1e}")

    tokenizer = minbert.Tokenizer.from_pretrained(args.model)
    data = load("para", "train", args.data, tokenizer)
    batch = collate(data, range(args.batch_size))
    tokens = int(batch["attention_mask_1"].sum() + batch["attention_mask_2"].sum())
    whole = training_steps(base, batch, args.steps, args.warmup)
    print(f"\nwhole training step, {args.batch_size} Quora pairs ({tokens} tokens), cross-encoder, clip 1.0")
    for k, r in whole.items():
        print(f"  --optimizer {k:<8} step {r['step_ms']:7.1f} ms, of which the optimiser {r['optimizer_ms']:6.1f} ms "
              f"({100 * r['optimizer_ms'] / r['step_ms']:.0f}%)")
    print(f"  ratio course / fused: {whole['course']['step_ms'] / whole['fused']['step_ms']:.2f}x per step, "
          f"torch / fused: {whole['torch']['step_ms'] / whole['fused']['step_ms']:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({"settings": vars(args), "threads": torch.get_num_threads(),
                                               "parameters": n_params, "optimizer_step": alone,
                                               "training_step": whole}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
