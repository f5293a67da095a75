"""The multitask command's terms (tasks/core/terms.py): each reads one section of its Settings and is registered once
here; run() and the loop name none of them. They nest in the order registered (the first innermost): SMART adds to
the task's loss, the sentence-embedding objectives to that, R-Drop takes all of it on two passes; gradient surgery
combines the tasks' losses of a round."""

from __future__ import annotations

import random

import torch
from torch import nn

from minbert.multitask import SMART_KINDS
from minbert.pcgrad import surgery_loss
from minbert.rdrop import rdrop_loss

from ..core.distributed import world_size
from ..core.errors import ConfigurationError
from ..core.terms import Context, Extension, Term, register_term
from .settings import RDrop, Smart
from .toolkit import SurgeryBatches, ToolkitSettings, embedding_loss


class SmartTerm(Extension):
    """SMART (Jiang et al., 2020, sec. 3): L + lambda_s R_s + mu D_Breg on every training batch (minbert/smart.py);
    the model holds it (model.smart: theta~ travels in its state dict)."""

    def __init__(self, model: nn.Module):
        self.model = model
        model.smart.reset_stats()

    def loss(self, fwd, inner) -> torch.Tensor:
        loss, m = inner(fwd), fwd.model
        if not m.training:
            return loss
        return m.smart(m, fwd.task, SMART_KINDS[fwd.task], fwd.batch, fwd.inputs, fwd.h, fwd.y, loss)

    def after_step(self, model: nn.Module) -> None:
        if model.smart.names:                                   # theta~'s momentum update (--smart-bregman)
            model.smart.update(model)

    def epoch_stats(self, means: dict[str, float]) -> dict[str, float]:
        stats = self.model.smart.epoch_stats()                  # mean R_s, D_Breg and their shares of the loss
        self.model.smart.reset_stats()
        return stats

    def describe(self, s: dict[str, float]) -> str:
        return (f"R_s {s['smart_r_s']:.3e} (lambda R_s {s['smart_r_s_share']:.1%} of the loss), "
                f"D_Breg {s['smart_bregman']:.3e} ({s['smart_bregman_share']:.1%})")

    def state(self) -> dict:
        return dict(self.model.smart.stats)

    def load_state(self, state: dict) -> None:
        self.model.smart.stats = dict(state)


def smart_term(section: Smart, context: Context) -> SmartTerm | None:
    """After the trainable parameters are chosen (PALs included): theta~ follows those."""
    config = section.config()
    if config is None:
        return None
    context.model.add_smart(config)
    return SmartTerm(context.model)


class EmbeddingTerm(Extension):
    """The sentence-embedding objectives (tasks/multitask/toolkit.py): L + w * extra on a pair batch; with
    --sts-output cosine the STS objective is STS's whole loss."""

    def __init__(self, args: ToolkitSettings):
        self.args = args

    def loss(self, fwd, inner) -> torch.Tensor:
        args = self.args
        extra = embedding_loss(fwd.model, fwd.task, fwd.batch, args)
        if extra is None:
            return inner(fwd)
        if fwd.task == "sts" and args.sts_output == "cosine":
            total = extra                                                 # the head is unused: no MSE on it
        else:
            total = inner(fwd) + args.embedding_loss_weight * extra
        self.log.add(f"{fwd.task}_embedding", extra)
        self.log.add(f"{fwd.task}_embedding_weighted", args.embedding_loss_weight * extra if total is not extra else extra)
        self.log.add(f"{fwd.task}_total", total)
        return total

    def epoch_stats(self, mean: dict[str, float]) -> dict[str, float]:
        """Each objective's mean and its weighted share of its task's loss."""
        stats = {}
        for task in ("sts", "para"):
            if f"{task}_embedding" in mean:
                stats[f"{task}_embedding_loss"] = mean[f"{task}_embedding"]
                stats[f"{task}_embedding_share"] = mean[f"{task}_embedding_weighted"] / mean[f"{task}_total"]
        return stats

    def describe(self, stats: dict[str, float]) -> str:
        return "; ".join(f"{t} embedding loss {stats[f'{t}_embedding_loss']:.3e} ({stats[f'{t}_embedding_share']:.1%} "
                         f"of {t}'s loss)" for t in ("sts", "para") if f"{t}_embedding_loss" in stats)


