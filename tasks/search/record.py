"""Runs made before a search, added to its study as finished trials (--record RUN_DIR ...): the main job you already
ran, or a candidate confirmed at full budget, count for TPE and for the median pruner without being run again.

A run is taken only if it is a finished run of the space's command whose settings equal the space's (its base file
< fixed values) in everything but the searched params (and the run section: where and how it ran), and whose
params lie in the space's ranges; its value is the run's best dev score, its epochs' dev scores (from its curves
file, when the run directory still holds it) are the trial's intermediate values.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..core.curves import curves_path, read_curves
from ..core.errors import ConfigurationError
from ..core.runs import RUN_FILE, read_run_json
from ..core.settings import build, dump, flatten, leaves, walk
from .space import Space

IGNORED = ("run.",)          # where and how a run ran (its directory, threads, device, progress): not the experiment


def selection_metric(space: Space, settings: Any) -> str:
    """The dev score a run of the space's command keeps its best epoch by (what a trial's value is)."""
    if space.command == "multitask":
        return settings.design.chosen()[1]
    if space.command == "classifier":
        return "accuracy"
    if space.command == "simcse":
        return "sts_pearson"
    raise ConfigurationError(f"--record takes classifier, multitask and simcse runs; a {space.command} run fits "
                             "twice (its trial value is its second fit's): run it as a trial instead")


def read_recorded(space: Space, run_dir: str | Path) -> tuple[dict[str, Any], float, dict[int, float], Any, str,
                                                                float | None]:
    """(params, value, {epoch: dev score}, settings, metric, seconds of training and evaluation) of one finished
    run; a clear error if the space cannot take it."""
    run_dir = Path(run_dir)
    record = read_run_json(run_dir)
    where = f"--record {run_dir}"
    if record.get("command") != space.command:
        raise ConfigurationError(f"{where}: a tasks.{record.get('command')} run; the space searches tasks.{space.command}")
    values = flatten(space.cls, record["settings"], str(run_dir / RUN_FILE))
    settings = build(space.cls, values)
    expected = build(space.cls, space.values | {"run.run_dir": str(run_dir)})
    searched = {p.path for p in space.params}
    ran, wanted = leaves(settings), leaves(expected)
    differ = [f"{path} is {ran[path]!r}, the space's {wanted[path]!r}" for path, _, _ in walk(space.cls)
              if path not in searched and not path.startswith(IGNORED) and ran[path] != wanted[path]]
    if differ:
        raise ConfigurationError(f"{where}: not a point of this space ({'; '.join(differ)})")
    params = {p.path: ran[p.path] for p in space.params}
    unset = [p for p in space.params if params[p.path] is None and not p.holds(None)]
    if unset:
        raise ConfigurationError(
            f"{where}: the run left {unset[0].path} at its default (null) while the space samples it "
            f"({unset[0].describe()}); a recorded run must have set every searched setting: rerun it with "
            f"{unset[0].path} set, or search without --record {run_dir}")
    outside = [f"{p.path} {params[p.path]!r} ({p.describe()})" for p in space.params if not p.holds(params[p.path])]
    if outside:
        raise ConfigurationError(f"{where}: outside the space's ranges: {'; '.join(outside)}")
    metric = selection_metric(space, settings)
    result = record.get("result") or {}
    value = result.get(f"dev_{metric}")
    if not isinstance(value, (int, float)) or math.isnan(value):
        raise ConfigurationError(f"{where}: the run did not finish (its {RUN_FILE} has no result dev_{metric})")
    checkpoint = Path(settings.run.checkpoint) if settings.run.checkpoint else run_dir / space.checkpoint_name
    epochs: dict[int, float] = {}
    seconds = 0.0
    for row in read_curves(curves_path(checkpoint)):            # none when the run directory no longer holds it
        if row["kind"] == "epoch" and f"dev_{metric}" in row:
            epochs[int(row["epoch"])] = float(row[f"dev_{metric}"])
            seconds += row.get("train_seconds", 0.0) + row.get("eval_seconds", 0.0)
    return params, float(value), epochs, settings, metric, round(seconds, 1) if epochs else None


def record_runs(optuna: Any, study: Any, space: Space, run_dirs: list[str]) -> list[str]:
    """Add each finished run to the study as a complete trial (once: a run directory already in the study is
    skipped); one line per run saying what was done."""
    known = {str(Path(t.user_attrs["run_dir"]).resolve()) for t in study.get_trials(deepcopy=False)
             if "run_dir" in t.user_attrs}
    said = []
    for run_dir in run_dirs:
        params, value, epochs, settings, metric, seconds = read_recorded(space, run_dir)
        resolved = str(Path(run_dir).resolve())
        if resolved in known:
            said.append(f"--record {run_dir}: already in the study, skipped")
            continue
        dists = {p.path: p.distribution(optuna) for p in space.params}    # read_recorded: params lie in them
        trial = optuna.trial.create_trial(params=params, distributions=dists, value=value, intermediate_values=epochs,
                                          user_attrs={"run_dir": resolved, "metric": f"dev_{metric}",
                                                      "settings": dump(settings), "recorded": True,
                                                      "seconds": seconds})
        study.add_trial(trial)
        known.add(resolved)
        said.append(f"--record {run_dir}: added as a complete trial, dev {metric} {value:.4f}"
                    + (f", {len(epochs)} epochs' scores" if epochs else ", no curves file: no epoch scores for the pruner"))
    return said
