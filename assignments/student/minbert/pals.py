"""Projected attention layers, PALs (Stickland & Murray, 2019: "BERT and PALs", sec. 3), task by task.

Each task t owns an encoder projection V^E_t (H -> d, d = 204 for bert-base) and a decoder V^D_t (d -> H),
both shared across the layers, and in every layer l a multi-head self-attention SA_tl in the small space
(6 heads, no output projection), so that beside layer l

    PAL_tl(x) = GELU(V^D_t SA_tl(V^E_t x))                                        (B, T, H)

Two placements, both through BertLayer's one extension point, its `adapter` (minbert/model.py), which
returns the merged heads h1 and a term ts for the last add-and-norm:

    standard   Stickland & Murray: in parallel with the whole layer, added inside its last add-and-norm,
               out = LN2(h5 + h3 + PAL(x))   (the adapter returns h1 unchanged and ts = PAL(x))
    concat     the CS224N report's variant (Qian & Yang, sec. 4.4, Figure 2): beside each layer's self-attention
               sublayer (before Wm1), in every layer, the merged heads and the PAL output concatenated and
               projected back to H by a per-layer linear map, h1 <- W_tl [h1; PAL(x)] + b_tl   (the adapter
               returns that and ts = 0)

The PALs of the batch's task run: the multitask model sets `task` before each forward. Where the paper and
its code differ: the paper writes TS(x) = V^D MH(V^E x); its code (AsaCooperStickland/Bert-n-Pals,
modeling.py, BERTPals) applies a GELU after the decoder, and so does minbert. Initialisation as BERT's
(normal, std initializer_range, biases 0); the concat projection starts as [I, N(0, std)], so that the
layer starts as the pre-trained one plus a small PAL term (a random projection would replace the
pre-trained attention output by noise).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .config import BertConfig
from .model import BertModel, attention, fused_attention

VARIANTS = ("standard", "concat")


@dataclass
class PalsConfig:
    """The PALs' settings (Stickland & Murray, 2019, sec. 3 and 4: d = 204 and 6 heads for bert-base)."""

    variant: str = "standard"   # "standard" (inside the last add-and-norm) or "concat" (the report's variant)
    size: int = 204             # d, the width of the projected space
    heads: int = 6              # attention heads in the projected space

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"PALs variant must be one of {VARIANTS}, not {self.variant!r}")
        if self.size < 1 or self.heads < 1 or self.size % self.heads:
            raise ValueError(f"PALs size {self.size} must be a positive multiple of the number of heads {self.heads}")


