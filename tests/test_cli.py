"""The CLI scaffold (tasks/core/training_setup.py): list flags in both spellings, each common flag declared once, run settings."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import TEST_DEVICE

from tasks import classifier, deebert, multitask, simcse
from tasks.core.resume import resume_config

TASKS_DIR = Path(__file__).resolve().parents[1] / "tasks"


@pytest.mark.parametrize("flag, spellings, value", [
    ("--thresholds", (["0,0.2,0.6"], ["0", "0.2", "0.6"], ["0,0.2", "0.6"]), [0.0, 0.2, 0.6]),
    ("--patience", (["1,2,3"], ["1", "2", "3"]), [1, 2, 3]),
])
def test_deebert_list_flags_take_commas_and_spaces(flag, spellings, value):
    for spelling in spellings:
        assert getattr(deebert.parse_settings([flag, *spelling]).sweep, flag[2:]) == value


def test_tasks_and_bitfit_terms_take_spaces_too_and_store_the_comma_form():
    parse = multitask.parse_settings
    assert parse(["--tasks", "sst", "sts"]).design.tasks == parse(["--tasks", "sst,sts"]).design.tasks == "sst,sts"
    settings = classifier.parse_settings(["--fine-tune-mode", "bitfit", "--bitfit-terms", "bq", "bm2"])
    assert settings.fine_tune.bitfit_terms == "bq,bm2"
    for bad in (["--thresholds", "0,x"], ["--patience", "1,1.5"]):
        with pytest.raises(SystemExit):
            deebert.parse_settings(bad)
    with pytest.raises(SystemExit):
        classifier.parse_settings(["--bitfit-terms", "bq,nope"])


def test_each_common_flag_is_declared_once_and_per_cli_defaults_stay():
    for flag in ("--seed", "--device", "--threads", "--model", "--epochs", "--lr", "--batch-size", "--resume",
                 "--eval-batch-size", "--no-progress", "--max-train-examples", "--data-dir", "--pooling",
                 "--max-length", "--precision", "--optimizer", "--run-dir", "--config", "--print-config"):
        for command in (classifier, multitask, simcse, deebert):     # generated from the settings' fields
            assert flag in command.build_parser().format_help(), (command.__name__, flag)
    assert not any("add_argument(\"--seed\"" in f.read_text() for f in TASKS_DIR.rglob("*.py"))
    assert sum(f.read_text().count("seed: int = setting(") for f in (TASKS_DIR / "core").glob("*.py")) == 1  # once
    assert simcse.parse_settings([]).training.batch_size == 64
    assert simcse.parse_settings([]).training.max_length == 64
    assert deebert.parse_settings([]).run.eval_batch_size == 1
    assert deebert.parse_settings([]).training.lr == 3e-5
    assert classifier.parse_settings([]).training.epochs == 3 and simcse.parse_settings([]).training.epochs is None
    assert deebert.parse_settings(["--precision", "bf16", "--optimizer", "fused"]).recipe.optimizer == "fused"


def test_run_settings_leave_out_where_and_how_a_run_writes():
    for command in (classifier, multitask):
        typed = resume_config(command.parse_settings(["--threads", "2", "--no-progress", "--checkpoint", "x.pt"]))
        assert not any(k.startswith("run.") for k in typed) and "training.epochs" not in typed   # free on resume
        assert typed["training.seed"] == 11711 and typed["recipe.precision"] == "fp32"


def test_deebert_trains_both_stages_with_the_recipe_flags(tiny_dir, tmp_path, monkeypatch):
    seen = []

    class Stop(Exception):
        pass

    def fake_fit(work, recipe, options, terms=None):
        seen.append((type(work.optimizer), recipe.loop() | {"config": options.config}))
        raise Stop

    monkeypatch.setattr(deebert, "fit", fake_fit)
    argv = ["--model", str(tiny_dir), "--device", TEST_DEVICE, "--no-progress", "--max-train-examples", "8",
            "--max-eval-examples", "8", "--out", str(tmp_path / "run"), "--optimizer", "fused",
            "--warmup-ratio", "0.1", "--max-grad-norm", "1", "--grad-accum", "2"]
    with pytest.raises(Stop):
        deebert.run(deebert.parse_settings(argv))
    optimizer, kwargs = seen[0]
    assert optimizer is torch.optim.AdamW                 # --optimizer fused: torch's kernel, not minbert.AdamW
    assert {k: kwargs[k] for k in ("precision", "warmup_ratio", "max_grad_norm", "grad_accum")} == {
        "precision": "fp32", "warmup_ratio": 0.1, "max_grad_norm": 1.0, "grad_accum": 2}
    assert kwargs["config"]["recipe.optimizer"] == "fused" and kwargs["config"]["stage"] == 1


def test_the_classifiers_loss_is_the_librarys_pure_cross_entropy_with_the_same_bits() -> None:
    """One cross-entropy: the classifier's loss (and DeeBERT's off-ramps') is minbert.losses.cross_entropy of the
    model's logits, the same F.cross_entropy call as before, bit for bit."""
    import inspect

    import torch.nn.functional as F

    from minbert import deebert as deebert_lib
    from minbert import losses
    torch.manual_seed(0)
    logits, labels = torch.randn(5, 3, requires_grad=True), torch.tensor([0, 2, 1, 1, 0])
    model = lambda **inputs: logits                 # a model that returns fixed logits
    batch = {"input_ids": torch.zeros(5, 2, dtype=torch.long), "attention_mask": torch.ones(5, 2),
             "token_type_ids": torch.zeros(5, 2, dtype=torch.long), "labels": labels}
    assert torch.equal(classifier.classification_loss(model, batch), F.cross_entropy(logits, labels))
    assert torch.equal(deebert_lib.ramp_loss(logits, labels), F.cross_entropy(logits, labels))
    for code in (classifier.classification_loss, deebert_lib.ramp_loss):
        assert "F.cross_entropy" not in inspect.getsource(code), code   # the library's, not a copy
    assert losses.cross_entropy(logits, labels).item() == F.cross_entropy(logits, labels).item()
