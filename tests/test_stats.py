"""benchmarks/stats.py: the paired-seed difference and its 95% t interval, against hand computations."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import stats
from test_multitask import files  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("one_thread")


def test_paired_interval_equals_a_hand_computation():
    baseline = {1: 0.70, 2: 0.60, 3: 0.65}
    row = {1: 0.71, 2: 0.62, 3: 0.68, 4: 0.99}                      # seed 4 has no pair: left out
    d = stats.paired_difference(row, baseline)
    # diffs 0.01, 0.02, 0.03: mean 0.02, sd 0.01, t_{0.975, 2} = 4.3027, half-width 4.3027 * 0.01 / sqrt(3) = 0.024842
    assert d["n"] == 3 and d["mean"] == pytest.approx(0.02) and d["sd"] == pytest.approx(0.01)
    assert d["lo"] == pytest.approx(0.02 - 0.024842, abs=1e-6) and d["hi"] == pytest.approx(0.044842, abs=1e-6)
    assert not d["excludes_zero"]
    d = stats.paired_difference({1: 1.0, 2: 2.1, 3: 3.0, 4: 4.1}, {1: 0.0, 2: 1.0, 3: 2.0, 4: 3.0})
    # diffs 1, 1.1, 1, 1.1: mean 1.05, sd sqrt(4 * 0.05^2 / 3) = 0.057735, t_{0.975, 3} = 3.1824: 1.05 +- 0.091868
    assert d["lo"] == pytest.approx(0.958132, abs=1e-5) and d["excludes_zero"]


def test_t_quantiles_table_and_beyond():
    assert stats.t975(1) == 12.7062 and stats.t975(10) == 2.2281
    assert stats.t975(40) == pytest.approx(2.0211, abs=2e-4) and stats.t975(1000) == pytest.approx(1.9623, abs=2e-4)
    with pytest.raises(ValueError):
        stats.t975(0)


def test_unpaired_difference_is_welchs_interval_by_hand():
    d = stats.unpaired_difference([1.0, 2.0, 3.0], [0.0, 0.5, 1.0])
    # se^2 = 1/3 + 0.25/3; df = se^4 / ((1/3)^2/2 + (0.25/3)^2/2) = 2.94 -> 2, t = 4.3027
    assert d["mean"] == pytest.approx(1.5) and d["df"] == pytest.approx(2.941, abs=1e-3)
    half = 4.3027 * math.sqrt(1 / 3 + 0.25 / 3)
    assert (d["lo"], d["hi"]) == (pytest.approx(1.5 - half), pytest.approx(1.5 + half)) and not d["excludes_zero"]
    assert stats.unpaired_difference([5.0, 5.1, 5.2], [1.0, 1.1, 0.9])["excludes_zero"]
    with pytest.raises(ValueError, match="at least 2 runs a side"):
        stats.unpaired_difference([1.0], [1.0, 2.0])


def test_markdown_table_from_paired_runs_json(tmp_path):
    records = [{"row": r, "seed": s, "dev": {"overall": v}} for r, s, v in [
        ("baseline", 1, 0.70), ("baseline", 2, 0.60), ("baseline", 3, 0.65),
        ("smart", 1, 0.71), ("smart", 2, 0.62), ("smart", 3, 0.68)]]
    path = tmp_path / "runs.json"
    path.write_text(json.dumps(records))
    table = stats.markdown_table(stats.load_rows([path], "overall"), "baseline", "overall")
    lines = table.splitlines()
    assert lines[2].startswith("| baseline | 1,2,3 | 65.00 | 5.00 |")
    assert lines[3] == "| smart | 1,2,3 | 67.00 | 4.58 | +2.00 (n=3) | [-0.48, +4.48] | no |"
    assert math.isnan(stats.mean_sd([1.0])[1])
    with pytest.raises(ValueError, match="no baseline row"):
        stats.markdown_table({"a": {1: 1.0}}, "baseline", "overall")


def test_markdown_table_prints_no_nan_for_a_row_with_one_seed_or_none_shared():
    rows = {"baseline": {1: 0.50}, "one": {1: 0.53}, "apart": {2: 0.40}}
    lines = stats.markdown_table(rows, "baseline", "overall").splitlines()
    assert "nan" not in "\n".join(lines)
    assert lines[2] == "| baseline | 1 | 50.00 | - | - | - | - |"
    assert lines[3] == "| one | 1 | 53.00 | - | +3.00 (n=1) | needs 2 paired seeds | - |"
    assert lines[4] == "| apart | 2 | 40.00 | - | no shared seed | needs 2 paired seeds | - |"


def test_load_rows_rejects_a_non_finite_value_naming_the_file_row_and_seed(tmp_path, capsys):
    path = tmp_path / "runs.json"                                   # json writes and reads NaN and Infinity
    for bad in (math.nan, math.inf):
        path.write_text(json.dumps([{"row": "baseline", "seed": s, "dev": {"overall": 0.6}} for s in (1, 2)]
                                   + [{"row": "x", "seed": 1, "dev": {"overall": 0.7}},
                                      {"row": "x", "seed": 2, "dev": {"overall": bad}}]))
        message = re.escape(f"{path}: row 'x', seed 2: overall is {bad}")
        with pytest.raises(ValueError, match=message):
            stats.load_rows([path], "overall")
    with pytest.raises(SystemExit) as exit_:                        # the command: one line, no traceback
        stats.main([str(path), "--baseline", "baseline"])
    assert exit_.value.code == 2 and re.search(message, capsys.readouterr().err)


def test_markdown_table_means_a_row_over_the_seeds_it_shares_with_the_baseline():
    rows = {"b": {1: 0.4, 2: 0.5, 3: 0.6}, "r": {1: 0.5, 2: 0.6, 3: 0.7, 4: 0.1}}   # seed 4 unpaired, far below
    lines = stats.markdown_table(rows, "b", "overall").splitlines()
    # the mean and sd are the paired seeds' (60.00 against the baseline's 50.00, as the difference says), and the
    # seed left out is named
    assert lines[3] == "| r | 1,2,3 (4 unpaired, left out) | 60.00 | 10.00 | +10.00 (n=3) | [+10.00, +10.00] | yes |"
    rows = {"baseline": {1: 0.50}, "apart": {2: 0.40, 3: 0.42}}    # no shared seed: the row's own seeds
    assert stats.markdown_table(rows, "baseline", "overall").splitlines()[3] == (
        "| apart | 2,3 | 41.00 | 1.41 | no shared seed | needs 2 paired seeds | - |")


def test_paired_runs_writes_rows_per_seed_with_smarts_log_and_the_paired_table(tiny_dir, files, tmp_path, capsys):  # noqa: F811
    import paired_runs
    from test_multitask import argv

    out = tmp_path / "runs.json"
    flags = argv(tiny_dir, files, tmp_path, "x", "--epochs", "1")
    paired_runs.main(["--out", str(out), "--row", "baseline", "--seeds", "1,2", "--", *flags])
    paired_runs.main(["--out", str(out), "--row", "smart", "--seeds", "1,2", "--baseline", "baseline", "--", *flags,
                      "--smart", "--smart-perturbation", "vat"])
    records = json.loads(out.read_text())
    assert [(r["row"], r["seed"]) for r in records] == [("baseline", 1), ("baseline", 2), ("smart", 1), ("smart", 2)]
    assert "smart" not in records[0] and records[2]["smart"][0]["smart_r_s"] > 0
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=False).stdout.strip() or None           # None outside a git checkout
    assert records[0]["commit"] == head and records[0]["cpu"] in ("avx512_bf16", "avx2", "other")
    assert isinstance(records[0]["code_modified"], bool) and records[0]["cores"] == os.cpu_count()
    if Path("/proc/cpuinfo").is_file():                                  # the model name, as lscpu prints it
        assert records[0]["cpu_model"] and records[0]["cpu_model"] in Path("/proc/cpuinfo").read_text()
    assert "| smart | 1,2 |" in capsys.readouterr().out
    paired_runs.main(["--out", str(out), "--row", "smart", "--seeds", "2"])   # done already: skipped
    assert len(json.loads(out.read_text())) == 4


def test_paired_runs_single_task_row_prints_its_task_and_stats_reads_it(tiny_dir, files, tmp_path, capsys):  # noqa: F811
    import paired_runs
    from test_multitask import argv

    out = tmp_path / "runs.json"
    flags = argv(tiny_dir, files, tmp_path, "x", "--epochs", "1", "--tasks", "sts")
    paired_runs.main(["--out", str(out), "--row", "sts alone", "--seeds", "1", "--", *flags])
    record, = json.loads(out.read_text())
    assert set(record["dev"]) == {"sts_pearson"}
    assert f"sts alone seed 1: STS r {record['dev']['sts_pearson']:.4f}," in capsys.readouterr().out
    assert stats.load_rows([out], "sts_pearson") == {"sts alone": {1: record["dev"]["sts_pearson"]}}
    assert stats.load_rows([out], "overall") == {}
    # --keep-runs: the same run kept as a run directory (checkpoint, raw outputs for tasks.ensemble), the same figures
    own = [f for i, f in enumerate(flags) if f not in ("--checkpoint", "--predictions-dir")
           and flags[i - 1] not in ("--checkpoint", "--predictions-dir")]
    paired_runs.main(["--out", str(tmp_path / "kept.json"), "--row", "sts alone, kept", "--seeds", "1",
                      "--keep-runs", str(tmp_path / "kept"), "--", *own])
    kept, = json.loads((tmp_path / "kept.json").read_text())
    assert kept["dev"] == record["dev"]
    run_dir = tmp_path / "kept" / "sts-alone-kept-s1"
    assert {"run.json", "checkpoint.pt"} <= {p.name for p in run_dir.iterdir()}
    assert (run_dir / "predictions" / "sts-dev-raw.csv").is_file()
