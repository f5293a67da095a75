"""The leaderboard entrant's additions to the multitask CLI: gradient surgery (PCGrad) and sentence-embedding objectives
for the pair tasks, all optional. The multitask command takes their settings (ToolkitSettings); its model class
(tasks/multitask/model.py: model_class) and its terms (tasks/multitask/terms.py) add what is switched on.

--gradient-surgery pcgrad (Yu et al., 2020, Alg. 1): each optimiser step takes one batch of each task (a round of
the schedule's order), computes every task's gradient at the same parameters, projects them off each other where
they conflict on the shared parameters, and steps on their sum; the heads (and PALs) keep their own task's
gradient. A step then costs one forward and backward per task plus the projection (benchmarks/pcgrad_cost.py).
--gradient-surgery sum is its control: the same rounds, one step each, the gradients summed without projection.

--sts-embedding-loss cosine|cosent and --para-embedding-loss mnrl add, with weight --embedding-loss-weight, an
objective on the cosine of the two sentences' own vectors u, v (each sentence encoded alone, as in the bi-encoder
design) to the task's loss: 2 more encoder passes per pair batch with the cross-encoder (minbert.sentence_losses).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from minbert.multitask import MultitaskBert
from minbert.sentence_losses import cosent_loss, cosine_similarity_loss, mnrl_loss

from ..core.distributed import batch_rows
from ..core.errors import ConfigurationError, nonnegative_float, positive_float
from ..core.evaluation import raw_path, read_raw, write_raw  # noqa: F401  (the raw-output files, re-exported)
from ..core.settings import setting


@dataclass
class ToolkitSettings:
    """Gradient surgery and the sentence-embedding objectives (the leaderboard toolkit)."""

    gradient_surgery: str = setting(
        "none", choices=("none", "pcgrad", "sum"),
        help="pcgrad (Yu et al., 2020): each step takes one batch of every task and projects each task's gradient off "
             "the others' where they conflict, on the shared parameters. sum: the same rounds and steps with the "
             "gradients summed unprojected, the control that separates the projection from taking one step a round. "
             "Not with --grad-accum > 1 or torchrun")
    sts_embedding_loss: str = setting(
        "none", choices=("none", "cosine", "cosent"),
        help="add an STS objective on cos(u, v) of the sentences' own vectors: cosine (regression onto gold / 5; "
             "Sentence-BERT) or cosent (Su, 2022; lambda --cosent-lambda)")
    para_embedding_loss: str = setting(
        "none", choices=("none", "mnrl"),
        help="add multiple-negatives ranking on the Quora duplicates (Henderson et al., 2017): in-batch softmax over "
             "--mnrl-scale * cosines")
    sts_output: str = setting(
        "head", choices=("head", "cosine"),
        help="cosine: the bi-encoder design of Sentence-BERT for STS, the similarity is 5 cos(u, v) of the sentences' "
             "own vectors and --sts-embedding-loss (required) its only loss; the STS head is unused. head: the STS "
             "head's output")
    embedding_loss_weight: float = setting(1.0, parse=nonnegative_float, metavar="W",
                                           help="weight of the sentence-embedding objectives")
    cosent_lambda: float = setting(20.0, parse=positive_float, help="CoSENT's lambda")
    mnrl_scale: float = setting(20.0, parse=positive_float, help="MNRL's cosine scale")

    def check(self, grad_accum: int, world: int) -> None:
        """Refuse settings that do not go together: PCGrad splits no round (no --grad-accum, no torchrun);
        --sts-output cosine needs an STS embedding loss."""
        if self.sts_output == "cosine" and self.sts_embedding_loss == "none":
            raise ConfigurationError("--sts-output cosine trains STS with --sts-embedding-loss alone: give cosine or "
                                     "cosent")
        if self.gradient_surgery == "none":
            return
        if grad_accum != 1:
            raise ConfigurationError(f"--gradient-surgery {self.gradient_surgery} takes one batch of each task per "
                                     "step already: it cannot be combined with --grad-accum (use a larger "
                                     "--batch-size)")
        if world > 1:
            raise ConfigurationError(f"--gradient-surgery {self.gradient_surgery} is not supported under torchrun: the "
                                     "per-task gradients would have to be gathered before the projection; run it on "
                                     "one process")


class CosineStsMultitask(MultitaskBert):
    """STS in the bi-encoder design of Sentence-BERT (Reimers & Gurevych, 2019, sec. 3): 5 cos(u, v) of the
    sentences' own vectors is the similarity; the other tasks as MultitaskBert. The same parameters (the STS head
    stays, unused), so checkpoints load either way."""

    def predict(self, task: str, batch: dict) -> torch.Tensor:
        if task != "sts":
            return super().predict(task, batch)
        u, v = sentence_vectors(self, task, batch)                       # (B, H) each
        return 5.0 * F.cosine_similarity(u, v, dim=-1)                  # (B,) on the gold scores' 0-5 scale


class SurgeryBatches(Sequence):
    """An epoch's batches in rounds: consecutive batches of the schedule's order, each task at most once per round."""

    def __init__(self, inner: Sequence):
        self.inner, self.rounds = inner, []
        current: list[int] = []
        for i, (task, _) in enumerate(inner.order):
            if any(inner.order[k][0] == task for k in current):
                self.rounds.append(current)
                current = []
            current.append(i)
        if current:
            self.rounds.append(current)

    def __len__(self) -> int:
        return len(self.rounds)

    def __getitem__(self, r: int) -> dict:
        parts = {self.inner.order[i][0]: self.inner[i] for i in self.rounds[r]}
        # "rows" (one entry per task) is what fit() counts a batch by: the round's loss is taken as a whole
        return {"round": parts, "rows": torch.tensor([batch_rows(b) for b in parts.values()])}


def sentence_vectors(m: MultitaskBert, task: str, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """u, v (B, H): each sentence of a pair batch encoded alone (the task's PALs active, if any)."""
    if m.pals is not None:
        m.pals.task = task
    return (m.encode(batch["input_ids_1"], batch["attention_mask_1"]),
            m.encode(batch["input_ids_2"], batch["attention_mask_2"]))


def embedding_loss(m: nn.Module, task: str, batch: dict, args: ToolkitSettings) -> torch.Tensor | None:
    """The chosen sentence-embedding objective of a pair batch on the sentences' own vectors u, v (B, H); None if none."""
    kind = {"sts": args.sts_embedding_loss, "para": args.para_embedding_loss}.get(task, "none")
    if kind == "none":
        return None
    u, v = sentence_vectors(m, task, batch)                              # (B, H) each
    labels = batch["labels"]
    if kind == "cosine":
        return cosine_similarity_loss(u, v, labels)
    if kind == "cosent":
        return cosent_loss(F.cosine_similarity(u, v, dim=-1), labels.float(), args.cosent_lambda)
    return mnrl_loss(u, v, labels, args.mnrl_scale)
