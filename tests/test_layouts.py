"""Every public BERT layout loads with no flag: the encoder of checkpoints that transformers 5.23 saved.

The fixtures (tests/fixtures/layouts/, written by tests/fixtures/make_layout_fixtures.py) hold each layout's
config.json and model.safetensors as transformers saved them, and its encoder's outputs on a padded batch.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import minbert
from minbert import CheckpointError

LAYOUTS = Path(__file__).resolve().parent / "fixtures" / "layouts"
TOL = 1e-5
# what each layout holds besides the encoder (transformers' heads), and whether it has a pooler
HEADS = {
    "BertModel": {},
    "BertForPreTraining": {"masked-LM head (cls.predictions.*)": 5, "next-sentence head (cls.seq_relationship.*)": 2},
    "BertForMaskedLM": {"masked-LM head (cls.predictions.*)": 5},
    "BertForNextSentencePrediction": {"next-sentence head (cls.seq_relationship.*)": 2},
    "BertForSequenceClassification": {"classification head (classifier.*)": 2},
    "BertForMultipleChoice": {"classification head (classifier.*)": 2},
    "BertForTokenClassification": {"classification head (classifier.*)": 2},
    "BertForQuestionAnswering": {"question-answering head (qa_outputs.*)": 2},
}
NO_POOLER = {"BertForMaskedLM", "BertForTokenClassification", "BertForQuestionAnswering"}

pytestmark = pytest.mark.usefixtures("one_thread")


def compare(model: minbert.BertModel, reference: dict[str, torch.Tensor]) -> None:
    """minbert's encoder against transformers' on the fixture's padded batch: max abs difference <= TOL."""
    mask = reference["attention_mask"]
    assert (mask == 0).any()
    with torch.no_grad():
        out = model(reference["input_ids"], mask, reference["token_type_ids"])
    keep = mask.bool()
    diff = (out.last_hidden_state[keep] - reference["last_hidden_state"][keep]).abs().max().item()
    assert diff <= TOL, f"last_hidden_state differs from transformers by {diff:.2e}"
    if "pooler_output" in reference:
        diff = (out.pooler_output - reference["pooler_output"]).abs().max().item()
        assert diff <= TOL, f"pooler_output differs from transformers by {diff:.2e}"


def test_fixtures_record_their_provenance() -> None:
    meta = json.loads((LAYOUTS / "meta.json").read_text())
    assert meta["transformers_version"] == "5.23.0" and sorted(meta["layouts"]) == sorted(HEADS)


@pytest.mark.parametrize("layout", sorted(HEADS))
def test_layout_loads_with_no_flag(layout: str, caplog: pytest.LogCaptureFixture) -> None:
    directory = LAYOUTS / layout
    assert json.loads((directory / "config.json").read_text())["architectures"] == [layout]
    with caplog.at_level(logging.INFO, logger="minbert"):
        model = minbert.load_pretrained(str(directory))
    lines = [r.getMessage() for r in caplog.records]
    dropped = [line for line in lines if "dropped" in line]
    if HEADS[layout]:
        n = sum(HEADS[layout].values())
        assert len(dropped) == 1 and f"dropped {n} tensor(s) that are not the encoder" in dropped[0]
        for kind, count in HEADS[layout].items():
            assert f"{kind}: {count}" in dropped[0]
    else:
        assert not dropped
    pooler = [line for line in lines if "no pooler" in line]
    assert len(pooler) == (layout in NO_POOLER) and len(lines) == len(dropped) + len(pooler)
    reference = load_file(directory / "reference.safetensors")
    assert ("pooler_output" in reference) == (layout not in NO_POOLER)
    compare(model, reference)
    if layout in NO_POOLER:  # initialised as BERT does: N(0, initializer_range) weight, zero bias
        assert "N(0, 0.02)" in pooler[0]
        assert torch.equal(model.pooler.bp, torch.zeros(32))
        assert 0.017 < model.pooler.Wp.std().item() < 0.023 and abs(model.pooler.Wp.mean().item()) < 0.003


