"""The one extension point of a training command's objective: terms. docs/extensions.md walks through adding one.

A term is an extension of the loss (SMART, the sentence-embedding objectives, ...) or of how the tasks' gradients
combine (PCGrad). It is declared once, beside the command's other terms:

    register_term("multitask", Term("mine", section="mine", build=my_term))

`section` names the field of the command's Settings that holds the term's settings (one typed section, its flags
generated as every other's); `build(section, context)` returns the term's Extension for this run, or None when its
settings switch it off; `check(section, settings)`, if given, refuses settings before any work is done. The command
builds its terms once (build_terms) and hands the TermSet to its loss function and to fit(); neither its run() nor
the loop names a term.

An Extension's hooks, each a no-op unless overridden:
    loss(fwd, inner)        the batch's loss: `inner(fwd)` is the loss of the terms registered before this one (the
                            task's own loss innermost), `fwd` the batch's task forward (the command's: for the
                            multitask command tasks/multitask/model.py TaskForward); return the new loss
    combine(model, losses)  one loss from a round of the tasks' losses (one batch of each), whose backward() gives
                            the gradients the step takes (PCGrad); the first switched-on term that has it decides
    batches(inner, generator)  the epoch's batches the loop takes (PCGrad: rounds of one batch per task); generator
                            is the epoch's own (epoch_generator), for orders drawn as the batches are read
    after_step(model)       after each optimiser step (SMART's momentum copy)
    epoch_stats(means)      the epoch's logged means -> what its record shows; describe(stats) -> the log line
    state(), load_state()   what the term carries on (its log's running sums; more if it keeps any), in every checkpoint
Whatever a term logs with self.log.add(key, value) is averaged over the epoch and joins the epoch's record (the
curves, the progress line, the run's history and summary), so that its effect is visible and can be checked non-zero.

A resume gives a term back its state() of the checkpoint before the first epoch it trains, and batches() sees the
global RNG states as they were at the start of the epoch and a fresh epoch_generator, resumed within it or not
(tasks/core/train.py). Weights a term
keeps go in the model, as a module under the term's name (SMART's model.smart), so that the checkpoint holds them
and prediction, which builds the model without the terms, leaves them out (without_term_weights); trainable ones go
in Context.params too.
"""

from __future__ import annotations

import inspect
import sys
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, fields, is_dataclass
from io import BytesIO
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .distributed import is_main_process
from .errors import ConfigurationError, TermError


@dataclass
class Context:
    """What a term's build() may use: the model (a module added to it is saved with it), the list of parameters the
    optimiser will train (append a new trainable parameter to it), the device, all the command's settings."""

    model: nn.Module
    params: list[nn.Parameter]
    device: torch.device
    settings: Any


class TermLog:
    """Running sums of what a term logs, kept as detached tensors (no device sync per step)."""

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor | float] = {}
        self.counts: dict[str, int] = {}

    def add(self, key: str, value: torch.Tensor | float) -> None:
        value = value.detach().float() if isinstance(value, torch.Tensor) else float(value)   # numpy's as python's
        self.sums[key], self.counts[key] = self.sums.get(key, 0.0) + value, self.counts.get(key, 0) + 1

    def means(self) -> dict[str, float]:
        """The means since the last call, and the sums restart."""
        mean = {k: float(v) / self.counts[k] for k, v in self.sums.items()}
        self.sums, self.counts = {}, {}
        return mean


def epoch_generator(seed: int, epoch: int) -> torch.Generator:
    """A CPU generator of its own for a term's batches(), seeded from the run's seed and the epoch: what it draws
    depends on nothing else, so a sequence that samples from it as it is read takes the same batches after a resume
    (the loop takes the batches done before the interruption again, from a fresh generator)."""
    return torch.Generator().manual_seed((seed * 1_000_003 + epoch) % (1 << 63))


