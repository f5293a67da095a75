"""A hyperparameter search over any training command's typed settings, with Optuna (TPE sampler, pruning by epoch).

    python -m tasks.search --space tasks/search/main-job-space.json --trials 20
    python -m tasks.search --space tasks/search/main-job-space.json --trials 20       # again: 20 more, same study
    python -m tasks.multitask --config runs/search-main-job-space/best.json           # the best trial, again

The space file (JSON) names the command (classifier, multitask, simcse, deebert), an optional base config file,
the settings held fixed and the ones sampled, each by its dotted path (training.lr, recipe.layer_decay, ...; docs/
search.md). Each trial is a normal run directory, STUDY_DIR/trial-NNNN, written by the command itself in this
process; every epoch's dev score is reported to Optuna, and a trial behind the others is pruned there. The trial's
value is the best dev score of its run (the command's selection metric). After every trial STUDY_DIR holds
best.json (the best trial's settings, a --config file), trials.csv, trials.md, history.png and importances.png.

The study lives in --storage (default sqlite:///STUDY_DIR/study.db): a second call adds trials to it, and workers
started at once on one storage share it (several machines: a PostgreSQL or MySQL URL). A worker killed mid-trial
is noticed by its missing heartbeat; its trial is queued again and goes on from the killed run's last checkpoint.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..core.batching import hash_seed
from ..core.errors import (
    ConfigurationError,
    TrainingError,
    existing_file,
    nonnegative_int,
    on_interrupt,
    positive_float,
    positive_int,
    user_path,
)
from ..core.runs import runs_root
from ..core.settings import parse, parser_for, setting

PRUNERS = ("median", "halving", "none")
PROG = "python -m tasks.search"


@dataclass
class Settings:
    """python -m tasks.search: the space, where the study lives, and how many trials this call adds."""

    space: str | None = setting(None, parse=existing_file, metavar="FILE",
                                help="the search space (required, no default): a JSON file naming the command, a base config "
                                     "file, the fixed settings and the params to sample (the reference repository's "
                                     "docs/search.md)")
    study_dir: str | None = setting(None, parse=user_path, metavar="DIR",
                                    help="the trials' run directories (trial-NNNN), best.json, trials.csv, trials.md, "
                                         "history.png, importances.png and the default storage (none: "
                                         "runs/search-STUDY, or under $MINBERT_RUNS)")
    study: str | None = setting(None, metavar="NAME",
                                help="the study's name in the storage (none: the space file's name without .json)")
    storage: str | None = setting(None, metavar="URL",
                                  help="where the study lives, any URL Optuna takes: postgresql://USER:PASSWORD@HOST/DB "
                                       "or mysql://... for workers on several machines (none: "
                                       "sqlite:///STUDY_DIR/study.db, one machine; never SQLite on a network "
                                       "filesystem)")
    trials: int = setting(10, parse=nonnegative_int, metavar="N",
                          help="trials this call runs (each worker its own N; 0: only rewrite the reports)")
    timeout: float | None = setting(None, parse=positive_float, metavar="SECONDS",
                                    help="start no trial after this many seconds (the one running finishes)")
    pruner: str = setting("median", choices=PRUNERS,
                          help="median: stop a trial whose dev score at an epoch is below the median of the completed "
                               "trials' at that epoch; halving: successive halving (Optuna's "
                               "SuccessiveHalvingPruner); none: every trial runs all its epochs")
    warmup_epochs: int = setting(0, parse=nonnegative_int, metavar="N",
                                 help="the median pruner stops no trial in its first N epochs")
    startup_trials: int = setting(5, parse=nonnegative_int, metavar="N",
                                  help="trials sampled at random before TPE models the scores; the median pruner "
                                       "also waits for N completed trials")
    seed: int | None = setting(None, parse=int,
                               help="the TPE sampler's seed, for a repeatable single-worker search (none: random; "
                                    "workers sharing a study should not all take one seed)")
    heartbeat: int = setting(60, parse=positive_int, metavar="SECONDS",
                             help="each running trial writes a heartbeat to the storage this often; one silent for 3 "
                                  "heartbeats (its worker killed) is failed and queued again")
    record: list[str] | None = setting(None, item=user_path, metavar="RUN_DIR",
                                       help="finished runs of the space's command to add to the study as complete "
                                            "trials before this call's (the main job you already ran: it counts "
                                            "for TPE and the pruner without running again); each must equal the "
                                            "space's settings but for the searched params, which must lie in their "
                                            "ranges; a run already in the study is skipped")
    retries: int = setting(2, parse=nonnegative_int, metavar="N",
                           help="how many times a killed worker's trial is queued again")


def run(settings: Settings) -> dict:
    """Open (or create) the study, run this call's trials, write the reports; returns the best trial and the table."""
    from .report import write_reports
    from .space import load_space
    from .study import (
        default_storage,
        need_optuna,
        objective,
        open_study,
        sampler_and_pruner,
        shown,
    )

    if settings.space is None:
        raise ConfigurationError("give the search space: --space FILE (the reference repository's docs/search.md)")
    optuna = need_optuna()
    space = load_space(settings.space)
    name = settings.study or Path(settings.space).stem
    study_dir = Path(settings.study_dir) if settings.study_dir else runs_root() / f"search-{name}"
    study_dir.mkdir(parents=True, exist_ok=True)
    url = settings.storage or default_storage(study_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler, pruner = sampler_and_pruner(optuna, settings.pruner, settings.seed, settings.startup_trials,
                                             settings.warmup_epochs)
        study = open_study(optuna, url, name, space, settings.heartbeat, settings.retries, sampler, pruner)
        if settings.record:
            from .record import record_runs
            for line in record_runs(optuna, study, space, settings.record):
                print(line, file=sys.stderr)
        done = len(study.get_trials(deepcopy=False))
        if settings.seed is not None and done:   # the same seed again would draw the first call's points again
            study.sampler, _ = sampler_and_pruner(optuna, settings.pruner, hash_seed(settings.seed, done) % 2 ** 32,
                                                  settings.startup_trials, settings.warmup_epochs)
        print(f"search {name!r}: tasks.{space.command}, {len(space.params)} params "
              f"({'; '.join(f'{p.path} {p.describe()}' for p in space.params)}); {settings.trials} trials in "
              f"{study_dir}; storage {shown(url)}", file=sys.stderr)

        def after_trial(study, trial) -> None:    # the reports stay current, whatever stops the search
            write_reports(optuna, study, study_dir)

        try:
            if settings.trials:
                study.optimize(objective(optuna, study, space, study_dir, settings.retries),
                               n_trials=settings.trials, timeout=settings.timeout, catch=(TrainingError,),
                               callbacks=[after_trial], gc_after_trial=True)
        finally:                                  # a trial stopped by an error or Ctrl-C is in the table too
            table, notes = write_reports(optuna, study, study_dir)
    for note in notes:
        print(note, file=sys.stderr)
    print(table)
    done = [t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.COMPLETE]
    best = max(done, key=lambda t: t.value) if done else None
    if best is not None:
        print(f"best: trial {best.number}, {best.user_attrs.get('metric', 'dev score')} {best.value:.4f} "
              f"({best.user_attrs.get('run_dir')}); its settings: {study_dir / 'best.json'}, to run again: "
              f"python -m tasks.{space.command} --config {shlex.quote(str(study_dir / 'best.json'))}")
    return {"study": name, "study_dir": str(study_dir), "storage": shown(url), "trials": len(study.trials),
            "best": {"number": best.number, "value": best.value, "params": best.params,
                     "run_dir": best.user_attrs.get("run_dir")} if best is not None else None}


def build_parser() -> argparse.ArgumentParser:
    """The command line: Settings' flags, --config and --print-config."""
    return parser_for(Settings, PROG, __doc__)


def parse_settings(argv: list[str] | None = None) -> Settings:
    """The settings from the command line and --config."""
    return parse(Settings, argv, PROG, __doc__)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    on_interrupt("interrupted (Ctrl-C); the trial in flight is queued again (it resumes from its checkpoint): go on "
                 f"with the same command, python -m tasks.search {shlex.join(argv)}")
    run(parse_settings(argv))
    return 0
