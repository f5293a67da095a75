"""minbert's BertModel against Hugging Face transformers' outputs (fixtures), and its extension points."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import minbert
from minbert.model import attention, fused_attention, mask_to_bias

FIXTURES = Path(__file__).resolve().parent / "fixtures"

TOL = 1e-5  # max abs difference allowed against Hugging Face BertModel, float32, eval mode


@pytest.fixture(scope="module")
def reference() -> dict[str, torch.Tensor]:
    """Hugging Face BertModel's outputs for the fixture inputs (written by tests/fixtures/make_fixtures.py)."""
    return load_file(FIXTURES / "minilm_reference.safetensors")


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_matches_hugging_face(reference: dict[str, torch.Tensor], impl: str) -> None:
    model = minbert.load_pretrained("minilm", attn_implementation=impl)
    assert not model.training
    ids, mask, types = reference["input_ids"], reference["attention_mask"], reference["token_type_ids"]
    assert ids.shape[0] >= 8 and (mask == 0).any(), "the fixture batch should hold >= 8 inputs, some padded"
    with torch.no_grad():
        out = model(ids, mask, types, output_hidden_states=True)
    keep = mask.bool()
    L = model.config.num_hidden_layers
    assert len(out.hidden_states) == L + 1 == reference["hidden_states"].shape[0]
    for layer, (ours, theirs) in enumerate(zip(out.hidden_states, reference["hidden_states"])):
        diff = (ours[keep] - theirs).abs().max().item()
        assert diff <= TOL, f"{impl}: hidden state {layer} differs from Hugging Face by {diff:.2e}"
    diff = (out.last_hidden_state[keep] - reference["hidden_states"][-1]).abs().max().item()
    assert diff <= TOL, f"{impl}: last_hidden_state differs by {diff:.2e}"
    assert not out.last_hidden_state[~keep].any(), "padding positions: zeros (README says so)"
    diff = (out.pooler_output - reference["pooler_output"]).abs().max().item()
    assert diff <= TOL, f"{impl}: pooler_output differs by {diff:.2e}"


def test_fixture_records_its_provenance() -> None:
    meta = json.loads((FIXTURES / "minilm_reference.json").read_text())["meta"]
    assert meta["transformers_version"] and meta["attn_implementation"] == "eager" and meta["mode"] == "eval"


def test_eager_and_fused_attention_agree() -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 4, 7, 8) for _ in range(3))        # (B, nh, T, hs)
    attention_mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3, [1] * 2 + [0] * 5])
    bias = mask_to_bias(attention_mask, q.dtype)                  # (B, 1, 1, T)
    eager, fused = attention(q, k, v, bias), fused_attention(q, k, v, bias)
    assert eager.shape == (3, 7, 32)
    torch.testing.assert_close(eager, fused, atol=1e-6, rtol=1e-5)
    # padding keys get no weight: changing v at padded positions changes nothing
    v2 = v.clone()
    v2[1, :, 4:] = 100.0
    torch.testing.assert_close(attention(q, k, v2, bias)[1], eager[1], atol=1e-6, rtol=0)


