"""BERT (Devlin et al., 2019) written out in the notation of BitFit (Ben-Zaken et al., 2022, sec. 3.1).

Each layer l computes, for its input x (B, T, H):

    Q, K, V = Wq x + bq,  Wk x + bk,  Wv x + bv          # self-attention projections
    h1      = attention(Q, K, V, mask)                    # multi-head scaled dot product
    h2      = Dropout(Wm1 h1 + bm1)
    h3      = gLN1 * norm(h2 + x) + bLN1
    h4      = GELU(Wm2 h3 + bm2)                          # H -> 4H
    h5      = Dropout(Wm3 h4 + bm3)
    out     = gLN2 * norm(h5 + h3) + bLN2

BitFit numbers the last five, eqs. (1) h2 to (5) out (sec. 3.1); the projections and h1 are unnumbered.
The parameters carry exactly these names, so "train only bq and bm2" is a filter on names.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils import checkpoint as activation_checkpoint

from .config import BertConfig
from .shapes import expect_batch, expect_shape


def gelu(x: torch.Tensor) -> torch.Tensor:
    """Exact GELU, x * Phi(x) (Hendrycks & Gimpel, 2016, sec. 2), as BERT uses it."""
    return F.gelu(x)  # approximate="none": 0.5 * x * (1 + erf(x / sqrt(2)))


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GELU's tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (Hendrycks & Gimpel, 2016, sec. 2)."""
    return F.gelu(x, approximate="tanh")


# config.hidden_act -> the function, each what Hugging Face's ACT2FN computes for that name (tests/test_model.py
# compares them all); names Hugging Face maps to a module with weights of its own (prelu, xielu) are refused.
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": gelu, "gelu_python": gelu,                                    # exact, erf
    "gelu_new": gelu_tanh, "gelu_fast": gelu_tanh, "gelu_accurate": gelu_tanh,  # the tanh approximation
    "gelu_pytorch_tanh": gelu_tanh, "gelu_python_tanh": gelu_tanh,
    "gelu_10": lambda x: F.gelu(x).clamp(-10.0, 10.0),
    "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),
    "relu": F.relu, "relu2": lambda x: F.relu(x).square(), "relu6": F.relu6, "leaky_relu": F.leaky_relu,
    "silu": F.silu, "swish": F.silu, "mish": F.mish, "hardswish": F.hardswish,
    "tanh": torch.tanh, "sigmoid": torch.sigmoid, "linear": lambda x: x,
    "laplace": lambda x: 0.5 * (1.0 + torch.erf((x - 0.707107) / (0.282095 * math.sqrt(2.0)))),   # MEGA's
    "sqrtsoftplus": lambda x: F.softplus(x).sqrt(),
}


def layer_norm(x: torch.Tensor, gain: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    """gain * (x - mean) / sqrt(var + eps) + bias over the last dimension (Ba et al., 2016, sec. 3)."""
    return F.layer_norm(x, x.shape[-1:], gain, bias, eps)


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
    dropout_p: float = 0.0, training: bool = False,
) -> torch.Tensor:
    """Multi-head attention softmax(QK^T / sqrt(hs) + mask) V, hs = d_k the per-head size (Vaswani et al., 2017, 3.2).

    q, k, v: (B, nh, T, hs); mask: additive, broadcastable to (B, nh, T, T), 0 where a key may be
    attended to and a large negative number where it is padding. Returns the heads merged, (B, T, nh*hs).
    """
    B, nh, T, hs = q.shape
    ### BEGIN SOLUTION
    ### STUB: Multi-head scaled dot-product attention for all heads at once; q, k, v are (B, nh, T, hs).
    ### STUB:   1. scores = q k^T / sqrt(hs): one score per query and key, (B, nh, T, T)
    ### STUB:   2. add the additive mask (broadcast from (B, 1, 1, T)): padding keys get a huge negative score
    ### STUB:   3. softmax over the keys (the last dimension): attention probabilities, (B, nh, T, T)
    ### STUB:   4. dropout on the probabilities (F.dropout), rate dropout_p, only when training: (B, nh, T, T)
    ### STUB:   5. weighted sum of the values: probs v, (B, nh, T, hs)
    ### STUB:   6. merge the heads, (B, nh, T, hs) -> (B, T, nh, hs) -> (B, T, nh*hs), and return that
    scores = q @ k.transpose(-2, -1) / math.sqrt(hs)   # (B, nh, T, T)
    scores = scores + mask                              # padding keys get ~ -inf
    probs = scores.softmax(dim=-1)                      # (B, nh, T, T), rows sum to 1
    probs = F.dropout(probs, dropout_p, training)
    out = probs @ v                                     # (B, nh, T, hs)
    return out.transpose(1, 2).reshape(B, T, nh * hs)   # (B, T, H)
    ### END SOLUTION


