"""Grading on hidden inputs, judged outside the student's process.

The grader draws every fixture a graded part loads from a seed only the instructor holds (hidden_fixture), with
the reference code: the inputs, the expected outputs and the common mistakes' outputs. The process that runs the
student's code gets the inputs alone (the expected keys as zeros of their shape: student_view), runs each check
with a Recorder as common.SESSION, and hands back, as a safetensors file, what each compare() was given: tensors
as data, no verdict. The grader's own process, which never imports student code, then replays the same check on
the reference with a Replayer: each compare() takes the student's recorded result in place of the reference's
and judges it against the hidden expected values. Whatever the student's process prints, writes, patches, raises
or exits with, only the recorded tensors reach the judgement, and they must match values it never saw.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import torch

from . import common
from .adamw_problem import ADAMW_SOMETIMES
from .common import Fail, Session, judge, not_a_tensor
from .record import MAX_RECORD_BYTES, MAX_RECORDS, MAX_TEXT, RECORD_KEY

# The keys of each fixture that the student's process may read (with every "param." key): the questions. The
# other keys (the expected outputs and the mistakes' outputs) reach it as zeros of their shape and dtype.
INPUTS = {
    "attention": ("q", "k", "v", "mask", "dropout_p"),
    "embeddings": ("input_ids", "token_type_ids"),
    "layer": ("x", "mask", "parallel_A"),
    "model": ("input_ids", "attention_mask", "token_type_ids"),
    "adamw": ("init_0", "init_1", "init_2", "init_3", *(f"grad_{t}_{i}" for t in range(5) for i in range(3)
                                                        if not (i == ADAMW_SOMETIMES[0] and t in ADAMW_SOMETIMES[1])),
              "course_seed"),
    "classifier_head": ("hidden", "pooled", "input_ids", "attention_mask"),
    "multitask": ("input_ids_1", "attention_mask_1", "input_ids_2", "attention_mask_2", "long_ids_1", "long_mask_1",
                  "long_ids_2", "long_mask_2", "sentence_h0", "joined_h0", "joined_ids", "joined_mask",
                  "joined_types", "feat_sst", "feat_bi", "feat_cross"),
    "multitask_losses": ("sst_logits", "sst_labels", "para_logit", "para_labels", "sts_score", "sts_gold"),
    "deebert_entropy": ("logits",),
    "deebert_exit": ("input_ids", "attention_mask", "thresholds"),
    "smart": ("kl_p", "kl_q", "delta_0", "delta_1", "grad_0", "grad_1", "eta", "epsilon"),
    "pals": ("z", "mask", "x", "pal_A_0", "pal_A_1"),
    "simcse": ("z1", "z2", "temperature", "e1", "e2", "y", "margin_cosine", "margin_euclidean"),
}


def sub_seed(seed: int, name: str, attempt: int = 0) -> int:
    """The generator seed of one fixture: a hash of the grading seed, the fixture's name and the attempt."""
    digest = hashlib.sha256(f"{seed}\0{name}\0{attempt}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def _builders() -> dict[str, Callable[[torch.Generator], dict[str, torch.Tensor]]]:
    from . import make_fixtures as mf
    from .make_fixtures_ext import EXTENSION_FIXTURES
    return {"attention": mf.attention_fixture, "embeddings": mf.embeddings_fixture, "layer": mf.layer_fixture,
            "model": mf.model_fixture, "adamw": mf.adamw_fixture, "classifier_head": mf.classifier_head_fixture,
            "multitask": mf.multitask_fixture, "multitask_losses": mf.multitask_losses_fixture, **EXTENSION_FIXTURES}


def hidden_fixture(name: str, seed: int) -> dict[str, torch.Tensor]:
    """The fixture `name` drawn from the grading seed by the reference code (its builder in make_fixtures); a copy of
    the one drawn before in this process for the same seed (a batch grades every submission on the same inputs)."""
    return {k: v.clone() for k, v in _drawn(name, seed).items()}


@functools.lru_cache(maxsize=64)
def _drawn(name: str, seed: int, attempts: int = 20) -> dict[str, torch.Tensor]:
    """hidden_fixture, drawn: a builder that rejects its draw (an assert about its spread) gets the next sub-seed."""
    build = _builders()[name]
    for attempt in range(attempts):
        try:
            return build(torch.Generator().manual_seed(sub_seed(seed, name, attempt)))
        except (AssertionError, SystemExit):
            continue
    raise RuntimeError(f"the {name} fixture rejected {attempts} draws from this grading seed; try another seed")


def is_input(name: str, key: str) -> bool:
    return key.startswith("param.") or key in INPUTS[name]


def student_view(name: str, fixture: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """What the student's process may see of a fixture: its inputs, and zeros where the answers are."""
    return {k: v if is_input(name, k) else torch.zeros_like(v) for k, v in fixture.items()}


def write_inputs(directory: Path, fixtures: dict[str, dict[str, torch.Tensor]]) -> None:
    """Each fixture's student_view as directory/NAME.safetensors, readable by the student's process."""
    from safetensors.torch import save_file
    directory.mkdir(parents=True, exist_ok=True)
    for name, fixture in fixtures.items():
        path = directory / f"{name}.safetensors"
        save_file({k: v.detach().contiguous() for k, v in student_view(name, fixture).items()}, path)
        os.chmod(path, 0o644)                # safetensors writes 0600; the student's user reads it


# ---------------------------------------------------------------- the grader's process: read and replay

class Record:
    """One part's record as read back: the entries, their tensors, and the status the part's process reported."""

    def __init__(self, entries: list[dict], tensors: dict[str, torch.Tensor], status: str, message: str):
        self.entries, self.tensors, self.status, self.message = entries, tensors, status, message


class BadRecord(Exception):
    """A record file that is not what Recorder.save writes; the message says what is wrong with it."""


STATUSES = ("pass", "fail", "error", "not started")


def read_record(path: Path) -> Record:
    """A part's record, read as data (safetensors and JSON), or BadRecord saying why it cannot be used."""
    from safetensors import safe_open
    size = path.stat().st_size
    if size > MAX_RECORD_BYTES:
        raise BadRecord(f"the part's process returned {size} bytes, more than any check needs")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = json.loads((f.metadata() or {}).get(RECORD_KEY, "null"))
            keys = set(f.keys())
            ok = (isinstance(meta, dict) and meta.get("status") in STATUSES and isinstance(meta.get("message"), str)
                  and isinstance(meta.get("records"), list) and len(meta["records"]) <= MAX_RECORDS
                  and all(_entry_ok(i, r, keys) for i, r in enumerate(meta["records"])))
            if not ok:
                raise BadRecord("the part's process returned a malformed record")
            tensors = {k: f.get_tensor(k) for k in keys}
    except BadRecord:
        raise
    except Exception as e:  # noqa: BLE001 - anything unreadable is the part's problem, never the grader's
        raise BadRecord(f"the part's process returned an unreadable record ({type(e).__name__})") from None
    return Record(meta["records"], tensors, meta["status"], meta["message"][:MAX_TEXT])


def _entry_ok(i: int, r: object, keys: set[str]) -> bool:
    if not isinstance(r, dict) or not isinstance(r.get("what"), str):
        return False
    kind = r.get("kind")
    if kind == "tensor":
        return f"t{i}" in keys
    if kind == "object":
        return isinstance(r.get("type"), str)
    return kind == "grad" and isinstance(r.get("value"), bool)


class RanOut(Exception):
    """The student's process recorded fewer results than the check needs (its code stopped there)."""


class Replayer(Session):
    """In the grader's process: the hidden fixtures, and each compare() judged on the student's recorded result."""

    def __init__(self, fixtures: dict[str, dict[str, torch.Tensor]], record: Record):
        self.fixtures, self.record, self.next = fixtures, record, 0

    def fixture(self, name: str) -> dict[str, torch.Tensor]:
        return self.fixtures[name]

    def _take(self, what: str, kind: str) -> tuple[int, dict]:
        if self.next >= len(self.record.entries):
            raise RanOut
        i, entry = self.next, self.record.entries[self.next]
        self.next += 1
        if entry["what"] != what or (entry["kind"] == "grad") != (kind == "grad"):
            raise Fail(f"{what}: the part's process returned its results out of order (it recorded "
                       f"{entry['what'][:200]!r} here)")
        return i, entry

    def compare(self, what: str, got: object, expected: torch.Tensor, **options: object) -> None:
        i, entry = self._take(what, "compare")
        if entry["kind"] == "object":
            raise Fail(not_a_tensor(what, entry["type"], expected))
        judge(what, self.record.tensors[f"t{i}"], expected, **options)

    def seen(self, what: str, got: object) -> torch.Tensor | None:
        i, entry = self._take(what, "compare")
        return self.record.tensors.get(f"t{i}") if entry["kind"] == "tensor" else None

    def differentiable(self, what: str, loss: object) -> None:
        _, entry = self._take(what, "grad")
        if not entry["value"]:
            raise Fail(f"{what} {common.NO_GRADIENT}")


def replay(name: str, fixtures: dict[str, dict[str, torch.Tensor]], record: Record) -> tuple[str, str]:
    """(status, message) of one part: its check replayed on the reference, judging the student's record."""
    from .checks import PARTS
    replayer = Replayer(fixtures, record)
    saved, common.SESSION = common.SESSION, replayer
    try:
        torch.manual_seed(common.SEED)
        PARTS[name].check()
    except Fail as e:
        return "fail", str(e)
    except RanOut:
        if record.status != "pass":
            return record.status, record.message
        return "error", "the part's process returned fewer results than its check needs"
    finally:
        common.SESSION = saved
    if record.status != "pass":        # a rule of the check that the part's own process found broken
        return record.status, record.message
    return "pass", ""


def grading_seed(seed: int | None) -> int:
    """The seed the hidden inputs are drawn from: seed, else $MINBERT_GRADING_SEED, else a fresh random one."""
    if seed is not None:
        return seed
    env = os.environ.get("MINBERT_GRADING_SEED", "").strip()
    if env:
        return read_seed(env, "MINBERT_GRADING_SEED")
    import secrets
    return secrets.randbits(63)


def read_seed(text: str, where: str) -> int:
    try:
        return int(text.strip(), 0)
    except ValueError:
        raise ValueError(f"{where}: the grading seed must be an integer") from None
