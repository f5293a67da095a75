"""The DeeBERT command (tasks/deebert): SST-2 from SST, both stages trained, the threshold sweep and its timing, the
dev halves, the benchmark's resume and tables, the report's figures and the sweep flags' checks."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch
from conftest import DATA, TEST_DEVICE
from test_deebert import piece, tiny_config  # noqa: F401 - tiny_config: the four-layer model tiny_dir saves

import minbert
from minbert.deebert import DeeBert, DeeBertConfig, EntropyExit
from tasks import deebert as cli
from tasks.core.data import TASKS, DataError
from tasks.core.errors import ConfigurationError
from tasks.core.evaluation import check_predictions
from tasks.deebert import timing as deebert_timing
from tasks.deebert.report import per_layer_title, plot_curve, plot_per_layer, savings

pytestmark = pytest.mark.usefixtures("one_thread")


def test_sst2_is_binary_sst_without_the_neutral_rows(tmp_path, tokenizer):
    path = piece(tmp_path, "ids-sst-dev.csv", "dev.csv", 0, 60)
    five = TASKS["sst"].read(path)
    two = cli.load_split("dev", path, "sst2", tokenizer).records
    by_id = {e.id: e.label for e in five}
    assert len(two) == sum(e.label != 2 for e in five) < len(five)
    assert all(e.label == (by_id[e.id] >= 3) and by_id[e.id] != 2 for e in two)
    test = piece(tmp_path, "ids-sst-test-student.csv", "test.csv", 0, 25)
    assert len(cli.load_split("test", test, "sst2", tokenizer).records) == 25    # unlabelled: every row predicted


def cli_args(tiny_dir, tmp_path, task, out, *extra):
    source = {"sst2": "ids-sst", "sts": "sts", "cfimdb": "ids-cfimdb"}[task]
    return cli.parse_settings([
        "--task", task, "--model", str(tiny_dir), "--device", TEST_DEVICE, "--no-progress", "--out", str(tmp_path / out),
        "--train-file", piece(tmp_path, f"{source}-train.csv", f"{task}-train.csv", 0, 48),
        "--dev-file", piece(tmp_path, f"{source}-dev.csv", f"{task}-dev.csv", 0, 40),
        "--test-file", piece(tmp_path, f"{source}-test-student.csv", f"{task}-test.csv", 0, 20),
        "--epochs", "1", "--batch-size", "8", "--lr", "1e-3", "--rounds", "2", *extra])


def test_cli_trains_both_stages_sweeps_and_writes_every_file(tiny_dir, tmp_path, capsys):
    summary = cli.run(cli_args(tiny_dir, tmp_path, "sst2", "run", "--eval-batch-size", "4",
                               "--thresholds", "0", "0.3", "0.6", "0.69"))
    out = tmp_path / "run"
    for name in ("stage1.pt", "stage2.pt", "sweep.csv", "sweep.json", "curve.png", "exit_layers.png", "per_layer.png"):
        assert (out / name).stat().st_size > 0, name
    with open(out / "sweep.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["setting"] for r in rows] == ["plain", "S=0", "S=0.3", "S=0.6", "S=0.69", "no exit"]
    assert rows[1]["mean_exit_layer"] == "4.0" and float(rows[1]["same_as_plain"]) == 1.0
    assert rows[-1]["mean_exit_layer"] == "4.0"
    assert sum(int(rows[4][f"exit_layer_{l}"]) for l in range(1, 5)) == summary["examples"]
    assert json.loads((out / "sweep.json").read_text())["rows"][2]["setting"] == "S=0.3"
    assert summary["training"]["stage1"]["best_epoch"] == summary["training"]["stage2"]["best_epoch"] == 1
    dev_gold = cli.load_split("dev", tmp_path / "sst2-dev.csv", "sst2", minbert.Tokenizer.from_pretrained(
        str(tiny_dir))).records
    report = check_predictions(out / "predictions" / "sst2-dev-output.csv", "cfimdb", dev_gold)
    assert report.ok and report.score == pytest.approx(summary["dev_quality"])
    assert len((out / "predictions" / "sst2-test-output.csv").read_text().splitlines()) == 21
    printed = capsys.readouterr().out
    assert "| plain |" in printed
    assert "stage 1 epoch 1/1: train loss" in printed and "stage 2 epoch 1/1: train loss" in printed, printed

    # the trained model again, at batch 1: the same predictions and exit layers as batched exit gave
    again = cli.run(cli_args(tiny_dir, tmp_path, "sst2", "b1", "--from-run", str(out), "--eval-batch-size", "1",
                             "--thresholds", "0", "0.3", "0.6", "0.69"))
    for a, b in zip(summary["rows"], again["rows"]):
        assert (a["quality"], a["exit_histogram"]) == (b["quality"], b["exit_histogram"]), a["setting"]
    assert again["per_layer"] == summary["per_layer"]
    with pytest.raises(ConfigurationError, match="not a trained DeeBERT model for this run .*pooling"):
        cli.run(cli_args(tiny_dir, tmp_path, "sst2", "b2", "--from-run", str(out), "--pooling", "cls"))


def test_cli_sts_exits_by_patience(tiny_dir, tmp_path):
    summary = cli.run(cli_args(tiny_dir, tmp_path, "sts", "sts", "--eval-batch-size", "8", "--change-threshold", "0.5"))
    assert summary["metric"] == "pearson" and summary["exit"] == "patience"
    assert [r["setting"] for r in summary["rows"]] == ["plain", "P=1", "P=2", "no exit"]
    # P = 1 by hand: every off-ramp's output, then the first layer l >= 2 whose value moved less than 0.5 from
    # layer l - 1's (else the last layer); the swept row's mean exit layer and histogram must match it
    model = DeeBert(minbert.load_pretrained(str(tiny_dir)), DeeBertConfig(1, pooling="mean")).eval()
    model.load_state_dict(torch.load(tmp_path / "sts" / "stage2.pt", weights_only=True)["best_state"])
    tokenizer = minbert.Tokenizer.from_pretrained(str(tiny_dir))
    dev = cli.load_split("dev", tmp_path / "sts-dev.csv", "sts", tokenizer)
    if hasattr(cli, "split_halves"):                    # the sweep reports on the report half of dev, when split
        dev = cli.split_halves(dev, summary["settings"]["training"]["seed"])[1]
    records = dev.records
    with torch.no_grad():
        pairs = tokenizer([r.sentence1 for r in records], [r.sentence2 for r in records])   # the pairs' tokens
        y = model.all_logits(**pairs)[..., 0]                                                  # (L, N)
    L, N = y.shape
    layers = [next((l for l in range(2, L) if abs(y[l - 1, i] - y[l - 2, i]) < 0.5), L) for i in range(N)]
    p1 = summary["rows"][1]
    assert p1["mean_exit_layer"] == pytest.approx(sum(layers) / N, abs=1e-6)
    assert p1["exit_histogram"] == [layers.count(l) for l in range(1, L + 1)]
    for r in summary["rows"]:                           # each row's histogram is its exit layers', bin l = layer l
        assert sum(r["exit_histogram"]) == N
        assert sum(l * c for l, c in enumerate(r["exit_histogram"], 1)) / N == pytest.approx(r["mean_exit_layer"])
    assert (tmp_path / "sts" / "predictions" / "sts-test-output.csv").is_file()
    with pytest.raises(ConfigurationError, match="use --exit patience"):
        cli.run(cli_args(tiny_dir, tmp_path, "sts", "sts2", "--exit", "entropy"))


def test_every_flag_is_explained_and_the_default_thresholds_span_the_entropy_range():
    parser = cli.build_parser()
    assert all(action.help for action in parser._actions)
    text = parser.format_help()
    for flag in ("--task", "--model", "--epochs", "--lr", "--batch-size", "--max-train-examples", "--seed", "--device",
                 "--train-file", "--dev-file", "--test-file", "--exit", "--thresholds", "--patience",
                 "--eval-batch-size", "--out", "--resume", "--threshold"):
        assert flag in text, flag
    assert cli.DEFAULT_THRESHOLDS[0] == 0.0 and math.log(2) < cli.DEFAULT_THRESHOLDS[-1]   # no exit .. all at layer 1


# ------------------------------------------------------------------ the timing protocol and the dev halves

def test_sweep_orders_differ_between_rounds_include_plain_and_follow_the_seed():
    names = ["plain", "S=0", "S=0.3", "no exit"]
    orders = deebert_timing.round_orders(names, 5, seed=1)
    assert all(sorted(o) == sorted(names) for o in orders)           # every setting, plain included, once a round
    assert len({tuple(o) for o in orders}) > 1                       # the order changes between rounds
    assert len({o.index("plain") for o in orders}) > 1               # plain does not always go first
    assert orders == deebert_timing.round_orders(names, 5, seed=1) != deebert_timing.round_orders(names, 5, seed=2)


def test_sweep_runs_an_untimed_pass_of_every_setting_then_the_rounds_in_their_orders(monkeypatch):
    calls = []
    rules = {"S=0": EntropyExit(0.0), "no exit": EntropyExit(-math.inf)}
    names = {None: "plain", id(rules["S=0"]): "S=0", id(rules["no exit"]): "no exit"}

    def fake(model, batches, rule, trim=True):
        calls.append((names[None if rule is None else id(rule)], len(batches)))
        return torch.zeros(1, 2), torch.ones(1, dtype=torch.long), float(len(calls)), 1

    monkeypatch.setattr(deebert_timing, "timed_run", fake)
    plain, runs = deebert_timing.sweep(nn_stub(), [{}] * 3, rules, rounds=3, seed=7)
    assert sorted(c[0] for c in calls[:3]) == ["S=0", "no exit", "plain"] and all(c[1] == 3 for c in calls)
    timed = [c[0] for c in calls[3:]]
    assert timed == [n for o in deebert_timing.round_orders(["plain", "S=0", "no exit"], 3, 7) for n in o]
    assert len(plain.seconds) == 3 and [r.name for r in runs] == ["S=0", "no exit"]
    assert plain.time == sorted(plain.seconds)[1]                    # the median of the rounds


def nn_stub():
    return torch.nn.Linear(1, 1)


def test_time_saved_per_round_by_hand():
    got = savings([8.0, 6.0, 9.0], [10.0, 10.0, 10.0], "k")
    assert got["k"] == pytest.approx([0.2, 0.4, 0.1]) and got["k_median"] == pytest.approx(0.2)
    assert (got["k_min"], got["k_max"]) == (pytest.approx(0.1), pytest.approx(0.4))


def test_dev_halves_are_a_seeded_disjoint_split(tmp_path, tokenizer):
    path = piece(tmp_path, "ids-sst-dev.csv", "sst-dev.csv", 0, 41)
    dev = cli.load_split("dev", path, "sst", tokenizer)
    select, report = cli.split_halves(dev, seed=3)
    a, b = [e.id for e in select.records], [e.id for e in report.records]
    assert len(a) == 20 and len(b) == 21 and not set(a) & set(b) and sorted(a + b) == sorted(e.id for e in dev.records)
    again, other = cli.split_halves(dev, seed=3)[0], cli.split_halves(dev, seed=4)[0]
    assert [e.id for e in again.records] == a != [e.id for e in other.records]
    assert len(select.lengths) == 20


def test_cli_selects_on_one_dev_half_and_reports_the_other(tiny_dir, tmp_path):
    summary = cli.run(cli_args(tiny_dir, tmp_path, "sst2", "halves", "--eval-batch-size", "8",
                               "--thresholds", "0", "0.3", "0.69"))
    n = summary["dev_select_examples"] + summary["dev_report_examples"]
    assert summary["examples"] == summary["dev_report_examples"] and summary["selection"]["examples"] == \
        summary["dev_select_examples"] and n == len(cli.load_split("dev", tmp_path / "sst2-dev.csv", "sst2",
                                                                 minbert.Tokenizer.from_pretrained(str(tiny_dir))).records)
    chosen = summary["chosen"]
    assert chosen["value"] == summary["prediction_setting"] and len(chosen["time_saved_rounds"]) == 2
    assert all(len(r["seconds_all"]) == 2 for r in summary["rows"])


def test_the_benchmark_resumes_by_seed_and_writes_the_tables_json(tiny_dir, tmp_path, monkeypatch, capsys):
    import importlib.util
    import sys
    spec = importlib.util.spec_from_file_location("deebert_bench", DATA.parent / "benchmarks" / "deebert.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    extra = ["--model", str(tiny_dir), "--device", TEST_DEVICE, "--no-progress", "--epochs", "1", "--batch-size", "8",
             "--lr", "1e-3", "--thresholds", "0", "0.3", "0.6",
             "--train-file", piece(tmp_path, "ids-sst-train.csv", "train.csv", 0, 32),
             "--dev-file", piece(tmp_path, "ids-sst-dev.csv", "dev.csv", 0, 40),
             "--test-file", piece(tmp_path, "ids-sst-test-student.csv", "test.csv", 0, 8)]

    def main(seeds):
        monkeypatch.setattr(sys, "argv", ["deebert.py", "--seeds", seeds, "--rounds", "2", "--batch-size", "4",
                                          "--out", str(tmp_path / "bench"), "--results", str(tmp_path / "table.json"),
                                          "--machine", "test", "--", *extra])
        bench.main()
    main("1")
    main("1,2")                                                        # seed 1 is not run again
    assert capsys.readouterr().out.count("== seed 1, batch 1: already in") == 1
    table = json.loads((tmp_path / "table.json").read_text())
    assert table["machine"].startswith("test [") and table["command"].startswith("python benchmarks/deebert.py")
    assert [(r["row"], r["seed"]) for r in table["paired"] if r["row"].startswith("plain")] == \
        [("plain-b1", 1), ("plain-b4", 1), ("plain-b1", 2), ("plain-b4", 2)]
    assert [(s["seed"], s["eval_batch_size"]) for s in table["sweeps"]] == [(1, 1), (1, 4), (2, 1), (2, 4)]
    for sweep in table["sweeps"]:
        assert set(sweep["training"]) == {"stage1", "stage2"}         # from the batch-1 run that trained them
        assert sweep["report"][0]["setting"] == "plain" and sweep["report"][-1]["setting"] == "no exit"
        assert len(sweep["per_layer_report"]) == sweep["report"][-1]["mean_exit_layer"]  # one figure per layer
        assert [r["setting"] for r in sweep["selection"]][:2] == ["plain", "S=0"]
        chosen = [r for r in table["paired"] if r["seed"] == sweep["seed"]
                  and r["row"] == f"chosen-b{sweep['eval_batch_size']}"]
        assert [r["setting"] for r in chosen] == ([sweep["chosen"]] if sweep["chosen"] else [])


def test_a_report_figure_is_written_in_the_format_its_name_says_and_a_failed_one_leaves_nothing(tmp_path,
                                                                                              monkeypatch):
    """A .pdf name gets a PDF (not PNG bytes); savefig failing keeps the previous figure and leaves no temporary."""
    plot_per_layer([0.5, 0.6], tmp_path / "per_layer.pdf", "accuracy")
    assert (tmp_path / "per_layer.pdf").read_bytes().startswith(b"%PDF")
    import matplotlib.figure

    def savefig(self, fname, *args, **kwargs):
        Path(fname).write_bytes(b"partial")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    with pytest.raises(OSError, match="No space left"):
        plot_per_layer([0.5, 0.6], tmp_path / "per_layer.pdf", "accuracy")
    assert [p.name for p in tmp_path.iterdir()] == ["per_layer.pdf"]
    assert (tmp_path / "per_layer.pdf").read_bytes().startswith(b"%PDF")


def test_the_curves_threshold_labels_do_not_overlap_and_stay_inside_and_the_axes_name_their_baseline(tmp_path,
                                                                                                      monkeypatch):
    """Clustered settings (the tiny run's, the SST-2 benchmark's 0.1/0.15 and 0.2/0.25) and one at the top edge:
    no two label boxes intersect, none leaves the axes; per_layer.png says which dev half it measured."""
    from tasks.deebert import report
    kept = []
    monkeypatch.setattr(report, "save_figure", lambda fig, path, **kw: kept.append(fig))
    points = [{"setting": s, "time_saved": t, "layers_saved": t + 0.1, "quality": q} for s, t, q in
              [(0, -0.25, 0.885), (0.0005, -0.20, 0.885), (0.001, -0.19, 0.885), (0.002, -0.185, 0.885),
               (0.1, 0.26, 0.885), (0.15, 0.265, 0.885), (0.2, 0.40, 0.885), (0.25, 0.38, 0.885),
               (0.3, 0.42, 0.883), (0.7, 0.73, 0.79)]]
    plot_curve(points, tmp_path / "curve.png", "accuracy", "sst2, batch 1")
    fig = kept[0]
    fig.canvas.draw()
    ax, renderer = fig.axes[0], fig.canvas.get_renderer()
    assert ax.get_xlabel() == "time or layers saved (%) vs the plain model (no off-ramps)"
    boxes = {t.get_text(): t.get_window_extent(renderer) for t in ax.texts}
    assert {"0", "0.1", "0.7"} <= set(boxes) and len(boxes) >= 6, sorted(boxes)
    inside = ax.get_window_extent(renderer)
    for name, box in boxes.items():
        assert inside.x0 <= box.x0 and box.x1 <= inside.x1 and inside.y0 <= box.y0 and box.y1 <= inside.y1, name
    for a, one in boxes.items():
        for b, other in boxes.items():
            assert a == b or not one.overlaps(other), (a, b)
    assert per_layer_title({"task": "sst2", "dev_protocol": "halves", "dev_report_examples": 436}) == \
        "sst2, dev-report half (436 examples)"
    assert per_layer_title({"task": "sts", "dev_protocol": "same", "dev_report_examples": 863}) == "sts, dev (863 examples)"


@pytest.mark.parametrize("flag, value, message", [
    ("--max-drop", "nan", "must be a finite number"), ("--threshold", "nan", "must be a finite number"),
    ("--threshold", "-1", "0 or more"), ("--change-threshold", "inf", "must be a finite number"),
    ("--change-threshold", "-0.1", "0 or more")])
def test_the_sweep_numbers_are_finite_and_in_their_range(flag, value, message, capsys):
    with pytest.raises(SystemExit):
        cli.parse_settings([flag, value])
    assert message in capsys.readouterr().err
    assert cli.parse_settings(["--max-drop", "0.01", "--threshold", "0.3"]).sweep.threshold == 0.3


def test_the_stages_learning_rates_and_the_public_codes_are_what_the_page_and_help_say() -> None:
    """docs/deebert.md's list of what the public code does differently names the two stages' default rates, which
    are the settings' (stage 2's help says the public code's single rate too)."""
    from dataclasses import fields

    from tasks.deebert.settings import DeeBertTraining, OffRamps

    def short(x: float) -> str:
        return f"{x:.0e}".replace("e-0", "e-")                  # 3e-05 -> 3e-5

    stage1, stage2 = short(DeeBertTraining().lr), short(OffRamps().ramp_lr)
    page = " ".join((Path(__file__).resolve().parents[1] / "docs" / "deebert.md").read_text().split())
    assert (f"one learning rate for both stages (2e-5 in its `scripts/train_highway.sh`, `examples/run_highway_glue.py` "
            f"building the same AdamW for each): here stage 1 trains at {stage1} and stage 2 at {stage2} "
            "(`--lr`, `--ramp-lr`)") in page
    assert "`--lr 2e-5 --ramp-lr 2e-5` is the public code's setting" in page
    help_text = next(f.metadata for f in fields(OffRamps) if f.name == "ramp_lr")
    assert "the public DeeBERT code trains both stages at one rate, 2e-5" in help_text["setting"].help


