"""SimCSE contrastive sentence-embedding training (Gao, Yao & Chen, 2021, "SimCSE: Simple Contrastive Learning
of Sentence Embeddings"), and the margin loss of the CS224N report "Less is More" (Qian & Yang, sec. 4.5).

Three pure losses on sentence embeddings (B, H), each computed in fp32:

    unsupervised  the same sentences encoded twice with dropout on (z1, z2); InfoNCE with in-batch negatives,
                  l_i = -log exp(cos(z1_i, z2_i) / t) / sum_j exp(cos(z1_i, z2_j) / t)           (sec. 3, eq. 4)
    supervised    anchors h_i with positives h_i+ (paraphrases) and optional hard negatives h_i-,
                  l_i = -log e^{cos(h_i, h_i+)/t} / sum_j (e^{cos(h_i, h_j+)/t} + e^{cos(h_i, h_j-)/t + w [i = j]})
                  (sec. 4, eq. 5; w, the log of the paper's weight alpha, lifts each anchor's own hard negative)
    margin        L = 0.5 (y d^2 + (1 - y) max(0, m - d)^2), y = 1 for paraphrases, d the cosine distance
                  1 - cos (the default, as the report's experiments) or the Euclidean distance (its formula)

`SimCSE` wraps a BertModel with the training-time pooling (mean of the real tokens, or SimCSE's [CLS]
through an MLP that exists in training only) and computes the chosen objective's loss on a batch.
The encoder it trains is a plain BertModel: `model.bert` is what gets saved.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .model import BertModel
from .pooling import pool

OBJECTIVES = ("unsup", "sup", "margin")
SIMCSE_POOLINGS = ("mean", "cls_mlp")   # training-time pooling (sec. 3): pooling.pool's mean, or [CLS] through an MLP
DISTANCES = ("cosine", "euclidean")


def cosine_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """cos(a_i, b_j) for every pair, (B, H) x (C, H) -> (B, C), in fp32 even under autocast (which would run the
    product in bf16 or fp16: at t = 0.05 their rounding of cos, up to 4e-3, moves a logit by up to 0.08)."""
    with torch.autocast(a.device.type, enabled=False):
        a, b = F.normalize(a.float(), dim=-1), F.normalize(b.float(), dim=-1)
        return a @ b.T                                                      # (B, C)


def unsup_simcse_loss(z1: torch.Tensor, z2: torch.Tensor, temperature: float = 0.05) -> torch.Tensor:
    """Unsupervised SimCSE (Gao et al., 2021, sec. 3, eq. 4): InfoNCE over cos / t, targets arange(B)."""
    # YOUR CODE HERE
    # InfoNCE with in-batch negatives, a scalar; z1, z2 (B, H) are two views (dropout masks) of B sentences.
    #   logits_ij = cos(z1_i, z2_j) / temperature, (B, B): cosine_matrix(z1, z2) (given, in float32)
    #   divided by the temperature; sentence i's positive is z2_i, on the diagonal, the other z2_j its negatives
    #   loss = mean_i -log softmax(logits_i)[i]: F.cross_entropy with targets 0..B-1
    #   (torch.arange(B, device=logits.device)); one direction only, z1 -> z2.
    raise NotImplementedError


def sup_simcse_loss(anchor: torch.Tensor, positive: torch.Tensor, hard_negative: torch.Tensor | None = None,
                    temperature: float = 0.05, hard_negative_weight: float = 0.0) -> torch.Tensor:
    """Supervised SimCSE (Gao et al., 2021, sec. 4, eq. 5): in-batch positives and optional hard negatives.

    hard_negative_weight is added, after the division by the temperature, to the logit of each anchor's own
    hard negative (not to the other anchors' ones), as in the authors' code; 0 is the paper's alpha = 1.
    """
    logits = cosine_matrix(anchor, positive) / temperature                  # (B, B)
    B = logits.shape[0]
    if hard_negative is not None:
        negatives = cosine_matrix(anchor, hard_negative) / temperature      # (B, B)
        negatives = negatives + hard_negative_weight * torch.eye(B, device=negatives.device)
        logits = torch.cat([logits, negatives], dim=1)                      # (B, 2B)
    return F.cross_entropy(logits, torch.arange(B, device=logits.device))


def margin_loss(e1: torch.Tensor, e2: torch.Tensor, y: torch.Tensor, margin: float = 0.5,
                distance: str = "cosine") -> torch.Tensor:
    """The report's contrastive margin loss (Qian & Yang, sec. 4.5): mean of 0.5 (y d^2 + (1 - y) max(0, m - d)^2).

    distance "cosine" (default): d = 1 - cos(e1, e2), in [0, 2]; "euclidean": d = ||e1 - e2||, on the raw vectors.
    """
    if distance not in DISTANCES:
        raise ValueError(f"distance must be one of {DISTANCES}, not {distance!r}")
    with torch.autocast(e1.device.type, enabled=False):                   # fp32, as cosine_matrix
        # YOUR CODE HERE
        # The margin loss, a scalar; e1, e2 (B, H) the pair's sentence embeddings, y (B,) 1 for a paraphrase
        # and 0 otherwise (perhaps integers). Compute in float32: cast e1, e2 and y to float first.
        #   d = 1 - cos(e1_b, e2_b) with distance "cosine" (F.cosine_similarity over the last dimension), or
        #       d = ||e1_b - e2_b|| with "euclidean" (the raw vectors, not normalised), (B,)
        #   loss = mean_b 0.5 * (y_b d_b^2 + (1 - y_b) max(0, margin - d_b)^2): a paraphrase is pulled
        #   together (d -> 0), any other pair pushed apart until it is `margin` away, and then left alone.
        raise NotImplementedError


@dataclass
class SimCSEConfig:
    """The contrastive stage's settings; the encoder's own sizes stay in its BertConfig."""

    objective: str = "unsup"            # "unsup", "sup" (paraphrase positives) or "margin" (the report's loss)
    pooling: str = "mean"               # "mean" of real tokens, or "cls_mlp": [CLS] through an MLP (training only)
    temperature: float = 0.05           # t of both SimCSE losses
    hard_negative_weight: float = 0.0   # w of sup_simcse_loss (log alpha)
    margin: float = 0.5                 # m of margin_loss
    distance: str = "cosine"            # d of margin_loss: "cosine" or "euclidean"

    def __post_init__(self) -> None:
        for name, value, allowed in (("objective", self.objective, OBJECTIVES),
                                     ("pooling", self.pooling, SIMCSE_POOLINGS),
                                     ("distance", self.distance, DISTANCES)):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, not {value!r}")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be positive, not {self.temperature}")


def _stack(views: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Several right-padded (B, T_k) batches of ids and masks -> one (kB, max T_k) batch, for a single forward."""
    T = max(ids.shape[1] for ids, _ in views)
    ids = torch.cat([F.pad(i, (0, T - i.shape[1])) for i, _ in views])    # (kB, T)
    mask = torch.cat([F.pad(m, (0, T - m.shape[1])) for _, m in views])   # (kB, T)
    return ids, mask


class SimCSE(nn.Module):
    """A BERT encoder under contrastive training (Gao et al., 2021): training pooling, and the objective's loss.

    Batches: unsup takes input_ids/attention_mask (B, T) and encodes them twice in one forward (dropout makes
    the two views differ); sup takes input_ids_1/_2 (anchors, positives) and, for hard negatives, input_ids_3;
    margin takes input_ids_1/_2 and labels (1 paraphrase, 0 not).
    """

    def __init__(self, bert: BertModel, config: SimCSEConfig | None = None):
        super().__init__()
        self.bert, self.config = bert, config or SimCSEConfig()
        H = bert.config.hidden_size
        # SimCSE's MLP over [CLS] (sec. 3, "we take [CLS] with an MLP layer over it during training only")
        self.mlp = nn.Sequential(nn.Linear(H, H), nn.Tanh()) if self.config.pooling == "cls_mlp" else None

    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The training embedding (B, H): mean pooling, or [CLS] through the MLP."""
        hidden = self.bert(input_ids, attention_mask).last_hidden_state     # (B, T, H)
        if self.mlp is None:
            return pool(hidden, attention_mask, None, "mean")
        return self.mlp(hidden[:, 0])

    def sentence_embedding(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The embedding of the saved encoder (B, H): mean pooling, or [CLS] without the MLP (SimCSE's test time)."""
        hidden = self.bert(input_ids, attention_mask).last_hidden_state     # (B, T, H)
        return pool(hidden, attention_mask, None, "mean" if self.mlp is None else "cls")

    def loss(self, batch: dict) -> torch.Tensor:
        """The objective's mean loss on a collated batch."""
        c = self.config
        if c.objective == "unsup":
            ids, mask = batch["input_ids"], batch["attention_mask"]
            z = self.embed(torch.cat([ids, ids]), torch.cat([mask, mask]))  # (2B, H): two dropout views
            z1, z2 = z.chunk(2)                                             # (B, H) each
            return unsup_simcse_loss(z1, z2, c.temperature)
        k = 3 if "input_ids_3" in batch else 2
        ids, mask = _stack([(batch[f"input_ids_{i}"], batch[f"attention_mask_{i}"]) for i in range(1, k + 1)])
        views = self.embed(ids, mask).chunk(k)                              # k x (B, H)
        if c.objective == "margin":
            return margin_loss(views[0], views[1], batch["labels"], c.margin, c.distance)
        return sup_simcse_loss(views[0], views[1], views[2] if k == 3 else None, c.temperature,
                               c.hard_negative_weight)
