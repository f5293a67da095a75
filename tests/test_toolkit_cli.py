"""The entrant's toolkit end to end on a tiny model: curves, predict, export, ensemble, PCGrad and the embedding
objectives in the multitask loop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import DATA, TEST_DEVICE

from tasks import classifier, ensemble, export, multitask, predict
from tasks.core.curves import read_curves
from tasks.core.errors import ConfigurationError
from tasks.core.runs import run_settings

pytestmark = pytest.mark.usefixtures("one_thread")
SIX = [f"{t}-{s}-output.csv" for t in ("sst", "para", "sts") for s in ("dev", "test")]


@pytest.fixture
def files(multitask_files):
    return multitask_files


def train(tiny_dir, files, tmp_path, name, *extra) -> dict:
    argv = ["--model", str(tiny_dir), "--device", TEST_DEVICE, "--batch-size", "8", "--lr", "1e-3", "--no-progress",
            "--head-hidden", "16", "--checkpoint", str(tmp_path / f"{name}.pt"), "--predictions-dir",
            str(tmp_path / name), "--epochs", "1", *extra]
    for t, (tr, dev, test) in files.items():
        argv += [f"--{t}-train", tr, f"--{t}-dev", dev, f"--{t}-test", test]
    return multitask.run(multitask.parse_settings(argv))


def same_files(a: Path, b: Path, names=SIX) -> None:
    for name in names:
        assert (a / name).read_text() == (b / name).read_text(), name


def data_dir(files, tmp_path) -> Path:
    d = tmp_path / "data"
    d.mkdir(exist_ok=True)
    for t, (_, dev, test) in files.items():
        name = {"sst": "ids-sst", "para": "quora", "sts": "sts"}[t]
        (d / f"{name}-dev.csv").write_text(Path(dev).read_text())
        (d / f"{name}-test-student.csv").write_text(Path(test).read_text())
    return d


def test_predict_and_ensemble_of_one_run_equal_the_runs_files_and_curves_have_a_line_per_step(tiny_dir, files,
                                                                                           tmp_path):
    train(tiny_dir, files, tmp_path, "run", "--raw-outputs")
    lines = read_curves(tmp_path / "run.curves.jsonl")
    steps = [x for x in lines if x["kind"] == "step"]
    assert [x["step"] for x in steps] == list(range(1, 5 + 6 + 4 + 1))       # 40/8 + 48/8 + 32/8 optimiser steps
    assert {x["task"] for x in steps} == {"sst", "para", "sts"}
    assert [x["epoch"] for x in lines if x["kind"] == "epoch"] == [1]
    assert (tmp_path / "run.curves.png").stat().st_size > 0

    assert predict.main([str(tmp_path / "run.pt"), "--out", str(tmp_path / "again"), "--raw-outputs"]) == 0
    same_files(tmp_path / "run", tmp_path / "again", SIX + [n.replace("output", "raw") for n in SIX])

    assert ensemble.main([str(tmp_path / "run"), "--out", str(tmp_path / "ens"),
                          "--data-dir", str(data_dir(files, tmp_path))]) == 0
    same_files(tmp_path / "run", tmp_path / "ens")
    assert (tmp_path / "ens" / "submission.zip").is_file()

    with pytest.raises(ConfigurationError, match="a multitask checkpoint"):
        predict.main([str(tmp_path / "run.pt"), "--kind", "classifier"])


def test_export_loads_in_transformers_and_predicts_the_same(tiny_dir, files, tmp_path):
    transformers = pytest.importorskip("transformers")
    train(tiny_dir, files, tmp_path, "run", "--design", "bi-encoder")
    export.main([str(tmp_path / "run.pt"), str(tmp_path / "exp")])
    settings = json.loads((tmp_path / "exp" / "multitask.json").read_text())
    assert settings["settings"]["design"]["design"] == "bi-encoder" and "overall" in settings["dev"]
    assert predict.main([str(tmp_path / "exp"), "--out", str(tmp_path / "from-export")]) == 0
    same_files(tmp_path / "run", tmp_path / "from-export")

    state = torch.load(tmp_path / "run.pt", weights_only=True)["best_state"]
    ours = multitask.build_model(run_settings(multitask.Settings, settings["settings"], "multitask.json"))
    ours.load_state_dict(state)
    hf = transformers.BertModel.from_pretrained(str(tmp_path / "exp" / "encoder")).eval()
    ids = torch.tensor([[101, 7592, 2088, 102]])
    with torch.no_grad():
        want = ours.bert.eval()(ids, torch.ones_like(ids)).last_hidden_state
        got = hf(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_pcgrad_and_embedding_objectives_train_and_pcgrad_refuses_grad_accum(tiny_dir, files, tmp_path):
    result = train(tiny_dir, files, tmp_path, "pc", "--gradient-surgery", "pcgrad", "--sts-embedding-loss", "cosent",
                   "--para-embedding-loss", "mnrl")
    steps = [x for x in read_curves(tmp_path / "pc.curves.jsonl") if x["kind"] == "step"]
    assert len(steps) == 6                                  # one round of every task per step: max(5, 6, 4) rounds
    assert result["history"][0]["train_loss"] > 0
    # what the toolkit adds is logged beside the loss, and is not zero: the objectives' values and shares, and how
    # far the projection moved the summed gradient (rounds of 2-3 tasks: 4 of the 6)
    logged = result["toolkit"][0]
    assert logged["sts_embedding_loss"] > 0 and 0 < logged["sts_embedding_share"] < 1
    assert logged["para_embedding_loss"] > 0 and 0 < logged["para_embedding_share"] < 1
    assert 0 <= logged["surgery_conflict_share"] <= 1 and logged["surgery_change"] >= 0
    assert (logged["surgery_change"] > 0) == (logged["surgery_conflict_share"] > 0)
    with pytest.raises(ConfigurationError, match="grad-accum"):
        train(tiny_dir, files, tmp_path, "pc2", "--gradient-surgery", "pcgrad", "--grad-accum", "2")
    # the control takes the same rounds as steps; its first step moves the weights other than PCGrad's where the
    # tasks' gradients conflict, so the two runs end apart
    control = train(tiny_dir, files, tmp_path, "sum", "--gradient-surgery", "sum", "--sts-embedding-loss", "cosent",
                    "--para-embedding-loss", "mnrl")
    assert len([x for x in read_curves(tmp_path / "sum.curves.jsonl") if x["kind"] == "step"]) == 6
    assert control["history"][0]["train_loss"] != result["history"][0]["train_loss"]
    assert control["toolkit"][0]["surgery_change"] == 0                   # summed as they are: nothing moved


def test_predict_a_classifier_run_writes_its_files(tiny_dir, tmp_path):
    def piece(name, start, stop):
        lines = (DATA / name).read_text(encoding="utf-8").splitlines(keepends=True)
        path = tmp_path / f"{start}-{name}"
        path.write_text(lines[0] + "".join(lines[1 + start:1 + stop]), encoding="utf-8")
        return str(path)
    argv = ["--model", str(tiny_dir), "--train-file", piece("ids-sst-train.csv", 0, 32), "--dev-file",
            piece("ids-sst-dev.csv", 0, 24), "--test-file", piece("ids-sst-dev.csv", 24, 40), "--device", TEST_DEVICE,
            "--batch-size", "8", "--lr", "1e-3", "--no-progress", "--epochs", "1",
            "--checkpoint", str(tmp_path / "sst.pt"), "--predictions-dir", str(tmp_path / "sst"), "--raw-outputs"]
    classifier.run(classifier.parse_settings(argv))
    assert predict.main([str(tmp_path / "sst.pt"), "--kind", "classifier", "--out", str(tmp_path / "again"),
                         "--raw-outputs"]) == 0
    same_files(tmp_path / "sst", tmp_path / "again", [f"sst-{s}-{k}.csv" for s in ("dev", "test") for k in ("output", "raw")])
    with pytest.raises(ConfigurationError, match="a classifier checkpoint"):
        predict.main([str(tmp_path / "sst.pt"), "--kind", "multitask"])
    with pytest.raises(ConfigurationError, match="--sst-test is for multitask runs; this is a classifier run"):
        predict.main([str(tmp_path / "sst.pt"), "--sst-test", str(tmp_path / "new.csv"), "--out", str(tmp_path / "x")])


def test_predict_without_out_never_replaces_the_leaderboard_folders_files(tiny_dir, tmp_path, monkeypatch):
    """Without --out, predictions/ (the folder tasks.submit zips) is written only while it holds no prediction file."""
    lines = (DATA / "ids-sst-dev.csv").read_text(encoding="utf-8").splitlines(keepends=True)
    (tmp_path / "few.csv").write_text("".join(lines[:17]), encoding="utf-8")
    few = str(tmp_path / "few.csv")
    argv = ["--model", str(tiny_dir), "--train-file", few, "--dev-file", few, "--test-file", few, "--device",
            TEST_DEVICE, "--batch-size", "8", "--no-progress", "--epochs", "1", "--checkpoint",
            str(tmp_path / "sst.pt"), "--predictions-dir", str(tmp_path / "own")]
    classifier.run(classifier.parse_settings(argv))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "predictions").mkdir()
    (tmp_path / "predictions" / "sst-test-output.csv").write_text("the best run's\n")
    with pytest.raises(ConfigurationError, match=r"predictions/ holds prediction files already \(sst-test-output"):
        predict.main([str(tmp_path / "sst.pt"), "--splits", "test"])
    assert (tmp_path / "predictions" / "sst-test-output.csv").read_text() == "the best run's\n"
    assert predict.main([str(tmp_path / "sst.pt"), "--splits", "test", "--out", "predictions"]) == 0   # asked for
    same_files(tmp_path / "own", tmp_path / "predictions", ["sst-test-output.csv"])
    (tmp_path / "predictions" / "sst-test-output.csv").unlink()
    assert predict.main([str(tmp_path / "sst.pt"), "--splits", "test"]) == 0                           # empty: used
    same_files(tmp_path / "own", tmp_path / "predictions", ["sst-test-output.csv"])


def test_predict_a_deebert_run_at_a_threshold_writes_its_files(tiny_dir, tmp_path):
    from tasks import deebert

    def piece(name, start, stop):
        lines = (DATA / name).read_text(encoding="utf-8").splitlines(keepends=True)
        path = tmp_path / f"{start}-{name}"
        path.write_text(lines[0] + "".join(lines[1 + start:1 + stop]), encoding="utf-8")
        return str(path)
    out = tmp_path / "dee"
    deebert.run(deebert.parse_settings([
        "--task", "sst", "--model", str(tiny_dir), "--train-file", piece("ids-sst-train.csv", 0, 24),
        "--dev-file", piece("ids-sst-dev.csv", 0, 16), "--test-file", piece("ids-sst-dev.csv", 16, 28),
        "--epochs", "1", "--batch-size", "8", "--device", TEST_DEVICE, "--no-progress", "--thresholds", "0.5", "1.0",
        "--threshold", "1.0", "--out", str(out)]))
    assert predict.main([str(out), "--threshold", "1.0", "--kind", "deebert", "--out", str(tmp_path / "again")]) == 0
    same_files(out / "predictions", tmp_path / "again", ["sst-dev-output.csv", "sst-test-output.csv"])
    with pytest.raises(ConfigurationError, match="stage-1"):
        predict.main([str(out / "stage1.pt"), "--threshold", "1.0"])


def test_sts_as_the_cosine_of_the_sentence_vectors(tiny_dir, files, tmp_path):
    with pytest.raises(ConfigurationError, match="--sts-embedding-loss"):
        train(tiny_dir, files, tmp_path, "bad", "--sts-output", "cosine")
    train(tiny_dir, files, tmp_path, "cos", "--design", "bi-encoder", "--sts-output", "cosine",
          "--sts-embedding-loss", "cosine")
    state = torch.load(tmp_path / "cos.pt", weights_only=True)
    logged = json.loads((tmp_path / "cos" / "multitask-summary.json").read_text())["toolkit"][0]
    assert logged["sts_embedding_share"] == 1.0 and logged["sts_embedding_loss"] > 0   # STS's whole loss
    assert torch.all(state["model"]["head.sts.fc2.bias"] == 0)            # the STS head took no step (bias init 0)
    assert torch.any(state["model"]["head.para.fc2.bias"] != 0)           # the others did
    scores = [float(line.split(",")[1]) for line in (tmp_path / "cos" / "sts-dev-output.csv").read_text().splitlines()[1:]]
    assert all(-5 <= s <= 5 for s in scores) and len(set(scores)) > 1
    assert predict.main([str(tmp_path / "cos.pt"), "--out", str(tmp_path / "again")]) == 0
    same_files(tmp_path / "cos", tmp_path / "again")


def test_pcgrad_is_refused_under_torchrun():
    toolkit = multitask.parse_settings(["--gradient-surgery", "pcgrad"]).toolkit
    toolkit.check(grad_accum=1, world=1)
    with pytest.raises(ConfigurationError, match="torchrun"):
        toolkit.check(grad_accum=1, world=2)