def attention_probs(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor, attend=attention) -> torch.Tensor:
    """The attention probabilities softmax(QK^T / sqrt(hs) + mask), (B, nh, T, T) (Vaswani et al., 2017, 3.2).

    What attend (attention() or fused_attention()) weighs the values with, before dropout, computed apart for
    looking at them (output_attentions): attend itself with one-hot rows as the values, since softmax(...) I is the
    probabilities themselves, so the maps show what the model's own attention computes (a student's attention()
    included). The identity's T columns go in slices of hs, the values' width attend expects. q, k: (B, nh, T, hs).
    """
    B, nh, T, hs = q.shape
    eye = F.pad(torch.eye(T, dtype=q.dtype, device=q.device), (0, -T % hs))  # (T, T'), T' a multiple of hs
    parts = [attend(q, k, v.expand(B, nh, T, hs).contiguous(), mask).reshape(B, T, nh, hs)  # -> (B, T, nh, hs)
             for v in eye.split(hs, dim=-1)]                                      # key j's one-hot, hs at a time
    return torch.cat(parts, dim=-1)[..., :T].transpose(1, 2)                     # (B, T, nh, T) -> (B, nh, T, T)


def fused_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
    dropout_p: float = 0.0, training: bool = False,
) -> torch.Tensor:
    """The same computation as attention(), through torch's fused scaled_dot_product_attention kernel."""
    if skips_padding(mask) and not mask.any():  # no padding: without a mask torch can pick its flash kernel
        mask = None
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p if training else 0.0)
    return out.permute(0, 2, 1, 3).flatten(2)  # (B, nh, T, hs) -> (B, T, nh, hs) -> (B, T, H)


