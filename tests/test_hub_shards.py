"""Sharded checkpoints through the fake Hub: the index and the shards it lists, of one format only."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from fakehub import FakeHub, serve, sharded
from safetensors.torch import load_file

import minbert
from minbert.checkpoint import read_weights
from minbert.hub import download

MINILM_DIR = minbert.checkpoint.resolve("minilm")


@pytest.fixture
def hub(tiny_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict[str, torch.Tensor]]:
    """The fake Hub with no repository yet; yields the tiny model's tensors (Hugging Face names) to shard."""
    FakeHub.repos, FakeHub.requests = {}, []
    with serve(monkeypatch, tmp_path / "cache"):
        yield load_file(tiny_dir / "model.safetensors")


def add_repo(name: str, tiny_dir: Path, weights: dict[str, bytes]) -> None:
    """A repository of the tiny model's config and vocabulary, `weights`, and the files minbert never reads."""
    FakeHub.repos[name] = {"config.json": (tiny_dir / "config.json").read_bytes(),
                           "vocab.txt": (MINILM_DIR / "vocab.txt").read_bytes(), "tf_model.h5": b"x",
                           "flax_model.msgpack": b"x", "model.onnx": b"x", **weights}


def fetched(name: str) -> set[str]:
    """The files of repository `name` the fake Hub sent."""
    return {m.group(1) for r in FakeHub.requests if (m := re.fullmatch(rf"GET /{name}/resolve/\w+/(.+)", r))}


@pytest.mark.parametrize("weights", ["model.safetensors", "pytorch_model.bin"])
def test_download_fetches_the_index_and_its_shards(hub: dict[str, torch.Tensor], tiny_dir: Path,
                                                   weights: str, tmp_path: Path) -> None:
    """A sharded repository (no single weights file) loads to the unsharded save's tensors; only its format's files
    come: never the other format's shards, nor the TF, Flax or ONNX copies."""
    shards = sharded(hub, weights)
    other = sharded(hub, "pytorch_model.bin" if weights == "model.safetensors" else "model.safetensors")
    add_repo("org/sharded", tiny_dir, shards | (other if weights == "model.safetensors" else {}))
    snapshot = download("org/sharded", tmp_path / "cache")
    got = read_weights(snapshot)
    assert got.keys() == hub.keys() and all(torch.equal(got[k], v) for k, v in hub.items())
    assert fetched("org/sharded") == {"config.json", "vocab.txt", *shards}
    calls = sum(r.startswith("GET /api/models/org/sharded/revision/") for r in FakeHub.requests)
    assert calls == (2 if weights == "model.safetensors" else 3)   # the index read before its shards are known
    model = minbert.load_pretrained("org/sharded")
    expected = minbert.load_pretrained(str(tiny_dir)).state_dict()
    assert all(torch.equal(v, expected[k]) for k, v in model.state_dict().items())


@pytest.mark.parametrize("weights", ["model.safetensors", "pytorch_model.bin"])
def test_an_index_listing_a_missing_shard_is_one_line(hub: dict[str, torch.Tensor], tiny_dir: Path,
                                                      weights: str, tmp_path: Path) -> None:
    shards = sharded(hub, weights)
    lost = min(f for f in shards if not f.endswith(".json"))
    del shards[lost]
    add_repo("org/lost", tiny_dir, shards)
    with pytest.raises(minbert.CheckpointError, match=f"lists {lost}, which the repository does not hold"):
        minbert.load_pretrained("org/lost")
    with pytest.raises(OSError) as err:
        download("org/lost", tmp_path / "cache")
    message = str(err.value)
    assert "\n" not in message and message.endswith(f"/org/lost: {weights}.index.json lists {lost}, which the "
                                                    "repository does not hold")
    with pytest.raises(minbert.CheckpointError, match=f"{weights}.index.json: lists {lost}, which is missing"):
        minbert.load_pretrained("org/lost")      # the cached index without its shard: read_shards names it too


def test_an_index_that_is_not_json_is_one_line(hub: dict[str, torch.Tensor], tiny_dir: Path, tmp_path: Path) -> None:
    add_repo("org/bad", tiny_dir, {"model.safetensors.index.json": b"{not json"})
    with pytest.raises(OSError) as err:
        download("org/bad", tmp_path / "cache")
    assert "\n" not in str(err.value) and "/org/bad: model.safetensors.index.json is not an index of shards" in str(
        err.value)
