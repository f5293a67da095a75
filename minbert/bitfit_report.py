"""What BitFit trains and what it changes (Ben-Zaken et al., 2022): trainable counts by term (Table 1's %
column) and the mean bias change per term and layer (Figure 1, as numbers; tasks.bitfit_figure draws it)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from .bitfit import LAYER_TERMS, OTHER_BIASES, bias_snapshot, check_encoder, term_of
from .model import BertModel


@dataclass
class TrainableReport:
    """Trainable / total encoder parameters by group, the head counted apart (BitFit, Table 1's % column)."""

    rows: dict[str, tuple[int, int]] = field(default_factory=dict)  # group -> (trainable, total)
    head: tuple[int, int] = (0, 0)

    @property
    def trainable(self) -> int:
        """The trainable parameters, summed over the groups."""
        return sum(t for t, _ in self.rows.values())

    @property
    def total(self) -> int:
        """All parameters, summed over the groups."""
        return sum(n for _, n in self.rows.values())

    @property
    def percent(self) -> float:
        """The trainable share of all parameters, in percent."""
        return 100.0 * self.trainable / self.total

    def __str__(self) -> str:
        lines = [f"{'group':<22}{'trainable':>13}{'total':>14}"]
        lines += [f"{g:<22}{t:>13,}{n:>14,}" for g, (t, n) in self.rows.items()]
        lines.append(f"{'encoder':<22}{self.trainable:>13,}{self.total:>14,}   {self.percent:.3f}% trainable")
        if self.head[1]:
            lines.append(f"{'head (not in total)':<22}{self.head[0]:>13,}{self.head[1]:>14,}")
        return "\n".join(lines)


def trainable_report(model: BertModel, head: nn.Module | None = None) -> TrainableReport:
    """Count trainable and total encoder parameters by BitFit term (Ben-Zaken et al., 2022, Table 1)."""
    check_encoder(model)
    groups = list(LAYER_TERMS + OTHER_BIASES) + ["weights, gains, tables", "random subset (deltas)"]
    rows = {g: [0, 0] for g in groups}
    for name, p in model.named_parameters():
        if name.endswith(".delta"):  # a SparseDelta: trainable entries of a frozen original counted below
            rows["random subset (deltas)"][0] += p.numel() * p.requires_grad
            continue
        group = term_of(re.sub(r"parametrizations\.(\w+)\.original$", r"\1", name)) or "weights, gains, tables"
        rows[group][0] += p.numel() * p.requires_grad
        rows[group][1] += p.numel()
    report = TrainableReport({g: (t, n) for g, (t, n) in rows.items() if n or t})
    if head is not None:
        ps = list(head.parameters())
        report.head = (sum(p.numel() for p in ps if p.requires_grad), sum(p.numel() for p in ps))
    return report


def bias_change(pretrained: BertModel | Mapping[str, torch.Tensor], finetuned: BertModel) -> dict[str, list[float]]:
    """Mean |b0 - bF| for each term and layer, pretrained vs fine-tuned (Ben-Zaken et al., 2022, Figure 1)."""
    b0 = bias_snapshot(pretrained) if isinstance(pretrained, BertModel) else pretrained
    bF = bias_snapshot(finetuned)
    L = finetuned.config.num_hidden_layers
    missing = [n for n in bF if n not in b0]
    if missing:
        raise ValueError(f"the pretrained biases lack {missing[:3]}: are the two models the same architecture?")
    return {t: [(b0[f"layers.{l}.{t}"].float() - bF[f"layers.{l}.{t}"].float()).abs().mean().item() for l in range(L)]
            for t in LAYER_TERMS}


def format_bias_change(change: Mapping[str, Sequence[float]]) -> str:
    """A markdown table: one row per term, one column per layer (L1..L), mean |b0 - bF| (Figure 1 as numbers)."""
    L = len(next(iter(change.values())))
    lines = ["| term | " + " | ".join(f"L{l + 1}" for l in range(L)) + " |", "|---" * (L + 1) + "|"]
    lines += [f"| {t} | " + " | ".join(f"{v:.4f}" for v in vals) + " |" for t, vals in change.items()]
    return "\n".join(lines)