class Extension:
    """A switched-on term of one run; the TermSet gives it `log`, a TermLog."""

    log: TermLog

    def loss(self, fwd: Any, inner: Callable[[Any], torch.Tensor]) -> torch.Tensor:
        return inner(fwd)

    combine: Callable[[nn.Module, list[torch.Tensor]], torch.Tensor] | None = None

    def batches(self, inner: Sequence, generator: torch.Generator) -> Sequence:
        return inner

    def after_step(self, model: nn.Module) -> None:
        return None

    def epoch_stats(self, means: dict[str, float]) -> dict[str, float]:
        return means

    def describe(self, stats: dict[str, float]) -> str:
        return ", ".join(f"{k} {v:.3e}" for k, v in stats.items())

    def state(self) -> dict:
        """What every checkpoint keeps of the term (tensors and plain values): the epoch's running sums of its log; a
        term that carries more from step to step or epoch to epoch (weights from the last epoch's losses) adds it."""
        return {"sums": self.log.sums, "counts": self.log.counts}

    def load_state(self, state: dict) -> None:
        """Take back what state() gave, on a resume."""
        self.log.sums, self.log.counts = dict(state["sums"]), dict(state["counts"])


@dataclass(frozen=True)
class Term:
    """A registered term: its name, the Settings section it reads, how it is built and checked; `slot`: the model
    declares an empty part of this name (None) that the term's build fills (SMART's model.smart), not a clash."""

    name: str
    section: str
    build: Callable[[Any, Context], Extension | None]
    check: Callable[[Any, Any], None] | None = None
    slot: bool = False


TERMS: dict[str, list[Term]] = {}


def register_term(command: str, term: Term) -> Term:
    """Add a term to a command's objective; terms nest in registration order (the first innermost)."""
    terms = TERMS.setdefault(command, [])
    if any(t.name == term.name for t in terms):
        raise ValueError(f"{command} has a term {term.name!r} already")
    terms.append(term)
    return term


def check_terms(command: str, settings: Any, own: Collection[str]) -> None:
    """Before any work: every registered term's section is one of the settings', every section of the settings is
    read by the command itself (`own`) or by a registered term, and each term's check passes."""
    terms = TERMS.get(command, [])
    for term in terms:
        chosen = section_of(term, settings)
        if term.check is not None:
            term.check(chosen, settings)
    read = set(own) | {t.section for t in terms}
    for name in (f.name for f in fields(settings) if f.name not in read):
        where = f" ({_source(terms[0].build).rsplit(':', 1)[0]}, beside the command's other terms)" if terms else ""
        raise ConfigurationError(
            f"Settings.{name} ({_source(type(getattr(settings, name)))}) is read by no registered term of "
            f"{command} and is not one of the sections the command reads itself, so its flags could be accepted and "
            f"do nothing: register its term with register_term({command!r}, Term(NAME, section={name!r}, "
            f"build=...)){where}, or, where the command's own code reads it (build_model, as PALs' section), add "
            f"{name!r} to the command's OWN_SECTIONS (tasks/{command}/__init__.py)")


def section_of(term: Term, settings: Any) -> Any:
    """The settings' section that `term` reads; a ConfigurationError naming both when the settings have none."""
    names = {f.name for f in fields(settings)} if is_dataclass(settings) else set(vars(settings))
    if term.section not in names:
        raise ConfigurationError(
            f"the term {term.name!r} reads Settings.{term.section}, which {type(settings).__name__} "
            f"({_source(type(settings)).rsplit(':', 1)[0]}) has no section of: add `{term.section}: YourSection = "
            f"section(YourSection)` to it, or correct Term(section=...) where the term is registered (its build: "
            f"{_source(term.build)})")
    return getattr(settings, term.section)


