"""Time the staff's commands: every row of assignments/INSTRUCTORS.md's Times table but the batch row (that one is
benchmarks/grade_batch.py's), each command as one whole process, from the reference tree or a fresh student tree.

In a temporary folder T it first builds what the rows need: a fresh student tree (python -m assignments.make T/st
--no-data), T/seed holding a fixed grading seed, and for the leaderboard's rows a gold folder of the real test ids with
random labels, a salt file and uploads (tests/leaderboard_fixtures.py's helpers, as the leaderboard tests build them:
one valid upload; for the scoreboard a perfect zip made by tasks.submit, a partial folder and an invalid folder). Then
one warm-up run of every row and --runs rounds; each round runs every row once, in an order drawn from --seed, so
that the rows' runs interleave and a change in the machine's load spreads over all of them. A run is the command's
wall time (time.perf_counter around subprocess.run) and must exit with its row's expected status (a check of a fresh
stub tree exits 1: its parts are not started); any other status stops the run with the command's output. The JSON
(default benchmarks/results/staff-times.json), written after every round, holds per row the label (the table's
first column), the command, the folder it runs in, the expected exit, the median, min, max and every run; and the CPU,
torch, the commit, whether it ran as root and the user the grader ran each submission's code as (the grading rows
pass --as-user none, as measured: the grader's own user, root included; without it, as root the grader refuses when
nobody cannot run this Python). Prints the rows in the guide's format. --quick: one run per row and no warm-up, to
check the plumbing (the JSON says "quick": true).

    python benchmarks/staff_times.py                          # 1 warm-up + 5 runs a row, about 5 min on 2 cores
    python benchmarks/staff_times.py --runs 9 --json /tmp/staff-times.json
    python benchmarks/staff_times.py --quick --json /tmp/quick.json
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import pwd
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from epoch_speed import cpu_info

from tasks.core.evaluation import write_text

# The commands' environment, taken before tests/conftest.py (imported by the fixtures) sets its defaults; this
# repository first on the path, so that a command never imports another checkout's packages (python -m puts the
# folder it runs in before PYTHONPATH, so a student tree still imports its own).
ENV = {**{k: v for k, v in os.environ.items() if k != "MINBERT_COLD_START"},   # a row sets it when it names it
       "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
GRADING_SEED = 8072917364512093847
DEFAULT_JSON = ROOT / "benchmarks" / "results" / "staff-times.json"


@dataclass(frozen=True)
class Row:
    """One row of the guide's table: its label, the command ($T: the temporary folder), where it runs, its exit."""

    label: str
    command: str
    cwd: str = "."                                       # "." is the reference tree (this repository)
    exit: int = 0
    env: tuple[tuple[str, str], ...] = ()                # variables set for the command (the label shows them)


