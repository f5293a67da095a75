"""The progress bars of training, dev evaluation and prediction: one tqdm on stderr, drawn as tqdm draws it on a
terminal; where stderr is not one (a log file, a CI page, the notebook's pipe), redrawn at most every
PIPED_SECONDS, so that a run writes tens of redraws, not one per step (TQDM_MININTERVAL, where set, decides instead).

Within `showing(desc, enabled)`, the one prediction loop (evaluation.predict_batches) shows a bar named desc over its
batches: fit() shows "dev" over the dev evaluation, the commands "dev" or "test" over the files they write.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from tqdm import tqdm

PIPED_SECONDS = 30.0       # a bar's fewest seconds between redraws where stderr is not a terminal

_SHOWN: ContextVar[str | None] = ContextVar("progress_desc", default=None)


def progress_bar(desc: str, total: int | None, enabled: bool) -> tqdm:
    """A bar on stderr, cleared when closed (leave=False); throttled to PIPED_SECONDS off a terminal."""
    piped = not sys.stderr.isatty() and "TQDM_MININTERVAL" not in os.environ
    throttle = {"mininterval": PIPED_SECONDS, "maxinterval": PIPED_SECONDS} if piped else {}
    return tqdm(desc=desc, total=total, disable=not enabled, leave=False, file=sys.stderr, **throttle)


@contextmanager
def showing(desc: str, enabled: bool = True) -> Iterator[None]:
    """Within the block, predict_batches shows a bar named desc over its batches (none where enabled is false)."""
    token = _SHOWN.set(desc if enabled else None)
    try:
        yield
    finally:
        _SHOWN.reset(token)


def shown() -> str | None:
    """The name of the bar predict_batches shows here (None: no bar)."""
    return _SHOWN.get()
