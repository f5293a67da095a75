"""Typed settings: a command's settings are one dataclass, its flags are generated from the fields, and a run can be
written down as a JSON config file and read back.

Each field is declared once with `setting(...)`: its default, its help text, its check (a parser from the
command line's text, also applied to a config file's values) and what a resumed run may do with it
(on_resume="same": the run continues only with the value it started with; "free": it says where the run writes,
how it shows progress or what hardware it uses, and may change), the value runs had before it existed (`before`,
what a resume of an older run assumes for it) and any older spellings of its values (`legacy`). These are the one
resume rule: tasks/core/resume.py decides from them alone whether a checkpoint may continue.
A field whose type is a dataclass is a section:
its flags join the same command line (flat, as they have always been spelt), its values nest in the JSON.

    @dataclass
    class Settings:
        task: str = setting("sst", help="which task", choices=("sst", "cfimdb"))
        recipe: Recipe = section(Recipe)

    settings = parse(Settings, argv, prog="python -m tasks.x", description=__doc__)

`--config FILE` reads a JSON file of settings (flags on the command line override it), `--print-config` prints the
full settings as that JSON and exits; dump() and load() are the same two ways in code. Parsing a hand-written file
reports the file and the setting that is wrong, as a flag's error names the flag. Written by hand rather than with a
kept library (jsonargparse, tyro, simple-parsing): the CLIs keep every flag spelling in use (aliases, `--no-X`
switches, comma lists, the course's starter spellings) and the student's requirements stay torch and tokenizers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import types
import typing
from collections.abc import Callable, Collection, Sequence
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from .config_files import read_json
from .errors import ConfigurationError
from .flag_actions import ListAction, OrNone, Switch, or_none, shown, states_default
from .run_files import located, replayed

ON_RESUME = ("same", "free")
NEW = object()              # before=NEW: the setting has existed since run directories have (no older value to assume)


@dataclass(frozen=True)
class Spec:
    """How one field appears on the command line and in a config file (the metadata of `setting`)."""

    help: str
    flags: tuple[str, ...] = ()             # spellings; default `--the-name`; for a switch that defaults to True `--no-the-name`
    parse: Callable[[str], Any] | None = None   # text -> value, raising argparse.ArgumentTypeError; the field's check
    choices: tuple | None = None
    metavar: str | None = None
    on_resume: str = "same"
    item: Callable[[str], Any] | None = None    # a list field: each item's parser (`--f a,b c`, ListAction)
    in_config: bool = True                  # False: an action (--resume), not part of what the run is
    before: Any = NEW                       # the value runs had before the setting existed (what a resume assumes)
    legacy: tuple[tuple[str, Any], ...] = ()    # (older spelling, today's value): read as today's everywhere
    moot_when: tuple[str, Any] | None = None    # (setting name, value): this one has no effect then (not compared)

    def today(self, value: Any) -> Any:
        """A value with an older spelling read as today's (e.g. --optimizer minbert as torch)."""
        return dict(self.legacy).get(value, value) if isinstance(value, str) else value


def setting(default: Any = MISSING, *, help: str, flags: Sequence[str] = (), parse: Callable[[str], Any] | None = None,
            choices: Sequence | None = None, metavar: str | None = None, on_resume: str = "same",
            item: Callable[[str], Any] | None = None, in_config: bool = True,
            default_factory: Callable[[], Any] | None = None, before: Any = NEW, legacy: dict[str, Any] | None = None,
            moot_when: tuple[str, Any] | None = None) -> Any:
    """A dataclass field with its help text, flag spellings, check and resume rule: on_resume="same" or "free";
    `before`, the value a run written before the setting existed ran with (a resume of such a run compares with it);
    `legacy`, {older spelling: today's value}, read from flags, config files, run.json and checkpoints alike;
    `moot_when` (name, value): when the run's setting of that name has that value this one has no effect, and a
    resume does not compare it."""
    if on_resume not in ON_RESUME:
        raise ValueError(f"on_resume must be one of {ON_RESUME}, not {on_resume!r}")
    spec = Spec(help, tuple(flags), parse, tuple(choices) if choices is not None else None, metavar, on_resume, item,
                in_config, before, tuple((legacy or {}).items()), moot_when)
    if default_factory is not None:
        return field(default_factory=default_factory, metadata={"setting": spec})
    return field(default=default, metadata={"setting": spec})


