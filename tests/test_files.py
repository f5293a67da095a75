"""minbert/files.py, the one atomic writer: the previous file kept and no temporary left when a write fails, a fresh
temporary per write, fsync before the rename, and the mode a new file gets under the umask (read, not changed)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
import torch
from torch import nn

import minbert
from minbert import bitfit_tasks
from minbert.bitfit import freeze
from minbert.files import new_file_mode, replacing, write_text

PROC = Path("/proc/self/status")


@pytest.fixture
def umask():
    """Set the process's umask for the test; the previous one put back after."""
    real = os.umask                                     # the real one, whatever a test patches
    old = real(0o022)
    yield real
    real(old)


def test_a_failed_block_keeps_the_previous_file_and_removes_its_temporary(tmp_path: Path) -> None:
    path = write_text(tmp_path / "out.txt", "before")
    with pytest.raises(KeyboardInterrupt), replacing(path) as tmp:
        tmp.write_text("half")
        raise KeyboardInterrupt                         # any exception, not only an OSError
    assert path.read_text() == "before" and [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_each_write_has_its_own_temporary_beside_the_file_in_new_folders(tmp_path: Path) -> None:
    path = tmp_path / "new" / "folder" / "out.bin"
    with replacing(path) as first, replacing(path) as second:      # two writers into one folder at once
        assert first != second and first.parent == second.parent == path.parent
        assert first.name.startswith(".out.bin.") and second.name.startswith(".out.bin.")
        first.write_bytes(b"1")
        second.write_bytes(b"2")
    assert path.read_bytes() == b"1" and [p.name for p in path.parent.iterdir()] == ["out.bin"]


def test_sync_fsyncs_the_temporary_before_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk shows at fsync: with sync=True the previous file stays; without it the rename happens."""
    path = write_text(tmp_path / "data.bin", "before")

    def fsync(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OSError, match="No space left"), replacing(path, sync=True) as tmp:
        tmp.write_bytes(b"after")
    assert path.read_text() == "before" and [p.name for p in tmp_path.iterdir()] == ["data.bin"]
    with replacing(path) as tmp:
        tmp.write_bytes(b"after")
    assert path.read_bytes() == b"after"


@pytest.mark.parametrize("mask", [0o002, 0o022, 0o077])
def test_every_writer_gives_the_mode_a_new_file_gets(mask: int, umask, tiny_config, tmp_path: Path) -> None:
    """mkstemp's own mode is 0600: replacing gives its files the umask's mode (save_pretrained, task files too)."""
    umask(mask)
    model = minbert.BertModel(tiny_config)
    model.save_pretrained(tmp_path / "model")
    freeze(model, "all")
    bitfit_tasks.save_task(tmp_path / "task.safetensors", model, nn.Linear(32, 3))
    write_text(tmp_path / "out.txt", "x")
    written = [tmp_path / "model" / "config.json", tmp_path / "model" / "model.safetensors",
               tmp_path / "task.safetensors", tmp_path / "out.txt"]
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in written} == {p.name: oct(0o666 & ~mask) for p in written}


@pytest.mark.skipif(not PROC.is_file() or "Umask:" not in PROC.read_text(), reason="no Umask line in /proc (Linux)")
@pytest.mark.parametrize("mask", [0o002, 0o077])
def test_new_file_mode_reads_the_umask_on_linux_without_setting_it(mask: int, umask,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """/proc/self/status says the umask: setting it, even for a moment, would change it for every thread."""
    umask(mask)

    def set_umask(value: int) -> int:
        raise AssertionError("os.umask called where /proc/self/status says the umask")
    monkeypatch.setattr(os, "umask", set_umask)
    assert new_file_mode() == 0o666 & ~mask


@pytest.mark.parametrize("mask", [0o002, 0o077])
def test_new_file_mode_without_proc_reads_the_umask_by_setting_it_and_puts_it_back(
        mask: int, umask, monkeypatch: pytest.MonkeyPatch) -> None:
    real = Path.read_text

    def read_text(self: Path, *args, **kwargs) -> str:
        if self == PROC:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(self))
        return real(self, *args, **kwargs)
    monkeypatch.setattr(Path, "read_text", read_text)
    umask(mask)
    assert new_file_mode() == 0o666 & ~mask
    assert umask(mask) == mask                          # the umask it found is the one it left


class _Fs:
    """os.statvfs's answer with `left` bytes available."""
    def __init__(self, left: int):
        self.f_bavail, self.f_frsize = left // 4096, 4096


@pytest.mark.parametrize(("raised", "left", "expected"), [
    (OSError(errno.ENOSPC, "No space left on device"), 10 ** 9, "ENOSPC named"),           # write()/flush(): no file
    (OSError(errno.EIO, "Input/output error"), 10 ** 9, "EIO named"),
    (RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 20992 vs 20944"), 0, "ENOSPC named"),
    (RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 20992 vs 20944"), 10 ** 9, "as raised"),
    (ValueError("a bug, on a full disk all the same"), 0, "as raised"),
    (Exception("Error while serializing: I/O error: No space left on device (os error 28)"), 10 ** 9, "ENOSPC named"),
])
def test_a_failed_write_is_an_os_error_naming_the_file_or_stays_as_raised(raised: Exception, left: int, expected: str,
                                                                          tmp_path: Path, monkeypatch) -> None:
    """What run_cli prints in one line (an OSError naming the file) for a write that failed on the disk, however the
    writer said it: a write() naming no file, safetensors' and torch.save's own errors on a full disk (told by their
    text, or by the disk having under 1 MiB left); any other error keeps its type and traceback (it may be a bug)."""
    path = write_text(tmp_path / "f.txt", "old")
    monkeypatch.setattr(os, "statvfs", lambda folder: _Fs(left))
    with pytest.raises(BaseException) as e, replacing(path) as tmp:
        tmp.write_text("half")
        raise raised
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]
    if expected == "as raised":
        assert e.value is raised
    else:
        assert type(e.value) is OSError and e.value.__cause__ is raised and e.value.filename == str(path)
        assert e.value.errno == (errno.EIO if expected == "EIO named" else errno.ENOSPC)


def test_a_checkpoint_on_a_full_disk_is_one_line_from_a_command(tmp_path: Path, monkeypatch, capsys) -> None:
    """torch.save on a really full disk raises a RuntimeError (its zip writer's short write), not an OSError: the
    command still ends in the one line docs/errors.md shows, naming the checkpoint, and the previous one is kept."""
    import torch

    from tasks.core import checkpoints
    from tasks.core.errors import run_cli
    path = checkpoints.save_checkpoint(tmp_path / "checkpoint.pt", {"epoch": 1})

    def short_write(state, f, *a, **k):
        f.write(b"PK")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 20")
    monkeypatch.setattr(torch, "save", short_write)
    monkeypatch.setattr(os, "statvfs", lambda folder: _Fs(0))
    assert run_cli(lambda: checkpoints.save_checkpoint(path, {"epoch": 2})) == 1
    assert capsys.readouterr().err.startswith(f"error: {path}: No space left on device; every file is written")
    monkeypatch.undo()
    assert torch.load(path, weights_only=True) == {"epoch": 1} and sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint.pt"]


def test_make_fixtures_keeps_the_old_file_and_no_temporary_when_a_write_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """make_fixtures writes through `replacing` too: a write that fails half-way (here: half a file, then a full
    disk) keeps the previous file and leaves nothing beside it (a fixed-name `.NAME.tmp` was left behind)."""
    import safetensors.torch

    from assignments import make_fixtures

    def half_then_full(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    old = tmp_path / "old.safetensors"
    safetensors.torch.save_file({"x": torch.zeros(2)}, old)
    monkeypatch.setattr(make_fixtures, "save_file", half_then_full)
    monkeypatch.setattr(make_fixtures, "FIXTURES", tmp_path / "fixtures")
    (tmp_path / "fixtures").mkdir()
    (tmp_path / "fixtures" / "f.safetensors").write_bytes(old.read_bytes())
    with pytest.raises(OSError) as raised:
        make_fixtures._save("f", {"x": torch.ones(2)})
    assert raised.value.errno == errno.ENOSPC
    assert os.listdir(tmp_path / "fixtures") == ["f.safetensors"]
    assert (tmp_path / "fixtures" / "f.safetensors").read_bytes() == old.read_bytes()


def test_the_graders_recorder_on_a_full_disk_keeps_the_old_file_and_never_calls_a_tensor_unreadable(
        tmp_path: Path) -> None:
    """The recorder (in the process that runs a student's code) on a disk that takes no more (a real file-size
    limit, RLIMIT_FSIZE, under safetensors' own writer): an OSError, the previous file kept, no temporary left; its
    retry without tensors is for a dtype safetensors cannot store, never for the disk (safetensors says a failed
    write as a SafetensorError, which the retry took for a dtype: the student's tensor was recorded as unreadable)."""
    import resource

    import safetensors.torch

    from assignments.record import Recorder

    folder = tmp_path / "record"
    folder.mkdir()
    old = safetensors.torch.save({"x": torch.zeros(2)})
    (folder / "part.safetensors").write_bytes(old)
    recorder = Recorder(tmp_path)
    recorder.compare("out", torch.randn(4096), torch.zeros(1))
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4000, hard))    # Python ignores SIGXFSZ: a write past it is EFBIG
    try:
        with pytest.raises(OSError) as raised:
            recorder.save(folder / "part.safetensors", "pass", "done")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert raised.value.errno == errno.EFBIG
    assert os.listdir(folder) == ["part.safetensors"] and (folder / "part.safetensors").read_bytes() == old
    recorder.save(folder / "part.safetensors", "pass", "done")           # with room: the tensor as it was
    stored = safetensors.torch.load_file(folder / "part.safetensors")
    assert torch.equal(stored["t0"], recorder.tensors["t0"])


def test_the_graders_recorder_keeps_the_records_of_a_tensor_safetensors_cannot_store(tmp_path: Path) -> None:
    """A tensor of a dtype safetensors cannot store (complex128) is recorded as an object that says so, the other
    records and tensors' slots kept: the part is judged on what can be read, not lost."""
    import safetensors

    from assignments.record import RECORD_KEY, Recorder

    recorder = Recorder(tmp_path)
    recorder.compare("odd", torch.zeros(2, dtype=torch.complex128), torch.zeros(2))
    recorder.differentiable("loss", torch.ones(1, requires_grad=True))
    recorder.save(tmp_path / "part.safetensors", "pass", "done")
    with safetensors.safe_open(tmp_path / "part.safetensors", "pt") as f:
        meta, keys = json.loads(f.metadata()[RECORD_KEY]), list(f.keys())
    assert keys == [] and meta["status"] == "pass" and meta["records"] == [
        {"kind": "object", "what": "odd", "type": "a tensor of a dtype the grader cannot read"},
        {"kind": "grad", "what": "loss", "value": True}]
