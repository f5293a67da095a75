"""Sentence-embedding objectives for the pair tasks, on the cosine of two sentence vectors u, v (B, H) each.

    cosine_similarity_loss   (cos(u, v) - gold / 5)^2, the Sentence-BERT regression objective (Reimers &
                             Gurevych, 2019, sec. 3)
    cosent_loss              log(1 + sum over pairs i, j with gold_i > gold_j of exp(lambda (cos_j - cos_i)))
                             (Su, 2022, "CoSENT"), lambda 20: a ranking loss on the cosines, scale-free in the gold
    mnrl_loss                multiple-negatives ranking (Henderson et al., 2017, sec. 4): each duplicate pair's u_i
                             against every v_j of the batch, softmax cross-entropy of scale * cos with target j = i
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def cosine_similarity_loss(u: torch.Tensor, v: torch.Tensor, gold: torch.Tensor, top: float = 5.0) -> torch.Tensor:
    """Reimers & Gurevych (2019), sec. 3: mean of (cos(u_b, v_b) - gold_b / top)^2 over the batch."""
    cos = F.cosine_similarity(u, v, dim=-1)                              # (B,)
    return F.mse_loss(cos, gold.to(cos.dtype) / top)


def cosent_loss(cos: torch.Tensor, gold: torch.Tensor, lam: float = 20.0) -> torch.Tensor:
    """Su (2022), CoSENT: log(1 + sum_{gold_i > gold_j} exp(lam (cos_j - cos_i))) over the batch's cosines (B,)."""
    diff = lam * (cos[None, :] - cos[:, None])                           # (B, B): [i, j] = lam (cos_j - cos_i)
    ranked = gold[:, None] > gold[None, :]                               # (B, B): gold_i > gold_j
    terms = torch.cat([diff.new_zeros(1), diff[ranked]])                 # the 1 is exp(0)
    return torch.logsumexp(terms, dim=0)


def mnrl_loss(u: torch.Tensor, v: torch.Tensor, labels: torch.Tensor | None = None, scale: float = 20.0) -> torch.Tensor:
    """Henderson et al. (2017), sec. 4: mean over the anchors i (labels_i == 1; all when labels is None) of
    -log softmax_j(scale cos(u_i, v_j))[i], every other v_j of the batch a negative; 0 without an anchor."""
    sims = scale * F.normalize(u, dim=-1) @ F.normalize(v, dim=-1).T    # (B, B)
    anchors = torch.arange(u.shape[0], device=u.device)
    if labels is not None:
        anchors = anchors[labels.bool()]
    if anchors.numel() == 0:
        return sims.sum() * 0.0                                          # keeps the graph, adds nothing
    return F.cross_entropy(sims[anchors], anchors)
