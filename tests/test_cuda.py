"""The CUDA path: a checkpoint that transformers saved, on the GPU; the multitask CLI in each precision there.

Skipped where there is no GPU (CI). On a GPU machine, `MINBERT_TEST_DEVICE=cuda pytest tests` also runs every CLI
test (kill and resume, predict, ensembles, DeeBERT) on CUDA.
"""

from __future__ import annotations

import math

import pytest
import torch

import minbert
from minbert.pcgrad import pcgrad_project, surgery_loss
from tasks.core.checkpoints import load_checkpoint
from tasks.multitask import parse_settings, run

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
transformers = pytest.importorskip("transformers")


def hf_tiny(tmp_path):
    """A random BERT that transformers itself builds and saves (safetensors), with a real vocabulary size."""
    config = transformers.BertConfig(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=128, max_position_embeddings=128)
    torch.manual_seed(0)
    model = transformers.BertModel(config).eval()
    model.save_pretrained(tmp_path / "hf")
    return model, tmp_path / "hf"


def batch(device):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 30000, (4, 24), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 15:] = 0
    mask[3, 5:] = 0                                                    # padded rows
    types = torch.zeros_like(ids)
    types[:, 12:] = 1
    return {k: v.to(device) for k, v in {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}.items()}


def test_a_transformers_checkpoint_gives_transformers_outputs_on_cuda(tmp_path):
    cuda = torch.device("cuda")
    theirs, directory = hf_tiny(tmp_path)
    ours = minbert.load_pretrained(str(directory)).eval()
    cpu_out = ours(**batch("cpu"))
    theirs, ours = theirs.to(cuda), ours.to(cuda)
    with torch.no_grad():
        a, b = ours(**batch(cuda)), theirs(**batch(cuda))
    mask = batch(cuda)["attention_mask"].bool()                         # padded positions are not compared
    torch.testing.assert_close(a.last_hidden_state[mask], b.last_hidden_state[mask], rtol=0, atol=2e-5)
    torch.testing.assert_close(a.pooler_output, b.pooler_output, rtol=0, atol=2e-5)
    torch.testing.assert_close(a.last_hidden_state.cpu(), cpu_out.last_hidden_state.detach(),
                               rtol=0, atol=2e-5)                      # the GPU agrees with the CPU, 0 at padding too
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        low = ours(**batch(cuda)).last_hidden_state                     # fp32: the last LayerNorm runs in fp32
    error = (low.float()[mask] - a.last_hidden_state[mask]).abs().max().item()
    assert 1e-4 < error < 0.1                                           # bf16 reached the matmuls, and stayed close


def test_a_training_step_on_cuda_gives_the_gradient_of_the_cpu(tmp_path):
    _, directory = hf_tiny(tmp_path)
    grads = {}
    for device in ("cpu", "cuda"):
        model = minbert.load_pretrained(str(directory)).to(device).eval()  # no dropout: CPU and GPU draw apart
        out = model(**batch(device)).pooler_output                      # (B, H)
        out.square().sum().backward()
        grads[device] = {n: p.grad.cpu() for n, p in model.named_parameters() if p.grad is not None}
    assert grads["cpu"].keys() == grads["cuda"].keys()
    for name, g in grads["cpu"].items():
        torch.testing.assert_close(grads["cuda"][name], g, rtol=1e-3, atol=1e-4, msg=name)


@pytest.fixture
def files(multitask_files):
    return multitask_files


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_the_multitask_cli_trains_on_cuda_in_each_precision(precision, tiny_dir, files, tmp_path):
    argv = ["--model", str(tiny_dir), "--device", "cuda", "--precision", precision, "--batch-size", "8",
            "--lr", "1e-3", "--no-progress", "--epochs", "2", "--head-hidden", "16",
            "--checkpoint", str(tmp_path / "run.pt"), "--predictions-dir", str(tmp_path / "run")]
    for t, (train, dev, test) in files.items():
        argv += [f"--{t}-train", train, f"--{t}-dev", dev, f"--{t}-test", test]
    summary = run(parse_settings(argv))
    for record in summary["history"]:
        losses = [v for k, v in record.items() if k.startswith("train_loss_")]
        assert losses and all(math.isfinite(v) for v in losses), record
    state = load_checkpoint(tmp_path / "run.pt")
    assert bool(state["scaler"]) == (precision == "fp16")               # the gradient scaler runs under fp16 only
    if precision == "fp16":
        assert math.isfinite(state["scaler"]["scale"])
    for t in ("sst", "para", "sts"):
        for split in ("dev", "test"):
            assert (tmp_path / "run" / f"{t}-{split}-output.csv").stat().st_size > 0


@pytest.mark.parametrize("project", [True, False])
def test_pcgrad_on_cuda_gives_the_hand_computed_gradients(project):
    # the conflicting a, b of test_toolkit_losses on the GPU: projected (0.5, 1.5), or summed as they are (0, 1)
    cuda = torch.device("cuda")
    w, h1, h2 = (torch.nn.Parameter(torch.zeros(n, device=cuda)) for n in (2, 1, 1))
    a, b = torch.tensor([1.0, 0.0], device=cuda), torch.tensor([-1.0, 1.0], device=cuda)
    workspace: dict = {}
    surgery_loss([w @ a + h1.sum(), w @ b + 2 * h2.sum()], [w, h1, h2], project=project, workspace=workspace).backward()
    assert w.grad.device.type == "cuda" and w.grad.tolist() == ([0.5, 1.5] if project else [0.0, 1.0])
    assert h1.grad.item() == 1.0 and h2.grad.item() == 2.0
    assert workspace["last"]["conflicts"] == 1
    assert pcgrad_project([a, b])[0].tolist() == [0.5, 0.5]            # a projected off b: a - (a.b / |b|^2) b
