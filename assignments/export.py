"""Gradescope's "Export Submissions": one folder per submission (submission_NNN/) and submission_metadata.yml, which
names each submission's students. The batch grader and the scoreboard skip the metadata and add its students'
names, emails and student ids to each row.

The metadata is YAML as Ruby writes it (keys are symbols, ":name:"):

    submission_123:
      :submitters:
      - :name: Ada Lovelace
        :sid: '001'
        :email: ada@example.edu
      :created_at: 2026-11-20 10:00:00.000000000 -08:00
      :score: 0.0

It is read with the standard library (PyYAML is no dependency of minbert), by a reader of this structure alone: each
top-level key is a submission, and of its keys only :submitters: is read (a list of :name:, :sid:, :email:); the
others (:history:, :results:, ...) are skipped whatever they hold. A file it cannot read raises MetadataError with
its line.
"""

from __future__ import annotations

import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

METADATA = "submission_metadata.yml"
COLUMNS = ("names", "emails", "sids")            # one cell each per submission, its submitters joined by SEPARATOR
SEPARATOR = "; "
FIELDS = {":name": "name", ":email": "email", ":sid": "sid"}
_ESCAPES = {"0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n", "v": "\v", "f": "\f", "r": "\r",
            "e": "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\", "N": "\x85", "_": "\xa0", "L": "\u2028",
            "P": "\u2029"}
_HEX = {"x": 2, "u": 4, "U": 8}
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")     # a CSV cell starting so is a formula in a spreadsheet
NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


class MetadataError(ValueError):
    """A metadata file this reader cannot read: says the file and the line."""


@dataclass(frozen=True)
class Submitter:
    """One student of a submission, as the export names them."""

    name: str = ""
    email: str = ""
    sid: str = ""


def _double_quoted(text: str) -> str:
    """The value of a double-quoted YAML scalar's inside (its escapes decoded); ValueError on a bad escape."""
    out, i = [], 0
    while i < len(text):
        if text[i] != "\\":
            out.append(text[i])
            i += 1
            continue
        code = text[i + 1: i + 2]
        if code in _ESCAPES:
            out.append(_ESCAPES[code])
            i += 2
        elif code in _HEX and re.fullmatch(r"[0-9a-fA-F]+", text[i + 2: i + 2 + _HEX[code]] or "-") and \
                len(text[i + 2: i + 2 + _HEX[code]]) == _HEX[code]:
            out.append(chr(int(text[i + 2: i + 2 + _HEX[code]], 16)))
            i += 2 + _HEX[code]
        else:
            raise ValueError(f"an escape this reader does not know: \\{code}")
    return "".join(out)


def scalar(text: str) -> str:
    """A one-line YAML scalar as text (quoted, plain, ~ or null); ValueError for what this reader does not read."""
    text = text.strip()
    if text.startswith("'"):
        m = re.fullmatch(r"'((?:[^']|'')*)'\s*(#.*)?", text)
        if not m:
            raise ValueError("a quoted value that does not end on its line")
        return m[1].replace("''", "'")
    if text.startswith('"'):
        m = re.fullmatch(r'"((?:[^"\\]|\\.)*)"\s*(#.*)?', text)
        if not m:
            raise ValueError("a quoted value that does not end on its line")
        return _double_quoted(m[1])
    text = re.split(r"\s#", text, maxsplit=1)[0].strip() if not text.startswith("#") else ""
    if text[:1] in ("|", ">", "&", "*", "!", "[", "{", "@", "`") and text != "[]":
        raise ValueError(f"a value this reader does not read: {text[:20]!r}")
    return "" if text in ("", "~", "null", "Null", "NULL", "[]") else text


def _key_value(text: str) -> tuple[str, str] | None:
    """(key, the rest) of 'key: value' or 'key:', the key's quotes removed; None when the text is no mapping entry."""
    m = re.match(r"""('(?:[^']|'')*'|"(?:[^"\\]|\\.)*"|[^\s'"#][^#]*?):(?:\s+(.*))?$""", text)
    if not m:
        return None
    key = m[1]
    return (scalar(key) if key[0] in "'\"" else key), (m[2] or "")


def _dash(body: str) -> bool:
    """Whether a line's text starts a list item ('- ...' or a lone '-')."""
    return body == "-" or body.startswith("- ")


