"""A full disk while writing a prediction file, a checkpoint, a submission zip or a report: the previous file is
intact, no temporary file is left behind, and a CLI says so in one line (no traceback)."""

from __future__ import annotations

import errno
import os
import sys
import zipfile
from pathlib import Path

import pytest
import torch
import warm

from tasks import submit
from tasks.core import checkpoints, evaluation

ROOT = Path(__file__).resolve().parents[1]


def _full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """fsync fails with ENOSPC, as a write-back on a full disk does."""
    def fsync(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "fsync", fsync)


def _only(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_prediction_file_survives_a_full_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = evaluation.write_predictions(tmp_path / "sst-dev-output.csv", "sst", ["a", "b"], [1, 2])
    before = path.read_bytes()
    _full_disk(monkeypatch)
    with pytest.raises(OSError) as e:
        evaluation.write_predictions(path, "sst", ["a", "b"], [3, 4])
    assert e.value.errno == errno.ENOSPC
    assert path.read_bytes() == before and b"1" in before
    assert _only(tmp_path) == ["sst-dev-output.csv"]


def test_checkpoint_survives_a_full_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = checkpoints.save_checkpoint(tmp_path / "run.pt", {"epoch": 1, "w": torch.ones(3)})
    _full_disk(monkeypatch)
    with pytest.raises(OSError):
        checkpoints.save_checkpoint(path, {"epoch": 2, "w": torch.zeros(3)})
    monkeypatch.undo()
    kept = torch.load(path, weights_only=True)
    assert kept["epoch"] == 1 and torch.equal(kept["w"], torch.ones(3))
    assert _only(tmp_path) == ["run.pt"]


def test_report_and_zip_survive_a_full_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = evaluation.write_text(tmp_path / "sweep.json", "old")
    _full_disk(monkeypatch)
    with pytest.raises(OSError):
        evaluation.write_text(report, "new")
    assert report.read_text() == "old" and _only(tmp_path) == ["sweep.json"]


def test_submission_zip_survives_a_full_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data, preds = tmp_path / "data", tmp_path / "preds"
    data.mkdir()
    (data / "ids-sst-dev.csv").write_text("\tid\tsentence\tsentiment\n0\ta1\tgood .\t4\n")
    evaluation.write_predictions(preds / "sst-dev-output.csv", "sst", ["a1"], [4])
    out = tmp_path / "submission.zip"
    with zipfile.ZipFile(out, "w") as z:                # an earlier submission (a file not a zip is refused)
        z.writestr("previous", "zip")
    previous = out.read_bytes()
    _full_disk(monkeypatch)
    with pytest.raises(OSError):
        submit.make_submission(preds, data, out)
    assert out.read_bytes() == previous
    assert _only(tmp_path) == ["data", "preds", "submission.zip"]


def test_cli_reports_a_full_disk_in_one_line(tmp_path: Path) -> None:
    """The error boundary turns ENOSPC into one line naming the file, exit 1, no traceback."""
    code = ("import errno, os, sys; from tasks.core.errors import run_cli\n"
            "def main():\n"
            f"    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), {str(tmp_path / 'run.pt')!r})\n"
            "sys.exit(run_cli(main))\n")
    proc = warm.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"error: {tmp_path / 'run.pt'}: No space left on device; ")
    assert "previous version is intact" in proc.stderr


def test_the_graders_results_json_survives_a_full_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """assignments.grade's results.json (what Gradescope reads): the previous file kept, no temporary left (the
    grading itself stubbed: the write is what is tested)."""
    from assignments import grade
    monkeypatch.setattr(grade, "grade", lambda *a, **k: {"score": 1.0, "max_score": 2.0, "tests": []})
    monkeypatch.setattr(grade, "print_table", lambda res: None)
    out = tmp_path / "results.json"
    out.write_text("previous")
    (tmp_path / "submission").mkdir()
    argv = [str(tmp_path / "submission"), "--seed", "1", "--out", str(out)]
    _full_disk(monkeypatch)
    with pytest.raises(OSError):
        grade.main(argv)
    assert out.read_text() == "previous" and _only(tmp_path) == ["results.json", "submission"]
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    assert grade.main(argv) == 0
    assert '"score": 1.0' in out.read_text() and _only(tmp_path) == ["results.json", "submission"]
