"""The PALs extension's checks (minbert/pals.py): the attention in the projected space and a task's PAL.

The attention runs torch's fused kernel (attn_implementation="sdpa"), not part 1's attention(), and the PAL's
check puts fixed stand-in maps in place of the projected attentions, so that each part depends on its own
function alone. The expected values come from assignments/fixtures/pals.safetensors.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from .common import Fail, Part, _state, _tiny_config, compare, load_fixture

FILE = "minbert/pals.py"
SIZE, HEADS, LAYERS = 12, 3, 2      # d, the projected width, its heads, and the encoder's layers


def pals_config(dropout: float = 0.1) -> object:
    """The tiny encoder's config (H = 32, two layers), with torch's fused attention kernel."""
    return dataclasses.replace(_tiny_config(attn_implementation="sdpa", attention_probs_dropout_prob=dropout),
                               num_hidden_layers=LAYERS)


class FixedAttention(nn.Module):
    """A stand-in for one layer's projected attention: tanh(z A^T) at real tokens, 0 at padding, (B, T, d)."""

    def __init__(self, A: torch.Tensor):
        super().__init__()
        self.A = A

    def forward(self, z: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        keep = (mask[:, 0, 0, :, None] == 0).to(z.dtype)               # (B, T, 1) from the additive (B, 1, 1, T)
        return torch.tanh(z @ self.A.T) * keep


class _Attend:
    """Stands in for ProjectedAttention.attend: records the dropout rate and mode, and runs the kernel without dropout
    (or, given `inner`, the module's own attend, as called)."""

    def __init__(self, inner: object = None) -> None:
        self.calls: list[tuple[float, bool]] = []
        self.inner = inner

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                 dropout_p: float = 0.0, training: bool = False) -> torch.Tensor:
        from minbert.model import fused_attention
        self.calls.append((dropout_p, training))
        if self.inner is not None:
            return self.inner(q, k, v, mask, dropout_p, training)
        return fused_attention(q, k, v, mask, 0.0, False)


def check_attention() -> None:
    from minbert.pals import ProjectedAttention
    f = load_fixture("pals")
    module = ProjectedAttention(SIZE, HEADS, pals_config())
    module.load_state_dict(_state(f, "param.attention."))
    z, mask = f["z"], f["mask"]
    what = f"ProjectedAttention.forward in {FILE} (d = {SIZE}, {HEADS} heads)"
    hints = {f"one head of size d is used: split q, k and v into self.nh = {HEADS} heads with self.split_heads":
             f["attn_one_head"],
             "the biases bq, bk, bv are left out: q = Wq z + bq (F.linear(z, self.Wq, self.bq))": f["attn_no_bias"],
             "the queries and the keys are swapped": f["attn_qk_swapped"],
             "the attention mask is not applied: the padding tokens are attended to (pass `mask` on to self.attend)":
             f["attn_no_mask"]}
    with torch.no_grad():
        module.eval()
        attend = _Attend(module.attend)          # the module's own attend, its calls recorded
        module.attend = attend
        got = module(z, mask)
        module.attend = attend.inner
        # in eval mode, dropout must be off: the mode passed to self.attend (1 = training), 0 when it is not called
        compare(f"{what} in eval mode: the `training` argument given to self.attend (1 = True)",
                torch.tensor(float(any(training for _, training in attend.calls))), torch.tensor(0.0),
                hint="self.attend is called with training=True in eval mode, so dropout stays on at evaluation: "
                     "pass the module's own mode, self.training")
        compare(f"{what} (eval mode)", got, f["attn_out"], hints=hints,
                shape_hint="self.attend returns the heads merged, (B, T, d): return that")
        module.train()
        attend = _Attend()
        module.attend = attend
        got = module(z, mask)
    if not attend.calls:
        raise Fail(f"{what} does not call self.attend with q, k, v, the mask, the dropout rate and the mode: use it for the attention "
                   "(it is torch's fused kernel or your attention(), as the config says)")
    if attend.calls[-1] != (module.p, True):
        p, training = attend.calls[-1]
        raise Fail(f"{what} in training mode calls self.attend with dropout_p={p}, training={training}; expected "
                   f"dropout_p={module.p} (self.p), training=True (self.training)")
    compare(f"{what} in training mode (self.attend standing in without dropout)", got, f["attn_out"])


def check_pal() -> None:
    from minbert.pals import PalsConfig, TaskPALs
    f = load_fixture("pals")
    pal = TaskPALs(pals_config(), PalsConfig(size=SIZE, heads=HEADS))
    # the projected attentions stand in as fixed maps, so that this part depends on TaskPALs.forward alone
    pal.attention = nn.ModuleList(FixedAttention(f[f"pal_A_{layer}"]) for layer in range(LAYERS))
    pal.load_state_dict(_state(f, "param.pal."))
    x, mask = f["x"], f["mask"]
    with torch.no_grad():
        for layer in range(LAYERS):
            key = f"pal_out_{layer}"
            hints = {"no GELU follows the decoder (the paper writes V^D SA(V^E x); its authors' code and minbert "
                     "apply GELU(V^D ...))": f[f"{key}_no_gelu"],
                     "the GELU comes before the decoder: it is GELU(V^D SA(V^E x))": f[f"{key}_gelu_inside"],
                     "GELU's tanh approximation is used: F.gelu(...) is the exact one": f[f"{key}_gelu_tanh"]}
            if layer > 0:
                hints["the first layer's attention is used: each layer has its own, self.attention[layer]"] = \
                    f["pal_out_0"]
            for other in range(LAYERS):          # e.g. an index off by one: layer 0 takes the last layer's
                if other != layer and not (other == 0 and layer > 0):
                    hints.setdefault(f"another layer's attention is used (layer {other}'s): each layer has its own, "
                                     "self.attention[layer]", f[f"pal_out_{other}"])
            compare(f"TaskPALs.forward in {FILE} for layer {layer} (x (B, T, H = 32), d = {SIZE}; the projected "
                    "attentions stand in as fixed maps)", pal(layer, x, mask), f[key], hints=hints,
                    shape_hint="Down with self.encoder (V^E, H -> d), the layer's attention, back up with "
                               "self.decoder (V^D, d -> H): (B, T, H)")


PALS_PARTS = [Part(*p[:4], files=(FILE,), group="pals", fixtures=p[4]) for p in [
    ("pals_attention", 10, f"ProjectedAttention.forward in {FILE}", check_attention, ("pals",)),
    ("pals_forward", 10, f"TaskPALs.forward in {FILE}", check_pal, ("pals",)),
]]
