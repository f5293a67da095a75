"""`python -m tasks.curves`: a curves file or a run directory drawn as a PNG; a missing or empty file is one
`error:` line and exit 1, no PNG written."""

from __future__ import annotations

import json

from tasks.core.curves import main
from tasks.core.errors import run_cli

LINES = [{"kind": "step", "step": 1, "epoch": 0, "loss": 0.9}, {"kind": "step", "step": 2, "epoch": 0, "loss": 0.7},
         {"kind": "epoch", "epoch": 1, "train_loss": 0.8, "dev_accuracy": 0.5}]


def curves(path, lines=LINES):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_a_run_directory_draws_its_checkpoints_curves_inside_it(tmp_path, capsys):
    run = tmp_path / "run"
    curves(run / "checkpoint.curves.jsonl")
    assert run_cli(lambda: main([str(run)])) == 0
    assert (run / "checkpoint.curves.png").stat().st_size > 0 and not (tmp_path / "run.png").exists()
    assert capsys.readouterr().out == f"wrote {run / 'checkpoint.curves.png'}\n"


def test_a_file_draws_beside_itself(tmp_path):
    assert run_cli(lambda: main([str(curves(tmp_path / "a.curves.jsonl"))])) == 0
    assert (tmp_path / "a.curves.png").stat().st_size > 0


def test_a_missing_path_an_empty_file_and_an_empty_run_directory_are_one_error_line(tmp_path, capsys):
    (tmp_path / "empty-run").mkdir()
    cases = {str(tmp_path / "absent.curves.jsonl"): "no such file or directory",
             str(curves(tmp_path / "empty.curves.jsonl", [])): "the curves file is empty",
             str(tmp_path / "empty-run"): "the run directory has no curves file"}
    for path, message in cases.items():
        assert run_cli(lambda path=path: main([path])) == 1, path
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: {path}") and message in err[0], err
    assert not list(tmp_path.rglob("*.png"))