def test_from_run_reads_a_relative_model_directory_from_where_the_run_trained(tiny_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)                                   # --model tiny, the files: relative to tmp_path
    files = [piece(tmp_path, source, f"sst2-{split}.csv", 0, rows) and f"sst2-{split}.csv"
             for split, source, rows in (("train", "ids-sst-train.csv", 32), ("dev", "ids-sst-dev.csv", 24),
                                         ("test", "ids-sst-test-student.csv", 8))]
    cli.run(cli.parse_settings(["--task", "sst2", "--model", "tiny", "--device", TEST_DEVICE, "--no-progress",
                                "--out", "run", "--train-file", files[0], "--dev-file", files[1],
                                "--test-file", files[2], "--epochs", "1",
                                "--batch-size", "8", "--rounds", "1"]))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    again = cli.run(cli.parse_settings(["--from-run", str(tmp_path / "run"), "--out", "b1"]))
    assert again["model"] == str(tmp_path / "tiny") and again["from_run"] == str(tmp_path / "run" / "stage2.pt")
    monkeypatch.chdir(tmp_path)                     # a --from-run of that run: its model is read where run trained
    chained = cli.run(cli.parse_settings(["--from-run", "elsewhere/b1", "--out", "b2"]))
    assert chained["from_run"] == str(tmp_path / "run" / "stage2.pt")


