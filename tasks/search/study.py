"""The Optuna side of a search: the storage (heartbeat, retry of a killed worker's trial), the study, and one trial =
one run of the command, in process, followed epoch by epoch through tasks.core.train.watching.

Optuna is optional: it is imported here, when a search starts, and a missing one is one line of error.
"""

from __future__ import annotations

import contextlib
import json
import math
import platform
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..core.errors import ConfigurationError, UserError
from ..core.evaluation import write_text
from ..core.loop import watching
from ..core.runs import RUN_FILE, resume_base
from ..core.settings import build, dump
from .space import Space

CONFIGS = "configs"              # STUDY_DIR/configs/trial-NNNN.json: each trial's settings, a --config file
SQLITE_TIMEOUT = 60              # seconds a worker waits for another's write to an SQLite storage


def need_optuna() -> Any:
    """The optuna module, or a one-line error saying how to install it."""
    try:
        import optuna
    except ImportError:
        raise UserError("python -m tasks.search needs Optuna, which is not installed: pip install optuna") from None
    return optuna


def shown(url: str) -> str:
    """A storage URL with its password hidden (it is printed and may reach a log)."""
    import sqlalchemy

    try:
        return sqlalchemy.engine.make_url(url).render_as_string(hide_password=True)
    except sqlalchemy.exc.ArgumentError:
        return url


def default_storage(study_dir: Path) -> str:
    """sqlite:///STUDY_DIR/study.db, absolute (so that a worker started elsewhere finds the same file)."""
    return f"sqlite:///{(study_dir / 'study.db').resolve()}"


@contextlib.contextmanager
def creation_lock(url: str) -> Iterator[None]:
    """For an SQLite storage, one process at a time creates the tables and the study (two workers started at once
    would both try); the lock file sits beside the database. Other databases serialise it themselves."""
    database = url.split(":///", 1)[1] if url.startswith("sqlite:///") else ""
    try:
        import fcntl
    except ImportError:                     # not POSIX: no lock (start the first worker alone)
        fcntl = None
    if not database or database == ":memory:" or fcntl is None:
        yield
        return
    lock = Path(database + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def retry_callback(optuna: Any, retries: int) -> Any:
    """Optuna's callback that queues a killed worker's trial again (its params and user attrs, so its run_dir)."""
    cls = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None) or optuna.storages.RetryFailedTrialCallback
    return cls(max_retry=retries)


def open_storage(optuna: Any, url: str, heartbeat: int, retries: int) -> Any:
    """An RDBStorage with a heartbeat: a trial silent for 3 heartbeats (its worker killed) is failed and retried."""
    import inspect

    import sqlalchemy.exc

    params = inspect.signature(optuna.storages.RDBStorage).parameters
    callback = "heartbeat_stale_trial_callback" if "heartbeat_stale_trial_callback" in params else "failed_trial_callback"
    engine = {"connect_args": {"timeout": SQLITE_TIMEOUT}} if url.startswith("sqlite") else None
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs=engine, heartbeat_interval=heartbeat,
                                          grace_period=3 * heartbeat, **{callback: retry_callback(optuna, retries)})
    except (ImportError, sqlalchemy.exc.SQLAlchemyError) as e:
        raise ConfigurationError(f"--storage {shown(url)}: cannot open it ({str(e).splitlines()[0]}); give a URL such as "
                                 "sqlite:///PATH or postgresql://USER:PASSWORD@HOST/DB (its driver installed)") from None


def sampler_and_pruner(optuna: Any, pruner: str, seed: int | None, startup: int, warmup: int) -> tuple[Any, Any]:
    """TPE (constant liar: parallel workers do not all sample the same point) and the pruner asked for."""
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, constant_liar=True)
    if pruner == "median":   # steps count from 1: prunable from step warmup + 1
        return sampler, optuna.pruners.MedianPruner(n_startup_trials=startup, n_warmup_steps=warmup + 1)
    if pruner == "halving":
        return sampler, optuna.pruners.SuccessiveHalvingPruner()
    return sampler, optuna.pruners.NopPruner()


def open_study(optuna: Any, url: str, name: str, space: Space, heartbeat: int, retries: int, sampler: Any,
               pruner: Any) -> Any:
    """Open the storage and create the study (maximize; the space's enqueued trials queued once, by its creator) or
    load it."""
    with creation_lock(url):
        storage = open_storage(optuna, url, heartbeat, retries)
        try:
            study = optuna.create_study(storage=storage, study_name=name, direction="maximize", sampler=sampler,
                                        pruner=pruner)
        except optuna.exceptions.DuplicatedStudyError:
            study = optuna.load_study(study_name=name, storage=storage, sampler=sampler, pruner=pruner)
        else:
            study.set_user_attr("command", space.command)
            for params in space.enqueue:
                study.enqueue_trial(params)
    if study.direction != optuna.study.StudyDirection.MAXIMIZE:
        raise ConfigurationError(f"study {name!r} in {shown(url)} minimizes; a search maximizes the dev score")
    made_by = study.user_attrs.get("command")
    if made_by not in (None, space.command):
        raise ConfigurationError(f"study {name!r} in {shown(url)} searches tasks.{made_by}, not tasks.{space.command}: "
                                 "give another --study")
    return study