class TermSet:
    """The switched-on terms of a run, in registration order, and what they logged per epoch (by section)."""

    def __init__(self, active: list[tuple[Term, Extension]] = ()):
        self.active = list(active)
        for _, ext in self.active:
            ext.log = TermLog()
        self.keys: dict[str, list[str]] = {}            # section -> the keys its stats have shown (in every checkpoint)

    def loss(self, fwd: Any, base: Callable[[Any], torch.Tensor]) -> torch.Tensor:
        """The batch's loss: base(fwd) (the task's loss) wrapped by every term in turn."""
        inner = base
        for term, ext in self.active:
            inner = _wrapped(term, ext, inner)
        return inner(fwd)

    def combiner(self) -> Callable[[nn.Module, list[torch.Tensor]], torch.Tensor] | None:
        """The switched-on term that combines a round's task losses, if any."""
        return next((ext.combine for _, ext in self.active if ext.combine is not None), None)

    def batches(self, inner: Sequence, seed: int, epoch: int) -> Sequence:
        """The epoch's batches through each term's batches(), all given one generator of the epoch (epoch_generator)."""
        generator = epoch_generator(seed, epoch)
        for _, ext in self.active:
            inner = ext.batches(inner, generator)
        return inner

    def after_step(self, model: nn.Module) -> None:
        for _, ext in self.active:
            ext.after_step(model)

    def epoch_end(self) -> dict[str, float]:
        """The epoch's stats of every term (for its record), kept by section and logged, one line per section."""
        by_section: dict[str, tuple[dict, list[str]]] = {}
        for term, ext in self.active:
            stats = ext.epoch_stats(ext.log.means())
            taken = [k for k in stats if k in LOOP_KEYS or k.startswith(("train_loss_", "dev_")) or k.endswith("_seconds")]
            if taken:
                raise ConfigurationError(
                    f"the term {term.name!r} ({type(ext).__name__}) logs {', '.join(map(repr, taken))}: the loop's own "
                    "record has that key (epoch, kind, train_loss, train_loss_TASK, dev_*, *_seconds) and its value "
                    f"would be overwritten; name the term's stats after it ({term.name}_...) in its epoch_stats "
                    f"({_source(type(ext).epoch_stats)})")
            if stats:
                merged, lines = by_section.setdefault(term.section, ({}, []))
                merged.update(stats)
                lines.append(ext.describe(stats))
        for section, (stats, lines) in by_section.items():
            keys = self.keys.setdefault(section, [])
            keys += [k for k in stats if k not in keys]
            if is_main_process():
                print(f"  {section}: " + "; ".join(lines), file=sys.stderr)
        return {k: v for stats, _ in by_section.values() for k, v in stats.items()}

    def summary(self, history: list[dict]) -> dict[str, list[dict]]:
        """Per section, each epoch's stats, from the run's whole history (the epochs before a resume too)."""
        out = {}
        for section, keys in self.keys.items():
            epochs = [{k: v for k, v in record.items() if k in keys} for record in history]
            out[section] = [stats for stats in epochs if stats]
        return out

    def state(self) -> dict:
        """Each term's state(), checked to be what a checkpoint read with weights_only holds (a TermError if not)."""
        out = {}
        for term, ext in self.active:
            out[term.name] = ext.state()
            _check_state(term, ext, out[term.name], "state()")
        return out

    def load_state(self, state: dict, keys: dict[str, list[str]]) -> None:
        """The terms' state() and the sections' keys of a checkpoint."""
        for term, ext in self.active:
            if term.name in state:
                ext.load_state(state[term.name])
        for section, known in keys.items():
            mine = self.keys.setdefault(section, [])
            mine += [k for k in known if k not in mine]


LOOP_KEYS = ("epoch", "kind", "train_loss")     # with train_loss_*, dev_*, *_seconds: the loop's record's own keys
PLAIN = (bool, int, float, str, bytes, type(None), torch.Size, torch.dtype, torch.device)


def _wrapped(term: Term, ext: Extension, inner: Callable[[Any], torch.Tensor]) -> Callable[[Any], torch.Tensor]:
    def loss(fwd: Any) -> torch.Tensor:
        out = ext.loss(fwd, inner)
        training = torch.is_grad_enabled() and getattr(getattr(fwd, "model", None), "training", True)
        if not isinstance(out, torch.Tensor) or out.numel() != 1 or (training and not out.requires_grad):
            raise TermError(_bad_loss(term, ext, out))
        return out
    return loss


