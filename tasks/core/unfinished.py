"""Training on a student tree whose parts are not all written: say which function to write and how to check it.

run_cli (tasks/core/errors.py), the wrapper of every `python -m tasks.X`, turns a stub's bare NotImplementedError
into unfinished_message's line: `error: NAME in FILE:LINE is not written yet ...`, exit status 1, no traceback.
"""

from __future__ import annotations

from pathlib import Path

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
# What to run instead of an extension's flag, where the tree's assignment does not include the extension.
INSTEAD = {"BitFit": "--fine-tune-mode full-model or last-linear-layer"}


def unfinished_message(e: NotImplementedError) -> str | None:
    """For a stub's bare NotImplementedError, raised by a function of minbert/ or tasks/ itself: which function to
    write; else None (a library's NotImplementedError keeps its traceback, even when minbert's code called it)."""
    tb = e.__traceback__
    if e.args or tb is None:
        return None
    while tb.tb_next is not None:                    # the frame that raised it: the stub's own
        tb = tb.tb_next
    path = Path(tb.tb_frame.f_code.co_filename).resolve()
    if ROOT not in path.parents or path.relative_to(ROOT).parts[0] not in ("minbert", "tasks"):
        return None
    code = tb.tb_frame.f_code
    name, rel, line = getattr(code, "co_qualname", code.co_name), path.relative_to(ROOT).as_posix(), tb.tb_lineno
    name = name if "." in name else f"{name}()"
    group = GROUP_OF_FILE.get(rel, "")
    checked = group == "core" or (ROOT / "assignments" / f"checks_{group}.py").is_file()
    if rel in EXTENSION_OF_FILE and not checked and not (ROOT / "assignments" / "checks_multitask.py").is_file():
        # a tree of part 1 alone (no part 2, which the extensions build on): it carries the extension's skeleton
        # only so that the given commands' flags parse; its handout sets no such work
        extension = EXTENSION_OF_FILE[rel]
        instead = f" ({INSTEAD[extension]})" if extension in INSTEAD else ""
        return (f"{name} in {rel}:{line} is not written yet (it still raises NotImplementedError): it is part of "
                f"{extension}, which is not part of this assignment. Run without its flag{instead}.")
    if rel in EXTENSION_OF_FILE and not checked:      # an extension this tree leaves to build: no checks for it
        return (f"{name} in {rel}:{line} is not written yet (it still raises NotImplementedError): it is part of "
                f"{EXTENSION_OF_FILE[rel]}, an extension for you to build. Write it, or run without its flag.")
    part = {"core": "part 1", "multitask": "part 2"}.get(group, f"the {group} extension")
    if rel in PART_OF_FILE:
        part, group = f"{part} ({PART_OF_FILE[rel]})", PART_OF_FILE[rel]
    return (f"{name} in {rel}:{line} is not written yet (it still raises NotImplementedError): this run needs "
            f"{part} of the assignment. Write it, check it with  python -m assignments.check {group}".rstrip()
            + "  and run this again.")

