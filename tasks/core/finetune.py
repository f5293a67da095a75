"""Fine-tune modes: which parameters train. A registry, so that a new mode needs no change to the loop.

A mode is a function (model, settings, seed) -> the parameters to optimise, where settings is the command's FineTune
section; it sets requires_grad itself. The model is a task model with an encoder `bert` and a task head `head` (an
nn.Module or nn.ModuleDict). A mode may pick its own default learning rate, run a hook after every optimiser step
(post_step), e.g. to re-apply a mask, and one on the selected model after training (after_fit(model, settings,
meta)), e.g. to save a small per-task file; a setting of its own is a field of FineTune:

    register(FineTuneMode("my-mode", my_setup, default_lr=1e-4, help="..."))
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from minbert import bitfit, bitfit_controls, bitfit_tasks

from .errors import file_to_write
from .settings import setting


@dataclass(frozen=True)
class FineTuneMode:
    """A named way of choosing the trainable parameters, with its default learning rate."""

    name: str
    setup: Callable[[nn.Module, FineTune, int], list[nn.Parameter]]
    default_lr: float
    help: str
    post_step: Callable[[nn.Module, FineTune], None] | None = None
    after_fit: Callable[[nn.Module, FineTune, dict], None] | None = None  # on the best model, once


MODES: dict[str, FineTuneMode] = {}


def register(mode: FineTuneMode) -> FineTuneMode:
    """Add a mode to the registry (a later registration of the same name replaces it)."""
    MODES[mode.name] = mode
    return mode


def get_mode(name: str) -> FineTuneMode:
    if name not in MODES:
        raise ValueError(f"unknown fine-tune mode {name!r}; known: {', '.join(sorted(MODES))}")
    return MODES[name]


def trainable(model: nn.Module) -> list[nn.Parameter]:
    """The parameters with requires_grad set, in the model's order."""
    return [p for p in model.parameters() if p.requires_grad]


def _last_linear_layer(model: nn.Module, settings: FineTune, seed: int) -> list[nn.Parameter]:
    model.bert.requires_grad_(False)
    model.head.requires_grad_(True)
    return trainable(model)


def _full_model(model: nn.Module, settings: FineTune, seed: int) -> list[nn.Parameter]:
    model.requires_grad_(True)
    return trainable(model)


def _full_frozen_words(model: nn.Module, settings: FineTune, seed: int) -> list[nn.Parameter]:
    model.requires_grad_(True)
    model.bert.embeddings.word.requires_grad_(False)      # (vocab, H): half of MiniLM's parameters
    return trainable(model)


register(FineTuneMode(
    "last-linear-layer", _last_linear_layer, default_lr=1e-3,
    help="freeze the encoder, train the task head only"))
register(FineTuneMode(
    "full-model", _full_model, default_lr=3e-5,
    help="train every parameter of the encoder and the head"))
register(FineTuneMode(
    "full-frozen-words", _full_frozen_words, default_lr=3e-5,
    help="full-model but for the word-embedding table, which keeps its pretrained rows (no gradient for it and no "
         "optimiser state: a faster step where the table is a large share of the model)"))


# BitFit (Ben-Zaken et al., 2022) and the controls of its Table 3: the encoder frozen but for a few of
# its parameters, the task head trained. minbert.bitfit does the choosing; these modes only wire it here.

