"""The fine-tuning recipe that tasks/core/train.py fit() applies: the precision (fp32, or bf16 / fp16 autocast,
Micikevicius et al., 2018), the linear warm-up and decay of the learning rate (Devlin et al., 2019, A.2), gradient
clipping, gradient accumulation, which attention the model computes and which AdamW takes the steps. Recipe is a
section of every training command's settings (its flags are generated from its fields; its defaults are the
recommended recipe); a command builds its encoder with load_pretrained(..., attn_implementation=recipe.
attn_implementation), its optimiser with make_optimizer(...), and hands the recipe to fit(work, recipe, options).
In a student tree (tasks/core/tree.py) the defaults are the student's own code: eager attention and the course's AdamW.
"""

from __future__ import annotations

import argparse
import itertools
import math
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch

import minbert
from minbert.param_groups import depth, param_groups, unfreeze_step

from .errors import ConfigurationError, positive_float, positive_int, probability, unit_interval
from .precision import (  # the rules live in precision.py; check_precision, cpu_has_bf16 are re-exported
    PRECISION_CHOICES,
    PRECISIONS,
    check_precision,  # noqa: F401
    cpu_has_bf16,  # noqa: F401
)
from .settings import setting
from .step import COMPILE_MODES, PAD_MULTIPLE, optimizers_without_dynamo
from .tree import STUDENT

ATTENTIONS = ("eager", "fused")
ATTN_IMPLEMENTATION = {"eager": "eager", "fused": "sdpa"}     # --attention -> minbert's BertConfig.attn_implementation
DEFAULT_ATTENTION = "eager" if STUDENT else "fused"          # a student tree's own attention() by default
OPTIMIZERS = ("course", "torch", "fused")
LEGACY_OPTIMIZERS = {"minbert": "torch"}   # an older name still read from run.json, checkpoints and the command line

def step_and_epochs(text: str) -> str:
    """An item of Recipe.earlier_epochs: STEP:EPOCHS, two positive integers (as 'STEP:EPOCHS')."""
    parts = text.strip().split(":")
    if len(parts) != 2 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"must be STEP:EPOCHS, two positive integers, not {text!r}")
    return f"{int(parts[0])}:{int(parts[1])}"


# A setting's `before` is what a run that predates it ran with: the recipe's values before they became the recommended
# recipe (a constant learning rate, no clipping, torch's AdamW update (then written out and called 'minbert'), torch's
# fused attention, weight decay on every parameter).


