"""The search space: a JSON file naming a training command, its base settings, the settings held fixed and the ones
sampled, each key a dotted setting path of that command's Settings, each value checked as its flag would be.

    {"command": "multitask",
     "base": "../multitask/main-job.json",                    # optional: a --config file (or a run.json)
     "fixed": {"training.max_train_examples": 2000, "training.epochs": 2},
     "params": {"training.lr": {"low": 1e-5, "high": 2e-4, "log": true},
                "recipe.warmup_ratio": {"low": 0.0, "high": 0.2},
                "training.batch_size": {"choices": [16, 32]}},
     "enqueue": [{"training.lr": 5e-5, "recipe.warmup_ratio": 0.1, "training.batch_size": 16}]}

A range samples an integer for an integer setting and a float otherwise ("log": true on a log scale, "step" on a
grid); "choices" samples one of a list. "enqueue" lists trials to run first, on the study's creation (known-good
settings, so that TPE and the pruner start from them); a trial there gives every param.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.config_files import read_json
from ..core.errors import ConfigurationError
from ..core.runs import CHECKPOINT
from ..core.settings import build, check_value, read_config, spec_of, walk

COMMANDS = ("classifier", "multitask", "simcse", "deebert")
TOP_KEYS = ("command", "base", "fixed", "params", "enqueue")
RANGE_KEYS = ("low", "high", "log", "step")
# What the search decides for each trial (its files go into its own run directory): not for a space file to set.
PLACED = ("run.run_dir", "run.checkpoint", "run.predictions_dir")


@dataclass(frozen=True)
class Param:
    """One setting to sample: a range of integers or floats (on a log scale, or a grid of `step`), or choices."""

    path: str
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: tuple | None = None

    @property
    def kind(self) -> str:
        """'choices', 'int' or 'float' (what the sampler draws)."""
        if self.choices is not None:
            return "choices"
        return "int" if isinstance(self.low, int) and isinstance(self.high, int) else "float"

    def suggest(self, trial: Any) -> Any:
        """Ask an Optuna trial for this param's value."""
        if self.kind == "choices":
            return trial.suggest_categorical(self.path, list(self.choices))
        if self.kind == "int":
            return trial.suggest_int(self.path, self.low, self.high, step=self.step or 1, log=self.log)
        return trial.suggest_float(self.path, self.low, self.high, step=self.step, log=self.log)

    def distribution(self, optuna: Any) -> Any:
        """The Optuna distribution suggest() samples from (what a recorded run's value must lie in)."""
        if self.kind == "choices":
            return optuna.distributions.CategoricalDistribution(list(self.choices))
        if self.kind == "int":
            return optuna.distributions.IntDistribution(self.low, self.high, log=self.log, step=self.step or 1)
        return optuna.distributions.FloatDistribution(self.low, self.high, log=self.log, step=self.step)

    def holds(self, value: Any) -> bool:
        """Whether suggest() could give `value`: one of the choices, or within [low, high] and on the step's grid."""
        if self.kind == "choices":
            return value in self.choices
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not self.low <= value <= self.high:
            return False
        if self.step:
            steps = (value - self.low) / self.step
            return abs(steps - round(steps)) < 1e-8           # Optuna's own tolerance: what it would accept
        return True

    def describe(self) -> str:
        """One line: the range or the choices."""
        if self.kind == "choices":
            return f"one of {', '.join(map(str, self.choices))}"
        grid = f", step {self.step}" if self.step else ""
        return f"{self.kind} in [{self.low:g}, {self.high:g}]{' (log)' if self.log else ''}{grid}"


@dataclass
class Space:
    """A parsed space file: the command, its settings class and run(), the checked base < fixed values, the params."""

    path: Path
    command: str
    cls: type
    run: Callable[[Any], dict]
    values: dict[str, Any]                        # {dotted path: checked value}: the base file, then "fixed"
    params: list[Param]
    enqueue: list[dict[str, Any]] = field(default_factory=list)
    checkpoint_name: str = CHECKPOINT             # the checkpoint a resumed run needs, in its run directory

    def check(self, sampled: dict[str, Any], source: str) -> dict[str, Any]:
        """Sampled values, each through its setting's check (as a flag's text would be)."""
        leaves = _leaves(self.cls)
        return {path: check_value(path, *leaves[path], value, source) for path, value in sampled.items()}

    def settings(self, sampled: dict[str, Any], run_dir: str | Path) -> Any:
        """The command's settings for one trial: base < fixed < the sampled params, in `run_dir`."""
        values = self.values | self.check(sampled, f"{self.path} (a sampled value)")
        return build(self.cls, values | {"run.run_dir": str(run_dir)})


