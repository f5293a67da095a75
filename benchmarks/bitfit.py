"""BitFit vs full fine-tuning: training-step time and optimizer-state memory, same batch, same run.

    PYTHONPATH=. python benchmarks/bitfit.py [--batch-size 32 --rounds 5 --steps 4 --threads 2]

The offline MiniLM on CPU, SST sentences, a linear 5-way head on the pooled output, minbert's AdamW.
The two set-ups alternate in rounds so that other load on the machine hits both alike; the median step
time is reported. Also prints trainable_report for bert-base-uncased's configuration (built on the meta
device, no weights) and for MiniLM. Targets: BitFit steps >= 1.4x faster; optimizer state < 1% of full.
"""

from __future__ import annotations

import argparse
import copy
import csv
import statistics
import time
from pathlib import Path

import torch
from torch import nn

import minbert
from minbert import bitfit, bitfit_report
from minbert.checkpoint import on_meta

ROOT = Path(__file__).resolve().parents[1]


def sst_sentences(n: int) -> tuple[list[str], torch.Tensor]:
    with open(ROOT / "data" / "ids-sst-train.csv", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))[:n]
    return [r["sentence"] for r in rows], torch.tensor([int(r["sentiment"]) for r in rows])


class Setup:
    """An encoder, a head and an AdamW over whatever is trainable."""

    def __init__(self, model: minbert.BertModel, mode: str, lr: float):
        self.model = copy.deepcopy(model).train()
        torch.manual_seed(0)
        self.head = nn.Linear(model.config.hidden_size, 5)
        if mode == "bitfit":
            bitfit.freeze(self.model, "all")
        else:
            self.model.requires_grad_(True)
        params = [p for p in [*self.model.parameters(), *self.head.parameters()] if p.requires_grad]
        self.opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01, foreach=False)

    def step(self, batch, labels) -> float:
        out = self.model(batch.input_ids, batch.attention_mask, batch.token_type_ids)
        loss = nn.functional.cross_entropy(self.head(out.pooler_output), labels)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss.item()

    def weight_grads(self) -> int:
        """How many non-bias encoder tensors got a gradient in the last backward (BitFit: must be 0)."""
        return sum(p.grad is not None for n, p in self.model.named_parameters() if not bitfit.term_of(n))

    def state_bytes(self) -> int:
        return sum(v.numel() * v.element_size() for s in self.opt.state.values()
                   for v in s.values() if torch.is_tensor(v))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=4, help="steps per set-up per round")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    with on_meta():
        base = minbert.BertModel(minbert.BertConfig())
    for terms in ("all", "bq,bm2"):
        bitfit.freeze(base, terms)
        print(f"\ntrainable_report, bert-base-uncased configuration, terms={terms}:\n{bitfit_report.trainable_report(base)}")
    model = minbert.load_pretrained("minilm")
    tok = minbert.Tokenizer.from_pretrained("minilm")
    probe = copy.deepcopy(model)
    for terms in ("all", "bq,bm2"):
        bitfit.freeze(probe, terms)
        print(f"\ntrainable_report, MiniLM (minilm), terms={terms}:\n{bitfit_report.trainable_report(probe)}")

    sentences, labels = sst_sentences(args.batch_size)
    batch = tok(sentences)
    print(f"\nbatch: {tuple(batch.input_ids.shape)} tokens (B, T); torch threads {torch.get_num_threads()}")
    setups = {"full": Setup(model, "full", 2e-5), "bitfit": Setup(model, "bitfit", 1e-3)}
    for s in setups.values():  # warm-up, and the optimizer state exists after the first step
        for _ in range(2):
            s.step(batch, labels)
    times = {k: [] for k in setups}
    for r in range(args.rounds):
        order = list(setups) if r % 2 == 0 else list(reversed(setups))
        for k in order:
            for _ in range(args.steps):
                t0 = time.perf_counter()
                setups[k].step(batch, labels)
                times[k].append(time.perf_counter() - t0)

    full, bf = setups["full"], setups["bitfit"]
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"\n{'':<8}{'median step':>13}{'min step':>10}{'optimizer state':>18}{'weight grads':>14}")
    for k, s in setups.items():
        print(f"{k:<8}{med[k] * 1e3:>10.0f} ms{min(times[k]) * 1e3:>7.0f} ms{s.state_bytes() / 2**20:>14.2f} MiB"
              f"{s.weight_grads():>14}")
    speedup = med["full"] / med["bitfit"]
    ratio = bf.state_bytes() / full.state_bytes()
    print(f"\nBitFit step speed-up: {speedup:.2f}x (target >= 1.4x)  "
          f"optimizer state: {100 * ratio:.3f}% of full (target < 1%)  "
          f"steps timed: {len(times['full'])} each")
    assert bf.weight_grads() == 0, "BitFit computed a weight gradient"


if __name__ == "__main__":
    main()
