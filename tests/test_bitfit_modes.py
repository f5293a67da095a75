"""The BitFit fine-tune modes of the task CLIs: flags, what each trains, and the per-task file it writes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import minbert
from minbert import bitfit, bitfit_tasks
from tasks.classifier import SentimentClassifier, parse_settings


def setup(tiny_config, *argv):
    settings = parse_settings(list(argv))
    torch.manual_seed(0)
    model = SentimentClassifier(minbert.BertModel(tiny_config), 5)
    ft = settings.fine_tune
    return model, ft.mode.setup(model, ft, settings.training.seed), ft.mode, ft


def test_bitfit_mode_defaults_to_all_terms_and_a_bitfit_learning_rate(tiny_config):
    model, params, mode, args = setup(tiny_config, "--fine-tune-mode", "bitfit")
    page = (Path(__file__).resolve().parents[1] / "docs" / "bitfit.md").read_text()
    [documented] = re.findall(r"--fine-tune-mode bitfit --bitfit-terms all +# lr defaults to (\S+)", page)
    assert args.bitfit_terms == "all" and mode.default_lr == float(documented)      # docs/bitfit.md's figure
    names = {n for n, p in model.named_parameters() if p.requires_grad}
    assert names == {f"bert.{n}" for n, _ in model.bert.named_parameters() if bitfit.term_of(n)} | {
        "head.weight", "head.bias"}
    assert len(params) == len(names)


def test_bitfit_terms_subset_and_bad_terms(tiny_config, capsys):
    _, params, _, _ = setup(tiny_config, "--fine-tune-mode", "bitfit", "--bitfit-terms", "bq,bm2")
    assert sum(p.numel() for p in params) == 2 * (32 + 64) + 32 * 5 + 5
    with pytest.raises(SystemExit):
        parse_settings(["--fine-tune-mode", "bitfit", "--bitfit-terms", "bq,Wq"])
    assert "unknown bias term" in capsys.readouterr().err


def test_frozen_trains_the_head_only(tiny_config):
    model, _, _, _ = setup(tiny_config, "--fine-tune-mode", "frozen")
    assert {n for n, p in model.named_parameters() if p.requires_grad} == {"head.weight", "head.bias"}


@pytest.mark.parametrize("how", ["rand_uniform", "rand_row_col"])
def test_random_controls_get_bitfits_budget(tiny_config, how):
    model, params, _, _ = setup(tiny_config, "--fine-tune-mode", how, "--bitfit-terms", "bm2")
    deltas = sum(p.numel() for n, p in model.named_parameters() if p.requires_grad and n.endswith(".delta"))
    assert 0 < deltas <= 2 * 64 and sum(p.numel() for p in params) == deltas + 32 * 5 + 5
    again, _, _, _ = setup(tiny_config, "--fine-tune-mode", how, "--bitfit-terms", "bm2")
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(model.named_buffers(), again.named_buffers()))


def test_after_fit_writes_a_task_file(tiny_config, tmp_path):
    path = tmp_path / "sst.safetensors"
    model, _, mode, args = setup(tiny_config, "--fine-tune-mode", "bitfit", "--bitfit-terms", "bm2",
                                 "--bitfit-task-file", str(path))
    with torch.no_grad():
        model.bert.layers[1].bm2.add_(1.0)
        model.head.bias.add_(2.0)
    mode.after_fit(model, args, {"task": "sst", "fine_tune_mode": "bitfit", "bitfit_terms": args.bitfit_terms})
    fresh = SentimentClassifier(minbert.BertModel(tiny_config), 5)
    fresh.bert.load_state_dict(model.bert.state_dict())
    with torch.no_grad():
        fresh.bert.layers[1].bm2.zero_()
    meta = bitfit_tasks.load_task(path, fresh.bert, fresh.head)
    assert meta["bitfit_terms"] == "bm2" and meta["task"] == "sst"
    assert torch.equal(fresh.bert.layers[1].bm2, model.bert.layers[1].bm2)
    assert torch.equal(fresh.head.bias, model.head.bias)


@pytest.mark.parametrize("how, embeddings", [("rand_uniform", False), ("rand_row_col", False),
                                             ("rand_row_col_ref", False), ("rand_uniform_emb", True)])
def test_random_control_modes_reach_the_embeddings_only_in_their_named_variants(tiny_config, how, embeddings):
    model, _, _, _ = setup(tiny_config, "--fine-tune-mode", how, "--seed", "2")
    trained = [n for n, p in model.named_parameters() if p.requires_grad and n.endswith(".delta")]
    assert trained and any(n.startswith("bert.embeddings.") for n in trained) == embeddings
