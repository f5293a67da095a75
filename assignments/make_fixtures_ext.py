"""The extensions' fixtures (DeeBERT, SMART, PALs, SimCSE), written by python -m assignments.make_fixtures.

As there, only tensors are stored: inputs, parameters, the reference's outputs, and the outputs of a few
common mistakes, so that the checker can say which one a wrong answer looks like.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from .make_fixtures import _padding_mask, _randomize, _sentences

# ---------------------------------------------------------------- DeeBERT

def deebert_entropy_fixture(g: torch.Generator) -> dict[str, torch.Tensor]:
    from minbert.deebert import entropy
    logits = 3 * torch.randn(2, 3, 5, generator=g)
    return {"logits": logits, "entropy": entropy(logits), "entropy_normalized": entropy(logits, normalize=True)}


def deebert_exit_fixture(g: torch.Generator) -> dict[str, torch.Tensor]:
    """Exit rules whose samples leave at several layers; the expected values are each sample's run alone."""
    ids, mask = _sentences([12, 3, 9, 5, 12, 2, 7, 10, 4], 12, g)
    for _ in range(20):               # random models until every rule sends the samples to 3 layers or more
        out = _deebert_exit_attempt(ids, mask, g)
        if out is not None:
            return out
    raise SystemExit("deebert_exit fixture: no model among 20 spreads the exits over enough layers")


def _deebert_exit_attempt(ids: torch.Tensor, mask: torch.Tensor, g: torch.Generator) -> dict[str, torch.Tensor] | None:
    from minbert.deebert import early_exit, exit_from_logits

    from .checks_deebert import ConfidenceExit, deebert_model, exit_rules
    model = deebert_model()
    _randomize(model, g)
    with torch.no_grad():
        for layer in model.bert.layers:
            layer.W.mul_(3.0)                 # layers that change the representation, so that predictions change
        for ramp in model.ramps:
            ramp.classifier.weight.mul_(3.0)  # and off-ramps confident enough to leave early
    params = {f"param.{k}": v.clone() for k, v in model.state_dict().items()}
    lengths = mask.sum(1).tolist()
    with torch.no_grad():
        model.eval()
        alone = torch.stack([model.all_logits(ids[b:b + 1, :n], mask[b:b + 1, :n])[:, 0]
                             for b, n in enumerate(lengths)], 1)                              # (L, B, C)
        conf = alone[:-1].softmax(-1).amax(-1).flatten().sort().values                       # the exits' decisions
        cuts = [(a + b) / 2 for a, b in zip(conf[:-1].tolist(), conf[1:].tolist()) if b - a > 1e-3]
        # two thresholds with different exits: the most layers used, then the most work saved by trimming
        ranked, patterns = [], set()
        for t in cuts:
            layers = tuple(exit_from_logits(alone, ConfidenceExit(t))[1].tolist())
            saved = (early_exit(model, ids, mask, None, ConfidenceExit(t), trim=False).token_layers
                     - early_exit(model, ids, mask, None, ConfidenceExit(t), trim=True).token_layers)
            ranked.append((len(set(layers)), saved, t, layers))
        picked = []
        for *_, t, layers in sorted(ranked, reverse=True):
            if layers not in patterns and len(picked) < 2:
                picked.append(t)
                patterns.add(layers)
        thresholds = torch.tensor(sorted(picked))
        out = dict(params, input_ids=ids, attention_mask=mask, thresholds=thresholds)
        trimmed_less = False
        for i, (name, rule) in enumerate(exit_rules(thresholds)):
            logits, layers = exit_from_logits(alone, rule)
            if len(set(layers.tolist())) < 3:
                return None
            full = early_exit(model, ids, mask, None, rule, trim=False)
            trimmed = early_exit(model, ids, mask, None, rule, trim=True)
            for o in (full, trimmed):
                assert torch.equal(o.layers, layers) and torch.allclose(o.logits, logits, rtol=1e-5, atol=1e-5), name
            trimmed_less |= trimmed.token_layers < full.token_layers
            out.update({f"rule{i}_logits": logits, f"rule{i}_layers": layers,
                        f"rule{i}_work_full": torch.tensor(full.token_layers),
                        f"rule{i}_work_trim": torch.tensor(trimmed.token_layers)})
    return out if trimmed_less else None



# ---------------------------------------------------------------- SMART

