"""A training step on one epoch of the main job's real batch mix: how much padding it computes, its matrix-product
work, its time and rate against torch.mm's; for this tree, or for two commits interleaved in one run.

The batches are make train's: tasks.multitask.data.load and EpochBatches on data/ids-sst-train.csv, quora-train.csv
and sts-train.csv, round-robin, batch 16, seed 11711, 2 epochs (--epoch picks which), the cross-encoder's joined
pairs; length-grouped as the run groups them, and at random (--no-bucket's batches) for the padding figures.
    positions per real token   B x T summed over the epoch's batches, over its real tokens
    T^2 work                   sum of B T^2 over sum of n^2 (n a sequence's real length): the work of the
                               attention scores, their softmax and dropout, against what the real lengths need
    matrix-product FLOPs       per step, on real tokens only: per layer and sequence, 2n(4H^2 + 2HI) for the
                               projections and the FFN, 4n^2 H for QK^T and AV, the task head; backward twice forward
    time per step              the mean over K batches drawn at random from the epoch (--batches, --sample-seed),
                               after --warmup steps on others, each round in a fresh process; median and range
                               over --rounds. A step: zero_grad, the task's loss, backward, clipping at 1.0,
                               torch's fused AdamW (make train's --optimizer fused, fp32)
    epoch time                 that mean times the epoch's batches: training steps only (no data, no dev eval)
    GFLOP/s                    the sample's FLOPs over its time, and torch.mm's (--mm-size square, fp32) measured
                               in the same processes, at the same thread count

--compare REV extracts REV's minbert/ (git archive) into a temporary directory and times the same batches with it;
each round runs both trees, in a random order, in fresh processes, and the ratio is taken per round; --rev REV
times REV's minbert/ in place of this tree's files; --compare-env K=V,... adds the main tree run with those environment
variables (glibc's malloc settings, say) as another arm. Each worker also reports its CPU time per step, user and
system, and its page faults per step (getrusage). The batches are made once, by this tree's tasks/, so only the
model differs.

    python benchmarks/epoch_speed.py --batches 60 --rounds 5 --compare 116f628 --out benchmarks/results/epoch.json
    python benchmarks/epoch_speed.py --rev 96e556a --compare 116f628 --threads 2                # two commits
    python benchmarks/epoch_speed.py --batches 3 --rounds 1 --warmup 1 --limit 200     # a quick check
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = {"sst": "ids-sst-train.csv", "para": "quora-train.csv", "sts": "sts-train.csv"}
HEAD_HIDDEN = 512                                   # MultitaskConfig.head_hidden
HEAD_OUT = {"sst": 5, "para": 1, "sts": 1}


def batch_lengths(batch: dict) -> list[int]:
    """Each sequence's real length in a collated batch: the sentence, or the joined pair [CLS] a [SEP] b [SEP]."""
    if "attention_mask" in batch:
        return batch["attention_mask"].sum(1).tolist()
    return (batch["attention_mask_1"].sum(1) + batch["attention_mask_2"].sum(1) - 1).tolist()


def padding_stats(batches: Sequence[Sequence[int]]) -> dict:
    """Padded positions per real token and the T^2 work against the ideal, for batches given as real lengths."""
    real = sum(sum(b) for b in batches)
    padded = sum(len(b) * max(b) for b in batches)
    square = sum(len(b) * max(b) ** 2 for b in batches)
    ideal = sum(n * n for b in batches for n in b)
    return {"batches": len(batches), "real_tokens": real, "positions": padded,
            "positions_per_real_token": padded / real, "t2_work_ratio": square / ideal}


def step_flops(lengths: Sequence[int], task: str, H: int, I: int, L: int) -> float:
    """Matrix-product FLOPs of a training step on a batch's real tokens (2 m n k a product; backward twice forward)."""
    encoder = sum(L * (2 * n * (4 * H * H + 2 * H * I) + 4 * n * n * H) for n in lengths)
    head = len(lengths) * 2 * (H * HEAD_HIDDEN + HEAD_HIDDEN * HEAD_OUT[task])
    return 3.0 * (encoder + head)


