"""The cost of SMART: the time of a training step with SMART relative to a plain one, in the same run.

Two copies of the multitask model (the same weights) train on the same batch of real SST sentences
(`--batch-size`, default 32, the first rows of data/ids-sst-train.csv): one with plain loss(), one with
SMART (K = `--smart-steps`, default 1; optionally the Bregman term and the passes' dropout off). A step is
what fit() does: zero_grad, loss, backward, AdamW step, and SMART's momentum update when it keeps one.
The two kinds of step alternate (the order swapped every other round) after `--warmup` untimed rounds;
the script prints the median time of each, their ratio, and how many encoder passes each step ran. The
paper's method with K = 1 runs three passes (the task's, the perturbation's, the adversarial one) and two
backward passes through the encoder (the perturbation's reaches the embeddings only), so expect about
2.5-3x; more would mean a pass too many.

    python benchmarks/smart_cost.py --model minilm --steps 20
    python benchmarks/smart_cost.py --model minilm --steps 20 --smart-bregman --smart-dropout off
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
from minbert.smart import PRESETS, SmartConfig
from tasks.core.distributed import pick_device
from tasks.core.recipe import autocast
from tasks.multitask import collate, load


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="minilm", help="checkpoint: minilm (default), a Hub name or a directory")
    p.add_argument("--design", choices=("bi-encoder", "cross-encoder"), default="cross-encoder")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=20, help="timed steps of each kind (default 20)")
    p.add_argument("--warmup", type=int, default=2, help="untimed rounds first (default 2)")
    p.add_argument("--smart-steps", type=int, default=1, help="K (default 1)")
    p.add_argument("--smart-perturbation", choices=tuple(PRESETS), default="mt-dnn", help="the step's preset "
                   "(default mt-dnn, as tasks.multitask)")
    p.add_argument("--smart-bregman", action="store_true")
    p.add_argument("--smart-dropout", choices=("on", "off"), default="on")
    p.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32")
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--data", default=str(ROOT / "data" / "ids-sst-train.csv"), help="the SST file to sample from")
    args = p.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    tokenizer = minbert.Tokenizer.from_pretrained(args.model)
    data = load("sst", "train", args.data, tokenizer, limit=args.batch_size, seed=0)  # a seeded sample of rows
    n = len(data.records)
    batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in collate(data, range(n)).items()}

    torch.manual_seed(0)
    plain = MultitaskBert(minbert.load_pretrained(args.model), MultitaskConfig(design=args.design)).to(device)
    smart = copy.deepcopy(plain)
    smart.add_smart(SmartConfig.preset(args.smart_perturbation, steps=args.smart_steps, bregman=args.smart_bregman,
                                       dropout=args.smart_dropout == "on"))
    models = {"plain": plain, "smart": smart}
    optimizers = {k: torch.optim.AdamW(list(m.parameters()), lr=1e-5, weight_decay=0.0, foreach=False)
                  for k, m in models.items()}
    passes = {k: [0] for k in models}                                 # encoder forwards, counted by a hook
    for name, model in models.items():
        model.train()
        model.bert.register_forward_pre_hook(lambda m, a, c=passes[name]: c.__setitem__(0, c[0] + 1))
    scalers = {k: torch.amp.GradScaler(device.type, enabled=args.precision == "fp16") for k in models}

    def step(name: str) -> float:
        model, optimizer, scaler = models[name], optimizers[name], scalers[name]
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with autocast(device, args.precision):
            loss = model.loss("sst", batch)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        if model.smart is not None and model.smart.names:
            model.smart.update(model)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - t0

    times: dict[str, list[float]] = {"plain": [], "smart": []}
    per_step = {}
    for r in range(args.warmup + args.steps):
        for name in ("plain", "smart") if r % 2 == 0 else ("smart", "plain"):
            before = passes[name][0]
            t = step(name)
            per_step[name] = passes[name][0] - before
            if r >= args.warmup:
                times[name].append(t)
    med = {k: statistics.median(v) for k, v in times.items()}
    tokens = int(batch["attention_mask"].sum())
    print(f"{args.model} ({args.design}), {n} SST sentences ({tokens} tokens), {device}, {args.precision}, "
          f"{torch.get_num_threads()} threads; SMART K={args.smart_steps}, bregman {args.smart_bregman}, "
          f"dropout {args.smart_dropout}; median of {args.steps} steps after {args.warmup} untimed")
    print(f"plain step {med['plain'] * 1000:.1f} ms ({per_step['plain']} encoder pass); "
          f"SMART step {med['smart'] * 1000:.1f} ms ({per_step['smart']} encoder passes)")
    print(f"ratio SMART / plain: {med['smart'] / med['plain']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
