"""The one reader of the project's hand-written JSON (--config files, space files, run.json): strict where json.loads is
lenient, so that a file says what it means or is refused with one line naming the file.

A key given twice in one object is refused (json.loads keeps the last one silently: a learning rate written above
the file's own `"lr": null` would be dropped), naming the dotted key and its line. The text must be UTF-8 (a UTF-8
BOM, as Windows editors write it, is accepted, as the task readers accept it); a file saved in another encoding is
one line saying so, as are a missing or unreadable file and a syntax error (with its line and column).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import ConfigurationError


class _Twice(Exception):
    """A key given twice somewhere in the text (json.loads' hook cannot say where: _locate finds it)."""


def _refuse_twice(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _Twice
    return out


class _Found(Exception):
    """_locate's answer: (dotted key, offset)."""


def read_json(path: str | Path, what: str = "config file") -> Any:
    """A JSON file's value; a missing or unreadable file, text that is not UTF-8, a syntax error (with its line and
    column) or a key given twice (with the dotted key and its line) is one line naming the file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigurationError(f"{path}: no such {what}") from None
    except OSError as e:
        raise ConfigurationError(f"{path}: cannot read the {what} ({e.strerror})") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ConfigurationError(f"{path}: not UTF-8 text (byte 0x{data[e.start]:02x} on line {line}); save it as "
                                 "UTF-8") from None
    try:
        return json.loads(text, object_pairs_hook=_refuse_twice)
    except json.JSONDecodeError as e:
        raise ConfigurationError(f"{path}:{e.lineno}:{e.colno}: not valid JSON ({e.msg})") from None
    except _Twice:
        key, at = _locate(text)
        raise ConfigurationError(f"{path}:{text.count(chr(10), 0, at) + 1}: key {key!r} given twice (the last would "
                                 "silently win); keep one") from None


def _locate(text: str) -> tuple[str, int]:
    """(dotted key, offset) of the first key given twice in valid JSON text: a walk that knows where it is."""
    decoder, space = json.JSONDecoder(), " \t\r\n"

    def skip(pos: int) -> int:
        while text[pos] in space:
            pos += 1
        return pos

    def value(pos: int, where: str) -> int:                # returns the offset after the value at pos
        pos = skip(pos)
        if text[pos] not in "{[":
            return decoder.raw_decode(text, pos)[1]
        close, seen, i = "}" if text[pos] == "{" else "]", set(), 0
        pos = skip(pos + 1)
        while text[pos] != close:
            if close == "}":
                key, end = json.decoder.scanstring(text, pos + 1)
                dotted = f"{where}.{key}" if where else key
                if key in seen:
                    raise _Found(dotted, pos)
                seen.add(key)
                pos = value(skip(end) + 1, dotted)            # past the ':'
            else:
                pos, i = value(pos, f"{where}[{i}]"), i + 1
            pos = skip(pos)
            pos = skip(pos + 1) if text[pos] == "," else pos
        return pos + 1

    try:
        value(0, "")
    except _Found as found:
        return found.args
    raise AssertionError("no key given twice")             # _refuse_twice found one: unreachable
