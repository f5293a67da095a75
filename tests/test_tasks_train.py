"""The classifier CLI and the shared training loop: kill-and-resume, fine-tune modes, checkpoints, devices."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import DATA, TEST_DEVICE, killed_after_first_epoch

import minbert
from tasks import classifier
from tasks.classifier import SentimentClassifier, build_parser, parse_settings, run
from tasks.core import finetune
from tasks.core.checkpoints import load_checkpoint, save_checkpoint
from tasks.core.distributed import pick_device
from tasks.core.errors import ConfigurationError, ResumeError
from tasks.core.train import Interrupted

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def files(tmp_path):
    """Small slices of the real SST files; the test slice keeps its labels, so it is scored too."""
    def piece(source, name, start, stop):
        lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
        path = tmp_path / name
        path.write_text(lines[0] + "".join(lines[1 + start:1 + stop]), encoding="utf-8")
        return str(path)
    return {"train": piece(DATA / "ids-sst-train.csv", "train.csv", 0, 48),
            "dev": piece(DATA / "ids-sst-dev.csv", "dev.csv", 0, 40),
            "test": piece(DATA / "ids-sst-dev.csv", "test.csv", 40, 70)}


def argv(tiny_dir, files, tmp_path, name, *extra):
    return ["--model", str(tiny_dir), "--train-file", files["train"], "--dev-file", files["dev"],
            "--test-file", files["test"], "--device", TEST_DEVICE, "--batch-size", "8", "--lr", "1e-3", "--no-progress",
            "--checkpoint", str(tmp_path / f"{name}.pt"), "--predictions-dir", str(tmp_path / name), *extra]


def test_kill_and_resume_reproduces_an_uninterrupted_run(tiny_dir, files, tmp_path, monkeypatch):
    whole = run(parse_settings(argv(tiny_dir, files, tmp_path, "whole", "--epochs", "3")))

    real_fit = classifier.fit

    monkeypatch.setattr(classifier, "fit", killed_after_first_epoch(real_fit))
    with pytest.raises(Interrupted):
        run(parse_settings(argv(tiny_dir, files, tmp_path, "split", "--epochs", "3")))
    assert load_checkpoint(tmp_path / "split.pt")["epoch"] == 1
    monkeypatch.setattr(classifier, "fit", real_fit)
    resumed = run(parse_settings(
        argv(tiny_dir, files, tmp_path, "split", "--epochs", "3", "--resume", str(tmp_path / "split.pt"))))

    a, b = load_checkpoint(tmp_path / "whole.pt"), load_checkpoint(tmp_path / "split.pt")
    assert a["epoch"] == b["epoch"] == 3
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
        assert torch.equal(a["best_state"][key], b["best_state"][key]), key
    for sa, sb in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values()):
        assert torch.equal(sa["exp_avg_sq"], sb["exp_avg_sq"])
    strip = [{k: v for k, v in h.items() if not k.endswith("seconds")} for h in whole["history"]]
    assert strip == [{k: v for k, v in h.items() if not k.endswith("seconds")} for h in resumed["history"]]
    for split in ("dev", "test"):
        assert (tmp_path / "whole" / f"sst-{split}-output.csv").read_text() == \
            (tmp_path / "split" / f"sst-{split}-output.csv").read_text()
    assert whole["dev_accuracy"] == resumed["dev_accuracy"] and "test_accuracy" in resumed
    initial = minbert.load_pretrained(str(tiny_dir)).state_dict()
    assert not torch.equal(a["model"]["bert.layers.0.Wq"], initial["layers.0.Wq"])   # it did train


def test_resume_refuses_a_checkpoint_of_a_different_run(tiny_dir, files, tmp_path):
    run(parse_settings(argv(tiny_dir, files, tmp_path, "one", "--epochs", "1")))
    with pytest.raises(ValueError, match=r"cannot resume a different run; settings differ: training.lr: checkpoint 0.001, now 0.01"):
        run(parse_settings(argv(tiny_dir, files, tmp_path, "one", "--epochs", "2", "--lr", "0.01",
                                           "--resume", str(tmp_path / "one.pt"))))


def test_last_linear_layer_trains_the_head_only(tiny_dir, files, tmp_path):
    run(parse_settings(argv(tiny_dir, files, tmp_path, "frozen", "--epochs", "1",
                                       "--fine-tune-mode", "last-linear-layer")))
    state = load_checkpoint(tmp_path / "frozen.pt")
    initial = minbert.load_pretrained(str(tiny_dir)).state_dict()
    for key, value in initial.items():
        assert torch.equal(state["model"][f"bert.{key}"], value), key
    assert len(state["optimizer"]["state"]) == 2                   # head.weight and head.bias


def test_a_registered_mode_plugs_into_the_loop_without_changes(tiny_dir, files, tmp_path):
    calls = []

    def biases_only(model, settings, seed):
        for name, p in model.named_parameters():
            p.requires_grad_(name.startswith("head.") or name.rsplit(".", 1)[-1].startswith("b"))
        return finetune.trainable(model)

    finetune.register(finetune.FineTuneMode("biases-only", biases_only, default_lr=1e-2, help="test mode",
                                            post_step=lambda model, settings: calls.append(1)))
    try:
        out = run(parse_settings(argv(tiny_dir, files, tmp_path, "bias", "--epochs", "1",
                                                 "--fine-tune-mode", "biases-only")))
    finally:
        del finetune.MODES["biases-only"]
    assert len(calls) == 6 and out["best_epoch"] == 1               # 48 examples / batch 8
    state = load_checkpoint(tmp_path / "bias.pt")
    initial = minbert.load_pretrained(str(tiny_dir)).state_dict()
    assert torch.equal(state["model"]["bert.layers.0.Wq"], initial["layers.0.Wq"])
    assert not torch.equal(state["model"]["bert.layers.0.bq"], initial["layers.0.bq"])


def test_every_flag_is_explained_and_modes_have_their_own_lr():
    parser = build_parser()
    for action in parser._actions:
        assert action.help, action.option_strings
    text = parser.format_help()
    for flag in ("--task", "--model", "--fine-tune-mode", "--epochs", "--lr", "--batch-size", "--seed", "--device",
                 "--max-train-examples", "--train-file", "--dev-file", "--test-file", "--resume"):
        assert flag in text
    assert finetune.get_mode("last-linear-layer").default_lr == 1e-3
    assert 1e-5 <= finetune.get_mode("full-model").default_lr <= 5e-5
    with pytest.raises(ValueError, match="unknown fine-tune mode 'nope'"):
        finetune.get_mode("nope")


def test_pooling_and_head(tiny_config):
    torch.manual_seed(0)
    model = SentimentClassifier(minbert.BertModel(tiny_config), 5, dropout=0.0).eval()
    ids = torch.tensor([[101, 2023, 102, 0], [101, 2023, 2003, 102]])
    mask = (ids != 0).long()
    logits = model(ids, mask)                                     # (B, 5)
    assert logits.shape == (2, 5)
    h = model.bert(ids, mask).last_hidden_state
    expected = model.head(h[0, :3].mean(0))                       # padding left out of the mean
    assert torch.allclose(logits[0], expected, atol=1e-6)
    model.pooling = "cls"
    assert torch.allclose(model(ids, mask), model.head(h[:, 0]), atol=1e-6)
    with pytest.raises(ValueError, match="pooling"):
        SentimentClassifier(model.bert, 5, pooling="max")


def test_checkpoints_are_atomic_and_loaded_weights_only(tmp_path):
    path = save_checkpoint(tmp_path / "c.pt", {"w": torch.ones(2), "epoch": 3})
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]      # no temporary file left behind
    assert load_checkpoint(path)["epoch"] == 3
    torch.save({"evil": Interrupted("not a tensor")}, tmp_path / "bad.pt")
    with pytest.raises(ResumeError, match="bad.pt: cannot read the training checkpoint: it holds a value that loading "
                                          "with weights_only refuses .WeightsUnpickler error: Unsupported global: "
                                          "GLOBAL tasks.core.loop.Interrupted"):
        load_checkpoint(tmp_path / "bad.pt")
    with pytest.raises(FileNotFoundError, match="no such checkpoint"):
        load_checkpoint(tmp_path / "absent.pt")


@pytest.mark.parametrize("cuda, mps, auto", [(True, True, "cuda"), (True, False, "cuda"), (False, True, "mps"),
                                             (False, False, "cpu")])
def test_device_selection(cuda, mps, auto, monkeypatch):
    """auto prefers cuda, then mps, then cpu (a fixed table, whatever this machine has); absent devices are refused."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)
    assert pick_device("auto") == torch.device(auto)
    assert pick_device("cpu") == torch.device("cpu")
    for name, present, message in (("cuda", cuda, "no CUDA device"), ("mps", mps, "MPS is not available")):
        if present:
            assert pick_device(name) == torch.device(name)
        else:
            with pytest.raises(ConfigurationError, match=message):
                pick_device(name)