class BertEmbeddings(nn.Module):
    """Token + position + segment embeddings, then LayerNorm and dropout.

    The sum is BERT's input (Devlin et al., 2019, sec. 3, Input/Output Representations (Figure 2)).
    """

    def __init__(self, config: BertConfig):
        super().__init__()
        H = config.hidden_size
        self.word = nn.Embedding(config.vocab_size, H, padding_idx=config.pad_token_id)
        self.position = nn.Embedding(config.max_position_embeddings, H)
        self.token_type = nn.Embedding(config.type_vocab_size, H)
        self.gLN = nn.Parameter(torch.ones(H))
        self.bLN = nn.Parameter(torch.zeros(H))
        self.eps = config.layer_norm_eps
        self.p = config.hidden_dropout_prob

    def forward(
        self, input_ids: torch.Tensor | None = None, token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None, inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """ids (B, T) (or inputs_embeds (B, T, H)) -> h0 (B, T, H)."""
        if inputs_embeds is None:
            if input_ids is None:
                raise ValueError("give input_ids or inputs_embeds")
            inputs_embeds = self.word(input_ids)              # (B, T, H)
        B, T, _ = inputs_embeds.shape
        if T > self.position.num_embeddings:
            raise ValueError(f"sequence of {T} tokens is longer than the model's "
                             f"{self.position.num_embeddings} positions; truncate it")
        if position_ids is None:
            position_ids = torch.arange(T, device=inputs_embeds.device)[None, :]  # (1, T)
        if token_type_ids is None:
            token_type_ids = torch.zeros(B, T, dtype=torch.long, device=inputs_embeds.device)
        ### BEGIN SOLUTION
        ### STUB: h0 = Dropout(LayerNorm(word + position + token-type embeddings)), the sum of BERT's input
        ### STUB: (Devlin et al., 2019, sec. 3, Input/Output Representations (Figure 2)):
        ### STUB:   e = inputs_embeds (B, T, H) + the position embeddings of position_ids, (1, T, H)
        ### STUB:       + the token-type (segment) embeddings of token_type_ids, (B, T, H)
        ### STUB:   normalise e over H: this file's layer_norm, gain self.gLN, bias self.bLN, eps self.eps, (B, T, H)
        ### STUB:   return it after dropout with rate self.p, applied only when self.training
        e = inputs_embeds + self.position(position_ids) + self.token_type(token_type_ids)  # (B, T, H)
        e = layer_norm(e, self.gLN, self.bLN, self.eps)
        return F.dropout(e, self.p, self.training)
        ### END SOLUTION


class BertLayer(nn.Module):
    """One transformer layer with the BitFit paper's parameter names (Ben-Zaken et al., 2022, sec. 3.1)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        H, I = config.hidden_size, config.intermediate_size
        self.nh, self.hs = config.num_attention_heads, config.head_size
        self.eps, self.p, self.p_attn = config.layer_norm_eps, config.hidden_dropout_prob, config.attention_probs_dropout_prob
        self.attend = attention if config.attn_implementation == "eager" else fused_attention
        self.act = ACTIVATIONS[config.hidden_act]  # GELU for BERT (config.hidden_act)
        # BitFit's (unnumbered) query, key and value projections
        self.Wq, self.bq = nn.Parameter(torch.empty(H, H)), nn.Parameter(torch.zeros(H))
        self.Wk, self.bk = nn.Parameter(torch.empty(H, H)), nn.Parameter(torch.zeros(H))
        self.Wv, self.bv = nn.Parameter(torch.empty(H, H)), nn.Parameter(torch.zeros(H))
        # eqs. 1-2: the attention output projection and the first add-and-norm
        self.Wm1, self.bm1 = nn.Parameter(torch.empty(H, H)), nn.Parameter(torch.zeros(H))
        self.gLN1, self.bLN1 = nn.Parameter(torch.ones(H)), nn.Parameter(torch.zeros(H))
        # eqs. 3-5: the feed-forward block (eqs. 3-4) and the second add-and-norm (eq. 5)
        self.Wm2, self.bm2 = nn.Parameter(torch.empty(I, H)), nn.Parameter(torch.zeros(I))
        self.Wm3, self.bm3 = nn.Parameter(torch.empty(H, I)), nn.Parameter(torch.zeros(H))
        self.gLN2, self.bLN2 = nn.Parameter(torch.ones(H)), nn.Parameter(torch.zeros(H))
        # Extension point, so that no extension has to copy this layer: one adapter beside it (PALs, minbert.pals),
        # None or a callable (h1, x, mask) -> (h1, ts) of the merged heads h1 and the layer's input x, (B, T, H),
        # and the additive mask. It returns the merged heads that go on to Wm1 (the CS224N report's concat PALs
        # return W [h1; PAL(x)] + b) and ts, added inside the last add-and-norm, out = LN2(h5 + h3 + ts)
        # (Stickland & Murray, 2019, sec. 3: PALs return (h1, PAL(x))); ts is a (B, T, H) tensor or the number 0.0.
        self.adapter: Callable[[torch.Tensor, torch.Tensor, torch.Tensor],
                               tuple[torch.Tensor, torch.Tensor | float]] | None = None
        # Gradient checkpointing (Chen et al., 2016, "Training deep nets with sublinear memory cost"): keep only the
        # layer's input for the backward pass and compute the layer again there. Set by BertModel.gradient_checkpointing.
        self.checkpointing = False

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, H) -> (B, nh, T, hs): one slice of hs features per head."""
        B, T, _ = x.shape
        return x.view(B, T, self.nh, self.hs).transpose(1, 2)  # (B, T, H) -> (B, nh, T, hs)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x: (B, T, H); mask: additive (B, 1, 1, T). Returns the layer's output, (B, T, H), 0 at padding."""
        if self.checkpointing and torch.is_grad_enabled():
            # saves x alone; the backward pass reruns compute() with the same random state (the same dropout masks)
            return activation_checkpoint.checkpoint(self.compute, x, mask, use_reentrant=False)
        return self.compute(x, mask)

    def compute(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """BitFit's unnumbered Q, K, V and h1 = attention, the adapter if any, then eqs. 1-5 on the real tokens."""
        Q = self.split_heads(F.linear(x, self.Wq, self.bq))  # (B, T, H) -> (B, nh, T, hs)
        K = self.split_heads(F.linear(x, self.Wk, self.bk))
        V = self.split_heads(F.linear(x, self.Wv, self.bv))
        h1 = self.attend(Q, K, V, mask, self.p_attn, self.training)  # (B, T, H)
        expect_shape(h1, x.shape, "attention()", "(B, T, H)", "attention", ": merge the heads, (B, nh, T, hs) -> "
                     "(B, T, nh*hs)", dtype=V.dtype)
        ts: torch.Tensor | float = 0.0
        if self.adapter is not None:
            h1, ts = self.adapter(h1, x, mask)
        return on_real_tokens(self.after_attention, mask, h1, x, ts)

    def attention_probs(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The layer's attention probabilities on its input x (B, T, H), (B, nh, T, T), computing Q and K again."""
        Q = self.split_heads(F.linear(x, self.Wq, self.bq))  # (B, T, H) -> (B, nh, T, hs)
        K = self.split_heads(F.linear(x, self.Wk, self.bk))
        return attention_probs(Q, K, mask, self.attend)

    def after_attention(self, h1: torch.Tensor, x: torch.Tensor, ts: torch.Tensor | float = 0.0) -> torch.Tensor:
        """Eqs. 1-5 of BitFit: the merged heads h1 and the layer's input x, (N, H) or (B, T, H) -> the output."""
        ### BEGIN SOLUTION
        ### STUB: The rest of the layer (BitFit eqs. 1-5): h1 (the merged heads) and x (the layer's input) are
        ### STUB: (N, H), the batch's N real tokens, on a CPU (forward drops the padding and puts it back), or
        ### STUB: (B, T, H) on a GPU or under torch.compile, padding included (forward zeroes it afterwards), and
        ### STUB: whenever the batch has no padding; every step acts on each token alone, so the code is the same.
        ### STUB: ts is what an adapter adds inside the last add-and-norm (PALs): h1's shape as well, or the number
        ### STUB: 0.0 when the layer has none. Return `out` (shapes below for the (N, H) case):
        ### STUB:   h2  = Dropout(Wm1 h1 + bm1)         (N, H)   F.linear(a, W, b) computes W a + b
        ### STUB:   h3  = gLN1 * norm(h2 + x) + bLN1    (N, H)   layer_norm(..., self.gLN1, self.bLN1, self.eps)
        ### STUB:   h4  = GELU(Wm2 h3 + bm2)            (N, I)   self.act(): the config's hidden_act, GELU for BERT;
        ### STUB:                                                I is the intermediate size
        ### STUB:   h5  = Dropout(Wm3 h4 + bm3)         (N, H)
        ### STUB:   out = gLN2 * norm(h5 + h3 + ts) + bLN2   (N, H)
        ### STUB: Dropout has rate self.p and is active only when self.training (F.dropout(a, self.p, self.training)).
        h2 = F.dropout(F.linear(h1, self.Wm1, self.bm1), self.p, self.training)
        h3 = layer_norm(h2 + x, self.gLN1, self.bLN1, self.eps)
        h4 = self.act(F.linear(h3, self.Wm2, self.bm2))              # (N, I)
        h5 = F.dropout(F.linear(h4, self.Wm3, self.bm3), self.p, self.training)
        return layer_norm(h5 + h3 + ts, self.gLN2, self.bLN2, self.eps)  # (N, H)
        ### END SOLUTION


def skips_padding(mask: torch.Tensor) -> bool:
    """Whether the layers look at the mask's values to skip the padding: on a CPU yes; on a GPU no, since reading a
    value back makes the host wait until the GPU has run everything queued (benchmarks/gpu.md), nor under
    torch.compile, where a value-dependent shape would break the graph."""
    return not mask.is_cuda and not torch.compiler.is_compiling()


def on_real_tokens(
    f: Callable[..., torch.Tensor], mask: torch.Tensor, *args: torch.Tensor | float, gather: bool | None = None,
) -> torch.Tensor:
    """f on the N real tokens of (B, T, H) arguments only, its (N, H) result put back in place, 0 at padding.
    gather=False (the default on a GPU, where the gather waits for the device) runs f on every position and
    multiplies padding by 0 instead.

    Eqs. 1-5 act on each position alone, and attention never lets a padding position reach a real one, so
    they can skip the padding: a quarter to a half less work on typical padded batches. mask: additive (B, 1, 1, T).
    """
    B, T = mask.shape[0], mask.shape[-1]
    keep = (mask == 0).view(B, T)                                     # (B, T), True at real tokens
    if not (gather if gather is not None else skips_padding(mask)):  # every position, padding times 0
        out = f(*args)                                                # (B, T, H)
        return out * keep.unsqueeze(-1).to(out.dtype)
    if bool(keep.all()):                                              # no padding: nothing to skip
        return f(*args)
    out = f(*(a[keep] if isinstance(a, torch.Tensor) else a for a in args))  # (B, T, H) -> (N, H)
    return out.new_zeros(B, T, out.shape[-1]).index_put((keep,), out)      # (N, H) -> (B, T, H)


class BertPooler(nn.Module):
    """tanh(Wp h_[CLS] + bp): the sentence vector of the next-sentence head (Devlin et al., 2019, sec. 3.1)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        H = config.hidden_size
        self.Wp, self.bp = nn.Parameter(torch.empty(H, H)), nn.Parameter(torch.zeros(H))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """The last layer's output h (B, T, H) -> the pooled [CLS] vector (B, H)."""
        return torch.tanh(F.linear(h[:, 0], self.Wp, self.bp))  # (B, T, H) -> (B, H)


@dataclass
class BertOutput:
    """What BertModel returns; hidden_states (the embeddings and every layer's output) and attentions when asked."""

    last_hidden_state: torch.Tensor                    # (B, T, H)
    pooler_output: torch.Tensor                        # (B, H)
    hidden_states: tuple[torch.Tensor, ...] | None = None  # L + 1 tensors of (B, T, H)
    attentions: tuple[torch.Tensor, ...] | None = None     # L tensors of (B, nh, T, T), each row sums to 1
    # (the layers output 0 at padding, so from layer 2 on the rows of padding queries are not Hugging Face's)


def mask_to_bias(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """1/0 padding mask (B, T) -> additive attention bias (B, 1, 1, T): 0 to keep, dtype's minimum to drop."""
    keep = attention_mask[:, None, None, :].to(dtype)   # (B, T) -> (B, 1, 1, T)
    return (1.0 - keep) * torch.finfo(dtype).min


class BertModel(nn.Module):
    """The BERT encoder: embed(), the layers one by one, then the pooler (Devlin et al., 2019, sec. 3)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.layers = nn.ModuleList(BertLayer(config) for _ in range(config.num_hidden_layers))
        self.pooler = BertPooler(config)
        self.apply(self._init)

    def _init(self, module: nn.Module) -> None:
        """Weights ~ N(0, std), biases 0, LayerNorm gains 1; std the config's initializer_range, 0.02 as
        initializer_range in Google's released BERT configs (bert_config.json; Google's code draws from a normal
        truncated at 2 std, Hugging Face's and this one from the plain normal)."""
        std = self.config.initializer_range
        for name, p in module.named_parameters(recurse=False):
            if name.startswith("W"):
                nn.init.normal_(p, 0.0, std)
            elif name == "weight" and isinstance(module, nn.Embedding):
                nn.init.normal_(p, 0.0, std)
                if module.padding_idx is not None:
                    p.data[module.padding_idx].zero_()

    @property
    def gradient_checkpointing(self) -> bool:
        """Whether each layer is computed again in the backward pass instead of keeping its activations."""
        return any(layer.checkpointing for layer in self.layers)

    @gradient_checkpointing.setter
    def gradient_checkpointing(self, on: bool) -> None:
        for layer in self.layers:
            layer.checkpointing = bool(on)

    def embed(
        self, input_ids: torch.Tensor | None = None, token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None, inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The encoder's input h0, (B, T, H); callable alone so that extensions can perturb it."""
        return self.embeddings(input_ids, token_type_ids, position_ids, inputs_embeds)

    def attention_bias(self, attention_mask: torch.Tensor | None, h: torch.Tensor) -> torch.Tensor:
        """The additive mask every layer takes, (B, 1, 1, T), built once per forward, in the dtype of the layers'
        queries (under a GPU's autocast its dtype, since a fused kernel may misread a mask of another dtype)."""
        if attention_mask is None:
            attention_mask = torch.ones(h.shape[:2], device=h.device)
        cast = h.is_cuda and torch.is_autocast_enabled("cuda")
        return mask_to_bias(attention_mask, torch.get_autocast_dtype("cuda") if cast else h.dtype)

    def forward(
        self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None, *, position_ids: torch.Tensor | None = None,
        embeddings: torch.Tensor | None = None, output_hidden_states: bool = False, output_attentions: bool = False,
    ) -> BertOutput:
        """Encode a batch. Pass `embeddings` (h0 from embed(), possibly perturbed) to skip the embedding step.

        output_attentions: also return each layer's attention probabilities, as Hugging Face's output_attentions (in
        train mode these are before dropout, where Hugging Face's are after)."""
        expect_batch(input_ids, embeddings, attention_mask=attention_mask, token_type_ids=token_type_ids)
        h = embeddings if embeddings is not None else self.embed(input_ids, token_type_ids, position_ids)
        mask = self.attention_bias(attention_mask, h)
        hidden_states = [h] if output_hidden_states else None
        attentions = [] if output_attentions else None
        for layer in self.layers:
            if attentions is not None:
                attentions.append(layer.attention_probs(h, mask))  # (B, nh, T, T)
            h = layer(h, mask)
            if hidden_states is not None:
                hidden_states.append(h)
        return BertOutput(h, self.pooler(h), tuple(hidden_states) if hidden_states is not None else None,
                          tuple(attentions) if attentions is not None else None)

    @classmethod
    def from_pretrained(cls, name_or_path: str, **kwargs) -> BertModel:
        """Same as minbert.load_pretrained(name_or_path)."""
        from .checkpoint import load_pretrained
        return load_pretrained(name_or_path, **kwargs)

    def save_pretrained(self, directory: str) -> None:
        """Write config.json and model.safetensors with Hugging Face's names."""
        from .checkpoint import save_pretrained
        save_pretrained(self, directory)
