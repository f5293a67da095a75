"""The grader's recorder, in the process that runs a student's code: the hidden inputs in, results out as data.

python -m assignments.check --record DIR --inputs DIR (the grader's call, never a student's) sets a Recorder as
common.SESSION: each check then reads the inputs the grader drew, and every compare() stores what the student's
code returned instead of judging it. The file it writes (safetensors: tensors and a JSON header, nothing that
runs) is all the grader takes from this process; assignments/hidden.py (the instructor's) judges it elsewhere.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import torch

from .common import Session

RECORD_KEY = "minbert-record"
MAX_RECORD_BYTES = 128 << 20     # a record file larger than this is refused unread: no check returns as much
MAX_RECORDS = 2000
MAX_TEXT = 4000                   # characters kept of a message or a compare's description


class Recorder(Session):
    """In the process that runs student code: the hidden inputs in, each compare()'s result recorded, never judged."""

    def __init__(self, inputs: Path):
        self.inputs, self.records, self.tensors, self.bytes = Path(inputs), [], {}, 0

    def fixture(self, name: str) -> dict[str, torch.Tensor]:
        from safetensors.torch import load_file
        path = self.inputs / f"{name}.safetensors"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no hidden inputs for the fixture {name} (a grader bug)")
        return load_file(path)

    def compare(self, what: str, got: object, expected: torch.Tensor, **options: object) -> None:
        entry = {"kind": "object", "what": str(what)[:MAX_TEXT], "type": type(got).__name__}
        if isinstance(got, torch.Tensor):
            try:
                data = got.detach().to("cpu").contiguous().clone()
                if self.bytes + data.numel() * data.element_size() <= MAX_RECORD_BYTES // 2:
                    self.tensors[f"t{len(self.records)}"] = data
                    self.bytes += data.numel() * data.element_size()
                    entry = {**entry, "kind": "tensor"}
                else:
                    entry["type"] = f"a tensor too large to return ({tuple(got.shape)})"
            except Exception as e:  # noqa: BLE001 - a tensor that cannot be copied out is reported as what it is
                entry["type"] = f"a tensor that cannot be read ({type(e).__name__})"
        self.records.append(entry)

    def differentiable(self, what: str, loss: object) -> None:
        grad = not isinstance(loss, torch.Tensor) or bool(loss.requires_grad)
        self.records.append({"kind": "grad", "what": str(what)[:MAX_TEXT], "value": grad})

    def seen(self, what: str, got: object) -> None:
        self.compare(what, got, None)       # recorded as a compare() is, for the replay's seen(); nothing named here

    def save(self, path: Path, status: str, message: str) -> None:
        """Write the records, the part's own status and its message (safetensors: data only, nothing executable)."""
        from safetensors.torch import save
        meta = {"status": status, "message": message[:MAX_TEXT], "records": self.records[:MAX_RECORDS]}
        try:                         # serialised in memory first: only the data can fail here, never the disk
            data = save(self.tensors, metadata={RECORD_KEY: json.dumps(meta)})
        except Exception:  # noqa: BLE001 - a dtype safetensors cannot store: keep the records, drop the tensors
            for r in meta["records"]:
                if r["kind"] == "tensor":
                    r.update(kind="object", type="a tensor of a dtype the grader cannot read")
            data = save({}, metadata={RECORD_KEY: json.dumps(meta)})
        # atomic, as minbert.files.replacing writes (not imported: a student's model.py that does not import would
        # take the package, and with it every part's record, down): a temporary of its own, renamed when whole; a
        # write that fails (a full disk, a file-size limit) is an OSError, and the part has no record
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        tmp = Path(name)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o644)     # mkstemp's file is private; the record is read by the grader's process
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
