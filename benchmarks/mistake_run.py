"""What the classic attention mistake costs in training: part 1's first model, trained twice in a student tree.

    python benchmarks/mistake_run.py                      # part1 tree, 2000 SST examples, 2 epochs, seed 11711
    python benchmarks/mistake_run.py --train 16 --epochs 1 --out /tmp/mistake.json     # a smoke run

The tree (assignments.make, profile --profile) gets the reference laid over its stubs; a copy of it gets attention()
written with the scores divided by sqrt(H) = sqrt(nh * hs), the hidden size, instead of sqrt(hs) (the mistake
assignments/mistakes.py names, scale="H"), as a student would write it. Both trees then run the handout's first
training command with the same seed and the same slice of SST (--max-train-examples, --epochs) and --attention eager,
so that the tree's own attention() runs. Prints both dev accuracies with the seed, the slice, the machine (CPU model
and flags, threads, torch) and the commit, and writes them as JSON (default benchmarks/results/mistake_run.json).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from tree_env import first_training_command, lay_reference, student_files, with_function, write_tree

SQRT_H = """
    scores = q @ k.transpose(-2, -1) / math.sqrt(nh * hs)   # the mistake: sqrt(H), H = nh * hs, not sqrt(hs)
    scores = scores + mask
    probs = F.dropout(scores.softmax(dim=-1), dropout_p, training)
    return (probs @ v).transpose(1, 2).reshape(B, T, nh * hs)
"""
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "fma")


def machine() -> dict:
    """The CPU model and the flags that matter to torch's kernels, the cores, threads and versions."""
    import torch
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = re.search(r"^model name\s*:\s*(.+)$", info, re.MULTILINE)
    flags = set((re.search(r"^flags\s*:\s*(.+)$", info, re.MULTILINE) or re.match("()", "")).group(1).split())
    return {"cpu": model.group(1) if model else platform.processor(), "cpu_flags": [f for f in CPU_FLAGS if f in flags],
            "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
            "python": platform.python_version()}


def commit() -> str:
    """HEAD's commit, with '+dirty' when tracked files differ from it."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=ROOT, check=False).returncode != 0
    return head + ("+dirty" if dirty else "")


def train(tree: Path, cmd: list[str], run_dir: Path) -> dict:
    """Run cmd in tree with this interpreter; its best dev accuracy, the epoch and the wall time."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MINBERT_RUNS")}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, *cmd, "--run-dir", str(run_dir)], cwd=tree, env=env, capture_output=True,
                          text=True, check=False)
    seconds = time.perf_counter() - t0
    best = re.search(r"^best dev accuracy ([0-9.]+) at epoch (\d+)$", proc.stdout, re.MULTILINE)
    if proc.returncode or not best:
        sys.exit(f"`python {' '.join(cmd)}` in {tree} failed (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    epochs = re.findall(r"^epoch \d+/\d+: .*dev accuracy ([0-9.]+)", proc.stdout, re.MULTILINE)
    return {"dev_accuracy": float(best.group(1)), "best_epoch": int(best.group(2)),
            "dev_accuracy_per_epoch": [float(a) for a in epochs], "seconds": round(seconds, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python benchmarks/mistake_run.py", description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="part1", help="the student tree's profile (default part1)")
    ap.add_argument("--train", type=int, default=2000, help="SST training examples (default 2000)")
    ap.add_argument("--epochs", type=int, default=2, help="epochs (default 2)")
    ap.add_argument("--seed", type=int, default=11711, help="the training seed, the same for both runs")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "mistake_run.json")
    ap.add_argument("--keep", type=Path, metavar="DIR", help="build the trees in DIR and keep them (default: a temp dir)")
    args = ap.parse_args(argv)
    base = args.keep or Path(tempfile.mkdtemp(prefix="minbert-mistake-"))
    try:
        correct = base / "correct"
        lay_reference(correct, student_files(args.profile, write_tree(correct, args.profile, data=True)))
        mistake = base / "mistake"
        shutil.copytree(correct, mistake)
        with_function(mistake, "minbert/model.py", "attention", SQRT_H)
        cmd = [*first_training_command((correct / "assignments" / "README.md").read_text()),
               "--max-train-examples", str(args.train), "--epochs", str(args.epochs), "--seed", str(args.seed),
               "--attention", "eager", "--predictions-dir", "predictions", "--no-progress"]
        runs = {}
        for name, tree in (("correct", correct), ("scores / sqrt(H)", mistake)):
            runs[name] = train(tree, cmd, base / f"run-{tree.name}")
            print(f"{name:<18} dev accuracy {runs[name]['dev_accuracy']:.4f} (epochs: "
                  f"{runs[name]['dev_accuracy_per_epoch']}), {runs[name]['seconds']:.0f} s", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    result = {"benchmark": "mistake_run", "command": "python " + " ".join(cmd), "profile": args.profile,
              "seed": args.seed, "train_examples": args.train, "epochs": args.epochs,
              "mistake": "attention scores divided by sqrt(H) = sqrt(nh * hs) instead of sqrt(hs)", "runs": runs,
              "machine": machine(), "commit": commit(), "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    print(f"seed {args.seed}, {args.train} SST examples, {args.epochs} epochs; {result['machine']['cpu']} "
          f"({', '.join(result['machine']['cpu_flags'])}), commit {result['commit']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