def _leaves(cls: type) -> dict[str, tuple[dataclasses.Field, Any]]:
    return {path: (f, tp) for path, f, tp in walk(cls)}


def leaf(cls: type, path: Any, source: str) -> tuple[dataclasses.Field, Any]:
    """The field and type of a dotted setting path that a space may set; a clear error otherwise."""
    leaves = _leaves(cls)
    if not isinstance(path, str) or path not in leaves:
        sections = {p.rsplit(".", 1)[0] for p in leaves if "." in p}
        if path in sections:
            raise ConfigurationError(f"{source}: {path!r} is a section: give its settings as dotted keys "
                                     f"('{path}.NAME')")
        prefix = str(path).rsplit(".", 1)[0] + "." if "." in str(path) else ""
        known = sorted({p[len(prefix):].split(".")[0] for p in leaves if p.startswith(prefix)})
        if not known:                                     # an unknown section: what the top level holds
            prefix, known = "", sorted({p.split(".")[0] for p in leaves})
        raise ConfigurationError(f"{source}: unknown setting {path!r}; known {'in ' + prefix[:-1] if prefix else 'here'}"
                                 f": {', '.join(known)}")
    f, tp = leaves[path]
    if not spec_of(f).in_config:
        raise ConfigurationError(f"{source}: {path!r} is an action, not a setting a trial can take")
    if path in PLACED:
        raise ConfigurationError(f"{source}: {path!r} is the search's to set: each trial writes into its own run "
                                 "directory, STUDY_DIR/trial-NNNN")
    return f, tp


def _choices(path: str, f: dataclasses.Field, tp: Any, spec: dict, where: str) -> Param:
    """A param sampled from a list, each choice checked as the setting's flag would be."""
    if set(spec) != {"choices"}:
        raise ConfigurationError(f"{where}: choices stand alone (no {', '.join(sorted(set(spec) - {'choices'}))})")
    choices = spec["choices"]
    if not isinstance(choices, list) or not choices:
        raise ConfigurationError(f"{where}: choices must be a non-empty list")
    for value in choices:
        if isinstance(value, (list, dict)):
            raise ConfigurationError(f"{where}: a choice must be a number, a string, true/false or null, not {value!r}")
        check_value(path, f, tp, value, where)
    return Param(path, choices=tuple(choices))


def _range(cls: type, path: str, spec: Any, source: str) -> Param:
    """A param's range or choices, its ends (or each choice) checked as the setting's flag would be."""
    f, tp = leaf(cls, path, source)
    where = f"{source} {path!r}"
    if not isinstance(spec, dict):
        raise ConfigurationError(f"{where}: give a range {{\"low\": L, \"high\": H}} or {{\"choices\": [...]}}, "
                                 f"not {spec!r}")
    if "choices" in spec:
        return _choices(path, f, tp, spec, where)
    unknown = set(spec) - set(RANGE_KEYS)
    if unknown or not {"low", "high"} <= set(spec):
        raise ConfigurationError(f"{where}: a range has low and high (and optionally log, step)"
                                 + (f"; unknown: {', '.join(sorted(unknown))}" if unknown else ""))
    low, high = (check_value(path, f, tp, spec[k], f"{where} {k}") for k in ("low", "high"))
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (low, high)):
        raise ConfigurationError(f"{where}: a range needs a numeric setting; give choices instead")
    log, step = spec.get("log", False), spec.get("step")
    if not isinstance(log, bool):
        raise ConfigurationError(f"{where}: log must be true or false, not {log!r}")
    if low > high:
        raise ConfigurationError(f"{where}: low {low} is above high {high}")
    if log and low <= 0:
        raise ConfigurationError(f"{where}: a log range needs low > 0, not {low}")
    if step is not None:
        if isinstance(step, bool) or not isinstance(step, (int, float)) or step <= 0:
            raise ConfigurationError(f"{where}: step must be a positive number, not {step!r}")
        if log:
            raise ConfigurationError(f"{where}: give log or step, not both")
        if isinstance(low, int) and isinstance(high, int):
            if not isinstance(step, int) or (high - low) % step:
                raise ConfigurationError(f"{where}: an integer range needs an integer step that divides high - low")
        else:
            step = float(step)
    return Param(path, low, high, log, step)


