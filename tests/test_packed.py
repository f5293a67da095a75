"""minbert.packed against the readable forward: the same outputs and gradients, and no value read back to the host.

Tiny random models (hidden 32, 2 layers, 4 heads) with every parameter redrawn at a scale where attention is far
from uniform and the biases matter, padded batches of rows of different lengths, fp32 on the CPU; the real MiniLM
on a tokenised batch; on a CUDA GPU (skipped without one) the varlen kernel against padded SDPA in bf16.
"""

from __future__ import annotations

import pytest
import torch
from host_reads import no_host_reads

import minbert
from minbert.model import mask_to_bias
from minbert.packed import Packing, attention_kernel, encode_packed, padded_attention, varlen_attention

pytestmark = pytest.mark.usefixtures("one_thread")
TOL = 1e-5
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
# (B, T) batches by the lengths of their rows: padded (one row full), no padding, B = 1 with and without padding
BATCHES = {"padded": ([9, 3, 12, 1, 7], 12), "no padding": ([8, 8, 8], 8), "B=1": ([6], 6), "B=1 padded": ([4], 9),
           "random": (torch.randint(1, 17, (6,), generator=torch.Generator().manual_seed(3)).tolist() + [16], 16)}


def tiny(attn: str = "sdpa", dropout: float = 0.0, seed: int = 0) -> minbert.BertModel:
    config = minbert.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=64, max_position_embeddings=32, attn_implementation=attn,
                                hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    torch.manual_seed(seed)
    model = minbert.BertModel(config)
    with torch.no_grad():
        for name, p in model.named_parameters():  # every weight, bias and gain random: N(0, 0.02) leaves attention flat
            p.normal_(1.0 if ".gLN" in name else 0.0, 0.3)
    return model