ROWS = (
    Row("`python -m assignments.check adamw` in the reference tree (one part, passing)",
        "python -m assignments.check adamw"),
    Row("`python -m assignments.check adamw` in a fresh student tree (the stub)",
        "python -m assignments.check adamw", "$T/st", 1),
    Row("`python -m assignments.check all` in the reference tree (every part and extension)",
        "python -m assignments.check all"),
    Row("`python -m assignments.check` in a fresh student tree (the first incomplete group: part 1)",
        "python -m assignments.check", "$T/st", 1),
    Row("`python -m assignments.check all` in a fresh student tree", "python -m assignments.check all", "$T/st", 1),
    Row("`python -m assignments.grade . --seed-file seed` (the reference, part 1, hidden inputs)",
        "python -m assignments.grade . --out $T/r.json --seed-file $T/seed --as-user none"),
    Row("`python -m assignments.grade STUDENT_TREE --seed-file seed` (the stubs, part 1)",
        "python -m assignments.grade $T/st --out $T/s.json --seed-file $T/seed --as-user none"),
    Row("`python -m assignments.grade . --groups all --seed-file seed` (the reference, every group)",
        "python -m assignments.grade . --out $T/a.json --groups all --seed-file $T/seed --as-user none"),
    Row("`MINBERT_COLD_START=1 python -m assignments.grade . --seed-file seed` (the same, its checker started cold)",
        "python -m assignments.grade . --out $T/rc.json --seed-file $T/seed --as-user none",
        env=(("MINBERT_COLD_START", "1"),)),
    Row("`MINBERT_COLD_START=1 python -m assignments.grade . --groups all --seed-file seed` (the same, its checker "
        "started cold)",
        "python -m assignments.grade . --out $T/ac.json --groups all --seed-file $T/seed --as-user none",
        env=(("MINBERT_COLD_START", "1"),)),
    Row("`python -m assignments.leaderboard UPLOAD --gold ... --salt-file ...` (one valid upload)",
        "python -m assignments.leaderboard $T/upload --gold $T/gold --salt-file $T/salt --out $T/lb.json"),
    Row("`python -m assignments.scoreboard UPLOADS ...` (three uploads: perfect, partial, invalid)",
        "python -m assignments.scoreboard $T/uploads --gold $T/gold --salt-file $T/salt --data-dir data "
        "--csv $T/board.csv --md $T/board.md"),
    Row("`python -m assignments.bundle checks OUT.zip --seed-file seed`",
        "python -m assignments.bundle checks $T/checks.zip --seed-file $T/seed"),
    Row("`python -m assignments.bundle leaderboard OUT.zip --gold ... --salt-file ...`",
        "python -m assignments.bundle leaderboard $T/leaderboard.zip --gold $T/gold --salt-file $T/salt"),
)


def schedule(rows: int, rounds: int, seed: int) -> list[list[int]]:
    """The rows' order in each round: a fresh random permutation of range(rows) per round, drawn from seed."""
    rng = random.Random(seed)
    return [rng.sample(range(rows), rows) for _ in range(rounds)]


def cells(median: float, low: float, high: float) -> tuple[str, str]:
    """The table's median and range cells: two decimals, seconds."""
    return f"{median:.2f} s", f"{low:.2f}-{high:.2f} s"


def summary(runs: list[float]) -> dict:
    """A row's figures from its runs (seconds, 4 decimals, as stored; the median and range computed from them)."""
    runs = [round(r, 4) for r in runs]
    return {"median_s": round(statistics.median(runs), 4), "min_s": min(runs), "max_s": max(runs), "runs_s": runs}


def table(rows: list[dict]) -> str:
    """The rows measured, in the guide's format (header included)."""
    lines = ["| command | median | range |", "|---|---:|---:|"]
    for r in rows:
        if r["runs_s"]:
            lines.append("| {} | {} | {} |".format(r["label"], *cells(r["median_s"], r["min_s"], r["max_s"])))
    return "\n".join(lines)


def cpu_name(cpu: dict) -> str:
    """The CPU as the guide names it: '2-core Intel Xeon' from 'Intel(R) Xeon(R) Processor' and 2 cores."""
    words = [w for w in (cpu["model"] or "unknown CPU").replace("(R)", "").replace("(TM)", "").split("@")[0].split()
             if w not in ("Processor", "CPU")]
    return f"{cpu['cores']}-core {' '.join(words)}"


def prepare(tmp: Path) -> None:
    """The student tree, the seed, the gold, the salt and the uploads the rows read, under tmp."""
    subprocess.run([sys.executable, "-m", "assignments.make", str(tmp / "st"), "--no-data"], cwd=ROOT, env=ENV,
                   capture_output=True, text=True, check=True)
    (tmp / "seed").write_text(f"{GRADING_SEED}\n")
    sys.path.insert(0, str(ROOT / "tests"))
    from leaderboard_fixtures import SALT, dev_labels, partial, write_gold, write_upload

    from tasks.submit import make_submission
    labels, dev = write_gold(tmp / "gold"), dev_labels()
    (tmp / "salt").write_text(SALT + "\n")
    perfect = write_upload(tmp / "upload", labels, dev)
    (tmp / "uploads").mkdir()
    zipped, problems = make_submission(perfect, ROOT / "data", tmp / "uploads" / "alice.zip")
    assert zipped and not problems, problems
    write_upload(tmp / "uploads" / "bob" / "project" / "predictions", partial(labels), dev)
    carol = shutil.copytree(perfect, tmp / "uploads" / "carol")              # a row out of range: invalid
    (carol / "para-test-output.csv").write_text((carol / "para-test-output.csv").read_text() + "x , 9\n")


