"""SST dev accuracy of tasks.classifier on the offline MiniLM: full-model and last-linear-layer fine-tuning.

    python benchmarks/sst_accuracy.py [--modes full-model last-linear-layer] [--epochs 3] [--device cpu]

Each mode runs `python -m tasks.classifier --task sst --fine-tune-mode MODE --epochs 3 --device cpu`
(train on ids-sst-train, select on ids-sst-dev) and prints dev accuracy and wall time per epoch;
the per-run summaries go to runs/sst_accuracy/{mode}.json. Not run by the tests.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from tasks.classifier import parse_settings, run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modes", nargs="+", default=["full-model", "last-linear-layer"])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", default="runs/sst_accuracy")
    p.add_argument("extra", nargs="*", help="further tasks.classifier flags, after --")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for mode in args.modes:
        argv = ["--task", "sst", "--fine-tune-mode", mode, "--epochs", str(args.epochs), "--device", args.device,
                "--predictions-dir", str(out / mode), "--checkpoint", str(out / f"{mode}.pt"), *args.extra]
        print("python -m tasks.classifier " + " ".join(argv), flush=True)
        t0 = time.perf_counter()
        summary = run(parse_settings(argv))
        summary["wall_seconds"] = time.perf_counter() - t0
        summary["argv"] = argv
        (out / f"{mode}.json").write_text(json.dumps(summary, indent=2))
        for h in summary["history"]:
            print(f"{mode} epoch {h['epoch']}: dev accuracy {h['dev_accuracy']:.4f}, train loss {h['train_loss']:.4f}, "
                  f"{h['train_seconds']:.0f}s training + {h['eval_seconds']:.0f}s dev eval", flush=True)
        print(f"{mode}: best dev accuracy {summary['dev_accuracy']:.4f} (epoch {summary['best_epoch']}), "
              f"{summary['wall_seconds']:.0f}s in all", flush=True)


if __name__ == "__main__":
    main()
