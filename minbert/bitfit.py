"""BitFit (Ben-Zaken, Ravfogel & Goldberg, ACL 2022): fine-tune only the bias terms of BERT.

The layer's biases carry the paper's names (eqs. 1-5): bq bk bv (query, key, value), bm1 (attention
output), bLN1 (first LayerNorm), bm2 (feed-forward up, H -> 4H), bm3 (feed-forward down), bLN2 (second
LayerNorm). Outside the layers the encoder has two more: the embedding LayerNorm's `embeddings.bLN` and
the pooler's `pooler.bp`.

- freeze(model, terms)           train only the named bias terms (sec. 3.1); the caller's head stays trainable
- freeze_random(model, how)      the paper's controls (sec. 4, Table 3): rand_uniform, rand_row_col
- trainable_report(model, head)  trainable / total parameters by term
- bias_change(b0, model)         mean |b0 - bF| per term and layer (Figure 1), as a table and a heatmap
- save_task / load_task / SharedBackbone   per-task files of a few kilobytes on one frozen backbone
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn
from torch.nn.utils import parametrize

from .model import BertModel

LAYER_TERMS = ("bq", "bk", "bv", "bm1", "bLN1", "bm2", "bm3", "bLN2")  # per layer, eqs. 1-5
OTHER_BIASES = ("embeddings.bLN", "pooler.bp")                        # once per encoder
CONTROLS = ("frozen", "rand_uniform", "rand_row_col")                  # Table 3's baselines
TASK_FORMAT = "minbert-bitfit-task/1"


def parse_terms(terms: str | Sequence[str]) -> tuple[str, ...]:
    """'all' | 'none' | 'bq,bm2' | ['bq', 'bm2'] -> the bias names to train (BitFit, sec. 3.1 and Table 3).

    'all' is every bias of the encoder: the eight per-layer terms of every layer plus `embeddings.bLN` and
    `pooler.bp`, as the paper trains "all the bias terms". A subset names per-layer terms (and may add the
    two others by their full names); 'none' trains no encoder parameter (the `frozen` control).
    """
    items = [t.strip() for t in terms.split(",")] if isinstance(terms, str) else [str(t).strip() for t in terms]
    items = [t for t in items if t]
    if items == ["all"]:
        return LAYER_TERMS + OTHER_BIASES
    if items == ["none"]:
        return ()
    known = LAYER_TERMS + OTHER_BIASES
    unknown = [t for t in items if t not in known]
    if unknown or not items:
        raise ValueError(f"unknown bias term(s) {unknown or terms!r}: use 'all', 'none', or a comma-separated "
                         f"subset of {', '.join(known)}")
    return tuple(t for t in known if t in items)  # canonical order, no repeats


def term_of(name: str) -> str | None:
    """The BitFit term a parameter name belongs to ('layers.3.bm2' -> 'bm2'), or None for weights and gains."""
    m = re.fullmatch(r"layers\.\d+\.(\w+)", name)
    if m and m.group(1) in LAYER_TERMS:
        return m.group(1)
    return name if name in OTHER_BIASES else None


def _check_encoder(model: nn.Module) -> None:
    if not isinstance(model, BertModel):
        raise TypeError(f"expected the BertModel encoder, got {type(model).__name__}; pass model.bert (or "
                        "whatever holds the encoder) and mark the task head trainable yourself")


def freeze(model: BertModel, terms: str | Sequence[str] = "all") -> list[str]:
    """BitFit (Ben-Zaken et al., 2022, sec. 3.1): requires_grad only on the named biases; returns their names.

    Every weight, LayerNorm gain and embedding table gets requires_grad=False, so backward computes no
    gradient for them (only the activations' gradients the biases need) and an optimizer never sees them.
    Parameters outside `model` (the task head) are left as they are. 'all' includes `embeddings.bLN`
    (it shifts every token's input to layer 0) and `pooler.bp` (it only gets a gradient if the head reads
    pooler_output; a head on [CLS] or mean-pooled states leaves it at its pretrained value).
    """
    _check_encoder(model)
    chosen = set(parse_terms(terms))
    trained = []
    for name, p in model.named_parameters():
        p.requires_grad_(term_of(name) in chosen)
        if p.requires_grad:
            trained.append(name)
    return trained


def bitfit_budget(model: BertModel, terms: str | Sequence[str] = "all") -> int:
    """How many encoder parameters BitFit with these terms trains (the budget of the random controls)."""
    chosen = set(parse_terms(terms))
    return sum(p.numel() for n, p in model.named_parameters() if term_of(n) in chosen)


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
        return W0.flatten().index_add(0, self.index, self.delta.to(W0.dtype)).view_as(W0)


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
    return [m.flatten().nonzero().flatten() for m in masks]


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
        chosen.append(mask.flatten().nonzero().flatten())
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
    _check_encoder(model)
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


@dataclass
class TrainableReport:
    """Trainable / total encoder parameters by group, the head counted apart (BitFit, Table 1's % column)."""

    rows: dict[str, tuple[int, int]] = field(default_factory=dict)  # group -> (trainable, total)
    head: tuple[int, int] = (0, 0)

    @property
    def trainable(self) -> int:
        return sum(t for t, _ in self.rows.values())

    @property
    def total(self) -> int:
        return sum(n for _, n in self.rows.values())

    @property
    def percent(self) -> float:
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
    _check_encoder(model)
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


def bias_snapshot(model: BertModel) -> dict[str, torch.Tensor]:
    """A detached copy of every bias of the encoder (b0 for bias_change, the reset point for load_task)."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if term_of(n)}


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
    """A markdown table: one row per term, one column per layer, mean |b0 - bF| (Figure 1 as numbers)."""
    L = len(next(iter(change.values())))
    lines = ["| term | " + " | ".join(f"L{l}" for l in range(L)) + " |", "|---" * (L + 1) + "|"]
    lines += [f"| {t} | " + " | ".join(f"{v:.4f}" for v in vals) + " |" for t, vals in change.items()]
    return "\n".join(lines)


def plot_bias_change(change: Mapping[str, Sequence[float]], path: str | Path, title: str = "") -> None:
    """Save Figure 1 of Ben-Zaken et al. (2022): a heatmap of mean |b0 - bF|, terms by layers, as a PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    terms = list(change)
    values = torch.tensor([list(change[t]) for t in terms])  # (terms, L)
    fig, ax = plt.subplots(figsize=(1.0 + 0.7 * values.shape[1], 0.5 + 0.45 * len(terms)))
    im = ax.imshow(values.numpy(), cmap="Blues", aspect="auto")
    ax.set_xticks(range(values.shape[1]), [str(l) for l in range(values.shape[1])])
    ax.set_yticks(range(len(terms)), terms)
    ax.set_xlabel("layer")
    ax.set_title(title or "mean |b0 - bF|")
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    tmp = Path(path).with_suffix(".tmp.png")
    tmp.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    os.replace(tmp, path)


def backbone_fingerprint(model: BertModel) -> str:
    """A short hash of frozen weights, so a task file refuses to load onto a different backbone."""
    h = hashlib.sha256()
    for t in (model.embeddings.word.weight[:16], model.layers[0].Wq, model.layers[-1].Wm3):
        h.update(t.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def save_task(path: str | Path, model: BertModel, head: nn.Module | None = None,
              metadata: Mapping[str, str] | None = None) -> int:
    """Write what a BitFit task changed: the trainable biases and the head (sec. 1: a few KB per task).

    Tensors are stored as `encoder.<name>` and `head.<name>` in one safetensors file, written
    atomically; returns its size in bytes.
    """
    _check_encoder(model)
    tensors = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            if not term_of(name):
                raise ValueError(f"{name} is trainable but is not a bias term: a task file holds biases only; "
                                 "save the whole model instead")
            tensors[f"encoder.{name}"] = p.detach().cpu().contiguous().clone()
    if head is not None:
        tensors.update({f"head.{k}": v.detach().cpu().contiguous().clone() for k, v in head.state_dict().items()})
    meta = {"format": TASK_FORMAT, "backbone": backbone_fingerprint(model), **dict(metadata or {})}
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, tmp, metadata={k: str(v) for k, v in meta.items()})
    os.replace(tmp, path)
    return path.stat().st_size


def load_task(path: str | Path, model: BertModel, head: nn.Module | None = None,
              base: Mapping[str, torch.Tensor] | None = None) -> dict[str, str]:
    """Put a task file's biases into `model` and its tensors into `head`; returns the file's metadata.

    With `base` (bias_snapshot of the backbone), every bias the file does not hold is first reset to it,
    so that switching between tasks trained on different subsets is exact. Checks the backbone, every
    name and every shape before changing anything.
    """
    _check_encoder(model)
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open is not iterable)
    if meta.get("format") != TASK_FORMAT:
        raise ValueError(f"{path}: not a BitFit task file (format {meta.get('format')!r}, expected {TASK_FORMAT!r})")
    if meta.get("backbone") != backbone_fingerprint(model):
        raise ValueError(f"{path}: was trained on a different backbone (fingerprint {meta.get('backbone')}, "
                         f"this model's is {backbone_fingerprint(model)})")
    params = dict(model.named_parameters())
    enc = {k.removeprefix("encoder."): v for k, v in tensors.items() if k.startswith("encoder.")}
    hd = {k.removeprefix("head."): v for k, v in tensors.items() if k.startswith("head.")}
    problems = [f"{k} is not a bias of this model" for k in enc if not term_of(k) or k not in params]
    problems += [f"{k}: file {tuple(v.shape)} vs model {tuple(params[k].shape)}"
                 for k, v in enc.items() if k in params and v.shape != params[k].shape]
    problems += [f"{k} is neither encoder. nor head." for k in tensors if not k.startswith(("encoder.", "head."))]
    if head is not None:
        own = head.state_dict()
        problems += [f"head.{k} missing from the file" for k in own if k not in hd]
        problems += [f"head.{k} is not in the given head" for k in hd if k not in own]
        problems += [f"head.{k}: file {tuple(v.shape)} vs head {tuple(own[k].shape)}"
                     for k, v in hd.items() if k in own and v.shape != own[k].shape]
    if problems:
        raise ValueError(f"{path}: does not fit this model: " + "; ".join(problems))
    with torch.no_grad():
        for name, b in (base or {}).items():
            params[name].copy_(b)
        for name, b in enc.items():
            params[name].copy_(b)
    if head is not None:
        head.load_state_dict(hd, strict=True)
    return meta


class SharedBackbone:
    """One frozen encoder serving many BitFit tasks: switch() swaps in a task's biases and head (sec. 1)."""

    def __init__(self, model: BertModel):
        self.model = model
        self.base = bias_snapshot(model)

    def switch(self, path: str | Path, head: nn.Module | None = None) -> dict[str, str]:
        """Reset every bias to the backbone's, then load the task file at `path` (and its head)."""
        return load_task(path, self.model, head, base=self.base)