@dataclass(frozen=True)
class Recipe:
    """The fine-tuning recipe; its defaults are the recommended recipe, in fp32 (bf16 or auto: --precision).

    BERT's recipe: warm-up over 10% of the steps then linear decay, clipping at 1.0; fp32 so that a result does not
    depend on the machine; torch's fused attention and AdamW in the reference code, the student's own attention() and
    AdamW in a student tree (tasks/core/tree.py). Under torchrun (torchrun --nproc-per-node N -m tasks.NAME ...) --batch-size
    stays the global batch, each process takes its share, and only rank 0 writes files. fit() takes the fields of
    loop(); optimizer_for() the rest."""

    precision: str = setting(
        "fp32", before="fp32", choices=PRECISION_CHOICES,
        help="fp32; bf16: autocast matrix products to bfloat16, recommended on CPUs with avx512_bf16 or AMX and on "
             "GPUs from Ampere on; fp16: float16 with a gradient scaler, for GPUs without native bf16 and MPS "
             "(torch 2.8 on); auto: the device's fastest safe one (the reference repository's docs/training.md). "
             "Parameters and the optimiser stay fp32")
    warmup_ratio: float | None = setting(
        0.1, before=None, parse=probability, metavar="R",
        help="linear warm-up of the learning rate over this fraction of all optimiser steps, then linear decay to 0 "
             "(BERT's fine-tuning recipe)")
    max_grad_norm: float | None = setting(
        1.0, before=None, parse=positive_float, metavar="N",
        help="clip the gradients' total norm to N before each step")
    grad_accum: int = setting(
        1, before=1, parse=positive_int, metavar="K",
        help="one optimiser step per K batches, as one batch of K x --batch-size")
    attention: str = setting(
        DEFAULT_ATTENTION, before="fused", choices=ATTENTIONS,
        help="eager: minbert/model.py's attention(), written out: your attention() is what trains; it keeps the "
             "(B, heads, T, T) scores and probabilities for the backward pass and runs several kernels, so it is "
             "slower and takes more memory; fused: torch's scaled_dot_product_attention, the same computation in one "
             "kernel (the reference repository's benchmarks/student_path.py measures the two). Default: eager in a "
             "student tree, so that your attention() is what trains; fused in the reference code")
    optimizer: str = setting(
        "course" if STUDENT else "fused", before="torch", legacy=LEGACY_OPTIMIZERS, choices=OPTIMIZERS,
        help="course: minbert.AdamW, the course's AdamW update as minbert/optim.py writes it out (eps 1e-6; your "
             "AdamW.step is what trains), about eight passes over memory per parameter; torch: torch.optim.AdamW, "
             "torch's update (eps 1e-8) in torch's own unfused implementation; fused: torch.optim.AdamW("
             "fused=True), torch's update in one kernel, the fastest (the reference repository's "
             "benchmarks/optimizer.py). Default: course in a student tree, so that your AdamW is what trains; fused in "
             "the reference code")
    layer_decay: float = setting(
        1.0, before=1.0, parse=unit_interval, metavar="D",
        help="layer-wise learning-rate decay (Howard & Ruder, 2018; Sun et al., 2019): encoder layer l of L learns at "
             "lr * D^(L - l), the embeddings at lr * D^L; 1: one rate everywhere (minbert/param_groups.py)")
    head_lr_scale: float = setting(
        1.0, before=1.0, parse=positive_float, metavar="S",
        help="the learning rate of the parameters outside the pretrained encoder (task heads, off-ramps, PALs) is "
             "lr * S")
    gradual_unfreezing: float = setting(
        0.0, before=0.0, parse=probability, metavar="U",
        help="gradual unfreezing (Howard & Ruder, 2018, sec. 3.3): the heads train alone at first, then the "
             "encoder's layers join one at a time from the top, the embeddings last, evenly over the first U of the "
             "optimiser steps (a parameter takes no step, no weight decay included, before its turn); 0: everything "
             "trains from the start (minbert/param_groups.py)")
    earlier_epochs: list[str] | None = setting(
        None, before=None, item=step_and_epochs, metavar="STEP:EPOCHS", on_resume="free",
        help="written by a resume that changes --epochs, never by hand: the learning-rate schedule and gradual "
             "unfreezing of the optimiser steps before STEP were laid out over EPOCHS epochs (the loop's epochs: "
             "SimCSE's rounds), then laid out again over the next item's, the last over --epochs; run.json records "
             "it, so that --config RUN/run.json replays the extended run (none: laid out once, over --epochs)")
    decay_biases_and_gains: bool = setting(
        False, before=True, moot_when=("weight_decay", 0.0),
        help="apply --weight-decay to the biases and LayerNorm gains too (off: decay the weight matrices and embeddings "
             "only, the usual exclusion)")

    compile: str = setting(
        "off", before="off", choices=COMPILE_MODES,
        help="torch.compile the loss's forward and backward: default fuses kernels; reduce-overhead also captures "
             "each shape's step as CUDA graphs and replays them (for small models on a GPU, where launching kernels "
             f"takes longer than running them). Sequences are then padded to a multiple of {PAD_MULTIPLE} tokens so "
             "that few shapes occur; the first steps of each shape compile. off: eager PyTorch (tasks/core/step.py)")

    cuda_graphs: bool = setting(
        False, before=False, on_resume="free",
        help="on a GPU, capture each batch shape's whole optimiser step (forward, backward, clipping, the fused AdamW) "
             "as a CUDA graph and replay it: one launch instead of hundreds, for small models whose steps wait on the "
             "host. Sequences are padded to a multiple of "
             f"{PAD_MULTIPLE} tokens, and a replay computes what an eager step does on the padded batch (a resume "
             "may turn it on or off: the padding changes rounding only); needs --optimizer fused, fp32 or bf16, "
             "--grad-accum 1, --compile off, no gradual unfreezing or gradient checkpointing, one process, and no "
             "extension term or post-step hook (tasks/core/graphs.py)")

    def loop(self) -> dict:
        """The fields fit() reads (LOOP_FIELDS), by name."""
        return {k: v for k, v in asdict(self).items() if k in LOOP_FIELDS}

    def optimizer_for(self, model: torch.nn.Module, params, lr: float, weight_decay: float) -> torch.optim.Optimizer:
        """The AdamW that trains `params` of `model`: the recipe's parameter groups (minbert/param_groups.py)."""
        if self.compile == "off":
            optimizers_without_dynamo()              # nothing in this run compiles: the course's AdamW starts 1-2 s sooner
        groups = param_groups(model, params, lr, weight_decay, self.layer_decay, self.head_lr_scale,
                              self.decay_biases_and_gains)
        return make_optimizer(groups, lr, weight_decay, self.optimizer)

    @property
    def attn_implementation(self) -> str:
        """minbert's BertConfig.attn_implementation for --attention: 'eager' (attention()) or 'sdpa' (torch's kernel)."""
        return ATTN_IMPLEMENTATION[self.attention]


