"""Reference numbers for the real bert-base-uncased: the course's sanity_check.py and Hugging Face's integration test.

They need bert-base-uncased's weights, which CI (offline) does not have: each test looks them up in the local Hugging
Face cache (huggingface_hub.try_to_load_from_cache; nothing is ever downloaded here) and is skipped, saying so, when
they are not there. Fetch them once to run these checks, e.g.
    python -c "import minbert; minbert.load_pretrained('bert-base-uncased')"
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import FIXTURES

import minbert

REPOS = ("bert-base-uncased", "google-bert/bert-base-uncased")  # the Hub's old name and its current one


def cached_checkpoint(repos: tuple[str, ...] = REPOS) -> Path | None:
    """The cached snapshot directory holding config.json and weights of the first repo in `repos`, or None."""
    from huggingface_hub import try_to_load_from_cache
    cache = str(minbert.checkpoint.hf_cache_dir())
    for repo in repos:
        config = try_to_load_from_cache(repo, "config.json", cache_dir=cache)
        if not isinstance(config, str):  # None, or the marker of a file known not to exist
            continue
        for weights in minbert.checkpoint.WEIGHT_FILES:
            if isinstance(try_to_load_from_cache(repo, weights, cache_dir=cache), str):
                return Path(config).parent
    return None


@pytest.fixture(scope="module")
def bert_base_uncased() -> minbert.BertModel:
    directory = cached_checkpoint()
    if directory is None:
        pytest.skip(f"bert-base-uncased's weights are not in the local Hugging Face cache "
                    f"({minbert.checkpoint.hf_cache_dir()}; looked for {' and '.join(REPOS)}): this machine is "
                    "offline or never fetched them, and tests never download")
    return minbert.load_pretrained(str(directory))


def test_course_sanity_check(bert_base_uncased: minbert.BertModel) -> None:
    """The course's sanity_check.py (neubig/minbert-assignment): its inputs, its comparison, its stored outputs."""
    sanity_data = torch.load(FIXTURES / "sanity_check.data", weights_only=True)
    sent_ids = torch.tensor([[101, 7592, 2088, 102, 0, 0, 0, 0],
                             [101, 7592, 15756, 2897, 2005, 17953, 2361, 102]])
    att_mask = torch.tensor([[1, 1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        out = bert_base_uncased(sent_ids, att_mask)
    outputs = {"last_hidden_state": out.last_hidden_state * att_mask.unsqueeze(-1), "pooler_output": out.pooler_output}
    expected = {"last_hidden_state": sanity_data["last_hidden_state"] * att_mask.unsqueeze(-1),
                "pooler_output": sanity_data["pooler_output"]}
    for k in ["last_hidden_state", "pooler_output"]:
        assert torch.allclose(outputs[k], expected[k], atol=1e-5, rtol=1e-3), k


def test_hugging_face_integration_numbers(bert_base_uncased: minbert.BertModel) -> None:
    """transformers' tests/models/bert/test_modeling_bert.py, BertModelIntegrationTest.
    test_inference_no_head_absolute_embedding: its input, its expected slice, its tolerance."""
    input_ids = torch.tensor([[0, 345, 232, 328, 740, 140, 1695, 69, 6078, 1588, 2]])
    attention_mask = torch.tensor([[0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        output = bert_base_uncased(input_ids, attention_mask).last_hidden_state
    assert output.shape == (1, 11, 768)
    expected_slice = torch.tensor([[[0.4249, 0.1008, 0.7531], [0.3771, 0.1188, 0.7467], [0.4152, 0.1098, 0.7108]]])
    torch.testing.assert_close(output[:, 1:4, 1:4], expected_slice, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- offline: the fixture and the cache lookup

def test_sanity_fixture_is_the_course_file() -> None:
    data = torch.load(FIXTURES / "sanity_check.data", weights_only=True)
    assert {k: tuple(v.shape) for k, v in data.items()} == {"last_hidden_state": (2, 8, 768), "pooler_output": (2, 768)}


def test_the_checks_run_when_the_weights_are_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lookup finds a snapshot laid out as huggingface_hub writes it (so the checks above run, not skip)."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert cached_checkpoint() is None
    repo = tmp_path / "models--google-bert--bert-base-uncased"
    snapshot = repo / "snapshots" / ("ab" * 20)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("ab" * 20)
    (snapshot / "config.json").write_text("{}")
    assert cached_checkpoint() is None, "config.json alone is not a checkpoint"
    (snapshot / "model.safetensors").write_bytes(b"")
    assert cached_checkpoint() == snapshot
