"""fit()'s loop to and from its checkpoint: the restore() and save() that tasks/core/train.py's _Loop inherits."""

from __future__ import annotations

from pathlib import Path

from . import distributed as dp
from .checkpoints import (
    CHECKPOINT_KEYS,
    check_config,
    check_data_files,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from .graphs import float_learning_rates
from .loop import FitResult


class LoopCheckpoint:
    """What a checkpoint holds of _Loop (tasks/core/train.py), and taking it back: the state fit() saves after each
    epoch (or within one) and restores on --resume."""

    def restore(self, resume: str | Path) -> None:
        """The state of a checkpoint: model, optimiser, epochs done, best epoch, history, steps, RNG states."""
        state = load_checkpoint(resume, required=CHECKPOINT_KEYS)  # on the CPU: RNG states must stay there
        check_config(resume, state.get("config", {}), self.options.config)
        check_data_files(resume, state.get("data_files"), self.data_files)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.start, self.history = state["epoch"], list(state["history"])
        self.best = FitResult(state["best_epoch"], state["best_score"], state["best_state"], self.history)
        self.step, self.base_lrs = state.get("optimizer_steps", 0), state.get("base_lrs", self.base_lrs)
        places = state.get("within_ranks")
        self.within = places[self.me] if places and len(places) == self.world else state.get("within_epoch")
        if self.scaler.is_enabled() and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        terms = state.get("terms_ranks") or [state.get("terms", (self.within or {}).get("terms", {}))]  # older: within's
        self.terms.load_state(terms[self.me] if len(terms) == self.world else terms[0], state.get("term_keys", {}))
        rngs = state.get("rng_ranks") or [state["rng"]]
        if len(rngs) != self.world:
            self.say(f"{resume} was written by {len(rngs)} process(es), now {self.world}: dropout draws other random "
                     "numbers than an uninterrupted run would")
        set_rng_state(rngs[self.me] if len(rngs) == self.world else state["rng"])
        unit = self.unit
        if not self.history:                         # a step checkpoint of the first epoch: no best score yet
            within = f", {self.within['groups']} optimiser steps of {unit} 1 done" if self.within else ""
            self.say(f"resumed from {resume}: no {unit} finished yet{within}")
        else:
            within = f" and {self.within['groups']} optimiser steps of the next" if self.within else ""
            self.say(f"resumed from {resume}: {self.start} {unit}s done{within}, best dev {self.metric} "
                     f"{self.best.best_score:.4f} ({unit} {self.best.best_epoch})")
        was = state.get("planned_epochs")
        if was not in (None, self.options.epochs) and (self.recipe.warmup_ratio is not None
                                                        or self.recipe.gradual_unfreezing > 0):
            self.say(f"note: the run was started for {was} epochs and goes on for {self.options.epochs}: its "
                     "learning-rate schedule is laid out again over the new number of steps, so the result is "
                     f"neither the {was}-epoch run's nor an uninterrupted {self.options.epochs}-epoch run's")

    def save(self, epoch: int, within: dict | None = None) -> None:
        """The checkpoint after `epoch`, or within it after `within["groups"]` optimiser steps (rank 0 writes it,
        holding every rank's RNG state and, within an epoch, every rank's loss sums)."""
        rngs = dp.all_gather(rng_state()) if self.parallel else [rng_state()]
        terms = (dp.all_gather(self.terms.state()) if self.parallel else [self.terms.state()]) if self.terms.active else []
        places = (dp.all_gather(within) if self.parallel else [within]) if within is not None else None
        if self.main:
            if places is not None and self.curve is not None:
                self.curve.sync()                    # the steps logged so far, as the checkpoint has them
            save_checkpoint(self.options.checkpoint, {
                "model": self.model.state_dict(), "optimizer": float_learning_rates(self.optimizer.state_dict()),
                "epoch": epoch + 1 if within is None else epoch,
                **({"within_epoch": within, "within_ranks": places} if within is not None else {}),
                "best_epoch": self.best.best_epoch, "best_score": self.best.best_score,
                "best_state": self.best.best_state, "history": self.history, "rng": rngs[0], "config": dict(self.options.config),
                "optimizer_steps": self.step, "base_lrs": self.base_lrs, "scaler": self.scaler.state_dict(),
                "planned_epochs": self.options.epochs,   # --epochs is free on resume: the schedule's span says so
                "data_files": self.data_files,           # --resume refuses a file changed since
                **({"rng_ranks": rngs} if self.parallel else {}),
                **({"terms": terms[0], "term_keys": self.terms.keys} if terms else {}),
                **({"terms_ranks": terms} if terms and self.parallel else {}),
            })
        if self.parallel:
            dp.barrier()  # the epoch ends when its checkpoint is on disk, for every rank
