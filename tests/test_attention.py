"""output_attentions=True: each layer's attention probabilities, as transformers returns them.

Compared with transformers' own BertModel (eager attention, eval mode, output_attentions=True) on the layout fixtures
(tests/fixtures/layouts/, padded batches). minbert's layers output 0 at padding positions (on_real_tokens), where
transformers' carry values no real token ever reads, so the rows of padding queries from layer 2 on differ: the rows of
the real queries are compared, as the hidden states are in tests/test_layouts.py. Every row, padding queries included,
sums to 1 and gives padding keys 0.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import minbert
from minbert.model import attention, attention_probs, fused_attention

pytestmark = pytest.mark.usefixtures("one_thread")
LAYOUTS = Path(__file__).resolve().parent / "fixtures" / "layouts"
TOL = 1e-5


def assert_distributions(attentions: tuple[torch.Tensor, ...], mask: torch.Tensor, layers: int, heads: int) -> None:
    """L tensors of (B, nh, T, T); every row sums to 1; padding keys get exactly 0."""
    B, T = mask.shape
    assert isinstance(attentions, tuple) and len(attentions) == layers
    for probs in attentions:
        assert probs.shape == (B, heads, T, T)
        torch.testing.assert_close(probs.sum(-1), torch.ones(B, heads, T), atol=1e-6, rtol=0)
        padding_keys = (mask == 0)[:, None, None, :].expand_as(probs)
        assert padding_keys.any() and torch.all(probs[padding_keys] == 0)
        assert torch.all(probs[~padding_keys] > 0)


@pytest.mark.parametrize("layout", sorted(p.name for p in LAYOUTS.iterdir() if p.is_dir()))
def test_equal_to_transformers_on_the_layouts(layout: str) -> None:
    import transformers  # a test dependency (requirements-test.txt, installed by make test): never skipped
    transformers.logging.set_verbosity_error()
    reference = load_file(LAYOUTS / layout / "reference.safetensors")
    inputs = {k: reference[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    ours = minbert.load_pretrained(str(LAYOUTS / layout))
    theirs = getattr(transformers, layout).from_pretrained(str(LAYOUTS / layout), attn_implementation="eager").eval()
    theirs = theirs if layout == "BertModel" else theirs.bert
    with torch.no_grad():
        a = ours(**inputs, output_attentions=True).attentions
        b = theirs(**inputs, output_attentions=True).attentions
    mask = inputs["attention_mask"]
    assert_distributions(a, mask, ours.config.num_hidden_layers, ours.config.num_attention_heads)
    real_queries = mask.bool()
    for layer, (x, y) in enumerate(zip(a, b, strict=True)):
        diff = (x.transpose(1, 2)[real_queries] - y.transpose(1, 2)[real_queries]).abs().max().item()
        assert diff <= TOL, f"layer {layer}: the attention probabilities differ from transformers' by {diff:.2e}"
    torch.testing.assert_close(a[0], b[0], atol=TOL, rtol=0)  # layer 1's input is the embeddings: every row equal


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_equal_to_transformers_on_minilm(minilm: minbert.BertModel, tokenizer: minbert.Tokenizer, tmp_path: Path,
                                         impl: str) -> None:
    """The real checkpoint (6 layers, 12 heads), a padded sentence-pair batch, with torch's kernel and attention()."""
    import transformers
    minilm.save_pretrained(str(tmp_path))
    minilm = minbert.load_pretrained(str(tmp_path), attn_implementation=impl)
    theirs = transformers.BertModel.from_pretrained(str(tmp_path), attn_implementation="eager").eval()
    batch = tokenizer(["A cat sat on the mat.", "Hello"], ["A dog.", "A longer second sentence here."])
    with torch.no_grad():
        a = minilm(**batch, output_attentions=True).attentions
        b = theirs(**batch, output_attentions=True).attentions
    assert_distributions(a, batch.attention_mask, 6, 12)
    keep = batch.attention_mask.bool()
    for x, y in zip(a, b, strict=True):
        assert (x.transpose(1, 2)[keep] - y.transpose(1, 2)[keep]).abs().max() <= TOL


def test_none_unless_asked_and_nothing_else_changes(tiny_config: minbert.BertConfig) -> None:
    """Asking changes no output and, in train mode, draws no random numbers (the dropout masks stay the same)."""
    tiny_config.hidden_dropout_prob = tiny_config.attention_probs_dropout_prob = 0.3
    torch.manual_seed(0)
    model = minbert.BertModel(tiny_config)
    ids = torch.randint(1000, 2000, (2, 7))
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3])
    for train in (False, True):
        model.train(train)
        torch.manual_seed(1)
        plain = model(ids, mask, output_hidden_states=True)
        torch.manual_seed(1)
        asked = model(ids, mask, output_hidden_states=True, output_attentions=True)
        assert plain.attentions is None
        assert torch.equal(plain.last_hidden_state, asked.last_hidden_state)
        assert all(torch.equal(x, y) for x, y in zip(plain.hidden_states, asked.hidden_states, strict=True))
        # in train mode too the probabilities before dropout: rows sum to 1
        assert_distributions(asked.attentions, mask, 2, 4)


