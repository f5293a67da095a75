"""Training on a student tree whose parts are not all written: say which function to write and how to check it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from .errors import UserError

ROOT = Path(__file__).resolve().parents[2]
# The assignment's group of each file students fill in: python -m assignments.check GROUP checks that group.
GROUP_OF_FILE = {"minbert/model.py": "core", "minbert/optim.py": "core", "tasks/classifier.py": "core",
                 "minbert/pooling.py": "core", "minbert/multitask.py": "multitask", "minbert/deebert.py": "deebert",
                 "minbert/smart.py": "smart", "minbert/pals.py": "pals", "minbert/simcse.py": "simcse"}
PART_OF_FILE = {"minbert/pooling.py": "classifier_head"}      # a file one part of its group grades: name that part
# The extension each extension file belongs to, for a tree whose profile leaves the extension to build (no checks).
EXTENSION_OF_FILE = {"minbert/deebert.py": "DeeBERT", "minbert/smart.py": "SMART", "minbert/pals.py": "PALs",
                     "minbert/simcse.py": "SimCSE", "minbert/pcgrad.py": "PCGrad",
                     "minbert/sentence_losses.py": "the sentence-embedding objectives", "minbert/bitfit.py": "BitFit",
                     "minbert/bitfit_controls.py": "BitFit", "minbert/bitfit_tasks.py": "BitFit"}


def unfinished_message(e: NotImplementedError) -> str | None:
    """For a stub's bare NotImplementedError raised in minbert/ or tasks/: which function to write; else None."""
    if e.args:
        return None
    found, tb = None, e.__traceback__
    while tb is not None:
        path = Path(tb.tb_frame.f_code.co_filename).resolve()
        if ROOT in path.parents and path.relative_to(ROOT).parts[0] in ("minbert", "tasks"):
            code = tb.tb_frame.f_code
            found = (getattr(code, "co_qualname", code.co_name), path.relative_to(ROOT).as_posix(), tb.tb_lineno)
        tb = tb.tb_next
    if found is None:
        return None
    name, rel, line = found
    name = name if "." in name else f"{name}()"
    group = GROUP_OF_FILE.get(rel, "")
    checked = group == "core" or (ROOT / "assignments" / f"checks_{group}.py").is_file()
    if rel in EXTENSION_OF_FILE and not checked:      # an extension this tree leaves to build: no checks for it
        return (f"{name} in {rel}:{line} is not written yet (it still raises NotImplementedError): {EXTENSION_OF_FILE[rel]} "
                "is an extension for you to build. Write it, or run without its flag.")
    part = {"core": "part 1", "multitask": "part 2"}.get(group, f"the {group} extension")
    if rel in PART_OF_FILE:
        part, group = f"{part} ({PART_OF_FILE[rel]})", PART_OF_FILE[rel]
    return (f"{name} in {rel}:{line} is not written yet (it still raises NotImplementedError): this run needs "
            f"{part} of the assignment. Write it, check it with  python -m assignments.check {group}".rstrip()
            + "  and run this again.")


class UnfinishedError(UserError):
    """A run reached a part of the assignment that is not written yet."""


@contextlib.contextmanager
def explain_unfinished() -> Iterator[None]:
    """Turn a stub's NotImplementedError into a one-paragraph exit message instead of a long traceback."""
    try:
        yield
    except NotImplementedError as e:
        message = unfinished_message(e)
        if message is None:
            raise
        raise UnfinishedError(message) from None
