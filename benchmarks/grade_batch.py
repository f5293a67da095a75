"""Time batch regrades: python -m assignments.grade --batch on 20 submissions of part 1 (--groups core).

--make DIR builds the folder of 20 submissions: 10 copies of the reference's part-1 files (minbert/model.py,
minbert/optim.py, minbert/pooling.py, tasks/classifier.py; 5 folders holding the tree, 5 zips of the tree one folder
down), 5 unfilled stubs (the committed assignments/student/ files; 3 folders of the tree, 2 zips of the bare files two
folders down) and 5 partially filled (some files the reference's, the others the stubs; folders). The score each
should get is written to DIR/.expected.json (a hidden file, which the batch ignores).

The default mode builds that folder in a temporary folder (or takes --dir), then runs the CLI on it with --groups core
and a fresh CSV, once a round in each mode of --modes (warm: the grader's checker forked from its warm interpreter,
the default; cold: MINBERT_COLD_START=1, a cold `python -m assignments.check` per submission), the modes' order in
each round drawn from --seed. It prints each run's wall time, each mode's median seconds a submission, the ratio cold
/ warm, the CPU (lscpu's model name, avx512_bf16) and whether every score is the one expected. Arguments after -- go
to the grader (--jobs, --timeout, ...).

    python benchmarks/grade_batch.py --make /tmp/subs20
    python benchmarks/grade_batch.py                          # build in a temporary folder, grade warm and cold, time
    python benchmarks/grade_batch.py --rounds 3 --json benchmarks/results/grade-batch.json
    python benchmarks/grade_batch.py --dir /tmp/subs20 --modes warm -- --jobs 2
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from epoch_speed import cpu_info

from assignments.warmstart import COLD_ENV

STUBS = ROOT / "assignments" / "student"
PART1 = {"minbert/model.py": ("attention", "embeddings", "layer", "model"), "minbert/optim.py": ("adamw",),
         "minbert/pooling.py": ("classifier_head",), "tasks/classifier.py": ("classifier_head",)}
POINTS = {"attention": 25, "embeddings": 10, "layer": 25, "model": 10, "adamw": 20, "classifier_head": 10}
PARTIAL = [  # the files filled in (the reference's); the others are the stubs
    ("optim", "pooling", "classifier"), ("model", "pooling", "classifier"), ("model", "optim"),
    ("pooling", "classifier"), ("model",)]


def score(filled: set[str]) -> int:
    """The part-1 score of a submission whose `filled` files are the reference's: a part needs all its files."""
    return sum(POINTS[p] for p in POINTS if all(rel in filled for rel, parts in PART1.items() if p in parts))


def files_of(filled: set[str]) -> dict[str, str]:
    """The part-1 files' text: the reference's for the filled ones, the stubs' for the others."""
    return {rel: ((ROOT if rel in filled else STUBS) / rel).read_text() for rel in PART1}


def put(dest: Path, files: dict[str, str], kind: str) -> None:
    """Write the files as a folder holding the tree, a zip of the tree one folder down, or a zip of bare files two
    folders down."""
    if kind == "folder":
        for rel, text in files.items():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel).write_text(text)
        return
    prefix = "my-minbert/" if kind == "zip-tree" else "hw/src/"
    with zipfile.ZipFile(dest.with_suffix(".zip"), "w", zipfile.ZIP_DEFLATED) as zf:
        for rel, text in files.items():
            zf.writestr(prefix + (rel if kind == "zip-tree" else Path(rel).name), text)


def make(folder: Path) -> dict[str, int]:
    """Build the 20 submissions in folder (which must not exist or be empty); returns each entry's expected score."""
    if folder.exists() and any(folder.iterdir()):
        raise SystemExit(f"error: {folder} is not empty")
    folder.mkdir(parents=True, exist_ok=True)
    expected = {}
    everything = set(PART1)
    for i in range(10):
        kind = "folder" if i < 5 else "zip-tree"
        put(folder / f"reference-{i:02d}", files_of(everything), kind)
        expected[f"reference-{i:02d}" + ("" if kind == "folder" else ".zip")] = score(everything)
    for i in range(5):
        kind = "folder" if i < 3 else "zip-bare"
        put(folder / f"stubs-{i:02d}", files_of(set()), kind)
        expected[f"stubs-{i:02d}" + ("" if kind == "folder" else ".zip")] = 0
    for i, stems in enumerate(PARTIAL):
        filled = {rel for rel in PART1 if Path(rel).stem in stems}
        put(folder / f"partial-{i:02d}", files_of(filled), "folder")
        expected[f"partial-{i:02d}"] = score(filled)
    (folder / ".expected.json").write_text(json.dumps(expected, indent=2) + "\n")
    return expected


