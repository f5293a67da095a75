"""DeeBERT early exit (minbert/deebert.py): stable entropy, the exit rules, batched exit against batch 1, two-stage
training (the command: tests/test_deebert_cli.py)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from conftest import DATA, fit_with

import minbert
from minbert import deebert
from minbert.deebert import DeeBert, DeeBertConfig, EntropyExit, PatienceExit, early_exit, entropy, exit_from_logits
from tasks import deebert as cli
from tasks.classifier import SentimentClassifier
from tasks.core.batching import batches
from tasks.core.data import TASKS

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def tiny_config() -> minbert.BertConfig:
    """Four layers, hidden 32 (conftest's tiny_dir saves it here): samples can leave at several depths."""
    return minbert.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
                              intermediate_size=64, max_position_embeddings=128)


def piece(tmp_path, source, name, start, stop):
    """A slice of a real data file, header kept."""
    lines = (DATA / source).read_text(encoding="utf-8").splitlines(keepends=True)
    path = tmp_path / name
    path.write_text(lines[0] + "".join(lines[1 + start:1 + stop]), encoding="utf-8")
    return str(path)


def sentences(n: int = 12) -> list[str]:
    """SST dev sentences of many lengths (the file's first rows, shortest to longest interleaved)."""
    rows = sorted(TASKS["sst"].read(DATA / "ids-sst-dev.csv")[:40], key=lambda e: len(e.sentence))
    picked = rows[::max(1, len(rows) // n)][:n]
    return [e.sentence for e in picked[::2] + picked[1::2]]


def spread(model: DeeBert, classifier_std: float = 1.0) -> DeeBert:
    """Sharper random weights, so that entropies spread over [0, ln C] and samples leave at different layers."""
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.bert.layers.named_parameters():
            if name.rsplit(".", 1)[-1].startswith("W"):
                p.mul_(10.0)
        for ramp in model.ramps:
            if ramp.pooler is not None:
                torch.nn.init.normal_(ramp.pooler.Wp, 0.0, 0.2)
            torch.nn.init.normal_(ramp.classifier.weight, 0.0, classifier_std)
    return model.eval()


def test_entropy_equals_a_hand_computation_and_stays_finite():
    z = torch.tensor([1.0, 2.0, 3.0])
    p = [math.exp(v) / sum(math.exp(u) for u in (1, 2, 3)) for v in (1, 2, 3)]
    by_hand = -sum(q * math.log(q) for q in p)
    assert entropy(z).item() == pytest.approx(by_hand, abs=1e-6)
    assert entropy(z, normalize=True).item() == pytest.approx(by_hand / math.log(3), abs=1e-6)
    assert entropy(torch.zeros(4, 5)).tolist() == pytest.approx([math.log(5)] * 4, abs=1e-6)
    big = torch.tensor([[1000.0, -1000.0], [1000.0, 1000.0], [-1000.0, 1000.0], [-math.inf, 0.0]])
    h = entropy(big)
    assert torch.isfinite(h).all()
    assert h.tolist() == pytest.approx([0.0, math.log(2), 0.0, 0.0], abs=1e-6)
    naive = torch.logsumexp(big[:2], -1) - (big[:2] * big[:2].exp()).sum(-1) / big[:2].exp().sum(-1)
    assert not torch.isfinite(naive).all()     # the public code's formula overflows here
    assert torch.isnan(entropy(torch.tensor([math.nan, 0.0]))).all()   # a NaN is not hidden as "confident"


def test_exit_rules_by_hand():
    # entropies of these logits: ~0 (confident) and ln 2 (uniform); S = 0.5 lets only the confident one out
    conf, unsure = [9.0, -9.0], [0.0, 0.0]
    z = torch.tensor([[conf, unsure], [unsure, unsure], [conf, conf]])     # (L=3, B=2, C=2)
    logits, layers = exit_from_logits(z, EntropyExit(0.5))
    assert layers.tolist() == [1, 3] and torch.equal(logits, torch.tensor([conf, conf]))
    assert exit_from_logits(z, EntropyExit(0.0))[1].tolist() == [3, 3]      # S = 0: nobody leaves early
    # patience on classes: argmax sequences (0,0,0,0,0), (0,1,1,1,0), (0,1,0,1,0) with P = 2
    seqs = [[0, 0, 0, 0, 0], [0, 1, 1, 1, 0], [0, 1, 0, 1, 0]]
    z = torch.tensor([[[1.0, 0.0] if s[l] == 0 else [0.0, 1.0] for s in seqs] for l in range(5)])
    assert exit_from_logits(z, PatienceExit(2))[1].tolist() == [3, 4, 5]
    assert exit_from_logits(z, PatienceExit(1))[1].tolist() == [2, 3, 5]
    assert exit_from_logits(z, PatienceExit(5))[1].tolist() == [5, 5, 5]
    # patience on a regression: a change below 0.1 counts as unchanged
    values = [[1.0, 1.05, 1.08, 2.0, 2.0], [1.0, 2.0, 3.0, 4.0, 5.0], [1.0, 1.0, 2.0, 2.05, 2.1]]
    z = torch.tensor(values).T[..., None]                                     # (L=5, B=3, 1)
    logits, layers = exit_from_logits(z, PatienceExit(2, change=0.1))
    assert layers.tolist() == [3, 5, 5] and logits[0, 0].item() == pytest.approx(1.08)
    with pytest.raises(ValueError, match="regression exits by patience"):
        EntropyExit(0.3).step(torch.zeros(2, 1), {})
    with pytest.raises(ValueError, match="patience must be at least 1"):
        PatienceExit(0)


def test_off_ramp_poolers_start_as_copies_of_the_checkpoint_pooler(tiny_dir):
    bert = minbert.load_pretrained(str(tiny_dir))
    model = DeeBert(bert, DeeBertConfig(num_labels=2))
    saved = minbert.load_pretrained(str(tiny_dir)).pooler
    assert len(model.ramps) == 4
    for ramp in model.ramps:
        assert torch.equal(ramp.pooler.Wp, saved.Wp) and torch.equal(ramp.pooler.bp, saved.bp)
        assert ramp.pooler.Wp.data_ptr() != bert.pooler.Wp.data_ptr()       # copies, not shared
    with torch.no_grad():
        model.ramps[0].pooler.Wp.add_(1.0)
    assert torch.equal(model.ramps[1].pooler.Wp, saved.Wp)
    assert DeeBert(bert, DeeBertConfig(2, ramp_pooler=False)).ramps[0].pooler is None


def test_the_last_off_ramp_is_the_ordinary_classifier(tiny_dir, tokenizer):
    batch = tokenizer(sentences(6))
    for pooling, ramp_pooler, classifier_pooling in (("mean", False, "mean"), ("cls", True, "pooler")):
        model = spread(DeeBert(minbert.load_pretrained(str(tiny_dir)), DeeBertConfig(3, pooling, ramp_pooler)))
        plain = SentimentClassifier(copy.deepcopy(model.bert), 3, pooling=classifier_pooling).eval()
        plain.head.load_state_dict(model.ramps[-1].classifier.state_dict())
        if ramp_pooler:
            plain.bert.pooler.load_state_dict(model.ramps[-1].pooler.state_dict())
        with torch.no_grad():
            assert torch.allclose(model(**batch), plain(**batch), atol=1e-5)


def test_no_exit_settings_leave_at_the_last_layer_with_the_plain_models_predictions(tiny_dir, tokenizer):
    model = spread(DeeBert(minbert.load_pretrained(str(tiny_dir)), DeeBertConfig(3, "mean")))
    batch = tokenizer(sentences(10))
    with torch.no_grad():
        plain = model(**batch)
    for rule in (EntropyExit(0.0), EntropyExit(0.0, normalize=True), PatienceExit(10**6), PatienceExit(4)):
        out = early_exit(model, batch.input_ids, batch.attention_mask, batch.token_type_ids, rule)
        assert out.layers.tolist() == [4] * 10, rule
        assert torch.equal(out.logits.argmax(-1), plain.argmax(-1))
        assert torch.allclose(out.logits, plain, atol=1e-6)


def batch_one(model, tokenizer, texts, rule):
    """Algorithm 1: each sentence alone, no padding at all."""
    outs = [early_exit(model, *tokenizer([t]).values(), rule=rule) for t in texts]
    return torch.cat([o.logits for o in outs]), torch.cat([o.layers for o in outs])


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_batched_exit_equals_batch_one_on_a_padded_batch(tiny_dir, tokenizer, pooling):
    model = spread(DeeBert(minbert.load_pretrained(str(tiny_dir)), DeeBertConfig(3, pooling)))
    texts = sentences(12)
    batch = tokenizer(texts)
    lengths = batch.attention_mask.sum(1)
    assert (lengths.max() - lengths.min()) >= 10 and (batch.attention_mask == 0).any()   # really padded
    with torch.no_grad():
        h1 = entropy(torch.stack([model.all_logits(*tokenizer([t]).values())[:, 0] for t in texts], 1))  # (L, B)
    cut = h1[:-1].flatten().sort().values
    thresholds = ((cut[1:] + cut[:-1]) / 2)[::3].tolist()                 # between the samples' entropies
    mixed = trimmed = 0
    for rule in [EntropyExit(s) for s in thresholds] + [PatienceExit(1), PatienceExit(2)]:
        one_logits, one_layers = batch_one(model, tokenizer, texts, rule)
        full = early_exit(model, batch.input_ids, batch.attention_mask, batch.token_type_ids, rule, trim=False)
        for out in (early_exit(model, batch.input_ids, batch.attention_mask, batch.token_type_ids, rule), full):
            assert torch.equal(out.layers, one_layers), rule
            assert torch.equal(out.logits.argmax(-1), one_logits.argmax(-1)), rule
            assert torch.allclose(out.logits, one_logits, atol=1e-5), rule
        trimmed += early_exit(model, batch.input_ids, batch.attention_mask, batch.token_type_ids,
                              rule).token_layers < full.token_layers
        mixed += len(set(one_layers.tolist())) >= 3
    assert mixed >= 3 and trimmed >= 1        # samples left at several depths; dropping columns was exercised


def test_batched_patience_on_a_regression_equals_batch_one(tiny_dir, tokenizer):
    model = spread(DeeBert(minbert.load_pretrained(str(tiny_dir)), DeeBertConfig(1, "mean")))
    texts = sentences(12)
    batch = tokenizer(texts)
    with torch.no_grad():
        values = torch.stack([model.all_logits(*tokenizer([t]).values())[:, 0, 0] for t in texts], 1)  # (L, B)
    cut = (values[1:] - values[:-1]).abs().flatten().sort().values
    seen = set()
    for change in ((cut[1:] + cut[:-1]) / 2)[::3].tolist():                  # between the samples' changes
        for rule in (PatienceExit(1, change), PatienceExit(2, change)):
            one_logits, one_layers = batch_one(model, tokenizer, texts, rule)
            out = early_exit(model, batch.input_ids, batch.attention_mask, batch.token_type_ids, rule)
            assert torch.equal(out.layers, one_layers) and torch.allclose(out.logits, one_logits, atol=1e-5)
            seen |= set(one_layers.tolist())
    assert seen == {2, 3, 4}


def train_batches(tokenizer):
    """32 binary SST training sentences, batches of 8 drawn from the epoch."""
    split = cli.load_split("train", DATA / "ids-sst-train.csv", "sst2", tokenizer, limit=32, seed=0)
    return lambda epoch: batches(split, 8, shuffle=True, seed=epoch)


def test_stage_two_leaves_every_stage_one_parameter_bit_identical_and_computes_no_gradient_for_it(
        tiny_dir, tokenizer):
    model = DeeBert(minbert.load_pretrained(str(tiny_dir)), DeeBertConfig(2, "mean"))
    epoch_batches = train_batches(tokenizer)
    def evaluate(m):
        return {"accuracy": 0.0}

    before = {k: v.clone() for k, v in model.state_dict().items()}
    opt = minbert.AdamW(deebert.stage1_parameters(model), lr=1e-3)
    fit_with(model, opt, epoch_batches, cli.stage1_loss, evaluate, metric="accuracy", epochs=1,
             device=torch.device("cpu"), progress=False, log=lambda s: None)
    stage1 = {k: v.clone() for k, v in model.state_dict().items()}
    assert not torch.equal(stage1["bert.layers.0.Wq"], before["bert.layers.0.Wq"])      # stage 1 trained
    assert not torch.equal(stage1["ramps.3.classifier.weight"], before["ramps.3.classifier.weight"])
    assert torch.equal(stage1["ramps.0.classifier.weight"], before["ramps.0.classifier.weight"])

    frozen = [p for n, p in model.named_parameters() if not n.startswith(("ramps.0.", "ramps.1.", "ramps.2."))]
    model.zero_grad(set_to_none=True)
    opt = minbert.AdamW(deebert.stage2_parameters(model), lr=1e-3)
    grad_modes = []
    hooks = [layer.register_forward_hook(lambda *a: grad_modes.append(torch.is_grad_enabled()))
             for layer in model.bert.layers]
    fit_with(model, opt, epoch_batches, cli.stage2_loss, evaluate, metric="accuracy", epochs=1,
             device=torch.device("cpu"), progress=False, log=lambda s: None)
    for h in hooks:
        h.remove()
    state = model.state_dict()
    for name, value in stage1.items():
        if not name.startswith(("ramps.0.", "ramps.1.", "ramps.2.")):
            assert torch.equal(state[name], value), name                       # bit-identical
        else:
            assert not torch.equal(state[name], value), name                   # the off-ramps trained
    assert all(p.grad is None and not p.requires_grad for p in frozen)
    assert grad_modes and not any(grad_modes)                            # the backbone ran without autograd
    assert {id(p) for p in opt.state} == {id(p) for r in model.ramps[:-1] for p in r.parameters()}


def test_every_entry_checks_its_inputs_shapes_as_bert_forward_does(tiny_config):
    """A (B, 1) mask would broadcast and attend to the padding; a 1-D input_ids is one sequence: each entry refuses
    both in one line naming the input, before any layer runs (forward, all_logits, stage 2 and the early exit)."""
    model = DeeBert(minbert.BertModel(tiny_config), DeeBertConfig(2)).eval()
    ids, mask = torch.randint(1, 100, (3, 5)), torch.ones(3, 5, dtype=torch.long)
    entries = (model, model.all_logits, model.stage2_logits,
               lambda i, m, t: early_exit(model, i, m, t, EntropyExit(0.1)))
    for entry in entries:
        for args, name in (((ids, mask[:, :1], None), "attention_mask"), ((ids[0], mask[0], None), "input_ids"),
                           ((ids, mask, ids[:, :1]), "token_type_ids")):
            with pytest.raises(ValueError, match=rf"^{name} has shape \(\d+(, 1)?,?\), expected \(B, T\)[^\n]*$"):
                entry(*args)