def summary(values: Sequence[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def cpu_info() -> dict:
    """The CPU's model name and whether it has native bf16 (avx512_bf16 or AMX), from lscpu or /proc/cpuinfo."""
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        model = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("Model name")), "")
    except (OSError, subprocess.CalledProcessError):
        text, model = "", ""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    flags = set((text + " " + info).split())
    return {"model": model or next((ln.split(":", 1)[1].strip() for ln in info.splitlines()
                                    if ln.startswith("model name")), None),
            "cores": os.cpu_count(), "avx2": "avx2" in flags, "avx512f": "avx512f" in flags,
            "avx512_bf16": "avx512_bf16" in flags, "amx_bf16": "amx_bf16" in flags}


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def extract(rev: str, into: Path) -> Path:
    """REV's minbert/ package, written under `into` (git archive: no worktree, nothing written to .git)."""
    into.mkdir(parents=True, exist_ok=True)
    tar_path = into / "tree.tar"
    with open(tar_path, "wb") as f:
        subprocess.run(["git", "archive", "--format=tar", rev, "minbert"], cwd=ROOT, stdout=f, check=True)
    with tarfile.open(tar_path) as tar:
        tar.extractall(into, filter="data")
    return into


# ---------------------------------------------------------------- the worker: one tree, one round, one process

def worker(spec: dict) -> dict:
    """Time a training step on each batch of spec["batches"] with spec["tree"]'s minbert; torch.mm's rate."""
    sys.path.insert(0, spec["tree"])
    import torch

    import minbert
    from minbert.multitask import MultitaskBert, MultitaskConfig
    if not Path(minbert.__file__).resolve().is_relative_to(Path(spec["tree"]).resolve()):
        raise RuntimeError(f"imported {minbert.__file__}, not the tree {spec['tree']}")
    if spec["threads"]:
        torch.set_num_threads(spec["threads"])
    batches = torch.load(spec["batches"], weights_only=True)
    torch.manual_seed(spec["seed"])
    model = MultitaskBert(minbert.load_pretrained(spec["model"]),
                          MultitaskConfig(design="cross-encoder", similarity_bias=2.5)).train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=5e-5, weight_decay=0.0, fused=True)

    def step(batch: dict) -> float:
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        model.loss(batch["task"], batch).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return time.perf_counter() - t0

    for batch in batches["warmup"]:
        step(batch)
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    times = [step(batch) for batch in batches["timed"]]
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    k = len(times)
    n = spec["mm_size"]
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    best = math.inf
    for _ in range(5):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return {"times": times, "mm_gflops": 2 * n ** 3 / best / 1e9, "threads": torch.get_num_threads(),
            "user_s": (r1.ru_utime - r0.ru_utime) / k, "sys_s": (r1.ru_stime - r0.ru_stime) / k,
            "page_faults": (r1.ru_minflt - r0.ru_minflt) / k,
            "minbert": minbert.__file__, "torch": torch.__version__}