@pytest.mark.parametrize("task,split,column", [("sst2", "dev", "sentiment"), ("sst2", "train", "sentiment"),
                                               ("sts", "dev", "similarity"), ("cfimdb", "dev", "sentiment")])
def test_a_file_without_the_tasks_label_column_names_the_column(task, split, column, tiny_dir, tmp_path):
    settings = cli_args(tiny_dir, tmp_path, task, "run")
    path = Path(getattr(settings.files, f"{split}_file"))
    path.write_text(path.read_text(encoding="utf-8").replace(f"\t{column}\n", "\tlabel\n", 1), encoding="utf-8")
    source = cli.SOURCE[task]
    with pytest.raises(DataError, match="^" + rf"{path}:1: no '{column}' column \(header \[.*'label'\]\); the "
                       rf"{source} training and dev files label each row in a column named '{column}'$"):
        cli.run(settings)


def test_a_resume_from_another_data_folder_refuses_a_changed_training_file(tiny_dir, tmp_path, monkeypatch):
    from conftest import kill_after

    from tasks.core.checkpoints import load_checkpoint
    from tasks.core.errors import ResumeError
    from tasks.core.train import Interrupted, watching
    monkeypatch.chdir(tmp_path)
    for folder, first in (("dd", 0), ("dd2", 40)):                # dd2: the same dev and test, other training rows
        (tmp_path / folder).mkdir()
        piece(tmp_path / folder, "ids-sst-train.csv", "ids-sst-train.csv", first, first + 32)
        piece(tmp_path / folder, "ids-sst-dev.csv", "ids-sst-dev.csv", 0, 24)
        piece(tmp_path / folder, "ids-sst-test-student.csv", "ids-sst-test-student.csv", 0, 8)
    with pytest.raises(Interrupted), watching(kill_after(1)):     # killed in stage 1, its epoch 1 checkpointed
        cli.run(cli.parse_settings(["--task", "sst2", "--model", str(tiny_dir), "--device", TEST_DEVICE,
                                    "--no-progress", "--data-dir", "dd", "--out", "de1", "--epochs", "2",
                                    "--batch-size", "8", "--rounds", "1"]))
    assert "dd/ids-sst-train.csv" in json.loads((tmp_path / "de1" / "run.json").read_text())["data_files"]
    assert "dd/ids-sst-train.csv" in load_checkpoint(tmp_path / "de1" / "stage1.pt")["data_files"]
    with pytest.raises(ResumeError, match=r"settings differ: files.data_dir: run.json 'dd' .*, now 'dd2'"):
        cli.parse_settings(["--resume", "de1", "--data-dir", "dd2"])         # before any data is read
    record = json.loads((tmp_path / "de1" / "run.json").read_text())
    del record["data_files"]["dd/ids-sst-train.csv"]                           # as an older run.json records it
    (tmp_path / "de1" / "run.json").write_text(json.dumps(record))
    with pytest.raises(ResumeError, match=r"cannot resume: dd2/ids-sst-train.csv has changed since the run "
                       "started"):                             # the checkpoint's record, as read now
        cli.run(cli.parse_settings(["--resume", "de1", "--data-dir", "dd2"]))
