"""Tests written to kill the mutants mutmut left alive in minbert/deebert.py (tests/MUTATION.md): the config's
messages, the off-ramp's dropout, segment ids and the padding mask reaching every layer (against BertModel's own
forward, itself checked against transformers in tests/test_model.py), stage 1's parameter set, and the exit rules'
edges (normalised entropy, a strict threshold, a strict patience change, a sample leaving only once) by hand."""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F

import minbert
from minbert.deebert import (
    DeeBert,
    DeeBertConfig,
    EntropyExit,
    PatienceExit,
    entropy,
    exit_from_logits,
    ramp_loss,
    stage1_parameters,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny() -> DeeBert:
    torch.manual_seed(0)
    config = minbert.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=3, num_attention_heads=2,
                                intermediate_size=32, max_position_embeddings=16, hidden_dropout_prob=0.25)
    model = DeeBert(minbert.BertModel(config), DeeBertConfig(3, "cls")).eval()
    with torch.no_grad():                                   # sharper than BERT's N(0, 0.02): segments matter
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return model


def test_config_messages_exactly() -> None:
    with pytest.raises(ValueError, match="^" + re.escape("pooling must be one of ('mean', 'cls'), not 'pooler'") + "$"):
        DeeBertConfig(2, "pooler")
    with pytest.raises(ValueError, match="^num_labels must be at least 1, not 0$"):
        DeeBertConfig(0)
    with pytest.raises(ValueError, match="^" + re.escape(
            "entropy needs a class distribution; a regression exits by patience (PatienceExit)") + "$"):
        EntropyExit(0.3).step(torch.zeros(2, 1), {})


def test_off_ramp_dropout_is_the_configs_else_the_encoders() -> None:
    bert = tiny().bert
    assert [r.dropout.p for r in DeeBert(bert, DeeBertConfig(2, dropout=0.6)).ramps] == [0.6] * 3
    assert [r.dropout.p for r in DeeBert(bert, DeeBertConfig(2)).ramps] == [0.25] * 3


def test_segments_and_padding_reach_every_layer_and_ramp() -> None:
    """Every path (hidden_states, forward, all_logits, stage2_logits) equals BertModel's forward on a padded batch
    with two segments, each ramp applied by hand: classifier(tanh(Wp h[:, 0] + bp))."""
    model = tiny()
    ids = torch.tensor([[2, 7, 9, 3, 11, 4], [2, 5, 6, 3, 8, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0]])
    segments = torch.tensor([[0, 0, 0, 0, 1, 1], [0, 0, 0, 1, 1, 0]])
    with torch.no_grad():
        reference = model.bert(ids, mask, segments, output_hidden_states=True).hidden_states[1:]   # L of (B, T, H)
        ramps = [F.linear(torch.tanh(F.linear(h[:, 0], r.pooler.Wp, r.pooler.bp)), r.classifier.weight,
                          r.classifier.bias) for r, h in zip(model.ramps, reference)]            # L of (B, C)
        hidden = model.hidden_states(ids, mask, segments)
        all_logits = model.all_logits(ids, mask, segments)
        stage2 = model.stage2_logits(ids, mask, segments)
        last = model(ids, mask, segments)
        unsegmented = model(ids, mask)
    for got, want in zip(hidden, reference):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    torch.testing.assert_close(all_logits, torch.stack(ramps), rtol=0, atol=1e-5)
    for got, want in zip(stage2, ramps[:-1]):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    assert len(stage2) == 2
    torch.testing.assert_close(last, ramps[-1], rtol=0, atol=1e-5)
    assert (unsegmented - last).abs().max() > 1e-3             # the segments do change the answer


def test_stage_one_trains_the_encoder_without_its_pooler_and_only_the_last_ramp() -> None:
    model = tiny()
    expected = {f"bert.{n}" for n, _ in model.bert.named_parameters() if not n.startswith("pooler.")}
    expected |= {f"ramps.2.{n}" for n, _ in model.ramps[2].named_parameters()}
    ids = {id(p) for p in stage1_parameters(model)}
    assert {n for n, p in model.named_parameters() if id(p) in ids} == expected
    assert {n for n, p in model.named_parameters() if p.requires_grad} == expected


def test_regression_ramp_loss_by_hand() -> None:
    z, y = torch.tensor([[0.5], [2.0], [-1.0]]), torch.tensor([1.0, 0.0, 2.0])   # (B=3, 1): squared error
    assert ramp_loss(z, y).item() == pytest.approx((0.25 + 4.0 + 9.0) / 3)


def test_entropy_normalised_edges_and_leading_dimensions() -> None:
    assert entropy(torch.zeros(2, 1), normalize=True).tolist() == [0.0, 0.0]     # one class: H = 0, not 0 / ln 1
    assert entropy(torch.zeros(3, 2), normalize=True).tolist() == pytest.approx([1.0] * 3, abs=1e-6)   # ln 2 / ln 2
    z = torch.tensor([[[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]], [[5.0, 0.0, 0.0], [1.0, 1.0, 4.0]]])   # (2, 2, C=3)
    by_hand = []
    for row in z.reshape(-1, 3).tolist():
        p = [math.exp(v) / sum(math.exp(u) for u in row) for v in row]
        by_hand.append(-sum(q * math.log(q) for q in p))
    assert entropy(z).flatten().tolist() == pytest.approx(by_hand, abs=1e-6)


def test_entropy_exit_normalises_and_is_strict() -> None:
    uniform = torch.zeros(1, 4)                                  # H = ln 4 = 1.386, normalised 1
    assert EntropyExit(1.2, normalize=True).step(uniform, {})[0].tolist() == [True]
    assert EntropyExit(1.2).step(uniform, {})[0].tolist() == [False]
    certain = torch.tensor([[0.0, -math.inf]])                   # H = 0 exactly: S = 0 lets nothing out
    assert entropy(certain).item() == 0.0
    assert EntropyExit(0.0).step(certain, {})[0].tolist() == [False]


def test_patience_change_is_strict() -> None:
    """A change of exactly `change` is a change: values 1, 1.5, 2 with change 0.5 never leave early."""
    z = torch.tensor([1.0, 1.5, 2.0, 2.5])[:, None, None]        # (L=4, B=1, 1)
    assert exit_from_logits(z, PatienceExit(1, change=0.5))[1].tolist() == [4]
    assert exit_from_logits(z, PatienceExit(1, change=0.5 + 1e-6))[1].tolist() == [2]


def test_a_sample_leaves_once() -> None:
    """Confident at layer 1, unsure at 2, confident at 3: it left at layer 1, with layer 1's logits."""
    z = torch.tensor([[[9.0, -9.0]], [[0.0, 0.0]], [[-8.0, 8.0]], [[0.0, 0.0]]])   # (L=4, B=1, C=2)
    logits, layers = exit_from_logits(z, EntropyExit(0.1))
    assert layers.tolist() == [1] and logits.tolist() == [[9.0, -9.0]]