def embedding_term(section: ToolkitSettings, context: Context) -> EmbeddingTerm | None:
    on = section.sts_embedding_loss != "none" or section.para_embedding_loss != "none"
    return EmbeddingTerm(section) if on else None


class SurgeryTerm(Extension):
    """Gradient surgery (Yu et al., 2020, Alg. 1): an epoch in rounds of one batch per task, their gradients projected
    off each other where they conflict (pcgrad) or summed (sum), one step per round (minbert/pcgrad.py)."""

    def __init__(self, project: bool):
        self.project, self.workspace = project, {}              # PCGrad's (n, D) matrix, kept between rounds

    def batches(self, inner, generator):
        return SurgeryBatches(inner)

    def combine(self, m: nn.Module, losses: list[torch.Tensor]) -> torch.Tensor:
        # the projection order from python's random, whose state the checkpoint keeps: resumes stay exact
        loss = surgery_loss(losses, [p for p in m.parameters() if p.requires_grad],
                            random.Random(random.getrandbits(64)), project=self.project, workspace=self.workspace)
        if "last" in self.workspace:                            # a round of two or more tasks
            for k, v in self.workspace.pop("last").items():
                self.log.add(f"pcgrad_{k}", v)
        return loss

    def epoch_stats(self, mean: dict[str, float]) -> dict[str, float]:
        """The share of task pairs whose gradients conflict, how far the projection moved the summed gradient."""
        if "pcgrad_pairs" not in mean:
            return {}
        return {"surgery_conflict_share": mean["pcgrad_conflicts"] / mean["pcgrad_pairs"],
                "surgery_change": mean["pcgrad_change"]}

    def describe(self, s: dict[str, float]) -> str:
        return (f"surgery: {s['surgery_conflict_share']:.1%} of task pairs conflict, the summed gradient moved by "
                f"{s['surgery_change']:.2%} of its norm")


def surgery_term(section: ToolkitSettings, context: Context) -> SurgeryTerm | None:
    return None if section.gradient_surgery == "none" else SurgeryTerm(section.gradient_surgery == "pcgrad")


class RDropTerm(Extension):
    """R-Drop (Liang et al., 2021, sec. 2.1, eq. 3): the loss of everything inside it taken on two passes of the batch
    (independent dropout masks), averaged, plus alpha times the divergence of the two outputs (minbert/rdrop.py)."""

    def __init__(self, alpha: float):
        self.alpha = alpha

    def loss(self, fwd, inner) -> torch.Tensor:
        if not fwd.model.training:
            return inner(fwd)
        again = fwd.again()
        loss_1, loss_2 = inner(fwd), inner(again)
        total, divergence = rdrop_loss(loss_1, loss_2, fwd.y, again.y, RDROP_KINDS[fwd.task], self.alpha)
        self.log.add("divergence", divergence)
        self.log.add("weighted", self.alpha * divergence)
        self.log.add("total", total)
        return total

    def epoch_stats(self, mean: dict[str, float]) -> dict[str, float]:
        return {"rdrop_divergence": mean["divergence"], "rdrop_share": mean["weighted"] / mean["total"]} if mean else {}

    def describe(self, s: dict[str, float]) -> str:
        return f"divergence {s['rdrop_divergence']:.3e} (alpha D {s['rdrop_share']:.1%} of the loss)"


def check_rdrop(section: RDrop, settings) -> None:
    if section.rdrop_alpha > 0 and settings.toolkit.sts_output == "cosine":
        raise ConfigurationError("--rdrop-alpha compares the heads' outputs: not with --sts-output cosine")


RDROP_KINDS = {"sst": "classification", "para": "binary", "sts": "regression"}


register_term("multitask", Term("smart", "smart", smart_term, check=lambda s, settings: s.config(),
                                slot=True))                     # it fills the model's own slot, model.smart
register_term("multitask", Term("embedding", "toolkit", embedding_term))
register_term("multitask", Term("surgery", "toolkit", surgery_term,
                                check=lambda s, settings: s.check(settings.recipe.grad_accum, world_size())))
register_term("multitask", Term("rdrop", "rdrop", lambda s, c: RDropTerm(s.rdrop_alpha) if s.rdrop_alpha > 0 else None,
                                check=check_rdrop))
