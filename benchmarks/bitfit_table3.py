"""A small reproduction of BitFit's Table 3 (Ben-Zaken et al., 2022) on SST with the offline MiniLM.

    PYTHONPATH=. python benchmarks/bitfit_table3.py --seeds 1,2,3 --train-examples 0 --epochs 1 --out runs/bitfit_table3

Runs `python -m tasks.classifier` once per row and seed of --seeds, same budget, each logging to
OUT/<row>-s<seed>.log. --train-examples N trains on N rows drawn at random (seeded per seed) from the SST
training file, written to OUT/sst-train-sample-s<seed>.csv (the file is ordered by sentiment in long runs, so
its first N rows would be a skewed sample), so that every row of a seed reads the same file (0: the whole
file). The random controls draw from the layers and the pooler only (as the reference code's rand_row_col;
rand_row_col_ref is that code's own per-matrix scheme);
rand_uniform_emb and rand_row_col_emb, which draw from the embedding tables too, run only when --rows names
them. After every run OUT/results.json (paired_runs-style: "row", "seed", "dev": {"accuracy"}, and the commit and CPU it ran on) and
OUT/table3.md are rewritten, so an interrupted run keeps the runs that finished (and skips them when run again);
table3.md ends with benchmarks/stats.py's table: each row's mean and sd over seeds and its paired difference
against --baseline (default "bitfit all") with a 95% interval. At the end it draws the paper's Figure 1
(mean |b0 - bF| per term and layer) for the full fine-tuning and BitFit `all` runs of the first seed into
benchmarks/figures/.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import torch

import minbert
from minbert import bitfit, bitfit_report
from tasks.core.bitfit_figure import plot_bias_change

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import stats
from paired_runs import provenance

ROWS = {  # row name -> classifier flags (learning rates: each mode's default unless given here)
    "full-model": ["--fine-tune-mode", "full-model"],
    "bitfit all": ["--fine-tune-mode", "bitfit", "--bitfit-terms", "all"],
    "frozen": ["--fine-tune-mode", "frozen"],
    "rand_uniform": ["--fine-tune-mode", "rand_uniform"],
    "bitfit bq,bm2": ["--fine-tune-mode", "bitfit", "--bitfit-terms", "bq,bm2"],
    "bitfit bm2": ["--fine-tune-mode", "bitfit", "--bitfit-terms", "bm2"],
    "bitfit bq": ["--fine-tune-mode", "bitfit", "--bitfit-terms", "bq"],
    "rand_row_col": ["--fine-tune-mode", "rand_row_col"],
    "rand_row_col_ref": ["--fine-tune-mode", "rand_row_col_ref"],     # the reference code's per-matrix scheme
    "rand_uniform_emb": ["--fine-tune-mode", "rand_uniform_emb"],     # not by default: a weaker control
    "rand_row_col_emb": ["--fine-tune-mode", "rand_row_col_emb"],
}
DEFAULT_ROWS = [r for r in ROWS if not r.endswith("_emb")]


def slug(row: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", row.lower()).strip("-")


def run_row(row: str, seed: int, args: argparse.Namespace, out: Path) -> dict:
    name = f"{slug(row)}-s{seed}"
    cmd = [sys.executable, "-m", "tasks.classifier", "--task", "sst", *ROWS[row], "--epochs", str(args.epochs),
           "--seed", str(seed), "--batch-size", str(args.batch_size), "--no-progress",
           "--checkpoint", str(out / f"{name}.pt"), "--predictions-dir", str(out / f"pred-{name}")]
    if args.train_examples:
        cmd += ["--train-file", str(out / f"sst-train-sample-s{seed}.csv")]
    started = provenance()          # the commit and CPU this run's process starts on
    t0 = time.time()
    with open(out / f"{name}.log", "w") as log:
        log.write(" ".join(cmd) + "\n")
        log.flush()
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    text = (out / f"{name}.log").read_text()
    best = re.search(r"best dev accuracy ([0-9.]+) at epoch (\d+)", text)
    trains = re.search(r"trains ([0-9,]+) of ([0-9,]+) parameters; lr ([0-9.e-]+)", text)
    return {"row": row, "seed": seed, "rc": rc, "minutes": round((time.time() - t0) / 60, 1),
            "dev_accuracy": float(best.group(1)) if best else None,
            "dev": {"accuracy": float(best.group(1))} if best else {},
            "trainable": trains.group(1) if trains else None, "lr": trains.group(3) if trains else None,
            "log": str(out / f"{name}.log"), **started}


def sample_training_file(n: int, seed: int, out: Path) -> Path:
    """n rows of the SST training file drawn at random, in the same tab-separated format."""
    with open(ROOT / "data" / "ids-sst-train.csv", newline="") as f:
        header, *rows = list(csv.reader(f, delimiter="\t"))
    if n > len(rows):
        raise SystemExit(f"--train-examples {n}: the training file has only {len(rows)} rows")
    rows = random.Random(seed).sample(rows, n)
    path = out / f"sst-train-sample-s{seed}.csv"
    with open(path, "w", newline="") as f:
        csv.writer(f, delimiter="\t", lineterminator="\n").writerows([header, *rows])
    return path


def write_table(results: list[dict], out: Path, args: argparse.Namespace) -> str:
    title = (f"SST-5 dev accuracy, MiniLM, {args.train_examples or 'all'} training examples (random sample), "
             f"{args.epochs} epoch(s), batch {args.batch_size}, seeds {args.seeds}")
    lines = [title, "",
             "| row | seed | trainable (incl. head) | lr | dev accuracy | minutes |", "|---|---:|---:|---:|---:|---:|"]
    for r in results:
        acc = f"{100 * r['dev_accuracy']:.1f}" if r["dev_accuracy"] is not None else f"failed (rc {r['rc']})"
        lines.append(f"| {r['row']} | {r['seed']} | {r['trainable']} | {r['lr']} | {acc} | {r['minutes']} |")
    text = "\n".join(lines) + "\n"
    (out / "results.json").write_text(json.dumps(results, indent=1))
    rows: dict[str, dict[int, float]] = {}
    for r in results:  # failed runs (no dev figure) are listed above, left out of the statistics
        if r["dev"]:
            rows.setdefault(r["row"], {})[r["seed"]] = r["dev"]["accuracy"]
    if args.baseline in rows:
        text += "\nPaired over seeds (points):\n\n" + stats.markdown_table(rows, args.baseline, "accuracy") + "\n"
    (out / "table3.md").write_text(text)
    return text


def biases_from_checkpoint(path: Path) -> dict[str, torch.Tensor]:
    """The encoder biases of the best epoch in a classifier checkpoint (its `bert.` prefix dropped)."""
    state = torch.load(path, map_location="cpu", weights_only=True)["best_state"]
    return {k.removeprefix("bert."): v for k, v in state.items() if bitfit.term_of(k.removeprefix("bert."))}


def figures(out: Path, figdir: Path, seed: int) -> str:
    pretrained = minbert.load_pretrained("minilm")
    b0 = bitfit.bias_snapshot(pretrained)
    text = ""
    for row, fig in (("full-model", "bitfit_bias_change_full.png"), ("bitfit all", "bitfit_bias_change_bitfit.png")):
        ckpt = out / f"{slug(row)}-s{seed}.pt"
        if not ckpt.exists():
            text += f"\n{row}: no checkpoint at {ckpt}, no figure\n"
            continue
        tuned = minbert.BertModel(pretrained.config)
        tuned.load_state_dict({**pretrained.state_dict(), **biases_from_checkpoint(ckpt)})
        change = bitfit_report.bias_change(b0, tuned)
        plot_bias_change(change, figdir / fig, f"SST, MiniLM, {row}: mean |b0 - bF|")
        text += f"\n{row}: mean |b0 - bF| per term and layer ({figdir.name}/{fig})\n\n"
        text += bitfit_report.format_bias_change(change) + "\n"
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default=",".join(map(slug, DEFAULT_ROWS)),
                    help=f"comma-separated, from: {', '.join(map(slug, ROWS))} (default: all but the _emb controls)")
    ap.add_argument("--train-examples", type=int, default=4000, help="random training sample size (0: all)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seeds", default="1,2,3", help="comma-separated seeds, each row once per seed (default 1,2,3)")
    ap.add_argument("--baseline", default="bitfit all",
                    help="the row the others are compared with (default bitfit all)")
    ap.add_argument("--out", default="runs/bitfit_table3")
    ap.add_argument("--figures", default=str(ROOT / "benchmarks" / "figures"))
    ap.add_argument("--figures-only", action="store_true", help="only redraw the figures from OUT's checkpoints")
    args = ap.parse_args()
    by_slug = {slug(r): r for r in ROWS}
    unknown = [r for r in args.rows.split(",") if r.strip() not in by_slug]
    if unknown:
        raise SystemExit(f"unknown row(s) {unknown}; choose from {list(by_slug)}")
    rows = [by_slug[r.strip()] for r in args.rows.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.figures_only:
        old = out / "results.json"
        results = [r for r in json.loads(old.read_text()) if r.get("dev")] if old.is_file() else []
        for seed in [int(s) for s in args.seeds.split(",")]:
            if args.train_examples:
                sample_training_file(args.train_examples, seed, out)
            for row in rows:
                if any(r["row"] == row and r.get("seed") == seed for r in results):
                    continue
                results.append(run_row(row, seed, args, out))
                print(write_table(results, out, args), flush=True)
    text = figures(out, Path(args.figures), int(args.seeds.split(",")[0]))
    (out / "bias_change.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
