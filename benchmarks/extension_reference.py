"""Reference outputs of the multitask command's extensions, to show a refactor leaves every number bit-identical.

    python benchmarks/extension_reference.py record DIR      # tiny runs of every extension into DIR/<case>/
    python benchmarks/extension_reference.py check DIR       # the same runs again into a temporary directory,
                                                              # compared with DIR file by file; exit 1 on a difference

Each case trains the tests' tiny random BERT (2 layers, hidden 32, seed 0, MiniLM's vocabulary) for 2 epochs on
slices of the real files (40/48/32 training examples, 24 dev, 16-20 test) with --raw-outputs. Compared byte for byte:
the prediction and raw-output files; by value: the curves' step losses and epoch records (seconds left out);
by torch.equal: every tensor of the checkpoint (model, best state, optimiser state).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
CASES = {
    "base": [],
    "smart": ["--smart"],
    "smart-bregman": ["--smart", "--smart-bregman"],
    "sts-cosine": ["--sts-embedding-loss", "cosine"],
    "sts-cosent": ["--sts-embedding-loss", "cosent"],
    "para-mnrl": ["--para-embedding-loss", "mnrl"],
    "sts-output-cosine": ["--sts-output", "cosine", "--sts-embedding-loss", "cosent"],
    "pcgrad": ["--gradient-surgery", "pcgrad"],
    "surgery-sum": ["--gradient-surgery", "sum"],
}
SLICES = {"sst": [("ids-sst-train.csv", 0, 40), ("ids-sst-dev.csv", 0, 24), ("ids-sst-dev.csv", 24, 40)],
          "para": [("quora-train.csv", 0, 48), ("quora-dev.csv", 0, 24), ("quora-test-student.csv", 0, 20)],
          "sts": [("sts-train.csv", 0, 32), ("sts-dev.csv", 0, 24), ("sts-dev.csv", 24, 40)]}


def tiny_model(directory: Path) -> None:
    """The tests' tiny random BERT (tests/conftest.py tiny_dir), saved with MiniLM's vocabulary."""
    import minbert
    config = minbert.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=64, max_position_embeddings=128)
    torch.manual_seed(0)
    minbert.save_pretrained(minbert.BertModel(config), directory)
    (directory / "vocab.txt").write_bytes((minbert.checkpoint.resolve("minilm") / "vocab.txt").read_bytes())


def inputs(work: Path) -> list[str]:
    """The tiny model and the data slices under `work`; the flags that name them."""
    tiny_model(work / "tiny")
    flags = ["--model", str(work / "tiny")]
    for task, pieces in SLICES.items():
        for split, (name, start, stop) in zip(("train", "dev", "test"), pieces):
            lines = (DATA / name).read_text(encoding="utf-8").splitlines(keepends=True)
            path = work / f"{task}-{split}.csv"
            path.write_text(lines[0] + "".join(lines[1 + start:1 + stop]), encoding="utf-8")
            flags += [f"--{task}-{split}", str(path)]
    return flags


def record(out: Path, cases: list[str]) -> None:
    """Run every case into out/<case>/ (each in a fresh process)."""
    out.mkdir(parents=True, exist_ok=True)
    flags = inputs(out) + ["--device", "cpu", "--threads", "1", "--batch-size", "8", "--lr", "1e-3", "--no-progress",
                           "--head-hidden", "16", "--epochs", "2", "--eval-batch-size", "8", "--raw-outputs"]
    for name in cases:
        cmd = [sys.executable, "-m", "tasks.multitask", *flags, *CASES[name], "--run-dir", str(out / name)]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False,
                              env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
        if proc.returncode != 0:
            raise SystemExit(f"{name}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
        print(f"{name}: done", file=sys.stderr)


def _tensors(value: object, path: str = "") -> dict[str, object]:
    """Every leaf of a nested checkpoint, by its path."""
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in _tensors(item, f"{path}/{key}").items()}
    if isinstance(value, (list, tuple)):
        return {k: v for i, item in enumerate(value) for k, v in _tensors(item, f"{path}/{i}").items()}
    return {path: value}


def _curves(path: Path) -> list[dict]:
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [{k: v for k, v in line.items() if not k.endswith("seconds")} for line in lines]


def compare(before: Path, after: Path) -> list[str]:
    """What differs between two runs of one case: files, curves' values, the checkpoint's tensors."""
    diffs = []
    for f in sorted((before / "predictions").glob("*.csv")):
        other = after / "predictions" / f.name
        if not other.is_file() or other.read_bytes() != f.read_bytes():
            diffs.append(f"predictions/{f.name}")
    was, now = _curves(before / "checkpoint.curves.jsonl"), _curves(after / "checkpoint.curves.jsonl")
    if len(was) != len(now) or any({k: line[k] for k in old} != {k: line.get(k) for k in old}
                                   for old, line in zip(was, now)):       # keys added since may be new
        diffs.append("checkpoint.curves.jsonl (losses or records)")
    a, b = (_tensors(torch.load(d / "checkpoint.pt", weights_only=True)) for d in (before, after))
    for key in ("/model", "/best_state", "/optimizer/state"):
        for k in sorted(k for k in a if k.startswith(key)):
            same = k in b and (torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k])
            if not same:
                diffs.append(f"checkpoint.pt {k}")
    return diffs


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2 or argv[0] not in ("record", "check"):
        raise SystemExit(__doc__)
    directory, cases = Path(argv[1]), argv[2:] or list(CASES)
    if argv[0] == "record":
        record(directory, cases)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        record(Path(tmp), cases)
        failed = {name: compare(directory / name, Path(tmp) / name) for name in cases}
    for name, diffs in failed.items():
        print(f"{name}: {'identical' if not diffs else 'DIFFERS: ' + ', '.join(diffs[:8])}")
    return 1 if any(failed.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