def _bitfit_terms(value: str) -> str:
    try:
        bitfit.parse_terms(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def _bitfit(model: nn.Module, settings: FineTune, seed: int) -> list[nn.Parameter]:
    bitfit.freeze(model.bert, settings.bitfit_terms)
    model.head.requires_grad_(True)
    return trainable(model)


def _frozen(model: nn.Module, settings: FineTune, seed: int) -> list[nn.Parameter]:
    bitfit.freeze(model.bert, "none")
    model.head.requires_grad_(True)
    return trainable(model)


def _save_task_file(model: nn.Module, settings: FineTune, meta: dict) -> None:
    path = settings.bitfit_task_file
    if path:
        size = bitfit_tasks.save_task(path, model.bert, model.head, {k: str(v) for k, v in meta.items()})
        print(f"wrote {path} ({size / 1024:.0f} KiB: the trained biases and the head)")


def _random_control(how: str, scope: str = "encoder") -> Callable[[nn.Module, FineTune, int], list[nn.Parameter]]:
    def setup(model: nn.Module, settings: FineTune, seed: int) -> list[nn.Parameter]:
        budget = None if how == "rand_row_col_ref" else bitfit.bitfit_budget(model.bert, settings.bitfit_terms)
        bitfit_controls.freeze_random(model.bert, how, budget=budget, seed=seed, scope=scope)
        model.head.requires_grad_(True)
        return trainable(model)
    return setup


register(FineTuneMode(
    "bitfit", _bitfit, default_lr=1e-3, after_fit=_save_task_file,
    help="BitFit: train only the bias terms named by --bitfit-terms, and the head"))
register(FineTuneMode(
    "frozen", _frozen, default_lr=1e-3, after_fit=_save_task_file,
    help="BitFit's 'frozen' control: no encoder parameter trains, only the head"))
register(FineTuneMode(
    "rand_uniform", _random_control("rand_uniform"), default_lr=1e-3,
    help="BitFit's control: as many random entries of the layers and pooler as bitfit trains (chosen from --seed), "
         "and the head"))
register(FineTuneMode(
    "rand_row_col", _random_control("rand_row_col"), default_lr=1e-3,
    help="BitFit's control: the same budget as random whole rows and columns of the layers' and pooler's matrices"))
register(FineTuneMode(
    "rand_row_col_ref", _random_control("rand_row_col_ref"), default_lr=1e-3,
    help="BitFit's control as the reference code draws it: per matrix of the layers and pooler one random column or "
         "rows (a bias's worth), and every LayerNorm gain"))
register(FineTuneMode(
    "rand_uniform_emb", _random_control("rand_uniform", "with-embeddings"), default_lr=1e-3,
    help="rand_uniform drawing from the embedding tables too (the reference code's rand_uniform; a weaker control)"))
register(FineTuneMode(
    "rand_row_col_emb", _random_control("rand_row_col", "with-embeddings"), default_lr=1e-3,
    help="rand_row_col drawing from the embedding tables too (a weaker control)"))


def _registered(name: str) -> str:
    """A fine-tune mode's name, checked against the registry when the flag is read (a mode registered after this
    module loaded counts)."""
    if name not in MODES:
        raise argparse.ArgumentTypeError(f"unknown fine-tune mode {name!r}; known: {', '.join(sorted(MODES))}")
    return name


@dataclass
class FineTune:
    """Which parameters train: the fine-tune mode, and BitFit's choices."""

    fine_tune_mode: str = setting(
        "full-model", parse=lambda name: _registered(name), metavar="MODE",
        help="which parameters train. " + "; ".join(f"{m.name}: {m.help} (default lr {m.default_lr:g})"
                                                    for m in MODES.values()))
    bitfit_terms: str = setting(
        "all", item=_bitfit_terms, metavar="TERM",
        help="bitfit: the bias terms to train, 'all' (every bias, the embedding LayerNorm's and the pooler's "
             "included) or a comma- or space-separated subset of bq,bk,bv,bm1,bLN1,bm2,bm3,bLN2 such as bq,bm2; "
             "rand_*: the budget is what bitfit with these terms trains")
    bitfit_task_file: str | None = setting(
        None, parse=file_to_write, metavar="PATH",
        help="bitfit, frozen: also save the trained biases and the head, a few kilobytes, as a per-task file that "
             "minbert.bitfit_tasks.SharedBackbone.switch loads onto the backbone")

    @property
    def mode(self) -> FineTuneMode:
        return get_mode(self.fine_tune_mode)