def smart_fixture(g: torch.Generator) -> dict[str, torch.Tensor]:
    from minbert.smart import ascent_step, symmetric_kl
    p, q = 3 * torch.randn(4, 5, generator=g), 3 * torch.randn(4, 5, generator=g)
    lp, lq = p.log_softmax(-1), q.log_softmax(-1)
    pq, qp = (lp.exp() * (lp - lq)).sum(-1), (lq.exp() * (lq - lp)).sum(-1)        # (B,), one direction each
    out = {"kl_p": p, "kl_q": q, "kl": symmetric_kl(p, q), "kl_pq": pq.mean(), "kl_qp": qp.mean(),
           "kl_half": ((pq + qp) / 2).mean(), "kl_sum": (pq + qp).sum(), "kl_mean_all": ((pq + qp) / 5).mean()}
    # a bi-encoder pair's two tensors, (B, T, H) with B = 4 and T = 3, 2; row 2's gradient is 0 in both
    B, eta, eps = 4, 0.5, 0.3
    delta = [0.1 * (2 * torch.rand(B, T, 5, generator=g) - 1) for T in (3, 2)]
    scale = torch.tensor([1.0, 10.0, 0.0, 0.1]).view(B, 1, 1)
    grad = [torch.randn(B, T, 5, generator=g) * scale for T in (3, 2)]
    grad[1][0] *= 3                                          # row 0's largest entry is in the second tensor

    def step(norms: list[torch.Tensor], sign: bool = False, project: bool = True,
             direction: float = 1.0) -> list[torch.Tensor]:
        new = [d + direction * eta * (gr.sign() if sign else gr / torch.where(n > 0, n, 1.0))
               for d, gr, n in zip(delta, grad, norms)]
        return [x.clamp(-eps, eps) if project else x for x in new]

    def per_example(gs: list[torch.Tensor]) -> torch.Tensor:
        return torch.stack([gr.abs().reshape(B, -1).amax(1) for gr in gs]).amax(0).view(B, 1, 1)   # (B, 1, 1)

    inf = per_example(grad)
    l2 = torch.cat([gr.reshape(B, -1) for gr in grad], 1).norm(dim=1).view(B, 1, 1)
    variants = {"": step([inf, inf]), "_l2": step([l2, l2]), "_no_projection": step([inf, inf], project=False),
                "_per_tensor": step([per_example([gr]) for gr in grad]),
                "_per_token": step([gr.abs().amax(-1, keepdim=True) for gr in grad]),
                "_batch": step([inf.amax(), inf.amax()]), "_sign": step([inf, inf], sign=True),
                "_descent": step([inf, inf], direction=-1.0)}
    reference = ascent_step([d.clone() for d in delta], [gr.clone() for gr in grad], eta, eps)
    out.update(eta=torch.tensor(eta), epsilon=torch.tensor(eps))
    for i in range(2):
        assert torch.allclose(reference[i], variants[""][i], atol=1e-7) and torch.equal(reference[i][2], delta[i][2])
        out.update({f"delta_{i}": delta[i], f"grad_{i}": grad[i], f"out_{i}": reference[i]})
        out.update({f"out_{i}{k}": v[i] for k, v in variants.items() if k})
    return out


# ---------------------------------------------------------------- PALs

