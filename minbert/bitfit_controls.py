"""BitFit's random controls (Ben-Zaken et al., 2022, sec. 4, Table 3): train as many randomly chosen encoder
entries as BitFit trains biases, uniformly (rand_uniform) or as whole rows and columns (rand_row_col)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils import parametrize

from .bitfit import bitfit_budget, check_encoder, freeze
from .model import BertModel

# The random controls. Zeroing the gradient of unchosen entries is not enough to keep them fixed: AdamW's
# decoupled weight decay shrinks every entry of a parameter that has a gradient, and an optimizer with other
# habits (clipping, momentum from earlier steps) could move them too. So the encoder stays frozen and each
# tensor with chosen entries is re-parametrized as W = W0 + scatter(delta): W0 is the frozen original and
# `delta` holds only the chosen entries, the one thing the optimizer sees. Unchosen entries of W are copies
# of W0, bit for bit, whatever the optimizer does; weight decay on delta pulls chosen entries back toward
# their pretrained values. Unlike BitFit, this still computes the full weight gradient (dW, then gathered).

class SparseDelta(nn.Module):
    """W = W0 + scatter(delta) at fixed flat indices: only the chosen entries can move (sec. 4, Table 3)."""

    def __init__(self, index: torch.Tensor, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.register_buffer("index", index.to(torch.long))
        self.delta = nn.Parameter(torch.zeros(index.numel(), dtype=dtype))

    def forward(self, W0: torch.Tensor) -> torch.Tensor:
        """W0 (out, in) -> W0 + delta at the chosen entries, (out, in)."""
        flat = W0.flatten().index_add(0, self.index, self.delta.to(W0.dtype))  # (out, in) -> (out*in,)
        return flat.view_as(W0)                                                  # (out*in,) -> (out, in)


SCOPES = ("encoder", "with-embeddings")   # where the random controls draw from (freeze_random's `scope`)


def _slots(model: BertModel, scope: str = "encoder") -> list[tuple[nn.Module, str, torch.Tensor]]:
    """(module, attribute, tensor) for every parameter in `scope`, in named_parameters order: "encoder" is the
    layers and the pooler (the reference code's rand_row_col pool), "with-embeddings" adds the embeddings."""
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}: use one of {', '.join(SCOPES)}")
    return [(m, n, p) for prefix, m in model.named_modules() for n, p in m.named_parameters(recurse=False)
            if scope == "with-embeddings" or not prefix.startswith("embeddings")]


def _sample_uniform(sizes: list[int], budget: int, g: torch.Generator) -> list[torch.Tensor]:
    """budget distinct entries drawn uniformly from all tensors together; the flat indices per tensor."""
    total = sum(sizes)
    picked = torch.empty(0, dtype=torch.long)
    while picked.numel() < budget:  # draw with replacement and drop repeats: no randperm of the whole model
        extra = torch.randint(total, (budget - picked.numel() + 64,), generator=g)
        picked = torch.cat([picked, extra]).unique()  # sorted
        if picked.numel() > budget:
            picked = picked[torch.randperm(picked.numel(), generator=g)[:budget]].sort().values
    ends = torch.tensor(sizes).cumsum(0)
    which = torch.searchsorted(ends, picked, right=True)
    starts = ends - torch.tensor(sizes)
    return [picked[which == i] - starts[i] for i in range(len(sizes))]


def _sample_row_col(shapes: list[torch.Size], budget: int, g: torch.Generator) -> list[torch.Tensor]:
    """Whole rows and columns of the matrices, picked at random while the union stays within budget."""
    lines = [(i, axis, j) for i, s in enumerate(shapes) if len(s) == 2 for axis in (0, 1) for j in range(s[axis])]
    masks = [torch.zeros(s, dtype=torch.bool) for s in shapes]
    count = 0
    for k in torch.randperm(len(lines), generator=g).tolist():
        i, axis, j = lines[k]
        line = masks[i][j] if axis == 0 else masks[i][:, j]  # a view into the mask
        new = line.numel() - int(line.sum())
        if count + new <= budget:
            line.fill_(True)
            count += new
        if count == budget:
            break
    return [m.flatten().nonzero().flatten() for m in masks]   # each (out, in) mask -> (k,) flat indices


