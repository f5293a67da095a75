"""minbert.model's fast paths against the readable versions: dropout() against F.dropout's rate and expectation,
and fused_attention() against attention() in eval mode and, with dropout, in training under a fixed seed."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from minbert.model import attention, dropout, fused_attention, mask_to_bias

pytestmark = pytest.mark.usefixtures("one_thread")


def keep_count(p: float) -> int:
    return round((1 - p) * 65536)          # dropout() keeps an element with probability keep_count(p) / 65536


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.9])
def test_dropout_keeps_each_element_at_the_rate_within_a_binomial_bound(p):
    n = 1 << 21
    torch.manual_seed(0)
    y = dropout(torch.ones(n), p, True)                                    # (n,)
    k = keep_count(p)
    assert abs(k / 65536 - (1 - p)) <= 2 ** -17                           # the rate, to 16 bits
    q = k / 65536
    kept = (y != 0).view(-1, 4).double()       # each int64 draw gives 4 elements: every 16-bit field is uniform
    for field in range(4):
        rate, m = kept[:, field].mean().item(), n // 4
        assert abs(rate - q) < 5 * math.sqrt(q * (1 - q) / m), (p, field, rate)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dropout_scales_kept_elements_by_the_inverse_of_the_exact_keep_probability(dtype):
    p = 0.1
    x = torch.randn(64, 50, dtype=dtype)
    torch.manual_seed(1)
    y = dropout(x, p, True)
    k = keep_count(p)
    kept = y != 0
    assert 0 < kept.sum() < x.numel() and y.dtype == dtype
    scale = torch.tensor(65536 / k, dtype=dtype)                          # E[y] = (k / 65536) (65536 / k) x = x
    torch.testing.assert_close(y[kept], x[kept] * scale, rtol=0, atol=0)
    # which elements: the i-th 16 bits of the generator's 64-bit draws, as a signed int16, below k - 32768
    torch.manual_seed(1)
    bits = torch.empty((x.numel() + 3) // 4, dtype=torch.int64).random_(-2 ** 63, None)
    assert torch.equal(kept, bits.view(torch.int16)[:x.numel()].view(x.shape) < k - 32768)


def test_dropout_in_bf16_rounds_the_exact_product_like_f_dropout():
    x = torch.randn(200, 30)
    torch.manual_seed(2)
    y = dropout(x.bfloat16(), 0.1, True)
    kept = y != 0
    assert y.dtype == torch.bfloat16
    expected = (x.bfloat16().float() * (65536 / keep_count(0.1))).bfloat16()   # not x times a bf16-rounded scale
    assert torch.equal(y[kept], expected[kept])


def test_dropout_mean_converges_to_its_input():
    torch.manual_seed(3)
    x = torch.randn(1 << 20)
    y = dropout(x, 0.1, True)
    sd = (y - x).std().item() / math.sqrt(x.numel())
    assert abs((y - x).mean().item()) < 5 * sd


def test_dropout_is_seeded_by_torch_manual_seed_and_differs_between_seeds():
    x = torch.randn(8, 12, 20, 20)
    draws = []
    for seed in (5, 5, 6):
        torch.manual_seed(seed)
        draws.append(dropout(x, 0.1, True))
    assert torch.equal(draws[0], draws[1]) and not torch.equal(draws[0], draws[2])


def test_dropout_outside_training_or_at_p_0_is_the_identity_and_p_1_drops_everything():
    x = torch.randn(5, 7)
    assert torch.equal(dropout(x, 0.5, False), x) and torch.equal(dropout(x, 0.0, True), x)
    assert torch.equal(dropout(x, 1.0, True), torch.zeros_like(x))
    torch.manual_seed(0)
    tiny = dropout(x, 1e-7, True)                  # below 16 bits' resolution: F.dropout's own rate instead
    torch.manual_seed(0)
    assert torch.equal(tiny, F.dropout(x, 1e-7, True))
    with pytest.raises(ValueError):
        dropout(x, 1.5, True)


def test_dropout_gradient_is_the_same_mask_and_scale():
    x = torch.randn(30, 40, requires_grad=True)
    g = torch.randn(30, 40)
    torch.manual_seed(4)
    y = dropout(x, 0.2, True)
    y.backward(g)
    scale = 65536 / keep_count(0.2)
    torch.testing.assert_close(x.grad, torch.where(y != 0, g * torch.tensor(scale), 0.0), rtol=0, atol=0)


def heads(seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(3, 4, 7, 8, generator=g) for _ in range(3))    # (B, nh, T, hs)
    bias = mask_to_bias(torch.tensor([[1] * 7, [1] * 4 + [0] * 3, [1] * 2 + [0] * 5]), q.dtype)  # (B, 1, 1, T)
    return q, k, v, bias


def test_fused_attention_equals_attention_in_eval_and_without_dropout():
    q, k, v, bias = heads()
    for p, training in ((0.1, False), (0.0, True), (0.0, False)):
        torch.testing.assert_close(fused_attention(q, k, v, bias, p, training), attention(q, k, v, bias),
                                   atol=1e-6, rtol=1e-5)


def test_fused_attention_in_training_is_attention_with_dropout_for_f_dropout_under_the_same_seed():
    q, k, v, bias = heads()
    for t in (q, k, v):
        t.requires_grad_()
    p = 0.3
    torch.manual_seed(7)
    fused = fused_attention(q, k, v, bias, p, True)
    torch.manual_seed(7)
    probs = (q @ k.transpose(-2, -1) / math.sqrt(8) + bias).softmax(dim=-1)   # attention()'s equations
    eager = (dropout(probs, p, True) @ v).transpose(1, 2).reshape(3, 7, 32)
    assert torch.equal(fused, eager)
    g = torch.randn(3, 7, 32)
    grads = torch.autograd.grad(fused, (q, k, v), g)
    for a, b in zip(grads, torch.autograd.grad(eager, (q, k, v), g)):
        assert torch.equal(a, b) and a.abs().sum() > 0


def test_fused_attention_in_training_averages_to_attention():
    q, k, v, bias = heads(1)
    expected = attention(q, k, v, bias)
    torch.manual_seed(8)
    draws = torch.stack([fused_attention(q, k, v, bias, 0.1, True) for _ in range(400)])   # (400, B, T, H)
    err = (draws.mean(0) - expected).abs()
    assert (err <= 5 * draws.std(0) / math.sqrt(400) + 1e-6).all()
    assert not torch.equal(draws[0], draws[1])
