"""Pair order at prediction time: a trained multitask model's dev Quora accuracy and STS Pearson r with each pair
as given (s1, s2), swapped (s2, s1), and as the mean of the two outputs (what --symmetric-pairs predicts).

The model is the best epoch kept in a tasks.multitask checkpoint (its design, pooling and head settings are read
from the checkpoint), so the three rows are paired: the same weights, only the pair order differs. It also
prints the overall score with and without the mean, given the checkpoint's own dev SST accuracy.

    python benchmarks/pair_order.py checkpoints/multitask-cross-encoder-round-robin-full-model.pt
    python benchmarks/pair_order.py CHECKPOINT --json benchmarks/results/pair-order.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import minbert
from minbert.multitask import MultitaskBert, MultitaskConfig
from tasks.core.checkpoints import load_checkpoint
from tasks.core.data import TASKS
from tasks.core.evaluation import accuracy, overall_score, pearson
from tasks.multitask import outputs
from tasks.multitask.data import Encoded, load


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", help="a checkpoint written by python -m tasks.multitask")
    p.add_argument("--data-dir", default="data", help="where quora-dev.csv and sts-dev.csv are (default data)")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", default=None, help="also write the figures to this file")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    state = load_checkpoint(args.checkpoint)
    cfg = state["config"]
    model = MultitaskBert(minbert.load_pretrained(cfg["model"]), MultitaskConfig(
        cfg["design"], cfg["pooling"], cfg["head_hidden"], cfg["dropout"], similarity_bias=cfg["sts_head_bias"]))
    model.load_state_dict(state["best_state"])
    model.eval()
    tokenizer = minbert.Tokenizer.from_pretrained(cfg["model"], max_length=cfg.get("max_length"))
    best = state["history"][state["best_epoch"] - 1]
    result: dict = {"checkpoint": args.checkpoint, "seed": cfg.get("seed"), "best_epoch": state["best_epoch"],
                    "dev_sst_accuracy": best["dev_sst_accuracy"]}
    for task in ("para", "sts"):
        data = load(task, "dev", TASKS[task].path(args.data_dir, "dev"), tokenizer)
        labels = [r.label for r in data.records]
        given = outputs(model, data, args.batch_size, torch.device("cpu"))
        swapped = outputs(model, Encoded(task, "dev", data.records, data.ids2, data.ids), args.batch_size,
                          torch.device("cpu"))                     # each pair's sentences in the other order
        for name, y in (("given", given), ("swapped", swapped), ("mean", (given + swapped) / 2)):
            s = accuracy((y > 0).long().tolist(), labels) if task == "para" else pearson(y.tolist(), labels)
            result[f"{task}_{name}"] = s
            print(f"{task:4s} {name:7s} {s:.4f}")
    for name in ("given", "mean"):
        result[f"overall_{name}"] = overall_score(best["dev_sst_accuracy"], result[f"para_{name}"],
                                                  result[f"sts_{name}"])
        print(f"overall, pairs {name}: {result[f'overall_{name}']:.4f} (SST {best['dev_sst_accuracy']:.4f})")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
