"""The grader's peak memory: the reference graded on every group, with 1, 2, 4 and 8 parts at once (--jobs).

Each run is `python -m assignments.grade . --groups all --seed-file SEED --as-user none --jobs N --out OUT` from the
reference tree, one whole process. While it runs, a sampler reads every 50 ms the proportional set size (Pss, from
/proc/PID/smaps_rollup: shared pages split between the processes that map them, so the sum is what the processes
take together) and the resident size of the grader and of every process below it (found through each process's
parent in /proc/PID/stat: the warm helper, the checker, the parts). A run's figure is the highest sum of one sample;
the sampler may miss a peak shorter than 50 ms. Linux only. Writes benchmarks/results/grade-memory.json (the CPU,
torch, the commit and per --jobs the peak Pss and RSS in MiB, the wall time and the exit status) and prints a table.
INSTRUCTORS.md's memory figure is the highest peak Pss over the rows (tests/test_instructors_doc.py checks it).

    python benchmarks/grade_memory.py                   # about 1 min on 2 cores
    python benchmarks/grade_memory.py --jobs 1 2 --json /tmp/grade-memory.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from epoch_speed import cpu_info, git

from tasks.core.evaluation import write_text

DEFAULT_JSON = ROOT / "benchmarks" / "results" / "grade-memory.json"
GRADING_SEED = 8072917364512093847
SAMPLE_SECONDS = 0.05


def parents() -> dict[int, int]:
    """{pid: parent pid} of every process now alive."""
    out = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            out[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])    # the name may hold spaces and ')'
    return out


def tree(root: int) -> list[int]:
    """root and every process below it."""
    links, found, todo = parents(), [root], [root]
    while todo:
        pid = todo.pop()
        kids = [c for c, p in links.items() if p == pid]
        found += kids
        todo += kids
    return found


def memory_kib(pid: int) -> tuple[int, int]:
    """(Pss, Rss) of one process in KiB; (0, 0) once it is gone."""
    try:
        lines = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
    except OSError:
        return 0, 0
    values = {ln.split(":")[0]: int(ln.split()[1]) for ln in lines if ln.startswith(("Pss:", "Rss:"))}
    return values.get("Pss", 0), values.get("Rss", 0)


def measure(jobs: int, seed_file: Path, out: Path) -> dict:
    """One grading with --jobs N, sampled until it ends: its peak summed Pss and Rss in MiB, seconds, exit status."""
    cmd = [sys.executable, "-m", "assignments.grade", ".", "--groups", "all", "--seed-file", str(seed_file),
           "--as-user", "none", "--jobs", str(jobs), "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    peak = {"pss": 0, "rss": 0}
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            sizes = [memory_kib(pid) for pid in tree(proc.pid)]
            peak["pss"] = max(peak["pss"], sum(s[0] for s in sizes))
            peak["rss"] = max(peak["rss"], sum(s[1] for s in sizes))
            time.sleep(SAMPLE_SECONDS)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = proc.communicate()
    done.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}:\n{err[-3000:]}")
    score = json.loads(out.read_text())["score"]
    return {"jobs": jobs, "peak_pss_mib": round(peak["pss"] / 1024, 1), "peak_rss_mib": round(peak["rss"] / 1024, 1),
            "seconds": round(time.perf_counter() - start, 2), "exit": proc.returncode, "score": score}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, nargs="+", default=[1, 2, 4, 8], help="the --jobs of each run (default 1 2 4 8)")
    ap.add_argument("--json", default=str(DEFAULT_JSON), help=f"where to write the results (default {DEFAULT_JSON})")
    args = ap.parse_args(argv)
    if not Path("/proc/self/smaps_rollup").is_file():
        raise SystemExit("this benchmark reads /proc/PID/smaps_rollup: Linux 4.14 or newer")
    import torch
    rows = []
    with tempfile.TemporaryDirectory(prefix="grade-memory-") as tmp:
        seed = Path(tmp) / "seed"
        seed.write_text(f"{GRADING_SEED}\n")
        for jobs in args.jobs:
            rows.append(measure(jobs, seed, Path(tmp) / f"results-{jobs}.json"))
            print(f"--jobs {jobs}: peak Pss {rows[-1]['peak_pss_mib']:.0f} MiB, Rss {rows[-1]['peak_rss_mib']:.0f} MiB, "
                  f"{rows[-1]['seconds']:.1f} s, score {rows[-1]['score']}", flush=True)
    result = {"command": "python -m assignments.grade . --groups all --seed-file SEED --as-user none --jobs N",
              "sample_seconds": SAMPLE_SECONDS, "cpu": cpu_info(), "torch": torch.__version__,
              "commit": git("rev-parse", "--short", "HEAD"), "dirty": bool(git("status", "--porcelain")),
              "rows": rows, "peak_pss_mib": max(r["peak_pss_mib"] for r in rows)}
    write_text(args.json, json.dumps(result, indent=2) + "\n")
    print(f"highest peak Pss: {result['peak_pss_mib']:.0f} MiB; wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
