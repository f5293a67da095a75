"""Where a cross-encoder training step's time goes, against this CPU's own fp32 matmul rate, and what freezing the
word-embedding table saves.

One batch of Quora pairs (the main job's task with the longest inputs; `--batch-size`, default 16 as make train)
through the multitask cross-encoder, a full training step (zero_grad, forward, loss, backward, AdamW step) timed in
parts, medians of `--steps` steps after `--warmup`:
    embedding          the embedding module (word + position + segment, LayerNorm)
    layer i attention  Q, K, V projections, attention, Wm1 and the first add-and-norm      (timed by re-running
    layer i FFN        Wm2, GELU, Wm3 and the second add-and-norm                           each layer's equations
                                                                                            on its recorded input)
    heads              pooling and the task head; the loss
    backward           loss.backward() as a whole
    optimizer          the AdamW step
The rate: GFLOP/s of a large fp32 torch.mm (`--mm-size`) in the same run. The step's matrix-product FLOPs
(2 m n k per product, backward twice the forward) divided by that rate is the time the step would take at the
CPU's matmul peak: what is left to win inside the step. What remains beyond (optimizer, elementwise work,
the embedding table's dense gradient) only doing less work can win; the last lines time the same step with
the word-embedding table frozen (no gradient, no AdamW update for its vocab x H entries).

    python benchmarks/step_profile.py --model minilm --batch-size 16 --steps 10 --optimizer fused
    python benchmarks/step_profile.py --model minilm --steps 1 --warmup 0 --batch-size 2     # a quick check
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import minbert
from minbert.model import gelu, layer_norm
from minbert.multitask import MultitaskBert, MultitaskConfig, paraphrase_loss
from minbert.pooling import pool
from tasks.core.recipe import make_optimizer
from tasks.multitask import collate, load


def matmul_rate(n: int, repeats: int = 5) -> float:
    """GFLOP/s of an (n, n) @ (n, n) fp32 torch.mm, the best of `repeats`."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    best = min(_timed(lambda: torch.mm(a, b)) for _ in range(repeats))
    return 2 * n ** 3 / best / 1e9


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def layer_parts(layer, x: torch.Tensor, mask: torch.Tensor) -> tuple[float, float]:
    """Seconds of a layer's attention half and FFN half, its equations re-run on its input x (B, T, H) with grad."""
    B, T, _ = x.shape
    t0 = time.perf_counter()
    Q, K, V = (layer.split_heads(F.linear(x, W, b)) for W, b in ((layer.Wq, layer.bq), (layer.Wk, layer.bk),
                                                                  (layer.Wv, layer.bv)))   # (B, nh, T, hs)
    h1 = layer.attend(Q, K, V, mask, layer.p_attn, True)                                   # (B, T, H)
    keep = (mask == 0).view(B, T)
    xs, h1 = x[keep], h1[keep]                                                             # (N, H)
    h3 = layer_norm(F.dropout(F.linear(h1, layer.Wm1, layer.bm1), layer.p, True) + xs, layer.gLN1, layer.bLN1,
                    layer.eps)
    t1 = time.perf_counter()
    h5 = F.dropout(F.linear(gelu(F.linear(h3, layer.Wm2, layer.bm2)), layer.Wm3, layer.bm3), layer.p, True)
    layer_norm(h5 + h3, layer.gLN2, layer.bLN2, layer.eps)
    return t1 - t0, time.perf_counter() - t1