class ProjectedAttention(nn.Module):
    """SA in the projected space: softmax(QK^T / sqrt(d / heads)) V over `heads` heads, no output projection."""

    def __init__(self, d: int, heads: int, config: BertConfig):
        super().__init__()
        self.nh, self.hs, self.p = heads, d // heads, config.attention_probs_dropout_prob
        self.attend = attention if config.attn_implementation == "eager" else fused_attention
        self.Wq, self.bq = nn.Parameter(torch.empty(d, d)), nn.Parameter(torch.zeros(d))
        self.Wk, self.bk = nn.Parameter(torch.empty(d, d)), nn.Parameter(torch.zeros(d))
        self.Wv, self.bv = nn.Parameter(torch.empty(d, d)), nn.Parameter(torch.zeros(d))

    def split_heads(self, z: torch.Tensor) -> torch.Tensor:
        """(B, T, d) -> (B, nh, T, hs): one slice of hs features per head."""
        B, T, _ = z.shape
        return z.view(B, T, self.nh, self.hs).transpose(1, 2)  # (B, T, d) -> (B, nh, T, hs)

    def forward(self, z: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """z (B, T, d), mask (B, 1, 1, T) -> the merged heads (B, T, d)."""
        # YOUR CODE HERE
        # Multi-head self-attention in the projected space; z (B, T, d), mask the additive (B, 1, 1, T).
        #   q, k, v = Wq z + bq, Wk z + bk, Wv z + bv (F.linear with self.Wq, self.bq, ...), (B, T, d) each,
        #   each split into self.nh heads of size self.hs = d / nh by self.split_heads: (B, nh, T, hs)
        #   self.attend computes the attention from q, k, v, the mask, the dropout probability self.p and
        #   whether the module is training, and returns the heads merged, (B, T, d): return that.
        #   No output projection here: the PAL's decoder V^D follows.
        raise NotImplementedError


class TaskPALs(nn.Module):
    """One task's PALs: V^E and V^D shared by every layer, one SA per layer, and (concat) one W per layer."""

    def __init__(self, config: BertConfig, pals: PalsConfig):
        super().__init__()
        H, d, L = config.hidden_size, pals.size, config.num_hidden_layers
        self.encoder, self.decoder = nn.Linear(H, d), nn.Linear(d, H)                  # V^E, V^D
        self.attention = nn.ModuleList(ProjectedAttention(d, pals.heads, config) for _ in range(L))
        self.mix = nn.ModuleList(nn.Linear(2 * H, H) for _ in range(L)) if pals.variant == "concat" else None
        std = config.initializer_range
        for name, p in self.named_parameters():
            if name.rsplit(".", 1)[-1].startswith("b"):                                # bias, bq, bk, bv
                nn.init.zeros_(p)
            else:
                nn.init.normal_(p, 0.0, std)
        if self.mix is not None:
            with torch.no_grad():
                for m in self.mix:
                    m.weight[:, :H].copy_(torch.eye(H))                               # [I, N(0, std)]

    def forward(self, layer: int, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """PAL_l(x) = GELU(V^D SA_l(V^E x)), (B, T, H) -> (B, T, H)."""
        # YOUR CODE HERE
        # The PAL beside layer `layer` (0-based); x (B, T, H), mask the additive (B, 1, 1, T):
        #   V^E x = self.encoder(x): down into the small space, (B, T, d), shared by every layer
        #   SA_l(V^E x) = self.attention[layer](that, mask): this layer's own attention, (B, T, d)
        #   back up with the decoder V^D, self.decoder, (B, T, H), then F.gelu of that (the paper writes
        #   V^D SA(V^E x); its authors' code, and minbert, apply a GELU after the decoder). Return it.
        raise NotImplementedError


class PALs(nn.Module):
    """Every task's PALs for one encoder; `task` names the ones that run (set by the multitask model)."""

    def __init__(self, config: BertConfig, tasks: list[str] | tuple[str, ...], pals: PalsConfig | None = None):
        super().__init__()
        self.config = pals or PalsConfig()
        self.tasks = nn.ModuleDict({t: TaskPALs(config, self.config) for t in tasks})
        self.task: str | None = None

    def active(self) -> TaskPALs:
        """The PALs of the current task (set .task first); RuntimeError naming the tasks otherwise."""
        if self.task not in self.tasks:
            raise RuntimeError(f"PALs: no PALs for task {self.task!r} (tasks: {', '.join(self.tasks)}); set "
                               ".task before the forward (MultitaskBert.predict does)")
        return self.tasks[self.task]

    def parallel(self, layer: int, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Standard PALs: the term added inside layer `layer`'s last add-and-norm, (B, T, H)."""
        return self.active()(layer, x, mask)

    def concat(self, layer: int, h1: torch.Tensor, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The report's variant: W [h1; PAL(x)] + b, the new merged heads of layer `layer`, (B, T, H)."""
        t = self.active()
        return t.mix[layer](torch.cat([h1, t(layer, x, mask)], dim=-1))              # (B, T, 2H) -> (B, T, H)

    def adapt(self, layer: int, h1: torch.Tensor, x: torch.Tensor,
              mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | float]:
        """Layer `layer`'s adapter: (h1, PAL(x)) for standard PALs, (W [h1; PAL(x)] + b, 0.0) for concat."""
        if self.config.variant == "standard":
            return h1, self.parallel(layer, x, mask)
        return self.concat(layer, h1, x, mask), 0.0

    def attach(self, bert: BertModel) -> None:
        """Set every layer's extension point to these PALs (they stay registered here, not in `bert`)."""
        for i, layer in enumerate(bert.layers):
            layer.adapter = LayerHook(self, i)


class LayerHook:
    """What a layer calls: the PALs' adapt() with the layer's index. A plain object, not an nn.Module, so that
    the PALs' parameters are registered once (under the multitask model) and not again under the encoder
    (where the fine-tune modes would freeze them with it)."""

    def __init__(self, pals: PALs, layer: int):
        self.pals, self.layer = pals, layer

    def __call__(self, h1: torch.Tensor, x: torch.Tensor,
                 mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | float]:
        return self.pals.adapt(self.layer, h1, x, mask)

    def __repr__(self) -> str:
        return f"PALs.adapt(layer {self.layer}, {self.pals.config.variant})"

