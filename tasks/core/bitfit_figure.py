"""Figure 1 of BitFit (Ben-Zaken et al., 2022): the mean bias change per term and layer as a heatmap PNG
(the numbers come from minbert.bitfit_report.bias_change)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from .figures import save_figure


def plot_bias_change(change: Mapping[str, Sequence[float]], path: str | Path, title: str = "") -> None:
    """Save Figure 1 of Ben-Zaken et al. (2022): a heatmap of mean |b0 - bF|, terms by layers 1..L (a PNG, or the
    format the name's extension says: save_figure)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    terms = list(change)
    values = torch.tensor([list(change[t]) for t in terms])  # (terms, L)
    fig, ax = plt.subplots(figsize=(1.0 + 0.7 * values.shape[1], 0.5 + 0.45 * len(terms)))
    im = ax.imshow(values.numpy(), cmap="Blues", aspect="auto")
    ax.set_xticks(range(values.shape[1]), [str(l + 1) for l in range(values.shape[1])])   # layers count from 1
    ax.set_yticks(range(len(terms)), terms)
    ax.set_xlabel("layer")
    ax.set_title(title or "mean |b0 - bF|")
    fig.colorbar(im, ax=ax, label="mean |b0 - bF| (pretrained vs fine-tuned bias)")
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