LOOP_FIELDS = ("precision", "warmup_ratio", "max_grad_norm", "grad_accum", "gradual_unfreezing", "compile",
               "cuda_graphs")


def earlier_plans(items: list[str] | None) -> list[tuple[int, int]]:
    """Recipe.earlier_epochs as (step, epochs) pairs, the steps increasing (a user error naming the list if not)."""
    plans = [tuple(map(int, item.split(":"))) for item in items or []]
    if any(a[0] >= b[0] for a, b in itertools.pairwise(plans)):
        raise ConfigurationError(f"--earlier-epochs {','.join(items or [])}: the steps must increase; a resume that "
                                 "changes --epochs writes it: leave it out, or give the run.json's")
    return plans


def planned_epochs(plans: list[tuple[int, int]], step: int, epochs: int) -> int:
    """The epochs the schedule of optimiser step `step` (0-based) is laid out over: the first of the earlier plans
    (earlier_plans) whose STEP is still ahead, else the run's epochs."""
    return next((planned for until, planned in plans if step < until), epochs)


def with_schedule_record(settings: Any, earlier_epochs: list[str] | None) -> Any:
    """A command's settings with the record of a fit's re-laid schedule (FitResult.earlier_epochs) in its recipe:
    what run.json keeps, so that --config RUN/run.json replays an extended run."""
    return replace(settings, recipe=replace(settings.recipe, earlier_epochs=earlier_epochs))


def unfreezing(model: torch.nn.Module, params: list, fraction: float, total: int) -> tuple[list[int], str]:
    """Each of `params`' first optimiser step under gradual unfreezing (minbert/param_groups.py), and a log line."""
    names = {id(p): n for n, p in model.named_parameters()}
    first = [unfreeze_step(names[id(p)], model, fraction, total) for p in params]
    joins: dict[int, int] = {}                       # depth -> step
    for p, step in zip(params, first):
        d = depth(names[id(p)], model)
        if d is not None:
            joins[d] = step
    order = ", ".join(f"{'the embeddings' if d == 0 else f'layer {d}'} at step {joins[d] + 1}"
                      for d in sorted(joins, reverse=True))
    return first, (f"gradual unfreezing over {max(first, default=0)} of {total} optimiser steps: the heads from step 1, "
                   f"then {order or 'no encoder parameter to unfreeze'}")


def autocast(device: torch.device, precision: str) -> torch.autocast:
    """The autocast context for a precision: matrix products in bf16 or fp16, fp32 where torch's autocast keeps it.

    fp32 is autocast switched off. Under autocast torch keeps losses (cross_entropy, mse_loss, ...) in fp32,
    and LayerNorm and softmax accumulate their statistics in fp32; parameters, gradients, the optimiser
    state and the update stay fp32 (Micikevicius et al., 2018, sec. 3).
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
    dtype = torch.float16 if precision == "fp16" else torch.bfloat16
    return torch.autocast(device.type, dtype=dtype, enabled=precision != "fp32")


@dataclass(frozen=True)
class LinearSchedule:
    """Linear warm-up over `warmup` optimiser steps, then linear decay to 0 at `total` (Devlin et al., 2019, A.2).

    factor(s) multiplies the base learning rate of update s (0-based): (s + 1) / warmup during the
    warm-up, then (total - s) / (total - warmup), so no update is taken at a learning rate of 0.
    """

    warmup: int
    total: int

    @classmethod
    def from_ratio(cls, ratio: float, total: int) -> LinearSchedule:
        return cls(math.ceil(ratio * total), total)

    def factor(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / self.warmup
        return max(0.0, (self.total - step) / max(1, self.total - self.warmup))


def make_optimizer(params, lr: float, weight_decay: float, kind: str = Recipe.optimizer) -> torch.optim.Optimizer:
    """AdamW (Loshchilov & Hutter, 2019, alg. 2): the course's minbert.AdamW, or torch.optim.AdamW unfused or fused.

    course is the course's update (eps 1e-6 added to sqrt(v), the decay after the step); torch and fused are torch's
    (eps 1e-8 added to sqrt(v_hat), the decay first): they differ from each other in rounding only (about 1e-7
    relative). The written-out step makes about eight passes over memory per parameter; the fused kernel makes one,
    which on a CPU is most of the difference (benchmarks/optimizer.py). 'minbert', the name of torch's update written
    out before it was removed, is read as 'torch'.
    """
    kind = LEGACY_OPTIMIZERS.get(kind, kind)
    if kind == "course":
        return minbert.AdamW(params, lr=lr, weight_decay=weight_decay)
    if kind == "torch":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    if kind == "fused":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True)
    raise ValueError(f"optimizer must be one of {OPTIMIZERS}, not {kind!r}")
