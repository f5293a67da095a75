"""DeeBERT early exit: stable entropy, the exit rules, batched exit against batch 1, two-stage training, the CLI."""

from __future__ import annotations

import copy
import csv
import json
import math
from pathlib import Path

import pytest
import torch
from conftest import DATA, TEST_DEVICE, fit_with

import minbert
from minbert import deebert
from minbert.deebert import DeeBert, DeeBertConfig, EntropyExit, PatienceExit, early_exit, entropy, exit_from_logits
from tasks import deebert as cli
from tasks.classifier import SentimentClassifier
from tasks.core.batching import batches
from tasks.core.data import TASKS
from tasks.core.errors import ConfigurationError
from tasks.core.evaluation import check_predictions
from tasks.deebert import timing as deebert_timing
from tasks.deebert.report import plot_per_layer, savings

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def config() -> minbert.BertConfig:
    """Four layers, so that samples can leave at several depths; hidden 32."""
    return minbert.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
                              intermediate_size=64, max_position_embeddings=128)


@pytest.fixture
def tiny_dir(tmp_path, config, minilm_dir):
    """A tiny random BERT saved as a checkpoint directory, with MiniLM's vocabulary."""
    torch.manual_seed(0)
    directory = tmp_path / "tiny"
    minbert.save_pretrained(minbert.BertModel(config), directory)
    (directory / "vocab.txt").write_bytes((minilm_dir / "vocab.txt").read_bytes())
    return directory


def piece(tmp_path, source, name, start, stop):
    """A slice of a real data file, header kept."""
    lines = (DATA / source).read_text(encoding="utf-8").splitlines(keepends=True)
    path = tmp_path / name
    path.write_text(lines[0] + "".join(lines[1 + start:1 + stop]), encoding="utf-8")
    return str(path)


