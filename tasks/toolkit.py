"""The leaderboard entrant's additions to the multitask CLI: gradient surgery (PCGrad), sentence-embedding objectives
for the pair tasks, and raw outputs for ensembles. tasks/multitask.py adds the flags (add_toolkit_arguments) and
builds its loss with toolkit_loss; tasks/predict.py and tasks/ensemble.py read and write the raw-output files.

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

import argparse
import random
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from minbert.multitask import MultitaskBert
from minbert.pcgrad import surgery_loss
from minbert.sentence_losses import cosent_loss, cosine_similarity_loss, mnrl_loss

from .data import to_device
from .distributed import batch_rows, is_main_process
from .evaluation import raw_path, read_raw, write_raw  # noqa: F401  (the raw-output files, re-exported)

TOOLKIT_DEFAULTS = {"gradient_surgery": "none", "sts_embedding_loss": "none", "para_embedding_loss": "none",
                    "embedding_loss_weight": 1.0, "cosent_lambda": 20.0, "mnrl_scale": 20.0, "sts_output": "head"}


def add_toolkit_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of gradient surgery, the sentence-embedding objectives and the raw outputs."""
    g = p.add_argument_group("gradient surgery and sentence-embedding objectives")
    g.add_argument("--gradient-surgery", choices=("none", "pcgrad", "sum"), default="none",
                   help="pcgrad (Yu et al., 2020): each step takes one batch of every task and projects each task's "
                        "gradient off the others' where they conflict, on the shared parameters (default none). sum: "
                        "the same rounds and steps with the gradients summed unprojected, the control that separates "
                        "the projection from taking one step a round. Not with --grad-accum > 1 or torchrun")
    g.add_argument("--sts-embedding-loss", choices=("none", "cosine", "cosent"), default="none",
                   help="add an STS objective on cos(u, v) of the sentences' own vectors: cosine (regression onto "
                        "gold / 5; Sentence-BERT) or cosent (Su, 2022; lambda --cosent-lambda)")
    g.add_argument("--para-embedding-loss", choices=("none", "mnrl"), default="none",
                   help="add multiple-negatives ranking on the Quora duplicates (Henderson et al., 2017): in-batch "
                        "softmax over --mnrl-scale * cosines")
    g.add_argument("--sts-output", choices=("head", "cosine"), default="head",
                   help="cosine: the bi-encoder design of Sentence-BERT for STS, the similarity is 5 cos(u, v) of the "
                        "sentences' own vectors and --sts-embedding-loss (required) its only loss; the STS head is "
                        "unused (default head: the STS head's output)")
    g.add_argument("--embedding-loss-weight", type=float, default=1.0, metavar="W",
                   help="weight of the sentence-embedding objectives (default 1)")
    g.add_argument("--cosent-lambda", type=float, default=20.0, help="CoSENT's lambda (default 20)")
    g.add_argument("--mnrl-scale", type=float, default=20.0, help="MNRL's cosine scale (default 20)")
    p.add_argument("--raw-outputs", action="store_true",
                   help="also write each prediction's raw output beside the course files, {task}-{split}-raw.csv "
                        "(SST logits, Quora logit, STS score), for python -m tasks.ensemble")


def toolkit_settings(config: dict) -> dict:
    """The run settings without the toolkit's flags at their defaults (so older checkpoints still resume)."""
    return {k: v for k, v in config.items() if not (k in TOOLKIT_DEFAULTS and v == TOOLKIT_DEFAULTS[k])}


class CosineStsMultitask(MultitaskBert):
    """STS in the bi-encoder design of Sentence-BERT (Reimers & Gurevych, 2019, sec. 3): 5 cos(u, v) of the
    sentences' own vectors is the similarity; the other tasks as MultitaskBert. The same parameters (the STS head
    stays, unused), so checkpoints load either way."""

    def predict(self, task: str, batch: dict) -> torch.Tensor:
        if task != "sts":
            return super().predict(task, batch)
        u, v = sentence_vectors(self, task, batch)                       # (B, H) each
        return 5.0 * F.cosine_similarity(u, v, dim=-1)                  # (B,) on the gold scores' 0-5 scale


def model_class(settings: dict) -> type[MultitaskBert]:
    """The multitask model class of a run's settings (--sts-output)."""
    return CosineStsMultitask if settings.get("sts_output", "head") == "cosine" else MultitaskBert