def _bad_loss(term: Term, ext: Extension, out: Any) -> str:
    """What is wrong with a term's loss() result, naming the term and the line of its loss()."""
    if not isinstance(out, torch.Tensor):
        what = f"returned {type(out).__name__}" + {
            "tuple": " (a pair such as (loss, a stat)? return the loss alone; log the stat with self.log.add)",
            "NoneType": " (a missing return?)"}.get(type(out).__name__, "")
    elif out.numel() != 1:
        what = f"returned a tensor of shape {tuple(out.shape)} (per example?): reduce it to the batch's loss, .mean()"
    else:
        what = ("returned a tensor that does not require grad (detached, rebuilt from .item(), or computed under "
                "torch.no_grad()): backward() could not train through it")
    return (f"term {term.name!r} ({type(ext).__name__}.loss, {_source(type(ext).loss)}) {what}; loss() returns one "
            "scalar tensor, the batch's loss, computed from inner(fwd) or from the model's outputs")


def _check_state(term: Term, ext: Extension, value: Any, path: str) -> None:
    """Refuse, naming the term and the key, a value of its state() that a checkpoint read with weights_only cannot
    hold (a numpy scalar or array, an object of the term's own)."""
    if type(value) in (dict, OrderedDict):                # a state_dict() is an OrderedDict: walked, not pickled
        for key, item in value.items():
            _check_state(term, ext, key, f"the key {key!r} of {path}")
            _check_state(term, ext, item, f"{path}[{key!r}]")
        return
    if type(value) in (list, tuple, set):
        for key, item in enumerate(value):
            _check_state(term, ext, item, f"{path}[{key!r}]")
        return
    if type(value) in PLAIN or type(value) in (torch.Tensor, nn.Parameter):
        return
    buffer = BytesIO()
    try:
        torch.save(value, buffer)
        buffer.seek(0)
        torch.load(buffer, weights_only=True)
    except Exception:  # noqa: BLE001 - pickling errors of any kind: what torch.load would refuse on resume
        raise TermError(f"term {term.name!r} ({type(ext).__name__}.state, {_source(type(ext).state)}): {path} is a "
                        f"{type(value).__module__}.{type(value).__qualname__}, which a checkpoint (read with "
                        "weights_only) cannot hold: keep tensors and plain python values (float(x), int(x), "
                        "x.tolist() of a numpy value)") from None


def _source(f: Any) -> str:
    """file:line of a function or class (relative to the working directory when under it), for a message."""
    try:
        path, line = Path(inspect.getsourcefile(f) or "?"), inspect.getsourcelines(f)[1]
    except (TypeError, OSError):
        return getattr(f, "__qualname__", repr(f))
    try:
        path = path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        pass
    return f"{path.as_posix()}:{line}"


def without_term_weights(state: dict[str, torch.Tensor], model: nn.Module) -> dict[str, torch.Tensor]:
    """A checkpoint's model state less the weights a registered term kept in the model under its name (SMART's theta~,
    smart.*), which `model`, built without the terms (for prediction), does not have."""
    names, own = {t.name for terms in TERMS.values() for t in terms}, model.state_dict().keys()
    return {k: v for k, v in state.items() if k in own or k.split(".", 1)[0] not in names}


def build_terms(command: str, settings: Any, context: Context) -> TermSet:
    """The command's registered terms that the settings switch on, built for this run."""
    active = []
    for term in TERMS.get(command, []):
        model = context.model                                       # its weights go there (SMART fills its slot)
        if hasattr(model, term.name) and not (term.slot and getattr(model, term.name) is None):
            raise ConfigurationError(f"the term {term.name!r} has the name of the model's own {term.name!r}: register "
                                     "it under another name (a term's weights are kept in the model under its name; "
                                     f"its build: {_source(term.build)})")
        ext = term.build(section_of(term, settings), context)
        if ext is not None and not isinstance(ext, Extension):
            what = (f"the class {ext.__name__}, not an instance: return {ext.__name__}(...)" if isinstance(ext, type)
                    else f"{type(ext).__name__}: return an instance of an Extension subclass")
            raise TermError(f"term {term.name!r}: its build ({_source(term.build)}) returned {what}, or None when its "
                            "settings switch it off")
        if ext is not None:
            active.append((term, ext))
    return TermSet(active)