def section(cls: type) -> Any:
    """A field holding another settings dataclass at its defaults."""
    return field(default_factory=cls)


def dropped() -> Any:
    """Redeclares, in a subclass, an inherited setting that does not apply to this command: it has no flag and is
    not part of the command's settings (the attribute stays, None)."""
    return field(default=None, init=False, repr=False, compare=False, metadata={"dropped": True})


def _fields(cls_or_settings: Any) -> list[dataclasses.Field]:
    """The dataclass's fields but the dropped() ones."""
    return [f for f in fields(cls_or_settings) if not f.metadata.get("dropped")]


def spec_of(f: dataclasses.Field) -> Spec:
    if "setting" not in f.metadata:
        raise TypeError(f"field {f.name!r} is neither a setting(...) nor a section: declare its help text")
    return f.metadata["setting"]


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _is_section(tp: Any) -> bool:
    return isinstance(tp, type) and is_dataclass(tp)


def _base(tp: Any) -> tuple[Any, bool]:
    """The type a value has, and whether None is allowed too (`float | None`)."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0], True
    return tp, False


def walk(cls: type, prefix: str = "") -> list[tuple[str, dataclasses.Field, Any]]:
    """Every leaf field of a settings class as (dotted path, field, type), sections expanded in order."""
    out = []
    hints = _hints(cls)
    for f in _fields(cls):
        tp = hints[f.name]
        if _is_section(tp):
            out += walk(tp, f"{prefix}{f.name}.")
        else:
            spec_of(f)
            out.append((f"{prefix}{f.name}", f, tp))
    return out


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default is MISSING and f.default_factory is not MISSING else f.default


def _flags(path: str, f: dataclasses.Field, tp: Any) -> list[str]:
    spec = spec_of(f)
    if spec.flags:
        return list(spec.flags)
    name = f.name.replace("_", "-")
    return [f"--no-{name}" if _base(tp)[0] is bool and _default(f) is True else f"--{name}"]


def add_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """A flag for every leaf field of `cls` (dest = its dotted path); each section becomes an argument group."""
    groups: dict[str, Any] = {}
    hints = _hints(cls)
    for f in _fields(cls):
        tp = hints[f.name]
        if _is_section(tp):
            doc = (tp.__doc__ or "").strip().splitlines()
            group = groups.setdefault(f.name, parser.add_argument_group(f.name, doc[0] if doc else None))
            for path, leaf, leaf_tp in walk(tp, f"{f.name}."):
                _add_flag(group, path, leaf, leaf_tp)
        else:
            _add_flag(parser, f.name, f, tp)


def _read_legacy(spec: Spec, parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """The field's parser, an older spelling read as today's value first."""
    if not spec.legacy:
        return parse

    def parse_today(text: str) -> Any:
        return parse(spec.today(text))
    parse_today.__name__ = getattr(parse, "__name__", "value")
    return parse_today


def _add_flag(parser: Any, path: str, f: dataclasses.Field, tp: Any, default: Any = argparse.SUPPRESS) -> None:
    spec = spec_of(f)
    base, optional = _base(tp)
    kw: dict[str, Any] = {"dest": path, "default": default}
    default = _default(f)
    help = spec.help
    flags = _flags(path, f, tp)
    if base is bool:
        kw["action"] = "store_false" if default is True else "store_true"
        if not spec.flags and spec.in_config:           # and the other spelling, to undo a file's or a run's value
            name = f.name.replace("_", "-")
            flags.append(f"--{name}" if default is True else f"--no-{name}")
            kw["action"], kw["on"] = Switch, flags[1] if default is True else flags[0]
            help += f" ({flags[1]}: the opposite)"
    else:
        if typing.get_origin(base) is list:
            kw["action"], kw["item"], kw["optional"] = ListAction, spec.item or typing.get_args(base)[0], optional
        elif spec.item is not None:                      # a string of comma-separated items, `a,b` or `a b`
            kw["action"], kw["item"], kw["joined"], kw["optional"] = ListAction, spec.item, True, optional
        else:
            parse = _read_legacy(spec, spec.parse or base)
            kw["type"] = or_none(parse) if optional else parse
        if spec.choices is not None:
            kw["choices"] = OrNone((*spec.choices, "none")) if optional else spec.choices
        if spec.metavar is not None or spec.choices is None:
            kw["metavar"] = spec.metavar or f.name.upper()
        if not states_default(help):
            help += f" (default: {shown(default)}{'; none switches it off' if optional and default is not None else ''})"
    parser.add_argument(*flags, help=help, **kw)


def check_value(path: str, f: dataclasses.Field, tp: Any, value: Any, source: str) -> Any:
    """A config file's value for a field, checked as the flag's text would be; an error names the file and setting."""
    spec = spec_of(f)
    base, optional = _base(tp)

    def bad(why: str) -> ConfigurationError:
        return ConfigurationError(f"{source}: setting {path!r}: {why}")

    if value is None:
        if optional:
            return None
        raise bad("may not be null")
    if base is bool:
        if not isinstance(value, bool):
            raise bad(f"must be true or false, not {value!r}")
        return value
    kind = base                                          # what each JSON value must be (a list: each item)
    if typing.get_origin(base) is list:
        if not isinstance(value, list):
            raise bad(f"must be a list, not {value!r}")
        if not value:                                    # as the flag refuses `--f ""`
            raise bad(f"give at least one value{' (or null: none)' if optional else ''}")
        kind = typing.get_args(base)[0]
        parse = spec.item or kind
        items = value
    elif spec.item is not None:                          # a string of comma-separated items
        if not isinstance(value, str):
            raise bad(f"must be a string of comma-separated items, not {value!r}")
        parse, items = spec.item, [v.strip() for v in value.split(",") if v.strip()]
        if not items:
            raise bad("give at least one item")
    else:
        if isinstance(value, (dict, list)) or (base in (int, float) and isinstance(value, bool)):
            raise bad(f"must be a {base.__name__}, not {value!r}")
        parse, items = spec.parse or base, [value]
    out = []
    for v in items:
        if base is str and not isinstance(v, str):
            raise bad(f"must be a string, not {v!r}")
        if kind in (int, float) and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise bad(f"must be a number, not {v!r}")      # "3" is not 3: a JSON string is the wrong type
        try:
            checked = parse(spec.today(str(v)))
        except (argparse.ArgumentTypeError, ValueError, TypeError) as e:
            raise bad(str(e)) from None
        if spec.choices is not None and checked not in spec.choices:
            raise bad(f"must be one of {', '.join(map(str, spec.choices))}, not {v!r}")
        out.append(checked)
    if spec.item is not None and base is str:
        return ",".join(map(str, out))
    return out if typing.get_origin(base) is list else out[0]


def flatten(cls: type, data: dict, source: str, prefix: str = "", trusted: bool = False) -> dict[str, Any]:
    """A (nested) JSON object of settings -> {dotted path: checked value}; unknown keys are an error. `trusted`: a
    run's own record (dump() wrote it): values taken as written, older spellings read as today's, not checked again
    (a file it names may have moved since)."""
    if not isinstance(data, dict):
        raise ConfigurationError(f"{source}: {prefix.rstrip('.') or 'the file'} must be a JSON object of settings")
    hints, known = _hints(cls), {f.name: f for f in _fields(cls)}
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key not in known:
            raise ConfigurationError(f"{source}: unknown setting {prefix + key!r}; known here: "
                                     f"{', '.join(sorted(known))}")
        f, tp = known[key], hints[key]
        if _is_section(tp):
            out |= flatten(tp, value, source, f"{prefix}{key}.", trusted)
        elif spec_of(f).in_config:
            out[prefix + key] = spec_of(f).today(value) if trusted else check_value(prefix + key, f, tp, value, source)
        elif not trusted:                                # dropped, the command would do other than the file says
            raise an_action(prefix + key, f, tp, source)
    return out


def an_action(path: str, f: dataclasses.Field, tp: Any, source: str) -> ConfigurationError:
    """The error for an action (in_config=False, such as run.resume) given in a file: it is the command line's."""
    spec, flag = spec_of(f), _flags(path, f, tp)[0]
    value = f" {spec.metavar or f.name.upper()}" if _base(tp)[0] is not bool else ""
    return ConfigurationError(f"{source}: {path!r} is an action, not a setting: give {flag}{value} on the command line")