def test_legacy_gamma_beta_names_in_a_bin(tmp_path: Path) -> None:
    """BertForPreTraining as old checkpoints (bert-base-uncased's own files) store it: LayerNorm gamma/beta."""
    source = LAYOUTS / "BertForPreTraining"
    legacy = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
              for k, v in load_file(source / "model.safetensors").items()}
    assert "bert.embeddings.LayerNorm.gamma" in legacy and "cls.predictions.transform.LayerNorm.beta" in legacy
    legacy["bert.embeddings.position_ids"] = torch.arange(16)[None]
    torch.save(legacy, tmp_path / "pytorch_model.bin")
    shutil.copy(source / "config.json", tmp_path / "config.json")
    compare(minbert.load_pretrained(str(tmp_path)), load_file(source / "reference.safetensors"))


def broken(tmp_path: Path, layout: str, change) -> str:
    """A copy of a layout with its tensors changed by `change`; the message of the CheckpointError loading it raises."""
    state = load_file(LAYOUTS / layout / "model.safetensors")
    change(state)
    save_file(state, tmp_path / "model.safetensors")
    shutil.copy(LAYOUTS / layout / "config.json", tmp_path / "config.json")
    with pytest.raises(CheckpointError) as err:
        minbert.load_pretrained(str(tmp_path))
    return str(err.value)


def test_encoder_tensors_stay_strict(tmp_path: Path) -> None:
    """Dropping heads never hides a missing or misshapen encoder tensor; a half pooler is an error too."""
    key = "bert.encoder.layer.1.attention.self.key.bias"
    message = broken(tmp_path, "BertForSequenceClassification", lambda s: s.pop(key))
    assert "1 missing tensor(s): encoder.layer.1.attention.self.key.bias" in message
    message = broken(tmp_path, "BertForPreTraining",
                     lambda s: s.update({"bert.embeddings.token_type_embeddings.weight": torch.zeros(3, 32)}))
    assert "bert.embeddings.token_type_embeddings.weight: checkpoint has (3, 32), the model expects (2, 32)" in message
    message = broken(tmp_path, "BertForSequenceClassification", lambda s: s.pop("bert.pooler.dense.bias"))
    assert "1 missing tensor(s): pooler.dense.bias" in message
    message = broken(tmp_path, "BertForPreTraining", lambda s: s.update({"bert.encoder.layer.2.output.dense.bias":
                                                                        torch.zeros(32)}))
    assert "1 unexpected tensor(s): bert.encoder.layer.2.output.dense.bias" in message


def test_an_unknown_prefix_and_a_wrong_layer_count_are_named_in_one_line(tmp_path: Path) -> None:
    """A state dict under another prefix (a sentence-transformers module's, a wrapper's `model.`) is named as that
    prefix, not as 37 missing tensors; whole layers missing or left over are counted, not listed."""
    for prefix in ("0.auto_model.", "model.", "model.bert."):
        message = broken(tmp_path, "BertModel", lambda s, p=prefix: s.update({p + k: s.pop(k) for k in list(s)}))
        assert message.startswith(f"{tmp_path}: ") and "\n" not in message and len(message) < 400, message
        assert f"the prefix {prefix!r}" in message and "encoder.layer.0" not in message
    config = json.loads((LAYOUTS / "BertModel" / "config.json").read_text())
    shutil.copy(LAYOUTS / "BertModel" / "model.safetensors", tmp_path)
    for layers in (1, 3):
        (tmp_path / "config.json").write_text(json.dumps({**config, "num_hidden_layers": layers}))
        with pytest.raises(CheckpointError) as err:
            minbert.load_pretrained(str(tmp_path))
        assert str(err.value) == (f"{tmp_path}: the config says {layers} layers (num_hidden_layers), the checkpoint "
                                  "holds 2 (encoder.layer.0 to encoder.layer.1): fix num_hidden_layers in config.json")


