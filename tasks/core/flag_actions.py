"""The argparse parts of the flags tasks/core/settings.py generates: list and switch actions, `none` for an optional
setting, how a default is shown in --help."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


def shown(value: Any) -> str:
    """A default as --help shows it (a list comma-separated, None as none)."""
    if isinstance(value, list):
        return ",".join(map(str, value)) if value else "none"
    return "none" if value is None else str(value)


class ListAction(argparse.Action):
    """`--f a,b,c`, `--f a b c` and `--f a,b c` give the same list, each item parsed."""

    def __init__(self, option_strings: list[str], dest: str, item: Callable[[str], Any] = str, joined: bool = False,
                 optional: bool = False, **kwargs):
        self.item, self.joined, self.optional = item, joined, optional
        super().__init__(option_strings, dest, nargs="+", **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if self.optional and [value.strip().lower() for value in values] == ["none"]:   # switched off, as null is
            setattr(namespace, self.dest, None)
            return
        parts = [part.strip() for value in values for part in value.split(",") if part.strip()]
        if not parts:
            parser.error(f"{option_string}: give at least one value")
        try:
            items = [self.item(part) for part in parts]
        except (argparse.ArgumentTypeError, ValueError) as e:
            parser.error(f"{option_string}: {e}")
        setattr(namespace, self.dest, ",".join(map(str, items)) if self.joined else items)


class Switch(argparse.Action):
    """A boolean setting's two spellings, `--x` (true) and `--no-x` (false), today's first; the last one given wins."""

    def __init__(self, option_strings: list[str], dest: str, on: str, **kwargs):
        self.on = on
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, option_string == self.on)


def or_none(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """A parser that also takes 'none' (a setting that may be switched off, such as --warmup-ratio none)."""
    def parse_or_none(text: str) -> Any:
        return None if text.strip().lower() == "none" else parse(text)
    parse_or_none.__name__ = getattr(parse, "__name__", "value")
    return parse_or_none


class OrNone(tuple):
    """An optional setting's choices: `none` among them as argparse lists them; its value, None, is one."""

    def __contains__(self, value: object) -> bool:
        return value is None or tuple.__contains__(self, value)


def states_default(help: str) -> bool:
    """Whether a help text says its default itself ("(default: x)", "Default: x", "no default"), not merely uses the
    word ("the offline default", "default lr 0.001")."""
    text = help.lower()
    return "default:" in text or "no default" in text
