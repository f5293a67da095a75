"""Bugs that once passed the whole suite (issue 26's table), each pinned to a value computed independently.

Every expected value here is a hand computation (or Python's own `statistics`), never the same code's other path.
"""

from __future__ import annotations

import math
import statistics
from types import SimpleNamespace

import pytest
import torch

from minbert.smart import SmartConfig, smart_loss
from tasks import deebert as deebert_cli
from tasks import multitask, simcse
from tasks.core.data import PairExample, Records

pytestmark = pytest.mark.usefixtures("one_thread")


def records(labels: list[float]) -> Records:
    return Records([PairExample(f"r{i}", "s", "t", y) for i, y in enumerate(labels)], "hand.csv", True, [])


# ---------------------------------------------------------------------------------------------- SMART (sec. 3.1-3.2)

def test_smart_loss_adds_mu_times_the_bregman_term():
    """L + lambda_s R_s + mu D_Breg with every weight away from 1 and 0: 1 + 0.5 * 2 + 3 * 4 = 14."""
    c = SmartConfig(lambda_s=0.5, bregman=True, mu=3.0)
    assert smart_loss(torch.tensor(1.0), torch.tensor(2.0), torch.tensor(4.0), c).item() == 14.0
    assert smart_loss(torch.tensor(1.0), torch.tensor(2.0), 0.0, SmartConfig(lambda_s=3.0)).item() == 7.0


# ---------------------------------------------------------------------------------------------- tasks.multitask

def test_quora_prediction_is_a_positive_logit(monkeypatch):
    """sigmoid(logit) > 0.5 <=> logit > 0: logits 0.2 and 0.4 are paraphrases (sigmoid 0.55 and 0.60)."""
    logits = torch.tensor([-3.0, -0.1, 0.2, 0.4, 0.7, 5.0])
    monkeypatch.setattr(multitask, "outputs", lambda *a, **k: logits)
    data = SimpleNamespace(task="para")
    assert multitask.predict(None, data, 8, torch.device("cpu")) == [0, 0, 1, 1, 1, 1]
    assert [int(1 / (1 + math.exp(-x)) > 0.5) for x in logits.tolist()] == [0, 0, 1, 1, 1, 1]


def test_sst_prediction_is_the_argmax(monkeypatch):
    logits = torch.tensor([[0.0, 1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 2.0], [3.0, 0.0, 0.0, 0.0, 2.9]])
    monkeypatch.setattr(multitask, "outputs", lambda *a, **k: logits)
    assert multitask.predict(None, SimpleNamespace(task="sst"), 8, torch.device("cpu")) == [1, 4, 0]


def test_the_dev_sts_metric_is_pearson_on_the_values_not_their_ranks():
    """A monotone but non-linear prediction: Spearman is 1, Pearson is not (statistics.correlation by hand)."""
    gold = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    preds = [0.0, 0.1, 0.2, 0.3, 0.4, 9.0]
    expected = statistics.correlation(preds, gold)
    assert expected < 0.8
    assert multitask.score("sts", preds, records(gold)) == pytest.approx(expected, abs=1e-12)
    assert multitask.score("para", [1, 0, 1, 1], records([1, 0, 0, 1])) == 0.75


# ---------------------------------------------------------------------------------------------- tasks.simcse

class Lookup(torch.nn.Module):
    """A stand-in encoder: a sentence's embedding is a fixed 2-d vector chosen by its first real token."""

    def __init__(self, vectors: dict[int, tuple[float, float]]):
        super().__init__()
        self.vectors = vectors

    def sentence_embedding(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return torch.tensor([self.vectors[int(i)] for i in input_ids[:, 1]])   # (B, 2)


def test_zero_shot_sts_is_pearson_of_the_cosine_between_the_two_sentences():
    angles = {1: 0.0, 2: 0.3, 3: 1.0, 4: 2.0, 5: 0.5, 6: 2.5}           # token id -> the vector's angle
    vectors = {k: (math.cos(a), math.sin(a)) for k, a in angles.items()}
    pairs = [(1, 2), (3, 4), (5, 6), (1, 3)]
    gold = [4.5, 3.0, 0.5, 1.0]
    cosines = [math.cos(angles[a] - angles[b]) for a, b in pairs]        # cos of the angle between u and v
    expected = statistics.correlation(cosines, gold)
    examples = simcse.Examples([[[101, a, 102] for a, _ in pairs],
                                [[101, b, 102] + [7] * k for k, (_, b) in enumerate(pairs)]])  # lengths differ
    got = simcse.sts_zero_shot(Lookup(vectors), examples, gold, batch_size=3, device=torch.device("cpu"))
    assert abs(expected) > 0.3 and got == pytest.approx(expected, abs=1e-6)


# ---------------------------------------------------------------------------------------------- tasks.deebert

def row(setting: str, value: float | None, layers_run: float, drop: float) -> dict:
    return {"setting": setting, "value": value, "layers_run": layers_run, "quality_drop": drop}


def test_choose_picks_the_fewest_layers_within_the_allowed_drop():
    table = {"rows": [row("plain", None, 1.0, 0.0), row("S=0.1", 0.1, 0.9, 0.0), row("S=0.3", 0.3, 0.6, 0.01),
                      row("S=0.5", 0.5, 0.4, 0.02), row("S=0.7", 0.7, 0.2, 0.2), row("no exit", None, 1.0, 0.0)]}
    assert deebert_cli.choose(table, 0.05)["setting"] == "S=0.5"          # 0.7 runs fewer layers but drops 0.2
    assert deebert_cli.choose(table, 0.0)["setting"] == "S=0.1"
    assert deebert_cli.choose(table, 1.0)["setting"] == "S=0.7"
    tied = {"rows": [row("plain", None, 1.0, 0.0), row("S=0.4", 0.4, 0.5, 0.0), row("S=0.2", 0.2, 0.5, 0.0),
                     row("no exit", None, 1.0, 0.0)]}
    assert deebert_cli.choose(tied, 0.0)["setting"] == "S=0.2"           # a tie goes to the smaller setting