class Watch:
    """fit()'s watcher for one trial: reports each epoch's dev score (at its own step count: deebert fits twice),
    prunes (never at a fit's final epoch: the run is done, and a finished trial is COMPLETE with its value), and
    keeps the best score of the last fit (the one whose model the run keeps)."""

    def __init__(self, trial: Any, pruned: type[Exception]):
        self.trial, self.pruned = trial, pruned
        self.step, self.metric, self.best = 0, None, -math.inf

    def __call__(self, epoch: int, record: dict, metric: str, last: bool = False) -> None:
        score = float(record[f"dev_{metric}"])
        if epoch == 1 or self.metric is None:       # a fit starts (a resumed one replays its epochs from 1)
            self.metric, self.best = metric, -math.inf
        self.best = max(self.best, score)
        self.step += 1
        self.trial.report(score, self.step)
        if not last and self.trial.should_prune():
            raise self.pruned(f"dev {metric} {score:.4f} at step {self.step} (epoch {epoch})")

    @property
    def value(self) -> float:
        """The trial's value: the best dev score of the last fit (NaN if no epoch gave a number: a failed trial)."""
        if self.metric is None:
            raise RuntimeError("the run finished without evaluating an epoch")
        return self.best if self.best > -math.inf else math.nan


@contextlib.contextmanager
def command_line(command: str, argv: list[str]) -> Iterator[None]:
    """sys.argv as the command would have been typed for this trial (run.json records it)."""
    saved = sys.argv
    sys.argv = [f"tasks.{command}", *argv]
    try:
        yield
    finally:
        sys.argv = saved


def trial_settings(space: Space, trial: Any, study_dir: Path) -> tuple[Any, list[str]]:
    """The settings of one trial and the command line that would give them. A retried trial (its worker was killed)
    goes on in the killed trial's run directory with --resume DIR; if that run wrote no checkpoint, it starts again
    with the same settings in a directory of its own."""
    sampled = {p.path: p.suggest(trial) for p in space.params}
    run_dir = study_dir / f"trial-{trial.number:04d}"
    config = ["--config", str(study_dir / CONFIGS / f"{run_dir.name}.json")]
    inherited = trial.user_attrs.get("run_dir")
    if inherited is not None and (Path(inherited) / RUN_FILE).is_file():
        values = resume_base(inherited, space.cls)                   # as --resume DIR reads it
        checkpoint = values.get("run.checkpoint") or Path(inherited) / space.checkpoint_name
        if Path(checkpoint).is_file():
            return build(space.cls, values | {"run.resume": inherited}), ["--resume", inherited]
        return build(space.cls, values | {"run.run_dir": str(run_dir)}), config
    if (run_dir / RUN_FILE).is_file():
        raise ConfigurationError(f"{run_dir} holds a run this study did not start (another study's, or was the "
                                 "storage deleted?): give another --study-dir, or move the old trials away")
    return space.settings(sampled, run_dir), config


def objective(optuna: Any, study: Any, space: Space, study_dir: Path, retries: int) -> Any:
    """The function Optuna calls per trial: run the command in the trial's run directory; its value."""
    def run_trial(trial: Any) -> float:
        settings, argv = trial_settings(space, trial, study_dir)
        run_dir = Path(settings.run.run_dir)
        if argv[0] == "--config":                                  # what run.json records as the command typed
            write_text(argv[1], json.dumps(dump(settings), indent=2) + "\n")
        trial.set_user_attr("run_dir", str(run_dir))
        trial.set_user_attr("host", platform.node())
        trial.set_user_attr("settings", dump(settings))          # best.json's source when run.json is elsewhere
        watch = Watch(trial, optuna.TrialPruned)
        try:
            with watching(watch), command_line(space.command, argv):
                space.run(settings)
        except KeyboardInterrupt:                                # Ctrl-C: queued again, as a killed worker's is
            frozen = next(t for t in study.get_trials(deepcopy=False) if t.number == trial.number)
            retry_callback(optuna, retries)(study, frozen)
            raise
        finally:
            if watch.metric is not None:
                trial.set_user_attr("metric", f"dev_{watch.metric}")
        return watch.value

    return run_trial
