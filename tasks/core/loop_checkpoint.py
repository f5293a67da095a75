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
from .errors import ResumeError
from .graphs import float_learning_rates
from .loop import FitResult
from .recipe import earlier_plans


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
        self._relay(resume, state)

    def _relay(self, resume: str | Path, state: dict) -> None:
        """The checkpoint's record of where its schedule was laid out again (Recipe.earlier_epochs), and, when this
        resume changes the epochs it was laid out over, that step added to it: run.json keeps it for a replay."""
        given, recorded = self.earlier_epochs, state.get("earlier_epochs")   # None: a checkpoint from before it
        if recorded is not None and recorded[:len(given)] != given:
            raise ResumeError(f"--earlier-epochs {','.join(given)} is not what {resume} recorded "
                              f"({','.join(recorded) or 'none'}): a resume that changes --epochs writes it; leave it out")
        self.earlier_epochs = list(recorded if recorded is not None else given)
        self.earlier = earlier_plans(self.earlier_epochs)
        was, epochs, unit = state.get("planned_epochs"), self.options.epochs, self.unit
        if was in (None, epochs):
            return
        if epochs < self.start or (epochs == self.start and self.within):   # nothing (or a part of one) left to train
            again = f"--epochs {was} or more" if unit == "epoch" else f"the --epochs that planned its {was} {unit}s"
            raise ResumeError(f"cannot resume {resume} for {epochs} {unit}s: {self.start} {unit}s are done"
                              f"{' and a part of the next' if self.within else ''}; resume it with {again}, or start "
                              f"a new run with --epochs {epochs}")
        if self.options.fixed_epochs is not None:
            raise ResumeError(f"cannot resume {resume} for {epochs} epochs: it was started for {was}, and "
                              f"{self.options.fixed_epochs}; resume it with --epochs {was}, or start a new run with "
                              f"--epochs {epochs}")
        if self.options.extended is not None and self.main:
            self.options.extended(list(self.earlier_epochs) or None)   # run.json: a plain --resume goes on with them
        if not self.scheduled:                       # nothing is laid out over the epochs: the uninterrupted run's
            return
        self.earlier_epochs.append(f"{self.step}:{was}")
        self.earlier.append((self.step, was))
        if epochs == self.start:                     # nothing left: the record keeps the plan its steps trained under
            self.say(f"note: the run was planned for {was} {unit}s and ends at {epochs}, which are done: no step is "
                     "left to train; run.json records the plan its steps trained under (--earlier-epochs), so that "
                     "--config RUN/run.json replays this run")
            return
        laid = [what for what, on in (("learning-rate schedule", self.recipe.warmup_ratio is not None),
                                      ("gradual unfreezing", self.recipe.gradual_unfreezing > 0)) if on]
        self.say(f"note: the run was started for {was} epochs and goes on for {epochs}: its {' and '.join(laid)} "
                 f"{'are' if len(laid) > 1 else 'is'} laid out again over the new number of steps from step "
                 f"{self.step + 1} on, so the result is neither "
                 f"the {was}-epoch run's nor an uninterrupted {epochs}-epoch run's; run.json records it "
                 f"(--earlier-epochs), so that --config RUN/run.json replays this run")

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
                "earlier_epochs": self.earlier_epochs,   # and where a resume laid it out again (Recipe.earlier_epochs)
                "data_files": self.data_files,           # --resume refuses a file changed since
                **({"rng_ranks": rngs} if self.parallel else {}),
                **({"terms": terms[0], "term_keys": self.terms.keys} if terms else {}),
                **({"terms_ranks": terms} if terms and self.parallel else {}),
            })
        if self.parallel:
            dp.barrier()  # the epoch ends when its checkpoint is on disk, for every rank
