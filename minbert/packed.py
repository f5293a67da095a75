"""A fast path through BertModel: the padding removed once, every layer computed on the batch's real tokens alone.

The readable forward (minbert/model.py) runs each layer on the padded batch, (B, T, H). encode_packed computes the
same function, with the same BertModel and its parameters (Wq, Wk, Wv, bq, ..., the BitFit names), on the N real
tokens laid end to end, (N, H), as padding-free transformer kernels do (Zhai et al., 2023, "ByteTransformer"):

    x   = h0[real tokens]                         (N, H)      once, after the embeddings
    qkv = [Wq; Wk; Wv] x + [bq; bk; bv]           (N, 3H)     the Q, K, V projections as one product
    h1  = attention within each sequence          (N, H)      varlen flash attention, or padded SDPA
    out = layer.after_attention(h1, x)            (N, H)      eqs. 1-5, each token alone
    last_hidden_state = out put back in place     (B, T, H)   0 at padding, as the readable forward

A model trained through it is the same object, state dict and checkpoint. Where the real tokens are (Packing) is
computed on the CPU from the 0/1 mask before the batch goes to the GPU, so that the host never waits for the
device to tell it the sizes:

    packing = Packing.of(batch["attention_mask"])                     # (B, T) on the CPU
    out = encode_packed(bert, ids, mask, types, packing.to("cuda", non_blocking=True))

tests/test_packed.py checks the outputs and gradients equal to the readable forward's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils import checkpoint as activation_checkpoint

from .model import BertLayer, BertModel, BertOutput
from .shapes import expect_batch

# Flash attention on variable-length sequences takes CUDA tensors only: imported only where CUDA is, since the import
# also imports torch._dynamo (a second or two). Older torch has no torch.nn.attention.varlen.
varlen_attn = None
if torch.cuda.is_available():
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        pass

HALF = (torch.float16, torch.bfloat16)


@dataclass
class Packing:
    """Where a batch's real tokens are, in the cumulative-lengths form of variable-length attention (Dao, 2023)."""

    index: torch.Tensor       # (N,) long: the flat positions b*T + t of the real tokens, sequence after sequence
    cu_seqlens: torch.Tensor  # (B+1,) int32: 0, then the running total of the sequences' lengths
    max_len: int              # the longest sequence's length
    B: int
    T: int

    @property
    def N(self) -> int:
        """The number of real tokens."""
        return self.index.shape[0]

    @classmethod
    def of(cls, attention_mask: torch.Tensor) -> Packing:
        """The packing of a (B, T) 0/1 mask on the CPU (any mask whose rows hold a real token; right-padded or not)."""
        if attention_mask.dim() != 2:
            raise ValueError(f"expected a (B, T) attention mask, got shape {tuple(attention_mask.shape)}")
        if attention_mask.device.type != "cpu":
            raise ValueError(f"Packing.of takes the mask on the CPU, not on {attention_mask.device}: reading the "
                             "sizes back from a GPU makes the host wait for it; compute the packing before the "
                             "batch goes to the device, then packing.to(device, non_blocking=True)")
        keep = attention_mask != 0                                    # (B, T), True at real tokens
        B, T = keep.shape
        lengths = keep.sum(dim=1)                                     # (B,)
        empty = (lengths == 0).nonzero().flatten().tolist()        # (n, 1) -> (n,): the rows with no real token
        if empty:
            raise ValueError(f"row(s) {empty} of the attention mask have no real token; attention over no key is "
                             "undefined: drop those rows from the batch")
        index = keep.flatten().nonzero().flatten()                    # (B*T,) -> (N,), row-major: sequence-major
        cu_seqlens = F.pad(lengths.cumsum(0), (1, 0)).to(torch.int32)  # (B,) -> (B+1,)
        return cls(index, cu_seqlens, int(lengths.max()), B, T)

    def to(self, device: str | torch.device, non_blocking: bool = False) -> Packing:
        """The same packing on `device`; to a GPU through pinned memory, so that non_blocking copies asynchronously."""
        device = torch.device(device)

        def move(t: torch.Tensor) -> torch.Tensor:
            if device.type == "cuda" and t.device.type == "cpu":
                t = t.pin_memory()
            return t.to(device, non_blocking=non_blocking)
        return Packing(move(self.index), move(self.cu_seqlens), self.max_len, self.B, self.T)


def attention_kernel(q: torch.Tensor, training: bool, p: float) -> str:
    """Which attention runs on packed q (N, ..., hs): "varlen" (flash: CUDA, fp16/bf16, no dropout) or "padded"."""
    flash = (varlen_attn is not None and q.is_cuda and q.dtype in HALF
             and q.shape[-1] % 8 == 0 and q.shape[-1] <= 256)       # the head sizes flash attention takes
    return "varlen" if flash and (not training or p == 0) else "padded"