def build(cls: type, values: dict[str, Any], prefix: str = "") -> Any:
    """The settings object from {dotted path: value}; fields absent there take their defaults."""
    hints, kw = _hints(cls), {}
    for f in _fields(cls):
        tp = hints[f.name]
        if _is_section(tp):
            kw[f.name] = build(tp, values, f"{prefix}{f.name}.")
        elif prefix + f.name in values:
            kw[f.name] = values[prefix + f.name]
    return cls(**kw)


def dump(settings: Any) -> dict:
    """The settings as plain JSON values, nested by section (what --print-config prints and run.json holds)."""
    out = {}
    for f in _fields(settings):
        value = getattr(settings, f.name)
        if is_dataclass(value):
            out[f.name] = dump(value)
        elif spec_of(f).in_config:
            out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


def load(cls: type, data: dict, source: str = "settings") -> Any:
    """dump()'s inverse, each value checked as its flag would be."""
    return build(cls, flatten(cls, data, source))


def read_config(path: str | Path, cls: type, replaced: Collection[str] = ()) -> dict[str, Any]:
    """A JSON config file -> {dotted path: checked value}; a syntax error names the file, line and column. Of a
    run.json, the settings in `replaced` (the flags given beside it) are left out: tasks.core.run_files.replayed."""
    path = Path(os.path.expanduser(path))       # ~name of no user stays a name (pathlib's expanduser raises)
    data = read_json(path)
    if isinstance(data, dict) and "settings" in data and "command" in data:   # a run.json
        data = replayed(located(data, path.parent), str(path), replaced)   # relative paths from where it ran
    return flatten(cls, data, str(path))