def read_metadata(path: str | Path) -> dict[str, list[Submitter]]:
    """Each submission's students from an export's metadata; MetadataError, with the line, where it cannot read it."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise MetadataError(f"{path}: cannot read it ({e})") from None
    reader = _Reader()
    for number, line in enumerate(lines, 1):
        body = line.lstrip(" ").rstrip()
        if not body or body.startswith("#") or (line[:1] != " " and body in ("---", "...")):
            continue
        try:
            reader.line(len(line) - len(line.lstrip(" ")), body)
        except ValueError as e:
            raise MetadataError(f"{path}:{number}: {e}") from None
    return reader.found


class _Reader:
    """The state of read_metadata between lines: the submission read, its keys' indent, where its submitters are."""

    def __init__(self) -> None:
        self.found: dict[str, list[Submitter]] = {}
        self.current: list[Submitter] | None = None
        self.child: int | None = None            # the indent of the submission's keys
        self.in_list = False                     # after ':submitters:', until the list ends
        self.items: int | None = None            # the indent of the list's '- '
        self.keys_at: int | None = None          # the column of the current submitter's keys

    def line(self, indent: int, body: str) -> None:
        """Read one line (not blank, not a comment): its indent and its text."""
        if body.startswith("\t") and (self.child is None or indent <= self.child or self.in_list):
            raise ValueError("indented with a tab, which YAML does not allow")
        if indent == 0:                          # a submission: "submission_123:"
            entry = _key_value(body)
            if entry is None or scalar(entry[1]):
                raise ValueError(f"expected a submission's name and a colon, as in 'submission_123:', got {body!r}")
            if entry[0] in self.found:
                raise ValueError(f"{entry[0]} is named twice")
            self.current = self.found[entry[0]] = []
            self.child, self.in_list = None, False
            return
        if self.current is None:
            raise ValueError("an indented line before the first submission")
        self.child = indent if self.child is None else self.child
        if indent < self.child:
            raise ValueError(f"indented {indent} spaces, less than the {self.child} of the keys above it")
        if self.in_list and self.items is None:  # the line after ':submitters:': its first item, or no list at all
            self.in_list = _dash(body)
            self.items = indent if self.in_list else None
        if self.in_list and (indent > self.items or (indent == self.items and _dash(body))):
            self.submitter_line(indent, body)
            return
        self.in_list = False
        if indent > self.child or _dash(body):   # inside another key's value, or an item of its list: skipped
            return
        entry = _key_value(body)
        if entry is None:
            raise ValueError(f"expected a key and a colon, got {body!r}")
        if entry[0] == ":submitters":
            if entry[1].strip() not in ("", "[]"):
                raise ValueError("expected the submitters as a list below ':submitters:'")
            self.in_list, self.items, self.keys_at = entry[1].strip() == "", None, None

    def submitter_line(self, indent: int, body: str) -> None:
        """One line of the submitters' list: '- :name: ...' starts a submitter, ':sid: ...' below it goes on."""
        if indent == self.items and _dash(body):
            self.current.append(Submitter())
            rest = body[1:].lstrip(" ")
            self.keys_at = indent + len(body) - len(rest) if rest else None    # a bare '-': the next line's column
            if rest:
                self.field(rest)
        elif self.keys_at is None and indent > self.items:                  # the first key after a bare '-'
            self.keys_at = indent
            self.field(body)
        elif self.keys_at is None or indent < self.keys_at:
            raise ValueError(f"expected a submitter's key (':name:', ':email:', ':sid:') at column {self.keys_at}, "
                             f"got {body!r}")
        elif indent == self.keys_at:
            self.field(body)                     # deeper: the rest of a value this reader skips

    def field(self, text: str) -> None:
        """A submitter's 'key: value'; :name:, :email: and :sid: are kept."""
        entry = _key_value(text)
        if entry is None:
            raise ValueError(f"expected ':name: ...', ':email: ...' or ':sid: ...' in a submitter, got {text!r}")
        if entry[0] in FIELDS:
            self.current[-1] = Submitter(**{**asdict(self.current[-1]), FIELDS[entry[0]]: scalar(entry[1])})


def cells(submitters: list[Submitter]) -> dict[str, str]:
    """A row's columns (names, emails, sids) for a submission's submitters, each joined by SEPARATOR."""
    return {"names": SEPARATOR.join(s.name for s in submitters), "emails": SEPARATOR.join(s.email for s in submitters),
            "sids": SEPARATOR.join(s.sid for s in submitters)}


def students(folder: str | Path) -> dict[str, dict[str, str]] | None:
    """An export's cells (COLUMNS) by submission; None when no METADATA, or one it cannot read (said on stderr)."""
    path = Path(folder) / METADATA
    if not path.is_file():
        return None
    try:
        return {name: cells(who) for name, who in read_metadata(path).items()}
    except MetadataError as e:
        print(f"warning: {e}; no students' names are read from it", file=sys.stderr)
        return None


def cells_for(by_name: dict[str, dict[str, str]], entry: str) -> dict[str, str]:
    """The cells of an export's entry (submission_123 or submission_123.zip); blank when the metadata lacks it."""
    found = by_name.get(entry) or by_name.get(entry.removesuffix(".zip"))
    return found or dict.fromkeys(COLUMNS, "")


def safe_cell(value: object) -> object:
    """A CSV cell a spreadsheet reads as text, not as a formula (OWASP's CSV injection advice): a text starting with
    = + - @ a tab or a carriage return, or with a quote, gets a quote before it (read_cell takes it off); numbers,
    and texts that are plain numbers (-0.25), stay as they are."""
    if not isinstance(value, str) or NUMBER.fullmatch(value) or not value.startswith((*FORMULA_START, "'")):
        return value
    return "'" + value


def read_cell(text: object) -> object:
    """A cell as it was before safe_cell."""
    return text[1:] if isinstance(text, str) and text.startswith("'") else text
