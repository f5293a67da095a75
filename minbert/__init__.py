"""minbert: a from-scratch, readable BERT that loads public checkpoints and carries research extensions."""

from __future__ import annotations

# The version check comes first and in syntax that Python 3.8 still parses, so that an older Python gets this one
# line instead of a SyntaxError or a TypeError from deep inside (every command and script imports minbert).
import sys as _sys

MIN_PYTHON = (3, 10)


def require_python(version: tuple[int, ...] | None = None) -> None:
    """Exit with one line when this Python (or the given version tuple) is older than MIN_PYTHON."""
    version = tuple(_sys.version_info[:3] if version is None else version)
    if version < MIN_PYTHON:
        need, have = ".".join(map(str, MIN_PYTHON)), ".".join(map(str, version))
        raise SystemExit(f"minbert needs Python {need} or newer; this is {have}")


require_python()

from .checkpoint import CheckpointError, load_pretrained, save_pretrained
from .config import BertConfig
from .model import BertModel, BertOutput, attention
from .optim import AdamW
from .tokenizer import Batch, Tokenizer

__all__ = [
    "AdamW", "Batch", "BertConfig", "BertModel", "BertOutput", "CheckpointError", "Tokenizer",
    "attention", "load_pretrained", "save_pretrained",
]
__version__ = "0.1.0"
