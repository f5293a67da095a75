"""What --save-every N costs: one checkpoint of the main job (MiniLM multitask model, fused AdamW's state after a step,
the best epoch's weights, RNG states), written as the loop writes it (tasks.core.checkpoints.save_checkpoint: a
temporary file, fsync, rename), timed over several writes, against one training step of the main job's batch size.

    python benchmarks/save_every.py --writes 5 --dir /tmp            # the disk the run directory is on matters

Prints the checkpoint's size, the write's median and spread, a step's median time, and the share of training time
that N = 100, 500, 1000 adds; writes --out JSON.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import minbert
from minbert.multitask import MultitaskBert, MultitaskConfig
from tasks.core.checkpoints import rng_state, save_checkpoint
from tasks.core.recipe import make_optimizer
from tasks.core.train import cpu_state


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="minilm")
    p.add_argument("--writes", type=int, default=5, help="checkpoint writes timed (after one untimed)")
    p.add_argument("--steps", type=int, default=5, help="training steps timed (after one untimed)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--length", type=int, default=30, help="tokens per example of the timed steps (make train's mean: 28)")
    p.add_argument("--dir", default=None, help="where to write (default: a temporary directory)")
    p.add_argument("--out", default=None, help="results JSON")
    args = p.parse_args(argv)

    torch.manual_seed(0)
    model = MultitaskBert(minbert.load_pretrained(args.model), MultitaskConfig(similarity_bias=2.5)).train()
    opt = make_optimizer(list(model.parameters()), 5e-5, 0.0, "fused")
    ids = torch.randint(1000, 20000, (args.batch_size, args.length))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.randint(0, 5, (args.batch_size,))}

    def step() -> float:
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        model.loss("sst", batch).backward()
        opt.step()
        return time.perf_counter() - t0

    step()
    steps = [step() for _ in range(args.steps)]
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 0, "best_epoch": 0,
             "best_score": 0.0, "best_state": cpu_state(model), "history": [], "rng": rng_state(), "config": {},
             "optimizer_steps": 1, "within_epoch": {"groups": 1, "sums": {"total": 0.0, "n": 1}, "per_task": {},
                                                    "seconds": 0.0}}
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        path = Path(d) / "checkpoint.pt"
        save_checkpoint(path, state)
        writes = []
        for _ in range(args.writes):
            t0 = time.perf_counter()
            save_checkpoint(path, state)
            writes.append(time.perf_counter() - t0)
        size = path.stat().st_size
    w, s = statistics.median(writes), statistics.median(steps)
    print(f"CPU: {cpu_name()}, torch threads {torch.get_num_threads()}; writing to {args.dir or tempfile.gettempdir()}")
    print(f"checkpoint: {size / 2**20:.0f} MiB; write median {w:.2f} s (min {min(writes):.2f}, max {max(writes):.2f}, "
          f"{args.writes} writes)")
    print(f"training step (batch {args.batch_size} x {args.length}): median {s * 1000:.0f} ms "
          f"(min {min(steps) * 1000:.0f}, max {max(steps) * 1000:.0f})")
    shares = {n: w / (n * s) for n in (100, 500, 1000)}
    for n, share in shares.items():
        print(f"  --save-every {n}: +{share:.1%} of the training time")
    if args.out:
        Path(args.out).write_text(json.dumps({
            "cpu": cpu_name(), "threads": torch.get_num_threads(), "size_bytes": size, "writes_s": writes,
            "steps_s": steps, "batch": [args.batch_size, args.length], "share": shares}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