MODES = {"warm": {}, "cold": {COLD_ENV: "1"}}   # the grader's environment in each mode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--make", type=Path, metavar="DIR", help="only build the 20 submissions in DIR")
    ap.add_argument("--dir", type=Path, help="time the batch on this folder (built by --make) instead of a fresh one")
    ap.add_argument("--modes", nargs="+", choices=tuple(MODES), default=list(MODES),
                    help="warm: the checker forked from the grader's warm interpreter; cold: MINBERT_COLD_START=1")
    ap.add_argument("--rounds", type=int, default=1, help="runs of each mode, interleaved (default 1)")
    ap.add_argument("--seed", type=int, default=0, help="the seed of the modes' order in each round (default 0)")
    ap.add_argument("--json", type=Path, help="also write the figures to this JSON (benchmarks/results/...)")
    ap.add_argument("grade_args", nargs="*", help="after --: passed to python -m assignments.grade")
    args = ap.parse_args()
    if args.make:
        expected = make(args.make)
        print(f"wrote {len(expected)} submissions to {args.make}")
        return
    rng, walls, wrong = random.Random(args.seed), {m: [] for m in args.modes}, {}
    with tempfile.TemporaryDirectory(prefix="grade-batch-") as tmp:
        folder = args.dir or Path(tmp) / "subs"
        expected = make(folder) if args.dir is None else json.loads((folder / ".expected.json").read_text())
        out = Path(tmp) / "grades.csv"
        cmd = [sys.executable, "-m", "assignments.grade", "--batch", str(folder), "--csv", str(out),
               "--groups", "core", "--as-user", "none", *args.grade_args]   # as measured: as root, the code as root
        print(" ".join(cmd[1:]))
        for n in range(args.rounds):
            for mode in rng.sample(args.modes, len(args.modes)):
                out.unlink(missing_ok=True)
                env = {k: v for k, v in os.environ.items() if k != COLD_ENV} | MODES[mode]
                t0 = time.perf_counter()
                subprocess.run(cmd, cwd=ROOT, env=env, check=True)
                walls[mode].append(round(time.perf_counter() - t0, 1))
                print(f"round {n + 1}, {mode}: {walls[mode][-1]:.1f} s", flush=True)
                with open(out, newline="") as f:
                    got = {r["submission"]: r["score"] for r in csv.DictReader(f)}
                wrong.update({f"{mode}: {name}": (got.get(name), score) for name, score in expected.items()
                              if got.get(name) != str(score)})
    per = {m: {"runs_s": w, "wall_s": round(statistics.median(w), 1),
               "s_per_submission": round(statistics.median(w) / len(expected), 2)} for m, w in walls.items()}
    cpu = cpu_info()
    for m, f in per.items():
        print(f"{m}: median wall {f['wall_s']:.1f} s for {len(expected)} submissions: {f['s_per_submission']:.2f} s "
              "a submission")
    ratio = round(per["cold"]["wall_s"] / per["warm"]["wall_s"], 2) if len(per) == 2 else None
    if ratio:
        print(f"cold / warm: {ratio:.2f}")
    print(f"CPU: {cpu['model']}, {cpu['cores']} cores, avx512_bf16 {'yes' if cpu['avx512_bf16'] else 'no'}")
    print("every score as expected" if not wrong else f"scores not as expected (got, expected): {wrong}")
    if args.json:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                check=False).stdout.strip()
        args.json.write_text(json.dumps({
            "command": " ".join(["python benchmarks/grade_batch.py", *sys.argv[1:]]),
            "grader": " ".join(["python -m assignments.grade --batch DIR --csv grades.csv", *cmd[7:]]),
            "submissions": len(expected), "rounds": args.rounds, "modes": per, "cold_over_warm": ratio,
            "every_score_as_expected": not wrong, "cpu": cpu, "commit": commit}, indent=2) + "\n")


if __name__ == "__main__":
    main()