@pytest.mark.parametrize("weights", ["model.safetensors", "pytorch_model.bin"])
def test_a_sharded_checkpoint_loads_its_shards(weights: str, tmp_path: Path) -> None:
    """transformers' save_pretrained(max_shard_size=...): the files its .index.json lists, read as one."""
    state = load_file(LAYOUTS / "BertModel" / "model.safetensors")
    names = sorted(state)
    shards = {f"part-1-of-2.{weights.split('.')[1]}": names[::2], f"part-2-of-2.{weights.split('.')[1]}": names[1::2]}
    for file, keys in shards.items():
        part = {k: state[k] for k in keys}
        save_file(part, tmp_path / file) if weights.endswith("safetensors") else torch.save(part, tmp_path / file)
    index = {"metadata": {}, "weight_map": {k: file for file, keys in shards.items() for k in keys}}
    (tmp_path / f"{weights}.index.json").write_text(json.dumps(index))
    shutil.copy(LAYOUTS / "BertModel" / "config.json", tmp_path / "config.json")
    compare(minbert.load_pretrained(str(tmp_path)), load_file(LAYOUTS / "BertModel" / "reference.safetensors"))
    (tmp_path / next(iter(shards))).unlink()
    with pytest.raises(CheckpointError, match=f"{weights}.index.json: lists part-1-of-2.*, which is missing"):
        minbert.load_pretrained(str(tmp_path))


def test_strict_mode_refuses_heads_and_a_missing_pooler() -> None:
    """ignore_heads=False: exactly a BertModel checkpoint, as before."""
    with pytest.raises(CheckpointError, match=r"7 unexpected tensor\(s\) \(ignore_heads=True, the default"):
        minbert.load_pretrained(str(LAYOUTS / "BertForPreTraining"), ignore_heads=False)
    with pytest.raises(CheckpointError, match=r"2 missing tensor\(s\): pooler.dense.weight, pooler.dense.bias"):
        minbert.load_pretrained(str(LAYOUTS / "BertForMaskedLM"), ignore_heads=False)
    minbert.load_pretrained(str(LAYOUTS / "BertModel"), ignore_heads=False)


def test_decoder_configs_are_refused(tmp_path: Path) -> None:
    """BertLMHeadModel (is_decoder) attends causally: minbert's bidirectional encoder would compute another thing."""
    config = json.loads((LAYOUTS / "BertForMaskedLM" / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "is_decoder": True}))
    shutil.copy(LAYOUTS / "BertForMaskedLM" / "model.safetensors", tmp_path)
    with pytest.raises(CheckpointError, match="a causal \\(decoder\\) BERT such as BertLMHeadModel"):
        minbert.load_pretrained(str(tmp_path))


# ---------------------------------------------------------------- save_pretrained after every fine-tune mode

@pytest.mark.parametrize("how", ["rand_uniform", "rand_row_col"])
def test_save_after_a_random_control_round_trips(how: str, tiny_config: minbert.BertConfig, tmp_path: Path) -> None:
    """The random controls' W = W0 + scatter(delta) is saved merged; minbert and transformers load it back."""
    from minbert import bitfit_controls
    torch.manual_seed(0)
    model = minbert.BertModel(tiny_config).eval()
    bitfit_controls.freeze_random(model, how, seed=0)
    merged = {}  # by hand: the frozen original with the trained entries added at their flat indices
    for name, module in model.named_modules():
        for attr, plist in getattr(module, "parametrizations", {}).items():
            with torch.no_grad():
                plist[0].delta.copy_(torch.randn_like(plist[0].delta))
            flat = plist.original.detach().flatten().clone()
            flat[plist[0].index] += plist[0].delta.detach()
            merged[f"{name}.{attr}"] = flat.view_as(plist.original)
    assert merged, "the control should re-parametrize some tensors"
    ids = torch.randint(1, 1000, (2, 6))
    mask = torch.tensor([[1] * 6, [1] * 3 + [0] * 3])
    with torch.no_grad():
        before = model(ids, mask)
    model.save_pretrained(str(tmp_path))
    assert any(bitfit_controls.parametrize.is_parametrized(m) for m in model.modules()), "saving must leave the model as it was (training goes on)"
    reloaded = minbert.load_pretrained(str(tmp_path))
    state = reloaded.state_dict()
    for name, tensor in merged.items():
        assert torch.equal(state[name], tensor), name
    with torch.no_grad():
        after = reloaded(ids, mask)
    torch.testing.assert_close(after.last_hidden_state, before.last_hidden_state, atol=1e-6, rtol=0)
    transformers = pytest.importorskip("transformers")
    theirs = transformers.BertModel.from_pretrained(str(tmp_path)).eval()
    with torch.no_grad():
        hf = theirs(input_ids=ids, attention_mask=mask)
    keep = mask.bool()
    assert (hf.last_hidden_state[keep] - before.last_hidden_state[keep]).abs().max() <= TOL