def tiny_batch(config: minbert.BertConfig, B: int = 3, T: int = 10) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, config.vocab_size, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, 6:] = 0
    types = torch.zeros(B, T, dtype=torch.long)
    types[:, 5:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def test_dropout_only_in_train_mode(tiny_config: minbert.BertConfig) -> None:
    torch.manual_seed(0)
    model = minbert.BertModel(tiny_config)
    batch = tiny_batch(tiny_config)
    model.train()
    a, b = model(**batch).last_hidden_state, model(**batch).last_hidden_state
    assert not torch.allclose(a, b), "two train-mode forwards should differ (dropout)"
    model.eval()
    c, d = model(**batch).last_hidden_state, model(**batch).last_hidden_state
    assert torch.equal(c, d)
    assert not torch.allclose(a, c)


def test_embeddings_then_encoder_equals_forward(minilm: minbert.BertModel, tokenizer: minbert.Tokenizer) -> None:
    batch = tokenizer(["A cat sat on the mat.", "Hi"], ["A dog.", "A longer second sentence here."])
    with torch.no_grad():
        full = minilm(**batch)
        h0 = minilm.embed(batch.input_ids, batch.token_type_ids)   # (B, T, H)
        split = minilm(attention_mask=batch.attention_mask, embeddings=h0)
        shifted = minilm(attention_mask=batch.attention_mask, embeddings=h0 + 0.1)
    assert h0.shape == (*batch.input_ids.shape, minilm.config.hidden_size)
    assert torch.equal(full.last_hidden_state, split.last_hidden_state)
    assert torch.equal(full.pooler_output, split.pooler_output)
    assert not torch.allclose(shifted.last_hidden_state, full.last_hidden_state), "embeddings must be used"


def test_layers_can_be_run_one_at_a_time(minilm: minbert.BertModel, tokenizer: minbert.Tokenizer) -> None:
    batch = tokenizer(["A cat sat on the mat.", "Hello"])
    with torch.no_grad():
        full = minilm(**batch, output_hidden_states=True)
        h = minilm.embed(batch.input_ids, batch.token_type_ids)
        bias = minilm.attention_bias(batch.attention_mask, h)
        for layer, expected in zip(minilm.layers, full.hidden_states[1:]):
            h = layer(h, bias)
            assert torch.equal(h, expected)
        pooled = minilm.pooler(h)
    assert torch.equal(h, full.last_hidden_state)
    assert torch.equal(pooled, full.pooler_output)
    assert len(full.hidden_states) == minilm.config.num_hidden_layers + 1
    assert full.hidden_states[0].shape == full.last_hidden_state.shape
    assert minilm(**batch).hidden_states is None


class ConstantAdapter(torch.nn.Module):
    """Leaves the merged heads as they are and adds the same vector at every position inside the last
    add-and-norm (ts); records that it was called and with what."""

    def __init__(self, value: torch.Tensor):
        super().__init__()
        self.value, self.calls = value, []

    def forward(self, h1: torch.Tensor, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.calls.append((h1.shape, x.shape, mask.shape))
        return h1, self.value.expand_as(x)


def test_layer_adapter_is_called_and_added(tiny_config: minbert.BertConfig) -> None:
    torch.manual_seed(0)
    model = minbert.BertModel(tiny_config).eval()
    batch = tiny_batch(tiny_config)
    H = tiny_config.hidden_size
    with torch.no_grad():
        plain = model(**batch).last_hidden_state

        zero = ConstantAdapter(torch.zeros(H))
        model.layers[0].adapter = zero
        assert torch.equal(model(**batch).last_hidden_state, plain)
        assert zero.calls == [((3, 10, H), (3, 10, H), (3, 1, 1, 10))]

        # an adapter adding c inside the last add-and-norm is the same as adding c to the bias bm3 of that layer
        c = torch.randn(H)
        model.layers[0].adapter = ConstantAdapter(c)
        with_adapter = model(**batch).last_hidden_state
        model.layers[0].adapter = None
        shifted = copy.deepcopy(model)
        shifted.layers[0].bm3 += c
        torch.testing.assert_close(with_adapter, shifted(**batch).last_hidden_state, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(with_adapter, plain)


def test_padding_changes_nothing_at_real_tokens(minilm: minbert.BertModel, tokenizer: minbert.Tokenizer) -> None:
    """A sentence alone and in a padded batch gives the same outputs; padding positions come out as 0."""
    texts = ["Short one.", "A much longer sentence that makes the first one padded in the batch."]
    with torch.no_grad():
        alone = minilm(**tokenizer(texts[:1]), output_hidden_states=True)
        batch = tokenizer(texts)
        padded = minilm(**batch, output_hidden_states=True)
    n = alone.last_hidden_state.shape[1]
    assert batch.attention_mask[0, n:].eq(0).all() and batch.attention_mask.shape[1] > n
    for a, b in zip(alone.hidden_states, padded.hidden_states):
        torch.testing.assert_close(a[0], b[0, :n], atol=1e-5, rtol=0)
    torch.testing.assert_close(alone.pooler_output[0], padded.pooler_output[0], atol=1e-5, rtol=0)
    assert padded.last_hidden_state[0, n:].eq(0).all()


def test_too_long_sequence_is_a_clear_error(tiny_config: minbert.BertConfig) -> None:
    model = minbert.BertModel(tiny_config)
    n = tiny_config.max_position_embeddings
    model(torch.ones(1, n, dtype=torch.long))  # the limit itself is fine
    with pytest.raises(ValueError, match=rf"{n + 1} tokens is longer than the model's {n} positions"):
        model(torch.ones(1, n + 1, dtype=torch.long))


def test_a_wrong_shaped_input_is_named_in_one_line(tiny_config: minbert.BertConfig) -> None:
    """forward compares its inputs' shapes (no value: free under torch.compile): a (B, 1) mask would broadcast and
    attend to the padding, the others failed deep in the layers; bool, int and float (B, T) masks agree."""
    model = minbert.BertModel(tiny_config).eval()
    ids = torch.randint(1, 100, (3, 10))
    mask = torch.ones(3, 10, dtype=torch.long)
    mask[0, 6:] = 0
    h = model.embed(ids)
    for kwargs, shape in [({"attention_mask": mask[:, :1]}, "(3, 1)"), ({"attention_mask": mask[:, :8]}, "(3, 8)"),
                          ({"attention_mask": mask[:1]}, "(1, 10)"), ({"attention_mask": mask[0]}, "(10,)"),
                          ({"attention_mask": mask[:, None, None]}, "(3, 1, 1, 10)"),
                          ({"token_type_ids": ids[:, :5]}, "(3, 5)")]:
        name = next(iter(kwargs))
        for given in ({"input_ids": ids}, {"embeddings": h}):
            with pytest.raises(ValueError, match=rf"^{name} has shape {re.escape(shape)}, expected \(B, T\) = "
                                                 r"\(3, 10\)"):
                model(**given, **kwargs)
    with pytest.raises(ValueError, match=r"^input_ids has shape \(10,\), expected \(B, T\)"):
        model(ids[0])
    with pytest.raises(ValueError, match=r"^embeddings has shape \(10, 32\), expected \(B, T, H\)"):
        model(embeddings=h[0])
    with torch.no_grad():
        outs = [model(ids, m).last_hidden_state for m in (mask, mask.bool(), mask.float(), mask.int())]
    assert all(torch.equal(outs[0], out) for out in outs[1:])


def test_gradients_reach_every_named_parameter(tiny_config: minbert.BertConfig) -> None:
    torch.manual_seed(0)
    model = minbert.BertModel(tiny_config).train()
    out = model(**tiny_batch(tiny_config))
    (out.last_hidden_state.square().mean() + out.pooler_output.sum()).backward()
    names = {n for n, _ in model.named_parameters()}
    assert {"layers.0.Wq", "layers.0.bq", "layers.1.bm2", "embeddings.gLN", "pooler.Wp"} <= names
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, f"{name} got no gradient"


# ---------------------------------------------------------------- hidden_act: what Hugging Face computes, or refused

def test_every_activation_matches_hugging_face() -> None:
    """Each hidden_act minbert accepts computes Hugging Face's ACT2FN[name] (float64, x in [-12, 12])."""
    activations = pytest.importorskip("transformers.activations")
    from minbert.model import ACTIVATIONS
    x = torch.linspace(-12, 12, 2001, dtype=torch.float64)
    for name, ours in ACTIVATIONS.items():
        torch.testing.assert_close(ours(x), activations.ACT2FN[name](x), atol=1e-12, rtol=1e-12, msg=name)
    assert set(activations.ACT2FN) - set(ACTIVATIONS) <= {"prelu", "xielu"}   # those have weights of their own
    tanh_gelu = ACTIVATIONS["gelu_new"](x)
    assert (tanh_gelu - ACTIVATIONS["gelu"](x)).abs().max() > 1e-4, "the tanh approximation is not the erf GELU"


@pytest.mark.parametrize("act", ["gelu_new", "gelu_pytorch_tanh", "relu"])
def test_tanh_gelu_model_matches_transformers(act: str, tmp_path: Path) -> None:
    """A transformers BertModel with hidden_act=act, saved and loaded into minbert: the same outputs to 1e-5."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=16, hidden_act=act)
    theirs = transformers.BertModel(config).eval()
    with torch.no_grad():
        for p in theirs.parameters():
            p.add_(0.5 * torch.randn_like(p))  # larger than BERT's init, so the two GELUs differ in the outputs
    theirs.save_pretrained(tmp_path)
    ours = minbert.load_pretrained(str(tmp_path))
    assert ours.config.hidden_act == act
    ids = torch.randint(1, 100, (2, 7))
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3])
    with torch.no_grad():
        a, b = ours(ids, mask), theirs(input_ids=ids, attention_mask=mask)
        ours.config.hidden_act = "gelu"
        erf = minbert.BertModel(ours.config).eval()
        erf.load_state_dict(ours.state_dict())
        c = erf(ids, mask)
    keep = mask.bool()
    assert (a.last_hidden_state[keep] - b.last_hidden_state[keep]).abs().max() <= 1e-5
    assert (a.pooler_output - b.pooler_output).abs().max() <= 1e-5
    assert (c.last_hidden_state[keep] - b.last_hidden_state[keep]).abs().max() > 1e-4, "erf GELU must differ"


def test_unsupported_activation_is_refused() -> None:
    for name in ("prelu", "xielu", "GELU", "gelu_tanh"):  # weights of their own, or not a Hugging Face name
        with pytest.raises(ValueError, match=rf"hidden_act '{name}' is not supported; minbert computes .*gelu_new"):
            minbert.BertConfig(hidden_act=name)


def test_a_config_built_directly_is_checked_as_one_read_from_json() -> None:
    """BertConfig(...) runs the checks config.json gets (no ZeroDivisionError, no model of width 0)."""
    for kwargs, message in [({"num_attention_heads": 0}, "num_attention_heads must be positive, not 0"),
                            ({"hidden_size": 0, "num_attention_heads": 1}, "hidden_size must be positive, not 0"),
                            ({"pad_token_id": -1}, "pad_token_id must be 0 or more, not -1"),
                            ({"num_hidden_layers": 2.0}, "num_hidden_layers must be an integer, not 2.0"),
                            ({"hidden_dropout_prob": "0.1"}, "hidden_dropout_prob must be a number, not '0.1'")]:
        with pytest.raises(ValueError, match=message):
            minbert.BertConfig(**kwargs)
        with pytest.raises(ValueError, match=message):
            minbert.BertConfig.from_dict(kwargs)


def test_every_config_field_s_type_has_its_check() -> None:
    """__post_init__ checks each field by its annotation in config.TYPES: a field typed otherwise (a future bool or
    str | None) is one line naming it, not a bare KeyError."""
    from dataclasses import dataclass, fields

    from minbert.config import TYPES
    assert {f.name: f.type for f in fields(minbert.BertConfig) if f.type not in TYPES} == {}

    @dataclass
    class WithAFlag(minbert.BertConfig):
        use_flag: bool = False
    with pytest.raises(TypeError, match=r"^BertConfig field use_flag: its type 'bool' has no entry in "
                                        r"minbert/config.py's TYPES \(its check\); add one$"):
        WithAFlag()


def test_a_config_without_a_padding_token_builds_a_model() -> None:
    """pad_token_id null, as transformers saves and reloads it: an embedding without a padding row."""
    config = minbert.BertConfig.from_dict({"pad_token_id": None, "hidden_size": 8, "num_attention_heads": 2,
                                           "num_hidden_layers": 1, "intermediate_size": 16, "vocab_size": 20})
    model = minbert.BertModel(config)
    assert config.pad_token_id is None and model.embeddings.word.padding_idx is None
    assert model(torch.tensor([[1, 2, 3]])).last_hidden_state.shape == (1, 3, 8)
    assert minbert.BertConfig.from_dict(config.to_hf_dict()) == config


def test_a_wrong_shaped_attention_or_pool_stops_where_the_given_code_calls_it(
        tiny_config: minbert.BertConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    """A student's attention() that leaves the heads unmerged, or a pool() that keeps a dimension, is named where
    the given code calls it (a one-line error in a run, run_cli's USER_ERRORS), not deep in code that uses its result;
    the checker's `model` part says so too."""
    import re

    import tasks.classifier
    from assignments import check
    from minbert.shapes import ShapeError
    from tasks.core.errors import USER_ERRORS
    assert issubclass(ShapeError, USER_ERRORS)
    batch = tiny_batch(tiny_config)                                   # B 3, T 10, H 32 (4 heads of 8)
    monkeypatch.setattr(minbert.model, "attention", lambda q, k, v, mask, p=0.0, training=False: v)
    tiny_config.attn_implementation = "eager"                        # attention() itself, as students' runs
    model = minbert.BertModel(tiny_config)
    with pytest.raises(ShapeError, match=re.escape(
            "attention() returned shape (3, 4, 10, 8), expected (B, T, H) = (3, 10, 32): merge the heads, "
            "(B, nh, T, hs) -> (B, T, nh*hs); python -m assignments.check attention")):
        model(**batch)
    result = check.run_part("model")
    assert result["status"] == "fail" and result["message"].startswith("attention() returned shape"), result
    assert "shapes.py" not in result["message"]            # the student's function, not the given check's file
    monkeypatch.undo()

    monkeypatch.setattr(tasks.classifier, "pool", lambda hidden, mask, pooled, how: hidden[:, :1])
    classifier = tasks.classifier.SentimentClassifier(minbert.BertModel(tiny_config), 5)
    with pytest.raises(ShapeError, match=re.escape(
            "pool() returned shape (3, 1, 32), expected (B, H) = (3, 32): one vector per sentence; "
            "python -m assignments.check classifier_head")):
        classifier(batch["input_ids"], batch["attention_mask"])
    from minbert import multitask
    monkeypatch.setattr(multitask, "pool", lambda hidden, mask, pooled, how: hidden[:, :1])
    with pytest.raises(ShapeError, match=re.escape("pool() returned shape (3, 1, 32), expected (B, H) = (3, 32)")):
        multitask.MultitaskBert(minbert.BertModel(tiny_config)).encode(batch["input_ids"], batch["attention_mask"])