@pytest.mark.parametrize("T", [6, 8, 21])
def test_attention_weighs_the_values_with_these_probabilities(T: int) -> None:
    """attention(Q, K, V, mask) = attention_probs(Q, K, mask, fused_attention) V with the heads merged, for T below,
    at and above hs = 8 (the identity's columns go through attend in slices of hs); attention_probs through
    attention() itself equals softmax(QK^T / sqrt(hs) + mask) written here."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, T, 8) for _ in range(3))
    mask = minbert.model.mask_to_bias(torch.tensor([[1] * T, [1] * 2 + [0] * (T - 2)]), torch.float32)
    merged = (attention_probs(q, k, mask, fused_attention) @ v).transpose(1, 2).reshape(2, T, 32)
    torch.testing.assert_close(merged, attention(q, k, v, mask), atol=1e-6, rtol=0)
    by_hand = (q @ k.transpose(-2, -1) / math.sqrt(8) + mask).softmax(-1)   # (B, nh, T, T)
    assert torch.equal(attention_probs(q, k, mask, attention), by_hand)       # one-hot values select exactly
    torch.testing.assert_close(attention_probs(q, k, mask, fused_attention), by_hand, atol=1e-6, rtol=0)


def test_the_maps_show_the_layers_own_attention_function_a_mistaken_one_included(tiny_config) -> None:
    """output_attentions comes from each layer's attend: attention() with a classic mistake (no 1/sqrt(hs)) gives
    softmax(QK^T + mask) of each layer's own input (hidden_states), not the right maps, so a student's attention()
    is what tasks.attention draws in a student tree (eager there by default)."""
    from assignments.mistakes import attention_variant
    torch.manual_seed(0)
    tiny_config.attn_implementation = "eager"
    model = minbert.BertModel(tiny_config).eval()
    ids, mask = torch.randint(1000, 2000, (2, 19)), torch.tensor([[1] * 19, [1] * 5 + [0] * 14])
    with torch.no_grad():
        right = model(ids, mask, output_attentions=True).attentions
        for layer in model.layers:
            layer.attend = lambda q, k, v, m, *_: attention_variant(q, k, v, m, scale="none")
        out = model(ids, mask, output_attentions=True, output_hidden_states=True)
    bias = minbert.model.mask_to_bias(mask, torch.float32)
    for layer, x, probs, good in zip(model.layers, out.hidden_states[:-1], out.attentions, right, strict=True):
        q, k = (layer.split_heads(torch.nn.functional.linear(x, w, b))
                for w, b in ((layer.Wq, layer.bq), (layer.Wk, layer.bk)))   # (B, nh, T, hs)
        torch.testing.assert_close(probs, (q @ k.transpose(-2, -1) + bias).softmax(-1), atol=1e-6, rtol=0)
        assert (probs - good).abs().max() > 1e-3


# ---------------------------------------------------------------- python -m tasks.attention: the drawing

def test_drawing_a_sentence_and_a_pair(tiny_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from tasks.attention import main
    for name, extra in (("one.png", []), ("pair.png", ["--pair", "A dog barked at it."])):
        out = tmp_path / name
        assert main(["--model", str(tiny_dir), "--text", "The cat sat on the mat.", *extra, "--layer", "2",
                     "--out", str(out)]) == 0
        data = out.read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5000
        assert f"wrote {out}" in capsys.readouterr().out


def test_the_figure_has_a_labelled_colour_scale_and_its_title_clears_the_panels_on_a_long_sentence(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A colour bar (0 to 1, "attention probability") beside the panels; the title above every panel, not over the
    top row, with a ~30-token sentence."""
    from tasks import attention
    kept = []
    monkeypatch.setattr(attention, "save_figure", lambda fig, out, **kw: kept.append(fig) or Path(out))
    words = "the quick brown fox jumps over the lazy dog while the farmer who had been watching all morning finally"
    tokens = ["[CLS]", *words.split(), "decided", "to", "intervene", "in", "an", "unexpected", "way", ".", "[SEP]"]
    probs = torch.rand(4, len(tokens), len(tokens)).softmax(-1)
    attention.draw(probs, tokens, "tiny: layer 2 of 2, 4 heads (rows attend to columns)", tmp_path / "a.png")
    fig = kept[0]
    fig.canvas.draw()
    bars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert len(bars) == 1 and bars[0].get_ylabel() == "attention probability"
    assert tuple(bars[0].get_ylim()) == (0.0, 1.0)
    renderer = fig.canvas.get_renderer()
    title = fig._suptitle.get_window_extent(renderer)
    panels = [ax for ax in fig.axes if ax not in bars and ax.get_visible() and ax.axison]
    assert len(panels) == 4 and all(title.y0 >= ax.get_tightbbox(renderer).y1 for ax in panels)


