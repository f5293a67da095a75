"""bert-base-uncased through a stand-in Hub: its real file list and tensor names, tiny tensors; the CLI trains on it."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from pathlib import Path

import pytest
import torch
import warm
from conftest import DATA, ROOT, TEST_DEVICE
from fakehub import FakeHub, serve
from safetensors.torch import save_file

import minbert

MINILM_DIR = minbert.checkpoint.resolve("minilm")  # the same 30522-token uncased vocabulary as bert-base-uncased
SIZES = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}
# bert-base-uncased's config.json on the Hub, but for the sizes
CONFIG = {"architectures": ["BertForMaskedLM"], "attention_probs_dropout_prob": 0.1, "gradient_checkpointing": False,
          "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "hidden_size": 768, "initializer_range": 0.02,
          "intermediate_size": 3072, "layer_norm_eps": 1e-12, "max_position_embeddings": 512, "model_type": "bert",
          "num_attention_heads": 12, "num_hidden_layers": 12, "pad_token_id": 0, "position_embedding_type": "absolute",
          "transformers_version": "4.6.0.dev0", "type_vocab_size": 2, "use_cache": True, "vocab_size": 30522} | SIZES
HEADS = ("cls.predictions.bias", "cls.predictions.decoder.weight", "cls.predictions.transform.dense.weight",
         "cls.predictions.transform.dense.bias", "cls.predictions.transform.LayerNorm.gamma",
         "cls.predictions.transform.LayerNorm.beta", "cls.seq_relationship.weight", "cls.seq_relationship.bias")


def bert_base_uncased_files() -> tuple[dict[str, bytes], dict[str, torch.Tensor]]:
    """The Hub repository's files (weights under the original checkpoint's names: bert. prefix, LayerNorm gamma/beta,
    the pre-training heads cls.*), and the encoder tensors under Hugging Face BertModel names, to compare with."""
    torch.manual_seed(0)
    config = minbert.BertConfig(**SIZES)
    model = minbert.BertModel(config)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    encoder = {k: v.detach().clone() for k, v in minbert.checkpoint.to_hf_state_dict(model).items()}
    H, V = config.hidden_size, config.vocab_size
    heads = {"cls.predictions.bias": torch.zeros(V), "cls.predictions.decoder.weight": torch.randn(V, H),
             "cls.predictions.transform.dense.weight": torch.randn(H, H),
             "cls.predictions.transform.dense.bias": torch.zeros(H),
             "cls.predictions.transform.LayerNorm.gamma": torch.ones(H),
             "cls.predictions.transform.LayerNorm.beta": torch.zeros(H),
             "cls.seq_relationship.weight": torch.randn(2, H), "cls.seq_relationship.bias": torch.zeros(2)}
    weights = {"bert." + k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
               for k, v in encoder.items()} | heads
    assert set(heads) == set(HEADS)
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))  # save_file needs a path; read straight back
    path = tmp / f"bert-base-uncased-{os.getpid()}.safetensors"
    save_file(weights, path, metadata={"format": "pt"})
    data = path.read_bytes()
    path.unlink()
    tokenizer = json.loads((MINILM_DIR / "tokenizer.json").read_text())
    tokenizer.update(truncation=None, padding=None)                  # as bert-base-uncased's tokenizer.json
    files = {"config.json": json.dumps(CONFIG, indent=2).encode(), "model.safetensors": data,
             "vocab.txt": (MINILM_DIR / "vocab.txt").read_bytes(), "tokenizer.json": json.dumps(tokenizer).encode(),
             "tokenizer_config.json": b'{"do_lower_case": true, "model_max_length": 512}',
             # what the repository also holds, none of which minbert may download
             "pytorch_model.bin": b"x", "tf_model.h5": b"x", "flax_model.msgpack": b"x", "rust_model.ot": b"x",
             "model.onnx": b"x", "README.md": b"x", "LICENSE": b"x", "coreml/fill-mask/float32_model.mlpackage/x": b"x"}
    return files, encoder


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    files, encoder = bert_base_uncased_files()
    FakeHub.repos, FakeHub.requests = {"bert-base-uncased": files}, []
    with serve(monkeypatch, tmp_path / "cache") as url:
        yield url, encoder


def test_bert_base_uncased_loads_by_name(hub, caplog: pytest.LogCaptureFixture) -> None:
    _, encoder = hub
    with caplog.at_level(logging.WARNING, logger="minbert"):
        model = minbert.load_pretrained("bert-base-uncased")
    assert [r.getMessage() for r in caplog.records] == [
        ("bert-base-uncased: dropped 8 tensor(s) that are not the encoder (masked-LM head (cls.predictions.*): 6, "
         "next-sentence head (cls.seq_relationship.*): 2)")]
    saved = minbert.checkpoint.to_hf_state_dict(model)
    assert saved.keys() == encoder.keys() and all(torch.equal(saved[k], v) for k, v in encoder.items())
    fetched = {m.group(1) for r in FakeHub.requests if (m := re.fullmatch(r"GET /bert-base-uncased/resolve/\w+/(.+)", r))}
    assert fetched == {"config.json", "model.safetensors", "vocab.txt", "tokenizer.json", "tokenizer_config.json"}
    assert minbert.Tokenizer.from_pretrained("bert-base-uncased").encode("Hello world") == [101, 7592, 2088, 102]


def test_classifier_cli_trains_on_bert_base_uncased(hub, tmp_path: Path) -> None:
    """`python -m tasks.classifier --model bert-base-uncased`, in a fresh process that downloads through the Hub."""
    def piece(source: str, name: str, start: int, stop: int) -> str:
        lines = (DATA / source).read_text(encoding="utf-8").splitlines(keepends=True)
        (tmp_path / name).write_text(lines[0] + "".join(lines[1 + start:1 + stop]), encoding="utf-8")
        return str(tmp_path / name)
    cmd = [sys.executable, "-m", "tasks.classifier", "--model", "bert-base-uncased", "--task", "sst",
           "--train-file", piece("ids-sst-train.csv", "train.csv", 0, 24),
           "--dev-file", piece("ids-sst-dev.csv", "dev.csv", 0, 16), "--test-file", piece("ids-sst-dev.csv", "test.csv", 16, 24),
           "--epochs", "1", "--batch-size", "8", "--lr", "1e-3", "--device", TEST_DEVICE, "--no-progress",
           "--checkpoint", str(tmp_path / "run.pt"), "--predictions-dir", str(tmp_path / "pred")]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), HF_HUB_CACHE=str(tmp_path / "fresh-cache"))
    done = warm.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                    check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "bert-base-uncased: dropped 8 tensor(s) that are not the encoder" in done.stderr
    assert any(re.fullmatch(r"GET /bert-base-uncased/resolve/\w+/model.safetensors", r) for r in FakeHub.requests)
    assert (tmp_path / "pred" / "sst-dev-output.csv").is_file() and (tmp_path / "pred" / "sst-test-output.csv").is_file()