def run_once(row: Row, tmp: Path) -> float:
    """One run's wall time; stops the benchmark when the command exits with another status than the row's."""
    cmd = [sys.executable if a == "python" else a.replace("$T", str(tmp)) for a in shlex.split(row.command)]
    cwd = ROOT if row.cwd == "." else Path(row.cwd.replace("$T", str(tmp)))
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env={**ENV, **dict(row.env)}, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if proc.returncode != row.exit:
        raise SystemExit(f"{row.label}: exit {proc.returncode}, expected {row.exit}\n$ {' '.join(cmd)} (in {cwd})\n"
                         f"{(proc.stdout + proc.stderr)[-3000:]}")
    return wall


def facts() -> dict:
    """The machine and the code: CPU, torch, the commit, root, and the user the grader runs a submission's code as
    (the grading rows pass --as-user none: the grader's own user, root included)."""
    git = [subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True, check=False)
           for a in (["rev-parse", "--short", "HEAD"], ["status", "--porcelain", "--untracked-files=no"])]
    return {"cpu": cpu_info(), "torch": importlib.metadata.version("torch"), "commit": git[0].stdout.strip(),
            "dirty": bool(git[1].stdout.strip()), "root": os.geteuid() == 0,
            "code_user": pwd.getpwuid(os.geteuid()).pw_name}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="timed runs a row, after one warm-up (default 5)")
    ap.add_argument("--seed", type=int, default=0, help="the seed of the rows' order in each round (default 0)")
    ap.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"the results (default {DEFAULT_JSON.relative_to(ROOT)})")
    ap.add_argument("--quick", action="store_true", help="one run a row, no warm-up: checks the plumbing only")
    args = ap.parse_args()
    runs, warmup = (1, 0) if args.quick else (args.runs, 1)
    order = schedule(len(ROWS), warmup + runs, args.seed)
    times: list[list[float]] = [[] for _ in ROWS]
    record = {"command": " ".join(["python benchmarks/staff_times.py", *sys.argv[1:]]), "quick": args.quick,
              "runs": runs, "warmup": warmup, "seed": args.seed, "grading_seed": GRADING_SEED, **facts(),
              "order": order, "rounds_done": 0, "rows": []}
    print(f"{len(ROWS)} rows, {warmup} warm-up + {runs} runs each; CPU {cpu_name(record['cpu'])}, torch "
          f"{record['torch']}, commit {record['commit']}{' (dirty)' if record['dirty'] else ''}, "
          f"{'root' if record['root'] else 'not root'}, submissions' code as {record['code_user']}", flush=True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="staff-times-") as tmp:
        prepare(Path(tmp))
        for n, round_order in enumerate(order):
            for i in round_order:
                wall = run_once(ROWS[i], Path(tmp))
                if n >= warmup:
                    times[i].append(wall)
            what = "warm-up" if n < warmup else f"round {n - warmup + 1}/{runs}"
            print(f"{what} done ({time.perf_counter() - start:.0f} s)", flush=True)
            if n < warmup:
                continue
            record["rounds_done"] = n - warmup + 1
            record["rows"] = [{"label": row.label, "command": row.command, "cwd": row.cwd, "expected_exit": row.exit,
                               **summary(t)} for row, t in zip(ROWS, times, strict=True)]
            write_text(args.json, json.dumps(record, indent=2) + "\n")          # atomic: a killed run keeps it
    print(table(record["rows"]))
    print(f"wrote {args.json} ({time.perf_counter() - start:.0f} s in all)")


if __name__ == "__main__":
    main()