def run_worker(spec: dict, extra_env: dict[str, str]) -> dict:
    env = dict(os.environ, PYTHONPATH=spec["tree"], TOKENIZERS_PARALLELISM="false", **extra_env)
    out = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], capture_output=True, text=True,
                         env=env, cwd=spec["tree"], check=False)
    if out.returncode != 0:
        raise RuntimeError(f"worker for {spec['tree']} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- the batches and the rounds

def load_train(args: argparse.Namespace) -> dict:
    """The three training files, tokenised once (this tree's tasks/)."""
    import minbert
    from tasks.multitask.data import load
    tokenizer = minbert.Tokenizer.from_pretrained(args.model)
    return {t: load(t, "train", Path(args.data) / f, tokenizer, args.limit, args.seed) for t, f in FILES.items()}


def epoch_batches(train: dict, args: argparse.Namespace, bucket: bool) -> list[dict]:
    """The epoch's collated batches in the run's order, length-grouped (bucket) or not."""
    from minbert.schedules import TaskSchedule
    from tasks.multitask.data import EpochBatches
    eb = EpochBatches(train, TaskSchedule("round-robin"), args.batch_size, args.epoch, args.epochs, args.seed,
                      bucket=bucket)
    return [eb[i] for i in range(len(eb))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", type=int, default=60, help="K: batches timed per round, drawn from the epoch")
    p.add_argument("--warmup", type=int, default=5, help="steps before the timed ones (other batches of the epoch)")
    p.add_argument("--rounds", type=int, default=5, help="0: the padding and FLOP figures only, no timing")
    p.add_argument("--compare", metavar="REV", help="also time REV's minbert, interleaved with this tree's")
    p.add_argument("--rev", metavar="REV", help="time REV's minbert in place of this tree's files as they are")
    p.add_argument("--compare-env", metavar="K=V,K=V", help="also time the main tree with these environment "
                   "variables set (e.g. glibc's MALLOC_MMAP_THRESHOLD_), interleaved")
    p.add_argument("--threads", type=int, default=None, help="torch threads in the workers (default: torch's)")
    p.add_argument("--sample-seed", type=int, default=0, help="seeds the sample of batches and the round orders")
    p.add_argument("--seed", type=int, default=11711, help="make train's seed: the batches' order")
    p.add_argument("--epoch", type=int, default=0, help="which epoch of the run (0-based)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--limit", type=int, default=None, help="examples per task (a quick check; default: all)")
    p.add_argument("--model", default="minilm")
    p.add_argument("--mm-size", type=int, default=2048)
    p.add_argument("--data", default=str(ROOT / "data"))
    p.add_argument("--out", help="write the results as JSON")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0

    sys.path.insert(0, str(ROOT))
    import torch

    import minbert
    config = minbert.load_pretrained(args.model).config
    H, I, L = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    train = load_train(args)
    bucketed = epoch_batches(train, args, bucket=True)
    stats = {"bucketed": padding_stats([batch_lengths(b) for b in bucketed]),
             "unbucketed": padding_stats([batch_lengths(b) for b in epoch_batches(train, args, bucket=False)])}
    flops = [step_flops(batch_lengths(b), b["task"], H, I, L) for b in bucketed]
    stats["flops_per_step"] = statistics.fmean(flops)

    rng = random.Random(args.sample_seed)
    picked = rng.sample(range(len(bucketed)), min(len(bucketed), args.batches + args.warmup))
    timed, warm = picked[:args.batches], picked[args.batches:]
    sample_flops = sum(flops[i] for i in timed)
    main_name = args.rev or "this tree"
    cpu = cpu_info()
    print(f"CPU: {cpu['model']}, {cpu['cores']} cores, avx512_bf16 {'yes' if cpu['avx512_bf16'] else 'no'}; "
          f"torch {torch.__version__}")
    for name in ("bucketed", "unbucketed"):
        s = stats[name]
        print(f"epoch {args.epoch + 1} of {args.epochs}, {name:10s}: {s['batches']} batches, {s['real_tokens']:,} real "
              f"tokens, {s['positions_per_real_token']:.3f} positions per real token, T^2 work "
              f"{s['t2_work_ratio']:.2f}x the real lengths'")
    print(f"matrix-product work per step on real tokens: {stats['flops_per_step'] / 1e9:.2f} GFLOP (epoch mean); "
          f"the {len(timed)} timed batches: {sample_flops / len(timed) / 1e9:.2f}")

    with tempfile.TemporaryDirectory(prefix="epoch_speed_") as tmp:
        tmp = Path(tmp)
        if args.rev:
            trees = {args.rev: str(extract(args.rev, tmp / "rev"))}
            described = {args.rev: git("rev-parse", "--short", args.rev)}
        else:
            trees = {"this tree": str(ROOT)}
            described = {"this tree": git("rev-parse", "--short", "HEAD") + (
                " + uncommitted minbert/" if git("status", "--porcelain", "--", "minbert") else "")}
        envs = {name: {} for name in trees}
        if args.compare:
            trees[args.compare] = str(extract(args.compare, tmp / "compare"))
            described[args.compare], envs[args.compare] = git("rev-parse", "--short", args.compare), {}
        if args.compare_env:
            name = f"{main_name} + env"
            envs[name] = dict(kv.split("=", 1) for kv in args.compare_env.split(","))
            trees[name], described[name] = trees[main_name], f"{described[main_name]}, {args.compare_env}"
        torch.save({"timed": [bucketed[i] for i in timed], "warmup": [bucketed[i] for i in warm]},
                   tmp / "batches.pt")
        results: dict[str, list[dict]] = {name: [] for name in trees}
        for r in range(args.rounds):
            order = list(trees)
            rng.shuffle(order)
            for name in order:
                spec = {"tree": trees[name], "batches": str(tmp / "batches.pt"), "threads": args.threads,
                        "model": args.model, "mm_size": args.mm_size, "seed": args.seed}
                res = run_worker(spec, envs[name])
                results[name].append(res)
                print(f"round {r + 1}/{args.rounds} {name} ({described[name]}): "
                      f"{statistics.fmean(res['times']) * 1000:.1f} ms a step (CPU user {res['user_s'] * 1000:.0f} "
                      f"ms, sys {res['sys_s'] * 1000:.0f} ms, {res['page_faults']:.0f} page faults), "
                      f"torch.mm {res['mm_gflops']:.0f} GFLOP/s")

    epoch_steps = len(bucketed)
    report: dict = {"settings": {k: v for k, v in vars(args).items() if k != "worker"}, "cpu": cpu,
                    "torch": torch.__version__, "model": {"H": H, "I": I, "L": L}, "stats": stats,
                    "timed_batches": timed, "timed_flops": sample_flops, "trees": {}}
    for name, rounds in results.items() if args.rounds else ():
        step = [statistics.fmean(res["times"]) for res in rounds]
        rates = [sample_flops / sum(res["times"]) / 1e9 for res in rounds]
        mm = [res["mm_gflops"] for res in rounds]
        t = summary(step)
        report["trees"][name] = {"commit": described[name], "step_seconds": t, "epoch_seconds": {
            k: v * epoch_steps if k != "n" else v for k, v in t.items()}, "gflops": summary(rates),
            "mm_gflops": summary(mm), "share_of_mm": statistics.median(rates) / statistics.median(mm),
            "sys_seconds": summary([res["sys_s"] for res in rounds]),
            "page_faults": summary([res["page_faults"] for res in rounds]), "env": envs[name],
            "threads": rounds[0]["threads"], "rounds": rounds}
        print(f"{name} ({described[name]}): step {t['median'] * 1000:.1f} ms [{t['min'] * 1000:.1f}, "
              f"{t['max'] * 1000:.1f}] over {t['n']} rounds; epoch {t['median'] * epoch_steps / 60:.1f} min "
              f"({epoch_steps} steps); {statistics.median(rates):.1f} GFLOP/s on real tokens, torch.mm "
              f"{statistics.median(mm):.1f} ({report['trees'][name]['share_of_mm']:.0%}); "
              f"threads {rounds[0]['threads']}")
    for other in list(results)[1:] if args.rounds else ():
        ratio = [statistics.fmean(b["times"]) / statistics.fmean(a["times"])
                 for a, b in zip(results[main_name], results[other])]
        report.setdefault("speedup", {})[other] = summary(ratio)
        print(f"{main_name} against {other}: {statistics.median(ratio):.3f}x faster a step (median of "
              f"{len(ratio)} paired rounds, range [{min(ratio):.3f}, {max(ratio):.3f}])")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
