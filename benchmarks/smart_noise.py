"""SMART's R_s against the dropout-noise term, per perturbation preset, on a few real batches (seconds on a CPU).

For each task batch (`--batches` batches of `--batch-size` rows of each of SST, Quora and STS train, seeded
samples; the multitask model on the offline MiniLM, fresh heads) the script prints
  - dropout noise: l_s(f(x), f'(x)), two training-mode passes with different dropout masks, no perturbation
    (what the regulariser measures when --smart-dropout on adds nothing but dropout: an R-Drop term);
  - per preset (minbert.smart.PRESETS: mt-dnn, vat, paper) R_s = l_s(f(x~), f(x)) after K ascent steps, with
    dropout off on every pass (the perturbation's own effect), and the perturbation's size: the mean over
    tokens of ||x~ - x||_inf, against the mean ||x||_inf of the embeddings.
The ratio R_s / noise says whether a preset's regulariser measures the perturbation (>> 1) or dropout (<< 1).
The last column, the first step's max over tokens of ||eta g||_inf / ||nu||_inf, says how much the ascent step
moves the perturbation off the starting noise's direction before the per-token rescale (paper preset: the
gradient is normalised by its own norm first, so this column does not describe its step).

    python benchmarks/smart_noise.py --batches 3 --batch-size 16 --threads 1
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import minbert
from minbert.multitask import SMART_KINDS, MultitaskBert, MultitaskConfig
from minbert.smart import PRESETS, SmartConfig, adversarial_perturbation, divergence
from tasks.core.data import TASKS
from tasks.multitask.data import collate, load


def gradient_share(f, x: list[torch.Tensor], target: torch.Tensor, kind: str, config: SmartConfig) -> float:
    """The first ascent step's gradient term against the starting noise: max over tokens of
    ||eta g||_inf / ||nu||_inf (small: the step keeps the noise's direction, whatever the gradient says)."""
    nu = [(config.sigma * torch.randn_like(h)).requires_grad_() for h in x]
    with torch.enable_grad():
        grads = torch.autograd.grad(divergence(f([h + d for h, d in zip(x, nu)]), target, kind), nu)
    return max((config.eta * g.abs().amax(-1) / d.detach().abs().amax(-1)).max().item() for g, d in zip(grads, nu))


def measure(model: MultitaskBert, task: str, batch: dict, config: SmartConfig) -> tuple[float, ...]:
    """(R_s, mean per-token ||x~ - x||_inf, mean per-token ||x||_inf, gradient_share) on one batch, dropout off."""
    kind = SMART_KINDS[task]
    model.eval()
    inputs = model.inputs(task, batch)
    with torch.no_grad():
        x = model.embed(inputs)
        target = model.predict_from_embeddings(task, x, inputs)

    def f(embeddings: list[torch.Tensor]) -> torch.Tensor:
        return model.predict_from_embeddings(task, embeddings, inputs)

    delta = adversarial_perturbation(f, x, target, kind, config)
    with torch.no_grad():
        r_s = divergence(f([h + d for h, d in zip(x, delta)]), target, kind).item()
    size = torch.cat([d.abs().amax(-1).flatten() for d in delta]).mean().item()      # over (B, T) tokens
    scale = torch.cat([h.abs().amax(-1).flatten() for h in x]).mean().item()
    return r_s, size, scale, gradient_share(f, x, target, kind, config)


def dropout_noise(model: MultitaskBert, task: str, batch: dict) -> float:
    """l_s between two training-mode passes (two dropout masks), no perturbation."""
    model.train()
    with torch.no_grad():
        a, b = model.predict(task, batch), model.predict(task, batch)
    return divergence(a, b, SMART_KINDS[task]).item()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="minilm", help="checkpoint: minilm (default), a Hub name or a directory")
    p.add_argument("--design", choices=("bi-encoder", "cross-encoder"), default="cross-encoder")
    p.add_argument("--tasks", default="sst,para,sts")
    p.add_argument("--batches", type=int, default=3, help="batches per task (default 3)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--smart-steps", type=int, default=1, help="K (default 1)")
    p.add_argument("--data-dir", default=str(ROOT / "data"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    tokenizer = minbert.Tokenizer.from_pretrained(args.model)
    torch.manual_seed(args.seed)
    model = MultitaskBert(minbert.load_pretrained(args.model), MultitaskConfig(design=args.design))
    print(f"{args.model} ({args.design}), {args.batches} batches x {args.batch_size} rows per task, "
          f"K={args.smart_steps}; "
          "R_s with dropout off on every pass; medians over the batches\n")
    print("| task | preset | eta | eps | R_s | dropout noise | R_s / noise | mean ||x~ - x||_inf | mean ||x||_inf "
          "| eta g / nu |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for task in [t.strip() for t in args.tasks.split(",")]:
        data = load(task, "train", TASKS[task].path(args.data_dir, "train"), tokenizer,
                    limit=args.batches * args.batch_size, seed=args.seed)
        batches = [collate(data, range(i, i + args.batch_size)) for i in range(0, len(data.records), args.batch_size)]
        torch.manual_seed(args.seed)
        noise = statistics.median(dropout_noise(model, task, b) for b in batches)
        for name in PRESETS:
            config = SmartConfig.preset(name, steps=args.smart_steps)
            torch.manual_seed(args.seed)
            rows = [measure(model, task, b, config) for b in batches]
            r_s, size, scale = (statistics.median(r[i] for r in rows) for i in range(3))
            share = max(r[3] for r in rows)
            print(f"| {task} | {name} | {config.eta:g} | {config.epsilon:g} | {r_s:.3g} | {noise:.3g} | "
                  f"{r_s / noise:.3g} | {size:.3g} | {scale:.3g} | {share:.2g} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
