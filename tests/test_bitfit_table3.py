"""benchmarks/bitfit_table3.py: one row of the table runs the real classifier and reads what its log says."""

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bitfit_table3


def test_run_row_reads_the_classifiers_log_and_records_the_commit_and_cpu(tiny_dir, multitask_files, tmp_path,
                                                                         monkeypatch):
    train, dev, test = multitask_files["sst"]
    flags = [*bitfit_table3.ROWS["bitfit all"], "--model", str(tiny_dir), "--train-file", train, "--dev-file", dev,
             "--test-file", test]
    monkeypatch.setitem(bitfit_table3.ROWS, "bitfit all", flags)
    args = argparse.Namespace(epochs=1, batch_size=8, train_examples=0)
    record = bitfit_table3.run_row("bitfit all", 3, args, tmp_path)
    log = Path(record["log"]).read_text()
    assert record["rc"] == 0, log
    assert "--seed 3" in log.splitlines()[0] and "--fine-tune-mode bitfit" in log.splitlines()[0]
    dev_rows = len(Path(dev).read_text().splitlines()) - 1                  # 24 sentences: accuracy is k / 24
    assert min(abs(record["dev_accuracy"] - k / dev_rows) for k in range(dev_rows + 1)) < 1e-4
    assert record["dev"] == {"accuracy": record["dev_accuracy"]} and record["lr"] == "0.001"
    trainable = int(record["trainable"].replace(",", ""))
    assert 0 < trainable < 50_000                                            # biases and the head, not the weights
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=False).stdout.strip() or None
    assert record["commit"] == head and isinstance(record["code_modified"], bool)
    if Path("/proc/cpuinfo").is_file():
        assert record["cpu_model"] in Path("/proc/cpuinfo").read_text()