def _sample_per_matrix(slots: list[tuple[nn.Module, str, torch.Tensor]], g: torch.Generator) -> list[torch.Tensor]:
    """The reference code's rand_row_col (benzakenelad/BitFit, glue_evaluator.py set_row_and_column_random_mask):
    every matrix gets one random column (when a coin says so, or when it is wider than tall) or else
    rows // cols random rows, as many entries as its bias; every LayerNorm gain trains whole. (The reference draws
    the rows with replacement; here they are distinct.)"""
    chosen = []
    for _, attr, p in slots:
        mask = torch.zeros(p.shape, dtype=torch.bool)
        if p.dim() == 1 and attr.startswith("gLN"):
            mask[:] = True
        elif p.dim() == 2:
            rows, cols = p.shape
            if torch.randint(2, (1,), generator=g).item() or rows < cols:
                mask[:, torch.randint(cols, (1,), generator=g).item()] = True
            else:
                mask[torch.randperm(rows, generator=g)[:rows // cols]] = True
        chosen.append(mask.flatten().nonzero().flatten())   # (out, in) mask -> (k,) flat indices
    return chosen


def freeze_random(model: BertModel, how: str = "rand_uniform", budget: int | None = None, seed: int = 0,
                  scope: str = "encoder") -> int:
    """The paper's random controls (sec. 4, Table 3): train `budget` random encoder entries; returns how many.

    rand_uniform: entries drawn uniformly from the parameters in `scope`; rand_row_col: whole rows and columns
    of its matrices; budget defaults to what BitFit 'all' trains. rand_row_col_ref: the reference code's own
    scheme, per matrix (_sample_per_matrix); its budget is what the scheme picks (`budget` must be None).
    scope "encoder" (default) draws from the layers and the pooler only, as the reference code's rand_row_col
    (benzakenelad/BitFit, glue_evaluator.py: 'encoder' or 'pooler' weights); "with-embeddings" adds the embedding
    tables, as the reference's rand_uniform does (it spreads its budget over all of model.bert in proportion to
    size): most of those entries are word rows a task's batches rarely touch, a weaker control. Call
    merge_deltas(model) afterwards to fold the trained entries back into ordinary parameters.
    """
    check_encoder(model)
    if how not in ("rand_uniform", "rand_row_col", "rand_row_col_ref"):
        raise ValueError(f"unknown control {how!r}: use 'rand_uniform', 'rand_row_col' or 'rand_row_col_ref'")
    if how == "rand_row_col_ref" and budget is not None:
        raise ValueError("rand_row_col_ref picks its own budget (one bias's worth per matrix): give no budget")
    budget = bitfit_budget(model, "all") if budget is None else budget
    slots = _slots(model, scope)
    if not 0 < budget <= sum(p.numel() for _, _, p in slots):
        raise ValueError(f"budget {budget} must be positive and at most the size of the {scope} scope")
    freeze(model, "none")
    g = torch.Generator().manual_seed(seed)
    if how == "rand_uniform":
        chosen = _sample_uniform([p.numel() for _, _, p in slots], budget, g)
    elif how == "rand_row_col_ref":
        chosen = _sample_per_matrix(slots, g)
    else:
        chosen = _sample_row_col([p.shape for _, _, p in slots], budget, g)
    for (module, attr, p), index in zip(slots, chosen):
        if index.numel():
            parametrize.register_parametrization(module, attr, SparseDelta(index.to(p.device), p.dtype))
    return sum(i.numel() for i in chosen)


def merge_deltas(model: BertModel) -> None:
    """Fold every SparseDelta into its tensor, W = W0 + scatter(delta), restoring plain (frozen) parameters."""
    for module in list(model.modules()):
        if parametrize.is_parametrized(module):
            for attr in list(module.parametrizations.keys()):
                parametrize.remove_parametrizations(module, attr, leave_parametrized=True)
                getattr(module, attr).requires_grad_(False)