def sentences(n: int = 12) -> list[str]:
    """SST dev sentences of many lengths (the file's first rows, shortest to longest interleaved)."""
    rows = sorted(TASKS["sst"].read(DATA / "ids-sst-dev.csv")[:40], key=lambda e: len(e.sentence))
    picked = rows[::max(1, len(rows) // n)][:n]
    return [e.sentence for e in picked[::2] + picked[1::2]]


def spread(model: DeeBert, classifier_std: float = 1.0) -> DeeBert:
    """Sharper random weights, so that entropies spread over [0, ln C] and samples leave at different layers."""
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.bert.layers.named_parameters():
            if name.rsplit(".", 1)[-1].startswith("W"):
                p.mul_(10.0)
        for ramp in model.ramps:
            if ramp.pooler is not None:
                torch.nn.init.normal_(ramp.pooler.Wp, 0.0, 0.2)
            torch.nn.init.normal_(ramp.classifier.weight, 0.0, classifier_std)
    return model.eval()


def test_entropy_equals_a_hand_computation_and_stays_finite():
    z = torch.tensor([1.0, 2.0, 3.0])
    p = [math.exp(v) / sum(math.exp(u) for u in (1, 2, 3)) for v in (1, 2, 3)]
    by_hand = -sum(q * math.log(q) for q in p)
    assert entropy(z).item() == pytest.approx(by_hand, abs=1e-6)
    assert entropy(z, normalize=True).item() == pytest.approx(by_hand / math.log(3), abs=1e-6)
    assert entropy(torch.zeros(4, 5)).tolist() == pytest.approx([math.log(5)] * 4, abs=1e-6)
    big = torch.tensor([[1000.0, -1000.0], [1000.0, 1000.0], [-1000.0, 1000.0], [-math.inf, 0.0]])
    h = entropy(big)
    assert torch.isfinite(h).all()
    assert h.tolist() == pytest.approx([0.0, math.log(2), 0.0, 0.0], abs=1e-6)
    naive = torch.logsumexp(big[:2], -1) - (big[:2] * big[:2].exp()).sum(-1) / big[:2].exp().sum(-1)
    assert not torch.isfinite(naive).all()     # the public code's formula overflows here
    assert torch.isnan(entropy(torch.tensor([math.nan, 0.0]))).all()   # a NaN is not hidden as "confident"


def test_exit_rules_by_hand():
    # entropies of these logits: ~0 (confident) and ln 2 (uniform); S = 0.5 lets only the confident one out
    conf, unsure = [9.0, -9.0], [0.0, 0.0]
    z = torch.tensor([[conf, unsure], [unsure, unsure], [conf, conf]])     # (L=3, B=2, C=2)
    logits, layers = exit_from_logits(z, EntropyExit(0.5))
    assert layers.tolist() == [1, 3] and torch.equal(logits, torch.tensor([conf, conf]))
    assert exit_from_logits(z, EntropyExit(0.0))[1].tolist() == [3, 3]      # S = 0: nobody leaves early
    # patience on classes: argmax sequences (0,0,0,0,0), (0,1,1,1,0), (0,1,0,1,0) with P = 2
    seqs = [[0, 0, 0, 0, 0], [0, 1, 1, 1, 0], [0, 1, 0, 1, 0]]
    z = torch.tensor([[[1.0, 0.0] if s[l] == 0 else [0.0, 1.0] for s in seqs] for l in range(5)])
    assert exit_from_logits(z, PatienceExit(2))[1].tolist() == [3, 4, 5]
    assert exit_from_logits(z, PatienceExit(1))[1].tolist() == [2, 3, 5]
    assert exit_from_logits(z, PatienceExit(5))[1].tolist() == [5, 5, 5]
    # patience on a regression: a change below 0.1 counts as unchanged
    values = [[1.0, 1.05, 1.08, 2.0, 2.0], [1.0, 2.0, 3.0, 4.0, 5.0], [1.0, 1.0, 2.0, 2.05, 2.1]]
    z = torch.tensor(values).T[..., None]                                     # (L=5, B=3, 1)
    logits, layers = exit_from_logits(z, PatienceExit(2, change=0.1))
    assert layers.tolist() == [3, 5, 5] and logits[0, 0].item() == pytest.approx(1.08)
    with pytest.raises(ValueError, match="regression exits by patience"):
        EntropyExit(0.3).step(torch.zeros(2, 1), {})
    with pytest.raises(ValueError, match="patience must be at least 1"):
        PatienceExit(0)


def test_off_ramp_poolers_start_as_copies_of_the_checkpoint_pooler(tiny_dir):
    bert = minbert.load_pretrained(str(tiny_dir))
    model = DeeBert(bert, DeeBertConfig(num_labels=2))
    saved = minbert.load_pretrained(str(tiny_dir)).pooler
    assert len(model.ramps) == 4
    for ramp in model.ramps:
        assert torch.equal(ramp.pooler.Wp, saved.Wp) and torch.equal(ramp.pooler.bp, saved.bp)
        assert ramp.pooler.Wp.data_ptr() != bert.pooler.Wp.data_ptr()       # copies, not shared
    with torch.no_grad():
        model.ramps[0].pooler.Wp.add_(1.0)
    assert torch.equal(model.ramps[1].pooler.Wp, saved.Wp)
    assert DeeBert(bert, DeeBertConfig(2, ramp_pooler=False)).ramps[0].pooler is None


def test_the_last_off_ramp_is_the_ordinary_classifier(tiny_dir, tokenizer):
    batch = tokenizer(sentences(6))
    for pooling, ramp_pooler, classifier_pooling in (("mean", False, "mean"), ("cls", True, "pooler")):
        model = spread(DeeBert(minbert.load_pretrained(str(tiny_dir)), DeeBertConfig(3, pooling, ramp_pooler)))
        plain = SentimentClassifier(copy.deepcopy(model.bert), 3, pooling=classifier_pooling).eval()
        plain.head.load_state_dict(model.ramps[-1].classifier.state_dict())
        if ramp_pooler:
            plain.bert.pooler.load_state_dict(model.ramps[-1].pooler.state_dict())
        with torch.no_grad():
            assert torch.allclose(model(**batch), plain(**batch), atol=1e-5)


def test_no_exit_settings_leave_at_the_last_layer_with_the_plain_models_predictions(tiny_dir, tokenizer):
    model = spread(DeeBert(minbert.load_pretrained(str(tiny_dir)), DeeBertConfig(3, "mean")))
    batch = tokenizer(sentences(10))
    with torch.no_grad():
        plain = model(**batch)
    for rule in (EntropyExit(0.0), EntropyExit(0.0, normalize=True), PatienceExit(10**6), PatienceExit(4)):
        out = early_exit(model, batch.input_ids, batch.attention_mask, batch.token_type_ids, rule)
        assert out.layers.tolist() == [4] * 10, rule
        assert torch.equal(out.logits.argmax(-1), plain.argmax(-1))
        assert torch.allclose(out.logits, plain, atol=1e-6)


def batch_one(model, tokenizer, texts, rule):
    """Algorithm 1: each sentence alone, no padding at all."""
    outs = [early_exit(model, *tokenizer([t]).values(), rule=rule) for t in texts]
    return torch.cat([o.logits for o in outs]), torch.cat([o.layers for o in outs])


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_batched_exit_equals_batch_one_on_a_padded_batch(tiny_dir, tokenizer, pooling):
    model = spread(DeeBert(minbert.load_pretrained(str(tiny_dir)), DeeBertConfig(3, pooling)))
    texts = sentences(12)
    batch = tokenizer(texts)
    lengths = batch.attention_mask.sum(1)
    assert (lengths.max() - lengths.min()) >= 10 and (batch.attention_mask == 0).any()   # really padded
    with torch.no_grad():
        h1 = entropy(torch.stack([model.all_logits(*tokenizer([t]).values())[:, 0] for t in texts], 1))  # (L, B)
    cut = h1[:-1].flatten().sort().values
    thresholds = ((cut[1:] + cut[:-1]) / 2)[::3].tolist()                 # between the samples' entropies
    mixed = trimmed = 0
    for rule in [EntropyExit(s) for s in thresholds] + [PatienceExit(1), PatienceExit(2)]:
        one_logits, one_layers = batch_one(model, tokenizer, texts, rule)
        full = early_exit(model, batch.input_ids, batch.attention_mask, batch.token_type_ids, rule, trim=False)
        for out in (early_exit(model, batch.input_ids, batch.attention_mask, batch.token_type_ids, rule), full):
            assert torch.equal(out.layers, one_layers), rule
            assert torch.equal(out.logits.argmax(-1), one_logits.argmax(-1)), rule
            assert torch.allclose(out.logits, one_logits, atol=1e-5), rule
        trimmed += early_exit(model, batch.input_ids, batch.attention_mask, batch.token_type_ids,
                              rule).token_layers < full.token_layers
        mixed += len(set(one_layers.tolist())) >= 3
    assert mixed >= 3 and trimmed >= 1        # samples left at several depths; dropping columns was exercised


def test_batched_patience_on_a_regression_equals_batch_one(tiny_dir, tokenizer):
    model = spread(DeeBert(minbert.load_pretrained(str(tiny_dir)), DeeBertConfig(1, "mean")))
    texts = sentences(12)
    batch = tokenizer(texts)
    with torch.no_grad():
        values = torch.stack([model.all_logits(*tokenizer([t]).values())[:, 0, 0] for t in texts], 1)  # (L, B)
    cut = (values[1:] - values[:-1]).abs().flatten().sort().values
    seen = set()
    for change in ((cut[1:] + cut[:-1]) / 2)[::3].tolist():                  # between the samples' changes
        for rule in (PatienceExit(1, change), PatienceExit(2, change)):
            one_logits, one_layers = batch_one(model, tokenizer, texts, rule)
            out = early_exit(model, batch.input_ids, batch.attention_mask, batch.token_type_ids, rule)
            assert torch.equal(out.layers, one_layers) and torch.allclose(out.logits, one_logits, atol=1e-5)
            seen |= set(one_layers.tolist())
    assert seen == {2, 3, 4}


def train_batches(tokenizer):
    """32 binary SST training sentences, batches of 8 drawn from the epoch."""
    split = cli.load_split("train", DATA / "ids-sst-train.csv", "sst2", tokenizer, limit=32, seed=0)
    return lambda epoch: batches(split, 8, shuffle=True, seed=epoch)


def test_stage_two_leaves_every_stage_one_parameter_bit_identical_and_computes_no_gradient_for_it(
        tiny_dir, tokenizer):
    model = DeeBert(minbert.load_pretrained(str(tiny_dir)), DeeBertConfig(2, "mean"))
    epoch_batches = train_batches(tokenizer)
    def evaluate(m):
        return {"accuracy": 0.0}

    before = {k: v.clone() for k, v in model.state_dict().items()}
    opt = minbert.AdamW(deebert.stage1_parameters(model), lr=1e-3)
    fit_with(model, opt, epoch_batches, cli.stage1_loss, evaluate, metric="accuracy", epochs=1,
             device=torch.device("cpu"), progress=False, log=lambda s: None)
    stage1 = {k: v.clone() for k, v in model.state_dict().items()}
    assert not torch.equal(stage1["bert.layers.0.Wq"], before["bert.layers.0.Wq"])      # stage 1 trained
    assert not torch.equal(stage1["ramps.3.classifier.weight"], before["ramps.3.classifier.weight"])
    assert torch.equal(stage1["ramps.0.classifier.weight"], before["ramps.0.classifier.weight"])

    frozen = [p for n, p in model.named_parameters() if not n.startswith(("ramps.0.", "ramps.1.", "ramps.2."))]
    model.zero_grad(set_to_none=True)
    opt = minbert.AdamW(deebert.stage2_parameters(model), lr=1e-3)
    grad_modes = []
    hooks = [layer.register_forward_hook(lambda *a: grad_modes.append(torch.is_grad_enabled()))
             for layer in model.bert.layers]
    fit_with(model, opt, epoch_batches, cli.stage2_loss, evaluate, metric="accuracy", epochs=1,
             device=torch.device("cpu"), progress=False, log=lambda s: None)
    for h in hooks:
        h.remove()
    state = model.state_dict()
    for name, value in stage1.items():
        if not name.startswith(("ramps.0.", "ramps.1.", "ramps.2.")):
            assert torch.equal(state[name], value), name                       # bit-identical
        else:
            assert not torch.equal(state[name], value), name                   # the off-ramps trained
    assert all(p.grad is None and not p.requires_grad for p in frozen)
    assert grad_modes and not any(grad_modes)                            # the backbone ran without autograd
    assert {id(p) for p in opt.state} == {id(p) for r in model.ramps[:-1] for p in r.parameters()}


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
    source = {"sst2": "ids-sst", "sts": "sts"}[task]
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
    assert "| plain |" in capsys.readouterr().out

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


@pytest.mark.parametrize("flag, value, message", [
    ("--max-drop", "nan", "must be a finite number"), ("--threshold", "nan", "must be a finite number"),
    ("--threshold", "-1", "0 or more"), ("--change-threshold", "inf", "must be a finite number"),
    ("--change-threshold", "-0.1", "0 or more")])
def test_the_sweep_numbers_are_finite_and_in_their_range(flag, value, message, capsys):
    with pytest.raises(SystemExit):
        cli.parse_settings([flag, value])
    assert message in capsys.readouterr().err
    assert cli.parse_settings(["--max-drop", "0.01", "--threshold", "0.3"]).sweep.threshold == 0.3
