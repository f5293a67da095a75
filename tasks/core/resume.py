"""The one resume rule: whether a run's checkpoint may continue under the settings given now, decided from the
settings' fields alone (tasks/core/settings.py `setting(...)`): on_resume ("same" or "free"), `before` (the value a
run that predates the setting ran with), `legacy` (older spellings of values) and `moot_when`. The checkpoint code
(tasks/core/checkpoints.py check_config) and the run directory's --resume (tasks/core/runs.py resume_base) ask it and
nothing else; the plain flag names of checkpoints written before typed settings are read here too (from_flat_names).
"""

from __future__ import annotations

import inspect
import typing
from pathlib import Path
from typing import Any

from .run_files import is_path_setting, same_place
from .settings import NEW, Spec, leaves, spec_of, walk

ROOT = Path(__file__).resolve().parents[2]


class ResumeConfig(dict):
    """{dotted path: value} of what a resumed run must keep, and `cls`, the settings class whose fields say how a
    checkpoint's values compare with them (resume_differences)."""

    def __init__(self, values: dict[str, Any], cls: type | None):
        super().__init__(values)
        self.cls = cls

    def __or__(self, other: dict) -> ResumeConfig:
        return ResumeConfig(dict(self) | dict(other), self.cls)


def resume_config(settings: Any) -> ResumeConfig:
    """{dotted path: value} of the settings a resumed run must keep (on_resume="same"): what fit() stores in the
    checkpoint and compares on --resume."""
    specs = _specs(type(settings))
    return ResumeConfig({path: list(v) if isinstance(v, tuple) else v for path, v in leaves(settings).items()
                         if specs[path].on_resume == "same" and specs[path].in_config}, type(settings))


def _specs(cls: type) -> dict[str, Spec]:
    return {path: spec_of(f) for path, f, _ in walk(cls)}


def before_values(cls: type) -> dict[str, Any]:
    """{dotted path: value} of each setting that declares `before`: what a run that predates it ran with."""
    return {path: spec.before for path, spec in _specs(cls).items() if spec.before is not NEW}


def from_flat_names(cls: type, stored: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's settings stored under plain flag names (before typed settings) -> dotted paths, for the
    names that are one field's; the others are dropped."""
    by_name: dict[str, list[str]] = {}
    for path, _, _ in walk(cls):
        by_name.setdefault(path.rsplit(".", 1)[-1], []).append(path)
    return {by_name[k][0]: v for k, v in stored.items() if len(by_name.get(k, ())) == 1}


def is_flat(stored: dict[str, Any]) -> bool:
    """Whether a checkpoint's stored settings predate typed settings (plain flag names, no dotted path)."""
    return bool(stored) and not any("." in k for k in stored)


def stored_values(cls: type, stored: dict[str, Any]) -> dict[str, Any]:
    """A run's stored settings (a checkpoint's {dotted path: value}, or the plain flag names of one written before
    typed settings) as `cls` reads them today: flat names at their fields' paths, older spellings as today's values,
    each setting the run predates at its `before`. Keys that are no field's (e.g. 'command') stay as they are."""
    specs = _specs(cls)
    values = before_values(cls) | (from_flat_names(cls, stored) if is_flat(stored) else dict(stored))
    return {k: specs[k].today(v) if k in specs else v for k, v in values.items()}


def resume_differences(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Whether a checkpoint's stored settings may continue as `current` (resume_config() and any extra keys), one 'path:
    checkpoint X, now Y' per setting that differs; [] when it may. The one resume rule, from the fields alone: settings
    free on resume are not compared, a setting the run predates counts as its `before`, older spellings as today's
    values, a file or model directory by the place it names (tasks.core.run_files.same_place: a path relative to the
    folder the run started in, or the same file now named from another folder), a moot setting (`moot_when`) only when
    it has an effect in the checkpoint or now (then by its own values, so a change to what makes it moot names that
    setting alone); of a checkpoint from before typed settings (flat names) only what it recorded or a `before` covers
    is asked. A plain dict (no settings class) must agree key for key. A setting the checkpoint lacks that declares no
    `before` is named as such, with where to declare it."""
    cls, newer = getattr(current, "cls", None), set()
    if cls is None:
        was, now, asked = dict(stored), dict(current), set(stored) | set(current)
    else:
        specs = _specs(cls)
        was = stored_values(cls, stored)
        now = {k: specs[k].today(v) if k in specs else v for k, v in current.items()}
        asked = set(was) if is_flat(stored) else set(was) | set(now)
        asked = {k for k in asked if k not in specs or specs[k].on_resume == "same"}
        moot_then = _moot(specs, was, now) | (set(now) - set(was))   # what the checkpoint lacks: as it is now
        asked -= moot_then & _moot(specs, now, now)   # of no effect then and now; moot on one side: its values compare
        if all(was.get(k) == now.get(k) for k in asked if k not in specs):    # the same command ('command': ...)
            newer = {k for k in asked if k not in was and k in specs and specs[k].before is NEW}   # no `before`
    return [f"{k}: the run predates this setting (now {now.get(k)!r}): declare before=VALUE, what runs ran with before "
            f"it existed, in its setting(...) ({_declared_in(cls, k)})" if k in newer else
            f"{k}: checkpoint {was.get(k)!r}, now {now.get(k)!r}" for k in sorted(asked) if was.get(k) != now.get(k)
            and not ((is_path_setting(k) or k == "training.model") and same_place(was.get(k), now.get(k)))]


def _declared_in(cls: type, path: str) -> str:
    """Where the setting at a dotted path is declared: its class and file (from the repository's root, inside it)."""
    for name in path.split(".")[:-1]:
        cls = typing.get_type_hints(cls)[name]                         # the section
    file = Path(inspect.getsourcefile(cls) or "?").resolve()
    return f"class {cls.__name__} in {file.relative_to(ROOT) if file.is_relative_to(ROOT) else file}"


def _moot(specs: dict[str, Spec], values: dict[str, Any], otherwise: dict[str, Any]) -> set[str]:
    """The settings of `values` whose moot_when holds there (a setting of that name at that value, taken from
    `otherwise` where `values` lacks it)."""
    by_name = {k.rsplit(".", 1)[-1]: v for k, v in (otherwise | values).items()}
    return {k for k in values if k in specs and specs[k].moot_when is not None
            and by_name.get(specs[k].moot_when[0], NEW) == specs[k].moot_when[1]}