def check_toolkit(args: argparse.Namespace, world: int) -> None:
    """Refuse flags that do not go together: PCGrad splits no round (no --grad-accum, no torchrun); --sts-output
    cosine needs an STS embedding loss."""
    if getattr(args, "sts_output", "head") == "cosine" and args.sts_embedding_loss == "none":
        raise SystemExit("--sts-output cosine trains STS with --sts-embedding-loss alone: give cosine or cosent")
    if args.gradient_surgery == "none":
        return
    if args.grad_accum != 1:
        raise SystemExit(f"--gradient-surgery {args.gradient_surgery} takes one batch of each task per step already: "
                         "it cannot be combined with --grad-accum (use a larger --batch-size)")
    if world > 1:
        raise SystemExit(f"--gradient-surgery {args.gradient_surgery} is not supported under torchrun: the per-task "
                         "gradients would have to be gathered before the projection; run it on one process")


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


def embedding_loss(m: nn.Module, task: str, batch: dict, args: argparse.Namespace) -> torch.Tensor | None:
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


class ToolkitLog:
    """Per-epoch means of what the toolkit adds, logged beside the loss so that a method's effect is seen to be non-zero:
    each embedding objective's value and its weighted share of its task's loss; PCGrad's share of task pairs whose
    gradients conflict and how far the projection moved the summed gradient (minbert.pcgrad.projection_stats)."""

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor | float] = {}
        self.counts: dict[str, int] = {}

    def add(self, key: str, value: torch.Tensor | float) -> None:
        value = value.detach().float() if isinstance(value, torch.Tensor) else value   # no device sync per step
        self.sums[key], self.counts[key] = self.sums.get(key, 0.0) + value, self.counts.get(key, 0) + 1

    def epoch_end(self, log: list[dict]) -> None:
        """Append this epoch's means (if anything was logged) to `log`, print them, and start the sums again."""
        mean = {k: float(v) / self.counts[k] for k, v in self.sums.items()}
        self.sums, self.counts = {}, {}
        if not mean:
            return
        stats = {}
        for task in ("sts", "para"):
            if f"{task}_embedding" in mean:
                stats[f"{task}_embedding_loss"] = mean[f"{task}_embedding"]
                stats[f"{task}_embedding_share"] = mean[f"{task}_embedding_weighted"] / mean[f"{task}_total"]
        if "pcgrad_pairs" in mean:
            stats["surgery_conflict_share"] = mean["pcgrad_conflicts"] / mean["pcgrad_pairs"]
            stats["surgery_change"] = mean["pcgrad_change"]
        log.append(stats)
        if is_main_process():
            parts = [f"{t} embedding loss {stats[f'{t}_embedding_loss']:.3e} ({stats[f'{t}_embedding_share']:.1%} of "
                     f"{t}'s loss)" for t in ("sts", "para") if f"{t}_embedding_loss" in stats]
            if "surgery_change" in stats:
                parts.append(f"surgery: {stats['surgery_conflict_share']:.1%} of task pairs conflict, the summed "
                             f"gradient moved by {stats['surgery_change']:.2%} of its norm")
            print("  toolkit: " + "; ".join(parts), file=sys.stderr)


def toolkit_loss(args: argparse.Namespace, device: torch.device,
                 log: ToolkitLog | None = None) -> Callable[[nn.Module, dict], torch.Tensor]:
    """The multitask loss_fn: the task's loss, plus the embedding objective; a PCGrad round's surgery_loss. What
    the toolkit adds is logged in `log` (a ToolkitLog) when one is given."""
    def one(m: nn.Module, task: str, batch: dict) -> torch.Tensor:
        extra = embedding_loss(m, task, batch, args)
        if task == "sts" and getattr(args, "sts_output", "head") == "cosine":
            total = extra                                                 # the head is unused: no MSE on it
        else:
            loss = m.loss(task, batch)
            total = loss if extra is None else loss + args.embedding_loss_weight * extra
        if log is not None and extra is not None:
            log.add(f"{task}_embedding", extra)
            log.add(f"{task}_embedding_weighted", args.embedding_loss_weight * extra if total is not extra else extra)
            log.add(f"{task}_total", total)
        return total

    workspace: dict = {}                                                  # PCGrad's (n, D) matrix, kept between rounds

    def loss_fn(m: nn.Module, batch: dict) -> torch.Tensor:
        if "round" not in batch:
            return one(m, batch["task"], batch)
        losses = [one(m, t, to_device(b, device)) for t, b in batch["round"].items()]
        # the projection order from python's random, whose state the checkpoint keeps: resumes stay exact
        loss = surgery_loss(losses, [p for p in m.parameters() if p.requires_grad],
                            random.Random(random.getrandbits(64)), project=args.gradient_surgery == "pcgrad",
                            workspace=workspace)
        if log is not None and "last" in workspace:                      # a round of two or more tasks
            for k, v in workspace.pop("last").items():
                log.add(f"pcgrad_{k}", v)
        return loss
    return loss_fn