def batch(lengths: list[int], T: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random ids and segments, right-padded to T: row b holds lengths[b] real tokens."""
    g = torch.Generator().manual_seed(seed)
    mask = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).long()   # (B, T)
    ids = torch.randint(1, 100, mask.shape, generator=g) * mask
    types = torch.randint(0, 2, mask.shape, generator=g) * mask
    return ids, mask, types


def close(got: torch.Tensor, want: torch.Tensor, atol: float = TOL, rtol: float = 0.0) -> None:
    torch.testing.assert_close(got, want, atol=atol, rtol=rtol)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("case", BATCHES)
def test_eval_outputs_equal_the_readable_forward(attn: str, case: str) -> None:
    model = tiny(attn).eval()
    ids, mask, types = batch(*BATCHES[case])
    with torch.no_grad():
        want = model(ids, mask, types)
        got = encode_packed(model, ids, mask, types)
    close(got.last_hidden_state, want.last_hidden_state)
    close(got.pooler_output, want.pooler_output)
    assert (got.last_hidden_state[mask == 0] == 0).all()
    assert got.hidden_states is None and got.attentions is None


def test_a_left_padded_mask_and_given_embeddings_equal_the_readable_forward() -> None:
    model = tiny().eval()
    ids, mask, types = batch([5, 9, 2], 9)
    mask, ids, types = mask.flip(1), ids.flip(1), types.flip(1)         # padding first: any mask packs
    with torch.no_grad():
        h0 = model.embed(ids, types) * 1.5
        want = model(attention_mask=mask, embeddings=h0)
        got = encode_packed(model, None, mask, embeddings=h0)
    close(got.last_hidden_state, want.last_hidden_state)
    close(got.pooler_output, want.pooler_output)


def loss_of(out: minbert.BertOutput, mask: torch.Tensor) -> torch.Tensor:
    """The pooled output's sum plus the mean of the last hidden state over the real tokens."""
    real = mask.unsqueeze(-1).to(out.last_hidden_state.dtype)          # (B, T, 1)
    return out.pooler_output.sum() + (out.last_hidden_state * real).sum() / (real.sum() * out.last_hidden_state.shape[-1])


def gradients(model: minbert.BertModel, forward, seed: int = 7) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    ids, mask, types = batch(*BATCHES["padded"])
    torch.manual_seed(seed)
    loss_of(forward(model, ids, mask, types), mask).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def readable(model, ids, mask, types) -> minbert.BertOutput:
    return model(ids, mask, types)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_train_mode_gradients_equal_the_readable_forward_without_dropout(attn: str) -> None:
    model = tiny(attn, dropout=0.0).train()
    want, got = gradients(model, readable), gradients(model, encode_packed)
    assert got.keys() == want.keys() and {"layers.0.Wq", "layers.1.bk", "layers.0.bv", "pooler.Wp"} <= got.keys()
    for name, g in want.items():  # gradients reach ~10 here: 1e-5 relative too (eager's rounding is not SDPA's)
        close(got[name], g, rtol=TOL)


def test_train_mode_with_dropout_runs_with_zeros_at_padding_and_finite_gradients() -> None:
    model = tiny(dropout=0.3).train()
    ids, mask, types = batch(*BATCHES["padded"])
    torch.manual_seed(0)
    out = encode_packed(model, ids, mask, types)
    assert (out.last_hidden_state[mask == 0] == 0).all()
    with torch.no_grad():
        assert not torch.allclose(out.last_hidden_state, model.eval()(ids, mask, types).last_hidden_state)  # dropped
    loss_of(out, mask).backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert len(grads) > 10 and all(torch.isfinite(g).all() for g in grads)


def test_gradient_checkpointing_gives_the_same_gradients_with_dropout_on() -> None:
    model = tiny(dropout=0.3).train()
    plain = gradients(model, encode_packed)
    model.gradient_checkpointing = True
    checkpointed = gradients(model, encode_packed)                    # the same seed: the same dropout masks
    assert checkpointed.keys() == plain.keys()
    for name, g in plain.items():
        close(checkpointed[name], g, atol=1e-6)


def test_a_layer_with_an_adapter_is_refused_naming_the_readable_forward() -> None:
    model = tiny().eval()
    model.layers[1].adapter = lambda h1, x, mask: (h1, 0.0)
    ids, mask, types = batch(*BATCHES["padded"])
    with pytest.raises(NotImplementedError, match="readable forward"):
        encode_packed(model, ids, mask, types)


def test_the_inputs_shapes_are_checked_as_bert_forward_checks_them() -> None:
    """A (B, 1) mask (it would broadcast) and a 1-D input_ids are refused in one line naming the input, as bert(...)."""
    model = tiny().eval()
    ids, mask, types = batch(*BATCHES["padded"])
    with pytest.raises(ValueError, match=r"^attention_mask has shape \(5, 1\), expected \(B, T\) = \(5, 12\)[^\n]*$"):
        encode_packed(model, ids, mask[:, :1], types)
    with pytest.raises(ValueError, match=r"^input_ids has shape \(12,\), expected \(B, T\)[^\n]*$"):
        encode_packed(model, ids[0], mask[0], types[0])
    with pytest.raises(ValueError, match=r"^attention_mask has shape \(5, 1\), expected \(B, T\) = \(5, 12\) \(from emb"):
        encode_packed(model, None, mask[:, :1], embeddings=model.embed(ids, types))


def test_packing_of_a_hand_computed_mask() -> None:
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    p = Packing.of(mask)
    assert p.index.tolist() == [0, 1, 2, 4, 8, 9, 10, 11] and p.index.dtype == torch.long
    assert p.cu_seqlens.tolist() == [0, 3, 4, 8] and p.cu_seqlens.dtype == torch.int32
    assert (p.max_len, p.B, p.T, p.N) == (4, 3, 4, 8)
    q = p.to("cpu")
    assert q.index.device.type == "cpu" and q.index.tolist() == p.index.tolist()
    assert q.cu_seqlens.tolist() == [0, 3, 4, 8] and (q.max_len, q.B, q.T) == (4, 3, 4)


def test_packing_refuses_an_empty_row_and_a_mask_off_the_cpu() -> None:
    with pytest.raises(ValueError, match=r"row\(s\) \[1\].*no real token"):
        Packing.of(torch.tensor([[1, 1], [0, 0]]))
    with pytest.raises(ValueError, match="on the CPU"):
        Packing.of(torch.ones(2, 3, device="meta"))
    model = tiny().eval()
    ids, mask, types = batch(*BATCHES["padded"])
    with pytest.raises(ValueError, match="packing is of a 5 x 12 batch"):
        encode_packed(model, ids[:, :8], mask[:, :8], types[:, :8], Packing.of(mask))


@pytest.mark.parametrize("checkpointing", [False, True])
def test_with_a_packing_given_nothing_is_read_back(checkpointing: bool) -> None:
    model = tiny(dropout=0.1).train()
    model.gradient_checkpointing = checkpointing
    ids, mask, types = batch(*BATCHES["padded"])
    packing = Packing.of(mask)
    with no_host_reads():
        with pytest.raises(RuntimeError, match="__bool__"):     # the guard itself works
            bool(torch.tensor(True))
        out = encode_packed(model, ids, mask, types, packing)
        (out.pooler_output.sum() + out.last_hidden_state.sum()).backward()
    assert model.layers[0].Wq.grad is not None and torch.isfinite(model.layers[0].Wq.grad).all()


def test_the_pretrained_minilm_matches_on_a_tokenised_batch(minilm: minbert.BertModel,
                                                              tokenizer: minbert.Tokenizer) -> None:
    b = tokenizer(["A cat sat on the mat.", "Hello", "The quick brown fox jumps over the lazy dog, twice."])
    assert len(set(b["attention_mask"].sum(1).tolist())) == 3 and b["attention_mask"][:, -1].tolist() == [0, 0, 1]
    with torch.no_grad():
        want = minilm(**b)
        got = encode_packed(minilm, b["input_ids"], b["attention_mask"], b["token_type_ids"])
    close(got.last_hidden_state, want.last_hidden_state)
    close(got.pooler_output, want.pooler_output)


def test_the_kernel_chosen_on_the_cpu_is_padded_sdpa() -> None:
    q = torch.zeros(5, 3, 4, 8)
    assert attention_kernel(q, False, 0.0) == "padded" and attention_kernel(q.bfloat16(), False, 0.0) == "padded"


@CUDA
def test_on_cuda_varlen_is_chosen_and_equals_padded_sdpa_in_bf16() -> None:
    dev = torch.device("cuda")
    ids, mask, types = batch(*BATCHES["padded"])
    packing = Packing.of(mask).to(dev, non_blocking=True)
    assert packing.index.is_cuda and packing.cu_seqlens.is_cuda and packing.cu_seqlens.dtype == torch.int32
    torch.manual_seed(0)
    qkv = torch.randn(packing.N, 3, 4, 16, device=dev, dtype=torch.bfloat16)           # (N, 3, nh, hs)
    assert attention_kernel(qkv, False, 0.1) == "varlen" and attention_kernel(qkv, True, 0.0) == "varlen"
    assert attention_kernel(qkv, True, 0.1) == "padded" and attention_kernel(qkv.float(), False, 0.0) == "padded"
    bias = mask_to_bias(mask.to(dev), torch.bfloat16)                                   # (B, 1, 1, T)
    torch.testing.assert_close(varlen_attention(qkv, packing), padded_attention(qkv, packing, bias),
                               atol=2e-2, rtol=2e-2)
    # the whole encoder: packed in bf16 is as close to the readable fp32 forward as the readable bf16 forward is
    model = tiny().to(dev).eval()
    ids, mask, types = ids.to(dev), mask.to(dev), types.to(dev)
    with torch.no_grad():
        want = model(ids, mask, types).last_hidden_state
        model.to(torch.bfloat16)
        readable_bf16 = model(ids, mask, types).last_hidden_state.float()
        packed_bf16 = encode_packed(model, ids, mask, types, packing).last_hidden_state.float()
    assert (packed_bf16 - want).abs().max() <= 2 * (readable_bf16 - want).abs().max() + 1e-2
    # and trains through varlen (dropout 0): finite gradients for the fused projection's parts
    model.train()
    encode_packed(model, ids, mask, types, packing).pooler_output.float().sum().backward()
    assert all(torch.isfinite(getattr(model.layers[0], n).grad).all() for n in ("Wq", "Wk", "Wv", "bq"))
