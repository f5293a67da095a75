"""What the student's path costs: a training step of the first model with the tree's own attention() and the course's
AdamW (--attention eager --optimizer course, a student tree's defaults) against torch's fused kernels (--attention
fused --optimizer fused, the reference's).

The step is python -m tasks.classifier --task sst --fine-tune-mode full-model's: SentimentClassifier on MiniLM (mean
pooling, dropout 0.1), batches of the classifier's --batch-size (32) drawn as its first epoch draws them from
data/ids-sst-train.csv (real sentences, length-grouped, seed 11711), cross-entropy, backward, clipping at 1.0 and the
optimiser step, fp32 on the CPU. Both arms start from the same weights and take the same batches, with the same dropout
draws. After --warmup untimed steps per arm, each of --rounds rounds times --steps steps of every arm, the arms in a
random order per round (--seed); a round's figure per arm is its median ms per step. It prints, per arm, the median
and the range over rounds, the ratio eager+course / fused+fused per round (median and range), the CPU model, its
avx2 / avx512_bf16 / amx_bf16 flags and torch's version, and writes them all as JSON (--out).

    python benchmarks/student_path.py --rounds 5 --steps 10 --threads 2
    python benchmarks/student_path.py --rounds 2 --steps 3 --warmup 1 --out /tmp/student-path.json   # a quick check
    python benchmarks/student_path.py --arms eager+course,eager+fused,fused+course,fused+fused     # which part costs
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from epoch_speed import cpu_info, summary

import minbert
from tasks.classifier import NUM_LABELS, SentimentClassifier, Settings, classification_loss
from tasks.core.batching import train_batches
from tasks.core.finetune import get_mode
from tasks.core.recipe import ATTENTIONS, OPTIMIZERS, Recipe
from tasks.core.training_setup import load_split

ARMS = "eager+course,fused+fused"      # the student tree's defaults, the reference's; the first is the ratio's top


def arm_names(text: str) -> list[str]:
    """'eager+course,fused+fused' -> the arms, each ATTENTION+OPTIMIZER checked."""
    arms = [a.strip() for a in text.split(",") if a.strip()]
    for arm in arms:
        attention, _, optimizer = arm.partition("+")
        if attention not in ATTENTIONS or optimizer not in OPTIMIZERS:
            raise argparse.ArgumentTypeError(f"{arm!r}: an arm is ATTENTION+OPTIMIZER, ATTENTION one of "
                                             f"{ATTENTIONS}, OPTIMIZER one of {OPTIMIZERS}")
    if len(arms) < 2 or len(set(arms)) != len(arms):
        raise argparse.ArgumentTypeError("give at least two different arms")
    return arms


def build(arm: str, settings: Settings, model_name: str) -> tuple[torch.nn.Module, list, torch.optim.Optimizer]:
    """The classifier command's model, trainable parameters and optimiser for one arm, from seed 0."""
    attention, _, optimizer = arm.partition("+")
    recipe = Recipe(attention=attention, optimizer=optimizer)
    tr, ft = settings.training, settings.fine_tune
    torch.manual_seed(0)
    bert = minbert.load_pretrained(model_name, attn_implementation=recipe.attn_implementation)
    model = SentimentClassifier(bert, NUM_LABELS["sst"], tr.dropout, tr.pooling).train()
    mode = get_mode(ft.fine_tune_mode)
    params = mode.setup(model, ft, tr.seed)
    lr = tr.lr if tr.lr is not None else mode.default_lr
    return model, params, recipe.optimizer_for(model, params, lr, tr.weight_decay)


