"""`python -m tasks.curves`: a curves file or a run directory drawn as a PNG; a missing or empty file is one
`error:` line and exit 1, no PNG written."""

from __future__ import annotations

import json
from pathlib import Path

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


def drawn(monkeypatch, path):
    """The matplotlib Figure plot_curves draws for `path` (kept open to read back), and its two panels."""
    from tasks.core import figures
    from tasks.core.curves import plot_curves
    kept = []
    monkeypatch.setattr(figures, "save_figure", lambda fig, out, **kw: kept.append(fig) or Path(out))
    plot_curves(path)
    fig = kept[0]
    fig.canvas.draw()
    return fig, fig.axes[0], fig.axes[1]


MULTITASK = [{"kind": "step", "step": 1, "epoch": 1, "loss": 1.6, "task": "sst"},
             {"kind": "epoch", "epoch": 1, "train_loss": 1.6, "dev_sst_accuracy": 0.25, "dev_para_accuracy": 0.6,
              "dev_sts_pearson": -0.1, "dev_overall": 0.4}]


def test_the_dev_panel_says_what_it_measures_in_the_consoles_names_with_whole_epochs_and_its_legend_below(
        tmp_path, monkeypatch):
    from tasks.core.evaluation import DEV_NAMES
    _, left, right = drawn(monkeypatch, curves(tmp_path / "mt.curves.jsonl", MULTITASK))
    assert right.get_ylabel() == "dev score (accuracy; Pearson r)" and right.get_xlabel() == "epoch"
    names = [t.get_text() for t in right.get_legend().get_texts()]
    assert names == [DEV_NAMES[k] for k in ("overall", "para_accuracy", "sst_accuracy", "sts_pearson")]
    for ax in (left, right):                                # a 1-epoch, 1-step run: ticks at 1, not 0.96 ... 1.04
        assert list(ax.get_xticks()) == [1]
        assert ax.get_legend().get_window_extent().y1 <= ax.get_window_extent().y0   # below the panel, not on it
    assert left.get_lines()[0].get_marker() == "."          # a one-point loss series is seen
    _, _, single = drawn(monkeypatch, curves(tmp_path / "cls.curves.jsonl"))
    assert single.get_ylabel() == "dev score (accuracy)"


def test_a_start_line_names_the_dev_axis_unit_and_draws_the_score_before_training_at_0(tmp_path, monkeypatch):
    from tasks.core.curves import mark_start, read_curves
    path = curves(tmp_path / "sim.curves.jsonl", [{"kind": "step", "step": s, "epoch": 1 + (s > 2), "loss": 1.0}
                                                  for s in (1, 2, 3, 4)] +
                  [{"kind": "epoch", "epoch": e, "train_loss": 1.0, "dev_sts_pearson": 0.5 + e / 10} for e in (1, 2)])
    for _ in range(2):                                      # again (a resumed run): one start line, in place
        assert mark_start(path, "round of 2 optimiser steps", {"sts_pearson": 0.4}).is_file()
    assert [x["kind"] for x in read_curves(path)] == ["start"] + ["step"] * 4 + ["epoch"] * 2
    _, _, right = drawn(monkeypatch, path)
    assert right.get_xlabel() == "round of 2 optimiser steps (0: before training)"
    assert list(right.get_lines()[0].get_xdata()) == [0, 1, 2] and list(right.get_xticks()) == [0, 1, 2]
    assert right.get_lines()[0].get_ydata()[0] == 0.4 and right.get_ylabel() == "dev score (Pearson r)"