def _base_file(space: Path, given: Any) -> Path:
    """The base config file: relative to the space file, else to the working directory."""
    if not isinstance(given, str):
        raise ConfigurationError(f"{space}: base must be the path of a config file, not {given!r}")
    candidates = [Path(given)] if Path(given).is_absolute() else [space.parent / given, Path(given)]
    for path in candidates:
        if path.is_file():
            return path
    raise ConfigurationError(f"{space}: base {given!r}: no such file (looked beside the space file and in the "
                             "working directory)")


def load_space(path: str | Path) -> Space:
    """Read and check a space file; every error names the file and the key."""
    path = Path(path)
    data = read_json(path, "space file")
    if not isinstance(data, dict):
        raise ConfigurationError(f"{path}: a space file is a JSON object with {', '.join(TOP_KEYS)}")
    unknown = sorted(set(data) - set(TOP_KEYS))
    if unknown:
        raise ConfigurationError(f"{path}: unknown key {unknown[0]!r}; a space file has {', '.join(TOP_KEYS)}")
    command = data.get("command")
    if command not in COMMANDS:
        raise ConfigurationError(f"{path}: command must be one of {', '.join(COMMANDS)}, not {command!r}")
    module = importlib.import_module(f"tasks.{command}")
    cls = module.Settings
    values: dict[str, Any] = {}
    if data.get("base") is not None:
        values = {k: v for k, v in read_config(_base_file(path, data["base"]), cls).items() if k not in PLACED}
    fixed, params = data.get("fixed", {}), data.get("params")
    if not isinstance(fixed, dict):
        raise ConfigurationError(f"{path}: fixed must be an object of {{setting: value}}")
    for key, value in fixed.items():
        values[key] = check_value(key, *leaf(cls, key, f"{path} (fixed)"), value, f"{path} (fixed)")
    if not isinstance(params, dict) or not params:
        raise ConfigurationError(f"{path}: params must be a non-empty object of {{setting: range or choices}}")
    both = sorted(set(params) & set(fixed))
    if both:
        raise ConfigurationError(f"{path}: {both[0]!r} is both fixed and searched; give it in one place")
    found = [_range(cls, key, spec, f"{path} (params)") for key, spec in params.items()]
    space = Space(path, command, cls, module.run, values, found,
                  checkpoint_name=getattr(module, "STAGE1", CHECKPOINT))   # deebert's first stage's
    space.enqueue = _enqueued(space, data.get("enqueue", []))
    return space


def _enqueued(space: Space, given: Any) -> list[dict[str, Any]]:
    """The trials to run first: each a value for every param, checked."""
    if not isinstance(given, list) or not all(isinstance(t, dict) for t in given):
        raise ConfigurationError(f"{space.path}: enqueue must be a list of {{param: value}} objects")
    names = [p.path for p in space.params]
    out = []
    for i, trial in enumerate(given, 1):
        source = f"{space.path} (enqueue, trial {i})"
        missing, extra = [n for n in names if n not in trial], [k for k in trial if k not in names]
        if missing or extra:
            raise ConfigurationError(f"{source}: give a value for each param and nothing else"
                                     + (f"; missing {', '.join(missing)}" if missing else "")
                                     + (f"; not a param: {', '.join(map(str, extra))}" if extra else ""))
        checked = space.check(trial, source)
        outside = [f"{p.path} {checked[p.path]!r} ({p.describe()})" for p in space.params
                   if not p.holds(checked[p.path])]
        if outside:
            raise ConfigurationError(f"{source}: {json.dumps(trial)} is outside the space's ranges: "
                                     f"{'; '.join(outside)}")
        out.append(dict(trial))
    return out
