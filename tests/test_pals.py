"""PALs (minbert.pals): the layer's extension points, zero PALs change nothing, counts, per-task gradients, the CLI."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from test_multitask import argv, files, pair_batch  # noqa: F401  (fixtures)

import minbert
from minbert.model import layer_norm
from minbert.multitask import TASK_NAMES, MultitaskBert, MultitaskConfig
from minbert.pals import PALs, PalsConfig
from tasks.core.checkpoints import load_checkpoint
from tasks.core.finetune import MODES, get_mode
from tasks.core.train import seed_everything
from tasks.multitask import add_pals, parse_settings, run

pytestmark = pytest.mark.usefixtures("one_thread")


def padded(tokenizer) -> dict:
    s = tokenizer(["a fine film", "dull and far too long , with nothing to say"])
    return {"input_ids": s.input_ids, "attention_mask": s.attention_mask, "labels": torch.tensor([4, 0])}


# ------------------------------------------------------------------ the layer's extension points

def test_an_adapters_ts_is_added_inside_the_last_layer_norm(tiny_config, tokenizer):
    torch.manual_seed(0)
    bert = minbert.BertModel(tiny_config).eval()
    layer = bert.layers[0]
    x = torch.randn(2, 5, tiny_config.hidden_size)
    mask = bert.attention_bias(torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]), x)
    c = torch.randn(2, 5, tiny_config.hidden_size)
    with torch.no_grad():
        layer.adapter = lambda h1, x, mask: (h1, c)
        got = layer(x, mask)
        layer.adapter = None
        # the equations, written out: out = LN2(h5 + h3 + c)
        q, k, v = (layer.split_heads(F.linear(x, W, b)) for W, b in
                   ((layer.Wq, layer.bq), (layer.Wk, layer.bk), (layer.Wv, layer.bv)))
        h1 = layer.attend(q, k, v, mask)
        h3 = layer_norm(F.linear(h1, layer.Wm1, layer.bm1) + x, layer.gLN1, layer.bLN1, layer.eps)
        h5 = F.linear(F.gelu(F.linear(h3, layer.Wm2, layer.bm2)), layer.Wm3, layer.bm3)
        expected = layer_norm(h5 + h3 + c, layer.gLN2, layer.bLN2, layer.eps)
        keep = (mask == 0).view(2, 5, 1)
        torch.testing.assert_close(got, expected * keep)
        assert not torch.allclose(got, layer(x, mask))


def test_an_adapters_h1_replaces_the_merged_heads(tiny_config):
    torch.manual_seed(0)
    bert = minbert.BertModel(tiny_config).eval()
    layer = bert.layers[1]
    x = torch.randn(2, 5, tiny_config.hidden_size)
    mask = bert.attention_bias(torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]), x)
    with torch.no_grad():
        layer.adapter = lambda h1, x, mask: (2 * h1, 0.0)            # the same as doubling Wm1
        got = layer(x, mask)
        layer.adapter = None
        layer.Wm1.mul_(2)
        torch.testing.assert_close(got, layer(x, mask))


# ------------------------------------------------------------------ PALs in the multitask model

@pytest.mark.parametrize("variant", ["standard", "concat"])
@pytest.mark.parametrize("design", ["bi-encoder", "cross-encoder"])
def test_pals_with_a_zero_decoder_leave_every_output_bit_identical(variant, design, tiny_config, tokenizer):
    torch.manual_seed(0)
    plain = MultitaskBert(minbert.BertModel(tiny_config), MultitaskConfig(design=design, head_hidden=16)).eval()
    model = copy.deepcopy(plain)
    pals = model.add_pals(PalsConfig(variant, size=12, heads=3))
    for t in pals.tasks.values():
        torch.nn.init.zeros_(t.decoder.weight)
        torch.nn.init.zeros_(t.decoder.bias)
    batches = {"sst": padded(tokenizer), "para": pair_batch(tokenizer), "sts": pair_batch(tokenizer)}
    with torch.no_grad():
        for task, batch in batches.items():
            assert torch.equal(model.predict(task, batch), plain.predict(task, batch)), task
        sents = padded(tokenizer)
        model.pals.task = "sst"
        assert torch.equal(model.bert(sents["input_ids"], sents["attention_mask"]).last_hidden_state,
                           plain.bert(sents["input_ids"], sents["attention_mask"]).last_hidden_state)
        torch.nn.init.normal_(pals.tasks["para"].decoder.weight)   # a PAL that does something
        assert not torch.allclose(model.predict("para", batches["para"]), plain.predict("para", batches["para"]))
        assert torch.equal(model.predict("sst", batches["sst"]), plain.predict("sst", batches["sst"]))


def test_pal_parameter_counts_for_bert_base_with_three_tasks():
    config = minbert.BertConfig()                                   # bert-base-uncased: H 768, 12 layers
    assert (config.hidden_size, config.num_hidden_layers) == (768, 12)
    # per task: V^E 768 x 204 + 204 = 156,876; V^D 204 x 768 + 768 = 157,440; per layer Q, K, V in 204 dims,
    # 3 x (204 x 204 + 204) = 125,460, times 12 = 1,505,520: 1,819,836 per task, 5,459,508 for three.
    standard = PALs(config, TASK_NAMES, PalsConfig("standard", 204, 6))
    assert sum(p.numel() for p in standard.parameters()) == 3 * (156_876 + 157_440 + 12 * 125_460) == 5_459_508
    # the concat variant adds per task and layer W: 1536 -> 768, 1536 x 768 + 768 = 1,180,416, times 12 = 14,164,992
    concat = PALs(config, TASK_NAMES, PalsConfig("concat", 204, 6))
    assert sum(p.numel() for p in concat.parameters()) == 5_459_508 + 3 * 14_164_992 == 47_954_484


@pytest.mark.parametrize("variant", ["standard", "concat"])
def test_only_the_active_tasks_pals_get_gradients(variant, tiny_config, tokenizer):
    torch.manual_seed(0)
    model = MultitaskBert(minbert.BertModel(tiny_config), MultitaskConfig(design="cross-encoder", head_hidden=16))
    model.add_pals(PalsConfig(variant, size=12, heads=3))
    batch = pair_batch(tokenizer) | {"labels": torch.tensor([4.2, 5.0, 0.4])}
    model.train()
    model.loss("sts", batch).backward()
    for name, p in model.pals.named_parameters():
        if name.startswith("tasks.sts."):
            assert p.grad is not None and p.grad.abs().sum() > 0, name
        else:
            assert p.grad is None, name


def test_pals_need_an_active_task_and_check_their_sizes(tiny_config, tokenizer):
    torch.manual_seed(0)
    model = MultitaskBert(minbert.BertModel(tiny_config), MultitaskConfig(head_hidden=16))
    model.add_pals(PalsConfig())
    s = padded(tokenizer)
    with pytest.raises(RuntimeError, match="no PALs for task None"):
        model.bert(s["input_ids"], s["attention_mask"])
    with pytest.raises(ValueError, match="multiple of the number of heads"):
        PalsConfig(size=100, heads=6)
    with pytest.raises(ValueError, match="variant must be one of"):
        PalsConfig("serial")


@pytest.mark.parametrize("mode", sorted(MODES))
def test_pals_train_in_every_fine_tune_mode(mode, tiny_config):
    torch.manual_seed(0)
    model = MultitaskBert(minbert.BertModel(tiny_config), MultitaskConfig(head_hidden=16))
    settings = parse_settings(["--fine-tune-mode", mode, "--pals", "standard", "--pals-size", "12",
                               "--pals-heads", "3"])
    params = add_pals(model, settings, get_mode(mode).setup(model, settings.fine_tune, settings.training.seed))
    chosen = {id(p) for p in params}
    assert all(p.requires_grad and id(p) in chosen for p in model.pals.parameters())
    assert len(chosen) == len(params)


# ------------------------------------------------------------------ the CLI

@pytest.mark.parametrize("variant, mode", [("standard", "full-model"), ("concat", "last-linear-layer")])
def test_pals_cli_trains_the_pals(variant, mode, tiny_dir, files, tmp_path):  # noqa: F811
    flags = argv(tiny_dir, files, tmp_path, variant, "--epochs", "1", "--pals", variant, "--pals-size", "12",
                 "--pals-heads", "3", "--fine-tune-mode", mode)
    out = run(parse_settings(flags))
    assert set(out["dev"]) >= {"overall"}
    state = load_checkpoint(tmp_path / f"{variant}.pt")["model"]
    seed_everything(11711)                                          # as run() builds its model: the same initial PALs
    settings = parse_settings(flags)
    fresh = MultitaskBert(minbert.load_pretrained(str(tiny_dir)), MultitaskConfig(head_hidden=16))
    add_pals(fresh, settings, get_mode(mode).setup(fresh, settings.fine_tune, settings.training.seed))
    initial = fresh.state_dict()
    assert set(initial) == set(state)
    trained = [k for k in state if k.startswith("pals.tasks.") and k.rsplit(".", 1)[-1] in ("weight", "Wq")]
    assert len(trained) == 3 * (2 + 2 + (2 if variant == "concat" else 0))  # V^E, V^D, 2 layers' Wq (and W)
    for k in trained:
        assert not torch.equal(initial[k], state[k]), k
    encoder_changed = any(not torch.equal(initial[k], state[k]) for k in initial if k.startswith("bert."))
    assert encoder_changed == (mode == "full-model")