def leaves(settings: Any) -> dict[str, Any]:
    """{dotted path: value} of every leaf setting of a settings object."""
    return dict(_leaves(settings))


def _leaves(settings: Any, prefix: str = "") -> list[tuple[str, Any]]:
    out = []
    for f in _fields(settings):
        value = getattr(settings, f.name)
        out += _leaves(value, f"{prefix}{f.name}.") if is_dataclass(value) else [(prefix + f.name, value)]
    return out


def parser_for(cls: type, prog: str, description: str | None) -> argparse.ArgumentParser:
    """The command's parser: its settings' flags, then --config and --print-config."""
    p = argparse.ArgumentParser(prog=prog, description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p, cls)
    p.add_argument("--config", metavar="FILE", default=None,
                   help="read the settings from this JSON file (as --print-config writes it, or a run directory's "
                        "run.json); flags given beside it override it")
    p.add_argument("--print-config", action="store_true",
                   help="print the full settings as JSON (a file --config takes) and exit without running")
    return p


def parse(cls: type, argv: Sequence[str] | None, prog: str, description: str | None = None,
          base: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
          finish: Callable[[Any], Any] | None = None) -> Any:
    """The settings from defaults < `base` (e.g. a resumed run's run.json) < --config FILE < flags.

    base(given) gets what the command line gave, {dotted path: value} (no defaults applied), and returns
    {dotted path: value} to start from; finish(settings), the settings built, returns the ones the command uses (a
    replayed run.json's paths left out). With --print-config those are printed as JSON and the process exits 0.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = parser_for(cls, prog, description)
    given = vars(parser.parse_args(argv))
    config, print_config = given.pop("config"), given.pop("print_config")
    values: dict[str, Any] = base(given) if base is not None else {}
    if config is not None:
        values |= read_config(config, cls, replaced=set(given))
    settings = build(cls, values | given)
    if finish is not None:
        settings = finish(settings)
    if print_config:
        print(json.dumps(dump(settings), indent=2))
        raise SystemExit(0)
    return settings
