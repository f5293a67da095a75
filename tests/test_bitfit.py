"""BitFit: exactly the named biases train, nothing else moves, counts are right, task files switch exactly."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from torch import nn

import minbert
from minbert import bitfit, bitfit_report, bitfit_tasks
from minbert.bitfit import LAYER_TERMS, freeze, term_of
from minbert.bitfit_controls import freeze_random, merge_deltas
from minbert.bitfit_report import trainable_report
from tasks.core.bitfit_figure import plot_bias_change


def tiny(tiny_config, seed=0):
    torch.manual_seed(seed)
    return minbert.BertModel(tiny_config)


def batch(B=4, T=12, vocab=30522, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, vocab, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[0, T // 2:] = 0
    return ids, mask


def train_steps(model, head, steps=3, lr=1e-2, weight_decay=0.1, optimizer=minbert.AdamW):
    """A few AdamW steps with weight decay on everything trainable; the caller checks what moved."""
    params = [p for p in list(model.parameters()) + list(head.parameters()) if p.requires_grad]
    opt = optimizer(params, lr=lr, weight_decay=weight_decay)
    model.train()
    for step in range(steps):
        ids, mask = batch(seed=step)
        logits = head(model(ids, mask).pooler_output)
        loss = nn.functional.cross_entropy(logits, torch.arange(len(ids)) % logits.shape[-1])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return loss


def named_tensors(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("terms,expected", [
    ("all", set(LAYER_TERMS) | {"embeddings.bLN", "pooler.bp"}),
    ("bq,bm2", {"bq", "bm2"}),
    ("bm2", {"bm2"}),
    ("none", set()),
])
def test_freeze_sets_requires_grad_on_exactly_the_named_terms(tiny_config, terms, expected):
    model = tiny(tiny_config)
    trained = freeze(model, terms)
    on = {n for n, p in model.named_parameters() if p.requires_grad}
    assert on == set(trained)
    assert {term_of(n) for n in on} == expected
    layers = tiny_config.num_hidden_layers
    per_layer = len(expected & set(LAYER_TERMS))
    assert len(on) == per_layer * layers + len(expected - set(LAYER_TERMS))
    assert all(n.split(".")[-1].startswith("b") for n in on)


def test_parse_terms_rejects_unknown_names():
    with pytest.raises(ValueError, match="bx"):
        bitfit.parse_terms("bq,bx")
    with pytest.raises(ValueError):
        bitfit.parse_terms("")
    assert bitfit.parse_terms("bm2, bq,bq") == ("bq", "bm2")


def test_freeze_refuses_a_wrapper():
    with pytest.raises(TypeError, match="BertModel"):
        freeze(nn.Linear(2, 2))


@pytest.mark.parametrize("optimizer", [minbert.AdamW, torch.optim.AdamW])
def test_after_steps_only_the_biases_moved_even_with_weight_decay(tiny_config, optimizer):
    model = tiny(tiny_config)
    head = nn.Linear(tiny_config.hidden_size, 3)
    freeze(model, "bq,bm2")
    before = named_tensors(model)
    train_steps(model, head, optimizer=optimizer)
    for name, p in model.named_parameters():
        if term_of(name) in ("bq", "bm2"):
            assert not torch.equal(p, before[name]), f"{name} did not train"
        else:
            assert torch.equal(p, before[name]), f"{name} moved"
            assert p.grad is None, f"a gradient was computed for frozen {name}"


def test_bitfit_backward_computes_no_weight_gradient(tiny_config):
    model = tiny(tiny_config)
    freeze(model, "all")
    ids, mask = batch()
    model(ids, mask).pooler_output.pow(2).sum().backward()
    grads = {n for n, p in model.named_parameters() if p.grad is not None}
    assert grads == {n for n, p in model.named_parameters() if term_of(n)}


@pytest.mark.parametrize("how", ["rand_uniform", "rand_row_col"])
def test_random_controls_move_only_the_chosen_entries(tiny_config, how):
    model = tiny(tiny_config)
    head = nn.Linear(tiny_config.hidden_size, 3)
    budget = bitfit.bitfit_budget(model, "all")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    chosen = freeze_random(model, how, seed=1)
    assert 0.9 * budget <= chosen <= budget
    assert trainable_report(model).trainable == chosen
    assert all(n.endswith(".delta") for n, p in model.named_parameters() if p.requires_grad)
    masks = {}  # parameter name -> bool mask of its chosen entries
    for mname, module in model.named_modules():
        for attr, plist in getattr(module, "parametrizations", {}).items():
            mask = torch.zeros(plist.original.numel(), dtype=torch.bool)
            mask[plist[0].index] = True
            masks[f"{mname}.{attr}".lstrip(".")] = mask.view_as(plist.original)
    assert sum(int(m.sum()) for m in masks.values()) == chosen
    train_steps(model, head, weight_decay=0.5)
    merge_deltas(model)
    in_layers = moved = 0
    for name, p in model.named_parameters():
        assert not p.requires_grad
        mask = masks.get(name, torch.zeros_like(p, dtype=torch.bool))
        assert torch.equal(p[~mask], before[name][~mask]), f"an unchosen entry of {name} moved"
        if name.startswith("layers."):  # (embedding rows of tokens not in the batch get no gradient)
            in_layers += int(mask.sum())
            moved += int((p[mask] != before[name][mask]).sum())
    assert in_layers > 0 and moved == in_layers, "a chosen entry inside the layers did not train"


def chosen_by_tensor(model) -> dict[str, int]:
    """parameter name -> how many of its entries a random control chose."""
    return {f"{mname}.{attr}".lstrip("."): plist[0].index.numel()
            for mname, module in model.named_modules()
            for attr, plist in getattr(module, "parametrizations", {}).items()}


@pytest.mark.parametrize("how", ["rand_uniform", "rand_row_col"])
def test_random_controls_draw_nothing_from_the_embeddings_unless_asked(tiny_config, how):
    model = tiny(tiny_config)                                       # embeddings: most of the tiny model's entries
    chosen = freeze_random(model, how, budget=2000, seed=3)
    by_tensor = chosen_by_tensor(model)
    assert sum(by_tensor.values()) == chosen and chosen > 1000
    assert not any(n.startswith("embeddings.") for n in by_tensor)
    assert {n.split(".")[0] for n in by_tensor} <= {"layers", "pooler"}
    with_emb = tiny(tiny_config)
    freeze_random(with_emb, how, budget=20000, seed=3, scope="with-embeddings")   # the named option reaches them
    assert any(n.startswith("embeddings.") for n in chosen_by_tensor(with_emb))
    with pytest.raises(ValueError, match="unknown scope"):
        freeze_random(tiny(tiny_config), how, budget=10, scope="everything")


def test_reference_rand_row_col_takes_a_biass_worth_of_lines_per_matrix_and_every_layernorm_gain(tiny_config):
    model = tiny(tiny_config)
    shapes = {n: p.shape for n, p in model.named_parameters()}
    chosen = freeze_random(model, "rand_row_col_ref", seed=5)
    by_tensor = chosen_by_tensor(model)
    matrices = [n for n, s in shapes.items() if len(s) == 2 and not n.startswith("embeddings.")]
    gains = [n for n in shapes if n.split(".")[-1] in ("gLN1", "gLN2")]
    assert set(by_tensor) == set(matrices) | set(gains)               # nothing from the embeddings, no bias
    for n in matrices:                                               # a bias's worth: rows (out) entries, or
        rows, cols = shapes[n]                                       # rows // cols whole rows
        assert by_tensor[n] in (rows, (rows // cols) * cols), n
    assert all(by_tensor[n] == shapes[n][0] for n in gains)
    # BitFit's budget minus the embedding LayerNorm's bias, when every matrix's rows // cols * cols equals its rows
    assert chosen == bitfit.bitfit_budget(model, "all") - shapes["embeddings.bLN"][0]
    with pytest.raises(ValueError, match="picks its own budget"):
        freeze_random(tiny(tiny_config), "rand_row_col_ref", budget=10)


def test_rand_row_col_picks_whole_lines(tiny_config):
    model = tiny(tiny_config)
    freeze_random(model, "rand_row_col", budget=3 * 32, seed=0)
    for module in model.modules():
        for plist in getattr(module, "parametrizations", {}).values():
            mask = torch.zeros(plist.original.numel(), dtype=torch.bool)
            mask[plist[0].index] = True
            mask = mask.view_as(plist.original)
            full_rows, full_cols = mask.all(1), mask.all(0)
            covered = full_rows[:, None] | full_cols[None, :]
            assert torch.equal(mask, covered)


def test_counts_match_a_hand_computation_for_bert_base():
    with torch.device("meta"):
        model = minbert.BertModel(minbert.BertConfig())  # bert-base-uncased's configuration, no weights
    H, I, L, V = 768, 3072, 12, 30522
    per_layer_biases = 7 * H + I                    # bq bk bv bm1 bLN1 bm3 bLN2 are H, bm2 is 4H
    biases = L * per_layer_biases + H + H           # + embeddings.bLN + pooler.bp
    weights = L * (4 * H * H + 2 * H * I + 2 * H)   # Wq Wk Wv Wm1, Wm2 Wm3, gLN1 gLN2
    total = biases + weights + (V + 512 + 2) * H + H + H * H  # + tables, embeddings.gLN, pooler.Wp
    assert total == 109_482_240
    freeze(model, "all")
    report = trainable_report(model)
    assert (report.trainable, report.total) == (biases, total) == (102_912, 109_482_240)
    assert report.rows["bm2"] == (L * I, L * I)
    assert round(report.percent, 2) == 0.09
    freeze(model, "bq,bm2")
    assert trainable_report(model).trainable == L * (H + I) == 46_080  # the paper's 0.04% setting
    assert "0.042%" in str(trainable_report(model))


def test_report_counts_the_head_apart(tiny_config):
    model = tiny(tiny_config)
    freeze(model, "none")
    report = trainable_report(model, nn.Linear(32, 5))
    assert report.trainable == 0 and report.head == (165, 165)


def test_bias_change_is_zero_then_tracks_the_trained_terms(tiny_config):
    model = tiny(tiny_config)
    b0 = bitfit.bias_snapshot(model)
    change = bitfit_report.bias_change(b0, model)
    assert set(change) == set(LAYER_TERMS) and all(v == [0.0, 0.0] for v in change.values())
    freeze(model, "bm2")
    train_steps(model, nn.Linear(32, 3))
    change = bitfit_report.bias_change(b0, model)
    assert all(v > 0 for v in change["bm2"]) and all(sum(change[t]) == 0 for t in LAYER_TERMS if t != "bm2")
    table = bitfit_report.format_bias_change(change)
    assert table.count("\n") == len(LAYER_TERMS) + 1 and "| bm2 |" in table


def test_heatmap_is_written(tiny_config, tmp_path):
    change = {t: [0.1 * i, 0.2] for i, t in enumerate(LAYER_TERMS)}
    plot_bias_change(change, tmp_path / "fig.png", "test")
    assert (tmp_path / "fig.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_heatmap_counts_layers_from_1_and_labels_its_colour_bar(tmp_path, monkeypatch):
    """Layers 1..L as everywhere else in the project (tasks.attention --layer, DeeBERT's figures); the colour bar says
    what it shows; the numbers table's columns count the same way."""
    from tasks.core import bitfit_figure
    kept = []
    monkeypatch.setattr(bitfit_figure, "save_figure", lambda fig, path, **kw: kept.append(fig))
    change = {t: [0.1, 0.2, 0.3] for t in LAYER_TERMS}
    plot_bias_change(change, tmp_path / "fig.png")
    heat, bar = kept[0].axes
    assert [t.get_text() for t in heat.get_xticklabels()] == ["1", "2", "3"] and heat.get_xlabel() == "layer"
    assert bar.get_ylabel() == "mean |b0 - bF| (pretrained vs fine-tuned bias)"
    assert bitfit_report.format_bias_change(change).splitlines()[0] == "| term | L1 | L2 | L3 |"


@pytest.mark.parametrize("name, magic", [("fig.pdf", b"%PDF"), ("fig.svg", b"<?xml"), ("fig.v2.png", b"\x89PNG")])
def test_the_heatmap_is_written_in_the_format_its_name_says(tmp_path, name, magic):
    """matplotlib's format is the name's extension (the temporary's name says nothing): a .pdf is a PDF."""
    plot_bias_change({t: [0.1, 0.2] for t in LAYER_TERMS}, tmp_path / name)
    assert [p.name for p in tmp_path.iterdir()] == [name] and (tmp_path / name).read_bytes().startswith(magic)


def test_a_failed_heatmap_leaves_the_previous_figure_and_no_temporary(tmp_path, monkeypatch):
    import matplotlib.figure
    path = tmp_path / "fig.png"
    path.write_bytes(b"before")

    def savefig(self, fname, *args, **kwargs):
        Path(fname).write_bytes(b"partial")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    with pytest.raises(OSError, match="No space left"):
        plot_bias_change({t: [0.1, 0.2] for t in LAYER_TERMS}, path)
    assert [p.name for p in tmp_path.iterdir()] == ["fig.png"] and path.read_bytes() == b"before"


def test_task_files_round_trip_and_switching_is_exact(minilm, tokenizer, tmp_path):
    backbone = copy.deepcopy(minilm)
    shared = bitfit_tasks.SharedBackbone(backbone)
    enc = tokenizer(["a gripping, funny film", "dull and far too long", "it is a film"])
    H = minilm.config.hidden_size

    def run():
        with torch.no_grad():
            backbone.eval()
            out = backbone(enc.input_ids, enc.attention_mask, enc.token_type_ids)
            return out.last_hidden_state, out.pooler_output

    # two tasks trained on the same backbone with different subsets and heads
    expected, heads = {}, {"a": nn.Linear(H, 5), "b": nn.Linear(H, 1)}
    for task, terms in (("a", "all"), ("b", "bq,bm2")):
        with torch.no_grad():  # each task starts from the pretrained biases
            for n, p in backbone.named_parameters():
                if n in shared.base:
                    p.copy_(shared.base[n])
        freeze(backbone, terms)
        torch.manual_seed(ord(task))
        with torch.no_grad():  # stand-in for training: move every trainable bias
            for p in backbone.parameters():
                if p.requires_grad:
                    p.add_(0.05 * torch.randn_like(p))
        size = bitfit_tasks.save_task(tmp_path / f"{task}.safetensors", backbone, heads[task], {"task": task})
        assert size < 120_000  # ~26k biases of 4 bytes, not the 90 MB model
        expected[task] = run()

    head_a, head_b = nn.Linear(H, 5), nn.Linear(H, 1)
    for task in "abab":
        meta = shared.switch(tmp_path / f"{task}.safetensors", head_a if task == "a" else head_b)
        assert meta["task"] == task
        got = run()
        assert all(torch.equal(x, y) for x, y in zip(got, expected[task])), f"task {task} not reproduced"
    assert torch.equal(head_a.weight, heads["a"].weight) and torch.equal(head_b.bias, heads["b"].bias)
    # only biases differ from the pretrained backbone
    for n, p in backbone.named_parameters():
        if not term_of(n):
            assert torch.equal(p, dict(minilm.named_parameters())[n])


def test_load_task_refuses_a_mismatched_file(tiny_config, tmp_path):
    model = tiny(tiny_config)
    freeze(model, "all")
    path = tmp_path / "t.safetensors"
    bitfit_tasks.save_task(path, model, nn.Linear(32, 3))
    with pytest.raises(ValueError, match="t.safetensors.*different backbone"):
        bitfit_tasks.load_task(path, tiny(tiny_config, seed=1))
    with pytest.raises(ValueError, match="t.safetensors.*head.weight"):
        bitfit_tasks.load_task(path, model, nn.Linear(32, 4))
    freeze_random(model, "rand_uniform", budget=10)
    merge_deltas(model)
    model.layers[0].Wq.requires_grad_(True)
    with pytest.raises(ValueError, match="not a bias term"):
        bitfit_tasks.save_task(path, model)
