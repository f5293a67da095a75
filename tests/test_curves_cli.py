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


def test_a_torn_last_line_is_dropped_with_a_note_and_a_bad_line_elsewhere_is_one_error_line(tmp_path, capsys):
    from tasks.core.curves import Curves
    torn = curves(tmp_path / "torn.curves.jsonl")
    with torn.open("a") as f:
        f.write('{"kind": "step", "step": 3')            # an append cut short (a full disk, a kill mid-write)
    assert run_cli(lambda: main([str(torn)])) == 0
    out = capsys.readouterr()
    assert out.err.count(f"{torn}:4: the last line is cut short") == 1 and (tmp_path / "torn.curves.png").is_file()
    Curves(torn, keep_epochs=1, tensorboard=False).close()          # a resume keeps the whole lines and goes on
    assert torn.read_text() == "".join(json.dumps(x) + "\n" for x in LINES)
    capsys.readouterr()
    cases = {"middle": (['{"kind": "step", "step": 1', json.dumps(LINES[2])], ":1: not valid JSON"),
             "list": (["[1, 2]", json.dumps(LINES[2])], ':1: not a curves line (a JSON object with "kind"'),
             "nokind": ([json.dumps({"step": 1}), json.dumps(LINES[2])], ":1: not a curves line"),
             "noepoch": ([json.dumps(LINES[2]), json.dumps({"kind": "step", "step": 1, "loss": 1.0})],
                         ":2: not a curves line"),
             "csv": (["id\tsentence\tsentiment", "a\tb\t1", "c\td\t0"], ":1: not valid JSON")}
    for name, (lines, message) in cases.items():
        path = tmp_path / f"{name}.curves.jsonl"
        path.write_text("\n".join(lines) + "\n")
        assert run_cli(lambda path=path: main([str(path)])) == 1, name
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: {path}{message}"), (name, err)