def test_max_train_examples_is_a_seeded_random_sample(tokenizer):
    """The SST training file is grouped by sentiment: a limit must sample rows, not take the first ones."""
    path = DATA / "ids-sst-train.csv"
    a = classifier.load_split("train", path, "sst", tokenizer, limit=200, seed=1)
    b = classifier.load_split("train", path, "sst", tokenizer, limit=200, seed=1)
    c = classifier.load_split("train", path, "sst", tokenizer, limit=200, seed=2)
    first = [r.label for r in first_rows(path, 200)]
    assert [r.id for r in a.records] == [r.id for r in b.records]          # same seed, same rows
    assert [r.id for r in a.records] != [r.id for r in c.records]          # another seed, other rows
    assert len({r.label for r in a.records}) == 5                          # every class is present
    assert max(first.count(k) for k in set(first)) / 200 > 0.5 > max(
        [r.label for r in a.records].count(k) for k in range(5)) / 200     # the first rows are skewed, the sample is not


def first_rows(path, n):
    from tasks.core.data import TASKS
    return list(TASKS["sst"].read(path))[:n]


def test_resume_refuses_a_data_file_changed_since_the_run_started(tiny_dir, files, tmp_path):
    """The checkpoint records each file the run read (bytes, sha256): a resume on changed data is refused in one
    line naming the file; a checkpoint written before files were recorded still resumes; an unlabelled test file
    may change."""
    test = Path(files["test"])                        # unlabelled, as the course's test files are
    test.write_text("".join((DATA / "ids-sst-test-student.csv").read_text(encoding="utf-8").splitlines(True)[:30]),
                    encoding="utf-8")
    run(parse_settings(argv(tiny_dir, files, tmp_path, "one", "--epochs", "1")))
    state = load_checkpoint(tmp_path / "one.pt")
    for mark in state["data_files"].values():          # a record without a key added later: the same bytes resume
        del mark["labelled"]
    save_checkpoint(tmp_path / "one.pt", state)
    run(parse_settings(argv(tiny_dir, files, tmp_path, "one", "--epochs", "1", "--resume", str(tmp_path / "one.pt"))))
    recorded = load_checkpoint(tmp_path / "one.pt")["data_files"]
    assert set(recorded) == {files["train"], files["dev"], files["test"]}
    train = Path(files["train"])
    train.write_text("".join(train.read_text(encoding="utf-8").splitlines(keepends=True)[:25]),   # half its rows
                     encoding="utf-8")
    resume = argv(tiny_dir, files, tmp_path, "one", "--epochs", "2", "--resume", str(tmp_path / "one.pt"))
    with pytest.raises(ResumeError, match=rf"^{tmp_path / 'one.pt'}: cannot resume: {files['train']} has changed "
                                          r"since the run started \(.*\): put the file back as it was, or start a "
                                          r"new run without --resume$"):
        run(parse_settings(resume))
    state = load_checkpoint(tmp_path / "one.pt")
    del state["data_files"]                                               # as a checkpoint written before this
    save_checkpoint(tmp_path / "one.pt", state)
    assert len(run(parse_settings(resume))["history"]) == 2
    test.write_text("".join(test.read_text(encoding="utf-8").splitlines(keepends=True)[:10]), encoding="utf-8")
    assert load_checkpoint(tmp_path / "one.pt")["data_files"][files["test"]]["labelled"] is False
    three = argv(tiny_dir, files, tmp_path, "one", "--epochs", "3", "--resume", str(tmp_path / "one.pt"))
    assert len(run(parse_settings(three))["history"]) == 3