def varlen_attention(qkv: torch.Tensor, packing: Packing) -> torch.Tensor:
    """softmax(QK^T / sqrt(hs)) V within each sequence (Vaswani et al., 2017, 3.2), on packed qkv (N, 3, nh, hs)."""
    q, k, v = qkv.unbind(1)                                           # 3 x (N, nh, hs)
    out = varlen_attn(q, k, v, packing.cu_seqlens, packing.cu_seqlens, packing.max_len, packing.max_len)
    return out.flatten(1)                                             # (N, nh, hs) -> (N, H)


def padded_attention(qkv: torch.Tensor, packing: Packing, bias: torch.Tensor, dropout_p: float = 0.0) -> torch.Tensor:
    """The same attention through F.scaled_dot_product_attention on the padded batch: for dropout, CPUs and fp32.

    qkv: (N, 3, nh, hs), the packed projections; bias: additive, (B, 1, 1, T). Returns the merged heads, (N, H).
    """
    B, T = packing.B, packing.T
    _, _, nh, hs = qkv.shape
    padded = qkv.new_zeros(B * T, 3, nh, hs).index_copy(0, packing.index, qkv)  # (N, ...) -> (B*T, 3, nh, hs)
    q, k, v = padded.view(B, T, 3, nh, hs).permute(2, 0, 3, 1, 4).unbind(0)   # 3 x (B, nh, T, hs)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p)  # (B, nh, T, hs)
    out = out.transpose(1, 2).reshape(B * T, nh * hs)                # (B, T, nh, hs) -> (B*T, H)
    return out.index_select(0, packing.index)                         # (B*T, H) -> (N, H)


def packed_layer(layer: BertLayer, x: torch.Tensor, packing: Packing, bias: torch.Tensor) -> torch.Tensor:
    """One layer in BitFit's notation (Ben-Zaken et al., 2022), on the packed real tokens x (N, H) -> (N, H);
    bias: the additive mask (B, 1, 1, T) BertModel.attention_bias builds, for the padded kernel."""
    N, _ = x.shape
    W = torch.cat([layer.Wq, layer.Wk, layer.Wv])                    # (3H, H): the gradient flows to each part
    b = torch.cat([layer.bq, layer.bk, layer.bv])                    # (3H,)
    qkv = F.linear(x, W, b).view(N, 3, layer.nh, layer.hs)           # Q, K, V: (N, 3H) -> (N, 3, nh, hs)
    if attention_kernel(qkv, layer.training, layer.p_attn) == "varlen":
        h1 = varlen_attention(qkv, packing)                           # (N, H)
    else:
        h1 = padded_attention(qkv, packing, bias, layer.p_attn if layer.training else 0.0)  # (N, H)
    return layer.after_attention(h1, x)                               # eqs. 1-5, each token alone: (N, H)


def encode_packed(
    bert: BertModel, input_ids: torch.Tensor | None, attention_mask: torch.Tensor,
    token_type_ids: torch.Tensor | None = None, packing: Packing | None = None, embeddings: torch.Tensor | None = None,
) -> BertOutput:
    """bert(input_ids, attention_mask, token_type_ids) computed on the real tokens alone; the same BertOutput.

    packing: Packing.of(attention_mask) on the CPU, moved to the model's device (computed here when not given,
    from a mask on the CPU only). embeddings: h0 (B, T, H) from bert.embed(), possibly perturbed, instead of
    embedding input_ids. Gradient checkpointing (bert.gradient_checkpointing) is kept; a layer with an adapter
    (PALs) is refused. With a packing given, nothing is read back from the device: the sizes are its numbers.
    """
    if any(layer.adapter is not None for layer in bert.layers):
        raise NotImplementedError("encode_packed does not run a layer's adapter (PALs, minbert.pals), which takes "
                                  "the padded (B, T, H) batch; use the readable forward, bert(...), for those")
    expect_batch(input_ids, embeddings, attention_mask=attention_mask, token_type_ids=token_type_ids)  # as bert(...)
    if packing is None:
        packing = Packing.of(attention_mask)                          # refuses a mask on the GPU
    h0 = embeddings if embeddings is not None else bert.embed(input_ids, token_type_ids)  # (B, T, H)
    B, T, H = h0.shape
    if (B, T) != (packing.B, packing.T):
        raise ValueError(f"the packing is of a {packing.B} x {packing.T} batch, the embeddings {B} x {T}")
    packing = packing.to(h0.device, non_blocking=True)                # nothing to do when it is there already
    x = h0.flatten(0, 1).index_select(0, packing.index)               # (B, T, H) -> (B*T, H) -> (N, H)
    bias = bert.attention_bias(attention_mask.to(h0.device), h0)      # (B, 1, 1, T), the readable forward's, once
    for layer in bert.layers:
        if layer.checkpointing and torch.is_grad_enabled():           # keep x alone, compute the layer again later
            x = activation_checkpoint.checkpoint(packed_layer, layer, x, packing, bias, use_reentrant=False)
        else:
            x = packed_layer(layer, x, packing, bias)                 # (N, H)
    last = x.new_zeros(B * T, H).index_copy(0, packing.index, x).view(B, T, H)  # (N, H) -> (B, T, H), 0 at padding
    return BertOutput(last, bert.pooler(last), None, None)