def pals_fixture(g: torch.Generator) -> dict[str, torch.Tensor]:
    from minbert.model import fused_attention
    from minbert.pals import PalsConfig, ProjectedAttention, TaskPALs

    from .checks_pals import HEADS, LAYERS, SIZE, FixedAttention, pals_config
    att = ProjectedAttention(SIZE, HEADS, pals_config())
    out = {f"param.attention.{k[len('param.'):]}": v for k, v in _randomize(att, g).items()}
    z, mask = torch.randn(2, 5, SIZE, generator=g), _padding_mask([5, 3], 5)

    def heads(nh: int, bias: bool = True, swap: bool = False, masked: bool = True) -> torch.Tensor:
        B, T, d = z.shape
        q, k, v = (F.linear(z, W, b if bias else None).view(B, T, nh, d // nh).transpose(1, 2)  # (B, nh, T, hs)
                   for W, b in ((att.Wq, att.bq), (att.Wk, att.bk), (att.Wv, att.bv)))
        m = mask if masked else torch.zeros_like(mask)
        return fused_attention(k, q, v, m) if swap else fused_attention(q, k, v, m)

    with torch.no_grad():
        out.update(z=z, mask=mask, attn_out=att.eval()(z, mask), attn_one_head=heads(1),
                   attn_no_bias=heads(HEADS, bias=False), attn_qk_swapped=heads(HEADS, swap=True),
                   attn_no_mask=heads(HEADS, masked=False))
        assert torch.allclose(out["attn_out"], heads(HEADS), atol=1e-6)
        pal = TaskPALs(pals_config(), PalsConfig(size=SIZE, heads=HEADS))
        A = [0.5 * torch.randn(SIZE, SIZE, generator=g) for _ in range(LAYERS)]
        pal.attention = torch.nn.ModuleList(FixedAttention(a) for a in A)
        params = _randomize(pal, g)
        pal.decoder.weight.mul_(3.0)                         # outputs of a few units, where GELU's forms differ
        params["param.decoder.weight"] = pal.decoder.weight.clone()
        out.update({f"param.pal.{k[len('param.'):]}": v for k, v in params.items()})
        x = torch.randn(2, 5, 32, generator=g)
        out["x"] = x
        for layer in range(LAYERS):
            sa = pal.attention[layer](pal.encoder(x), mask)                                  # (B, T, d)
            key = f"pal_out_{layer}"
            out.update({f"pal_A_{layer}": A[layer], key: pal(layer, x, mask), f"{key}_no_gelu": pal.decoder(sa),
                        f"{key}_gelu_inside": pal.decoder(F.gelu(sa)),
                        f"{key}_gelu_tanh": F.gelu(pal.decoder(sa), approximate="tanh")})
    return out


# ---------------------------------------------------------------- SimCSE

def simcse_fixture(g: torch.Generator) -> dict[str, torch.Tensor]:
    from minbert.simcse import cosine_matrix, margin_loss, unsup_simcse_loss
    B, H, t = 6, 8, 0.1
    z1 = torch.randn(B, H, generator=g) * (0.5 + 2.5 * torch.rand(B, 1, generator=g))     # rows of different norms
    z2 = (z1 + 0.8 * torch.randn(B, H, generator=g)) * (0.5 + 2.5 * torch.rand(B, 1, generator=g))
    cos, targets = cosine_matrix(z1, z2), torch.arange(B)

    def ce(logits: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        return F.cross_entropy(logits, targets, reduction=reduction)

    out = {"z1": z1, "z2": z2, "temperature": torch.tensor(t), "unsup": unsup_simcse_loss(z1, z2, t),
           "unsup_default": unsup_simcse_loss(z1, z2), "unsup_no_temperature": ce(cos),
           "unsup_times_temperature": ce(cos * t), "unsup_dot": ce(z1 @ z2.T / t),
           "unsup_both_directions": (ce(cos / t) + ce(cos.T / t)) / 2, "unsup_sum": ce(cos / t, "sum")}
    assert torch.allclose(out["unsup"], ce(cos / t))
    # pairs from opposite to near-identical, labels mixed, so that every branch and the clamp matter
    e1 = torch.randn(B, H, generator=g)
    mix = torch.linspace(-0.6, 0.9, B)[:, None]
    e2 = mix * e1 + (1 - mix.abs()) * torch.randn(B, H, generator=g)
    y = torch.tensor([1, 0, 1, 0, 0, 1])
    out.update(e1=e1, e2=e2, y=y)
    yf = y.float()

    def loss(d: torch.Tensor, m: float, swap: bool = False, clamp: bool = True, reverse: bool = False,
             power: int = 2, push: int | None = None, half: float = 0.5, reduction: str = "mean",
             all_pull: bool = False) -> torch.Tensor:
        yy = torch.ones_like(yf) if all_pull else 1 - yf if swap else yf
        gap = d - m if reverse else m - d
        per = half * (yy * d ** power + (1 - yy) * (gap.clamp(min=0) if clamp else gap) ** (push or power))
        return per.sum() if reduction == "sum" else per.mean()

    for distance, m in (("cosine", 0.8), ("euclidean", 3.0)):
        d = 1 - F.cosine_similarity(e1, e2, dim=-1) if distance == "cosine" else (e1 - e2).norm(dim=-1)   # (B,)
        key = f"margin_{distance}_loss"
        out.update({f"margin_{distance}": torch.tensor(m), key: margin_loss(e1, e2, y, m, distance),
                    f"{key}_swapped": loss(d, m, swap=True), f"{key}_no_clamp": loss(d, m, clamp=False),
                    f"{key}_reversed": loss(d, m, reverse=True), f"{key}_not_squared": loss(d, m, power=1),
                    f"{key}_no_half": loss(d, m, half=1.0), f"{key}_sum": loss(d, m, reduction="sum"),
                    f"{key}_push_not_squared": loss(d, m, push=1), f"{key}_all_pull": loss(d, m, all_pull=True)})
        assert torch.allclose(out[key], loss(d, m)) and bool((d > m)[y == 0].any()) and bool((d < m)[y == 0].any())
        if distance == "cosine":
            out[f"{key}_cos"] = loss(F.cosine_similarity(e1, e2, dim=-1), m)
        else:
            out[f"{key}_normalised"] = loss((F.normalize(e1, dim=-1) - F.normalize(e2, dim=-1)).norm(dim=-1), m)
    return out


# The extensions' fixtures by name, in the order their generators are seeded (make_fixtures.main).
EXTENSION_FIXTURES: dict[str, Callable[[torch.Generator], dict[str, torch.Tensor]]] = {
    "deebert_entropy": deebert_entropy_fixture, "deebert_exit": deebert_exit_fixture, "smart": smart_fixture,
    "pals": pals_fixture, "simcse": simcse_fixture,
}