def test_drawing_the_tokens_and_the_layer(tiny_dir: Path) -> None:
    """The panels' tokens are the pair's, [CLS] ... [SEP] ... [SEP]; layers count from 1 and a wrong one is refused."""
    from tasks.attention import layer_attention
    from tasks.core.errors import ConfigurationError
    model, tokenizer = minbert.load_pretrained(str(tiny_dir)), minbert.Tokenizer.from_pretrained(str(tiny_dir))
    probs, tokens = layer_attention(model, tokenizer, "The cat sat.", "A dog.", 2)
    assert tokens == ["[CLS]", "the", "cat", "sat", ".", "[SEP]", "a", "dog", ".", "[SEP]"]
    assert probs.shape == (4, 10, 10)
    with torch.no_grad():
        expected = model(**tokenizer("The cat sat.", "A dog."), output_attentions=True).attentions[1][0]
    assert torch.equal(probs, expected)
    for layer in (0, 3):
        with pytest.raises(ConfigurationError, match=f"--layer {layer}: the model has layers 1 to 2"):
            layer_attention(model, tokenizer, "The cat sat.", None, layer)


def test_a_trained_run_draws_its_best_encoder_and_what_cannot_be_drawn_says_why(tiny_dir: Path, tmp_path: Path,
                                                                              capsys: pytest.CaptureFixture) -> None:
    """--model RUN_DIR: the maps of the run's best epoch's encoder (its checkpoint's bert.* weights on the run's own
    --model), not those of the checkpoint it started from; a run of a command without an encoder, a PALs run (its
    layers add a task's PAL) and a run whose checkpoint is gone are refused with a line naming the run."""
    import json

    from tasks import classifier
    from tasks.attention import encoder, layer_attention, main
    from tasks.core.checkpoints import load_checkpoint
    from tasks.core.errors import ConfigurationError, MissingFileError
    data = Path(__file__).resolve().parents[1] / "data"

    def piece(name: str, stop: int) -> str:
        lines = (data / name).read_text(encoding="utf-8").splitlines(keepends=True)
        (tmp_path / name).write_text("".join(lines[:1 + stop]), encoding="utf-8")
        return str(tmp_path / name)
    run = tmp_path / "run"
    classifier.run(classifier.parse_settings([
        "--model", str(tiny_dir), "--batch-size", "8", "--epochs", "1", "--lr", "1e-3", "--no-progress",
        "--train-file", piece("ids-sst-train.csv", 16), "--dev-file", piece("ids-sst-dev.csv", 8),
        "--test-file", str(tmp_path / "ids-sst-dev.csv"), "--run-dir", str(run)]))
    bert, base, name = encoder(str(run), "eager")
    assert (base, name) == (str(tiny_dir), "run (epoch 1)")
    best = load_checkpoint(run / "checkpoint.pt")["best_state"]
    assert all(torch.equal(v, best[f"bert.{k}"]) for k, v in bert.state_dict().items())
    tokenizer = minbert.Tokenizer.from_pretrained(str(tiny_dir))
    tuned = layer_attention(bert, tokenizer, "The cat sat on the mat.", None, 2)[0]
    start = layer_attention(minbert.load_pretrained(str(tiny_dir)), tokenizer, "The cat sat on the mat.", None, 2)[0]
    assert (tuned - start).abs().max() > 1e-3                     # fine-tuning moved the maps
    out = tmp_path / "tuned.png"
    assert main(["--model", str(run), "--layer", "2", "--out", str(out)]) == 0
    assert out.read_bytes().startswith(b"\x89PNG") and f"wrote {out}" in capsys.readouterr().out

    record = json.loads((run / "run.json").read_text())
    for what, change, error, says in (
            ("ensemble", {"command": "ensemble", "settings": {}}, ConfigurationError, "trains no encoder"),
            ("pals", {"settings": {**record["settings"], "pals": {"pals": "standard"}}}, ConfigurationError, "PALs"),
            ("gone", {}, MissingFileError, "checkpoint.pt is missing")):
        other = tmp_path / what
        other.mkdir()
        (other / "run.json").write_text(json.dumps({**record, **change}))
        with pytest.raises(error, match=f"{other}.*{says}"):
            encoder(str(other), "eager")
    with pytest.raises(MissingFileError, match="neither a checkpoint .no config.json. nor a run directory"):
        encoder(str(tmp_path), "eager")
