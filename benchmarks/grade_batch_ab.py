"""Time two versions of the batch grader against each other: each tree grades its own folder of submissions (made by
its own reference: python benchmarks/grade_batch.py --make DIR, run in that tree), warm (the default checker), the
trees interleaved in a shuffled order each round, round 0 a warm-up; prints each run and each tree's median and range.

    git worktree add /tmp/old d60fb21 && (cd /tmp/old && PYTHONPATH=/tmp/old python benchmarks/grade_batch.py --make /tmp/subs-old)
    python benchmarks/grade_batch.py --make /tmp/subs-new
    python benchmarks/grade_batch_ab.py old=/tmp/old:/tmp/subs-old new=.:/tmp/subs-new --rounds 3
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trees", nargs=2, metavar="NAME=TREE:SUBMISSIONS", help="a version: its tree and its submissions")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds after the warm-up (default 3)")
    p.add_argument("--seed", type=int, default=7, help="the order of the trees in each round")
    args = p.parse_args(argv)
    trees = {}
    for spec in args.trees:
        name, _, rest = spec.partition("=")
        tree, _, subs = rest.partition(":")
        trees[name] = (Path(tree).resolve(), Path(subs).resolve())
    rng, times = random.Random(args.seed), {k: [] for k in trees}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds + 1):
            order = list(trees)
            rng.shuffle(order)
            for name in order:
                tree, subs = trees[name]
                csv = Path(tmp) / f"{name}-{r}.csv"
                t = time.perf_counter()
                done = subprocess.run([sys.executable, "-m", "assignments.grade", "--batch", str(subs), "--csv", str(csv),
                                       "--groups", "core", "--as-user", "none", "--seed", "1"], check=False, cwd=tree,
                                      env=dict(os.environ, PYTHONPATH=str(tree)), capture_output=True, text=True)
                seconds = time.perf_counter() - t
                if done.returncode != 0:
                    print(done.stdout[-2000:], done.stderr[-2000:], file=sys.stderr)
                    return 1
                if r > 0:
                    times[name].append(seconds)
                print(f"round {r}{' (warm-up)' if r == 0 else ''}, {name}: {seconds:.1f} s", flush=True)
    for name, runs in times.items():
        print(f"{name}: median {statistics.median(runs):.1f} s ({min(runs):.1f}-{max(runs):.1f}), {len(runs)} rounds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
