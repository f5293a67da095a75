"""benchmarks/epoch_speed.py's pure parts against hand computations: the padding figures, the FLOP count, and a
batch's real lengths against the cross-encoder's own joining of the pairs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import epoch_speed

from minbert.multitask import join_pairs

pytestmark = pytest.mark.usefixtures("one_thread")


def test_padding_stats_equal_a_hand_computation():
    s = epoch_speed.padding_stats([[3, 5], [4]])             # two batches: T = 5 and T = 4
    assert s["real_tokens"] == 12 and s["positions"] == 2 * 5 + 4
    assert s["positions_per_real_token"] == pytest.approx(14 / 12)
    assert s["t2_work_ratio"] == pytest.approx((2 * 25 + 16) / (9 + 25 + 16))


def test_step_flops_equal_a_hand_computation():
    # one pair of 2 tokens, H 4, I 8, one layer: 2 n (4 H^2 + 2 H I) + 4 n^2 H, the head 2 (H 512 + 512), times 3
    assert epoch_speed.step_flops([2], "para", 4, 8, 1) == 3 * (2 * 2 * (64 + 64) + 4 * 4 * 4 + 2 * (4 * 512 + 512))
    assert epoch_speed.step_flops([2, 3], "sst", 4, 8, 2) == pytest.approx(
        3 * (2 * sum(2 * n * 128 + 16 * n * n for n in (2, 3)) + 2 * 2 * (4 * 512 + 512 * 5)))


def test_batch_lengths_are_the_joined_pairs_real_lengths():
    ids1 = torch.tensor([[101, 5, 102, 0], [101, 6, 7, 102]])
    ids2 = torch.tensor([[101, 8, 9, 102], [101, 10, 102, 0]])
    m1, m2 = (ids1 != 0).long(), (ids2 != 0).long()
    lengths = epoch_speed.batch_lengths({"input_ids_1": ids1, "attention_mask_1": m1,
                                         "input_ids_2": ids2, "attention_mask_2": m2})
    assert lengths == join_pairs(ids1, m1, ids2, m2)[1].sum(1).tolist() == [6, 6]
    assert epoch_speed.batch_lengths({"input_ids": ids1, "attention_mask": m1}) == [3, 4]
