"""Fine-tune modes: which parameters train. A registry, so that a new mode needs no change to the loop.

A mode is a function (model, args) -> the parameters to optimise; it sets requires_grad itself.
The model is a task model with an encoder `bert` and a task head `head` (an nn.Module or
nn.ModuleDict). A mode may add its own command-line flags (add_arguments), pick its own default
learning rate, and run a hook after every optimiser step (post_step), e.g. to re-apply a mask:

    register(FineTuneMode("my-mode", my_setup, default_lr=1e-4, help="..."))
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from torch import nn


@dataclass(frozen=True)
class FineTuneMode:
    """A named way of choosing the trainable parameters, with its default learning rate."""

    name: str
    setup: Callable[[nn.Module, argparse.Namespace], list[nn.Parameter]]
    default_lr: float
    help: str
    post_step: Callable[[nn.Module, argparse.Namespace], None] | None = None
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None


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


def _last_linear_layer(model: nn.Module, args: argparse.Namespace) -> list[nn.Parameter]:
    model.bert.requires_grad_(False)
    model.head.requires_grad_(True)
    return trainable(model)


def _full_model(model: nn.Module, args: argparse.Namespace) -> list[nn.Parameter]:
    model.requires_grad_(True)
    return trainable(model)


register(FineTuneMode(
    "last-linear-layer", _last_linear_layer, default_lr=1e-3,
    help="freeze the encoder, train the task head only"))
register(FineTuneMode(
    "full-model", _full_model, default_lr=3e-5,
    help="train every parameter of the encoder and the head"))


def add_mode_arguments(parser: argparse.ArgumentParser) -> None:
    """--fine-tune-mode, plus the flags every registered mode declares."""
    lines = "; ".join(f"{m.name}: {m.help} (default lr {m.default_lr:g})" for m in MODES.values())
    parser.add_argument("--fine-tune-mode", default="full-model", choices=sorted(MODES),
                        help=f"which parameters train. {lines}")
    for mode in MODES.values():
        if mode.add_arguments is not None:
            mode.add_arguments(parser)