def step_flops(config, tokens: int, B: int, T: int) -> float:
    """Matrix-product FLOPs of a training step: 2 m n k per product forward, twice that backward."""
    H, I, L = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    per_layer = 2 * tokens * (4 * H * H + 2 * H * I) + 2 * 2 * B * T * T * H   # projections + QK^T and AV (padded)
    return 3 * L * per_layer


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="minilm")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--optimizer", choices=("minbert", "fused"), default="fused")
    p.add_argument("--mm-size", type=int, default=2048, help="side of the square matmul that sets the rate")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--data", default=str(ROOT / "data" / "quora-train.csv"))
    args = p.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    tokenizer = minbert.Tokenizer.from_pretrained(args.model)
    data = load("para", "train", args.data, tokenizer, limit=args.batch_size, seed=0)
    batch = collate(data, range(len(data.records)))
    torch.manual_seed(0)
    base = MultitaskBert(minbert.load_pretrained(args.model), MultitaskConfig(design="cross-encoder")).train()
    rate = matmul_rate(args.mm_size)

    inputs: dict[int, tuple] = {}
    for i, layer in enumerate(base.bert.layers):
        layer.register_forward_pre_hook(lambda m, a, i=i: inputs.__setitem__(i, (a[0].detach(), a[1])))

    def profile(model: MultitaskBert, parts: bool) -> dict[str, float]:
        opt = make_optimizer([q for q in model.parameters() if q.requires_grad], 1e-5, 0.0, args.optimizer)
        times: dict[str, list[float]] = defaultdict(list)
        for s in range(args.warmup + args.steps):
            t = {}
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            x = model.inputs("para", batch)
            t1 = time.perf_counter()
            h = model.embed(x)
            t2 = time.perf_counter()
            out = model.bert(x[0].input_ids, x[0].attention_mask, x[0].token_type_ids, embeddings=h[0])
            t3 = time.perf_counter()
            vec = pool(out.last_hidden_state, x[0].attention_mask, out.pooler_output, "mean")   # (B, H)
            loss = paraphrase_loss(model.head["para"](vec).squeeze(-1), batch["labels"])    # as model.loss("para")
            t4 = time.perf_counter()
            loss.backward()
            t5 = time.perf_counter()
            opt.step()
            t6 = time.perf_counter()
            t.update(inputs=t1 - t0, embedding=t2 - t1, encoder=t3 - t2, heads=t4 - t3, backward=t5 - t4,
                     optimizer=t6 - t5, step=t6 - t0)
            if parts:
                for i, layer in enumerate(model.bert.layers):
                    t[f"layer {i + 1} attention"], t[f"layer {i + 1} FFN"] = layer_parts(layer, *inputs[i])
            if s >= args.warmup:
                for k, v in t.items():
                    times[k].append(v)
        return {k: statistics.median(v) for k, v in times.items()}

    full = profile(base, parts=True)
    frozen_model = copy.deepcopy(base)
    frozen_model.bert.embeddings.word.weight.requires_grad_(False)
    frozen = profile(frozen_model, parts=False)

    ids, m, _ = base.inputs("para", batch)[0]
    B, T = ids.shape
    tokens = int(m.sum())
    flops = step_flops(base.bert.config, tokens, B, T)
    print(f"{args.model} cross-encoder, {B} Quora pairs, {tokens} real tokens of {B * T} (T = {T}), "
          f"{torch.get_num_threads()} threads, optimizer {args.optimizer}; median of {args.steps} steps")
    print(f"this CPU's fp32 matmul rate: {rate:.1f} GFLOP/s (torch.mm {args.mm_size}^2)")
    print(f"{'part':24s} {'ms':>9s} {'share':>7s}")
    for k in ("inputs", "embedding", "encoder", "heads", "backward", "optimizer", "step"):
        print(f"{k:24s} {full[k] * 1000:9.1f} {full[k] / full['step']:7.1%}")
    for k in sorted((k for k in full if k.startswith("layer")), key=lambda k: (int(k.split()[1]), "FFN" in k)):
        print(f"  {k:22s} {full[k] * 1000:9.1f}  (re-run alone)")
    ideal = flops / (rate * 1e9)
    print(f"matrix-product work of the step: {flops / 1e9:.2f} GFLOP = {ideal * 1000:.1f} ms at the matmul rate; "
          f"forward + backward took {(full['encoder'] + full['backward']) * 1000:.1f} ms "
          f"({flops / (full['encoder'] + full['backward']) / 1e9:.1f} GFLOP/s achieved)")
    print(f"word-embedding table frozen ({base.bert.embeddings.word.weight.numel():,} of "
          f"{sum(q.numel() for q in base.parameters()):,} parameters): step {frozen['step'] * 1000:.1f} ms, "
          f"backward {frozen['backward'] * 1000:.1f} ms, optimizer {frozen['optimizer'] * 1000:.1f} ms; "
          f"{full['step'] / frozen['step']:.2f}x faster than the full step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