def step(model: torch.nn.Module, params: list, optimizer: torch.optim.Optimizer, batch: dict, seed: int) -> float:
    """One training step as fit() takes it in fp32 (loss, backward, clipping at 1.0, the step); its seconds."""
    torch.manual_seed(seed)                                          # the same dropout draws in every arm
    t0 = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    classification_loss(model, batch).backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    settings = Settings()                                            # python -m tasks.classifier's defaults
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arms", type=arm_names, default=arm_names(ARMS),
                   help=f"ATTENTION+OPTIMIZER,... to time (default {ARMS}); the ratio is the first over the last")
    p.add_argument("--rounds", type=int, default=5, help="rounds, each timing every arm (default 5)")
    p.add_argument("--steps", type=int, default=10, help="timed steps of each arm per round (default 10)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps of each arm first (default 3)")
    p.add_argument("--batch-size", type=int, default=settings.training.batch_size,
                   help=f"SST sentences a step (default {settings.training.batch_size}, the classifier's)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's, one per core)")
    p.add_argument("--seed", type=int, default=0, help="seeds the arms' order in each round (default 0)")
    p.add_argument("--model", default="minilm", help="checkpoint (default minilm)")
    p.add_argument("--data", default=str(ROOT / "data" / "ids-sst-train.csv"), help="the SST training file")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "student-path.json"),
                   help="write the figures as JSON here (default benchmarks/results/student-path.json)")
    args = p.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    tr = settings.training
    tokenizer = minbert.Tokenizer.from_pretrained(args.model, max_length=tr.max_length)
    split = load_split("train", args.data, "sst", tokenizer)
    batches = train_batches(split, args.batch_size, tr.seed, 0, tr.bucket)
    needed = args.warmup + args.rounds * args.steps
    if needed > len(batches):
        p.error(f"{needed} steps need more than the epoch's {len(batches)} batches: fewer --rounds or --steps")
    arms = {arm: build(arm, settings, args.model) for arm in args.arms}
    cpu = cpu_info()
    print(f"CPU: {cpu['model']}, {cpu['cores']} cores, avx2 {cpu['avx2']}, avx512_bf16 {cpu['avx512_bf16']}, "
          f"amx_bf16 {cpu['amx_bf16']}; torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"{args.model}, SST batches of {args.batch_size}, {args.rounds} rounds of {args.steps} steps after "
          f"{args.warmup} untimed")

    for i in range(args.warmup):
        for model, params, optimizer in arms.values():
            step(model, params, optimizer, batches[i], i)
    rng = random.Random(args.seed)
    rounds: dict[str, list[float]] = {arm: [] for arm in arms}      # each round's median seconds per step
    orders = []
    for r in range(args.rounds):
        order = list(arms)
        rng.shuffle(order)
        orders.append(order)
        chunk = range(args.warmup + r * args.steps, args.warmup + (r + 1) * args.steps)
        for arm in order:
            model, params, optimizer = arms[arm]
            rounds[arm].append(statistics.median(step(model, params, optimizer, batches[i], i) for i in chunk))
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{arm} {rounds[arm][-1] * 1000:.0f} ms" for arm in order))

    top, bottom = args.arms[0], args.arms[-1]
    ratios = [a / b for a, b in zip(rounds[top], rounds[bottom])]
    report = {"settings": vars(args), "cpu": cpu, "torch": torch.__version__, "threads": torch.get_num_threads(),
              "tokens_per_step": statistics.fmean(int(b["attention_mask"].sum()) for b in batches[:needed]),
              "orders": orders, "ms_per_step": {}, "ratio": {"of": f"{top} / {bottom}",
                                                             **summary(ratios), "rounds": ratios}}
    for arm, values in rounds.items():
        ms = [1000 * v for v in values]
        report["ms_per_step"][arm] = {**summary(ms), "rounds": ms}
        print(f"{arm:<14} {statistics.median(ms):8.1f} ms a step, range [{min(ms):.1f}, {max(ms):.1f}] over "
              f"{len(ms)} rounds")
    print(f"{top} / {bottom}: {statistics.median(ratios):.2f}x a step (median of {len(ratios)} rounds, range "
          f"[{min(ratios):.2f}, {max(ratios):.2f}])")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
