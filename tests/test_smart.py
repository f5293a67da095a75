"""SMART (minbert.smart): the divergences, the perturbation step, the regularised step and the momentum copy."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import math

import pytest
import torch
from conftest import killed_after_first_epoch
from test_multitask import PAIRS, argv, files, pair_batch  # noqa: F401  (fixtures)

import minbert
from minbert import losses, rdrop, smart
from minbert.multitask import MultitaskBert, MultitaskConfig
from minbert.smart import (
    PRESETS,
    SmartConfig,
    adversarial_perturbation,
    ascent_step,
    divergence,
    momentum_update,
    rescale_step,
    smoothness_loss,
    symmetric_kl,
)
from tasks import multitask
from tasks.core.checkpoints import load_checkpoint
from tasks.core.train import Interrupted
from tasks.multitask import parse_settings, run
from tasks.multitask import settings as multitask_settings
from tasks.multitask.settings import Smart

pytestmark = pytest.mark.usefixtures("one_thread")


# ------------------------------------------------------------------ the divergences

def test_symmetric_kl_equals_a_hand_computation_is_zero_for_equal_inputs_and_finite_at_100():
    p_logits, q_logits = [1.0, 2.0, 0.0], [0.5, -1.0, 0.0]

    def softmax(z):
        e = [math.exp(v) for v in z]
        return [v / sum(e) for v in e]

    P, Q = softmax(p_logits), softmax(q_logits)
    by_hand = sum(p * math.log(p / q) for p, q in zip(P, Q)) + sum(q * math.log(q / p) for p, q in zip(P, Q))
    got = symmetric_kl(torch.tensor([p_logits, q_logits]), torch.tensor([q_logits, p_logits]))  # batch mean of both
    assert got.item() == pytest.approx(by_hand, rel=1e-6)
    z = torch.randn(4, 5) * 30
    assert symmetric_kl(z, z).item() == 0.0
    big = symmetric_kl(torch.tensor([[100.0, -100.0, 0.0]]), torch.tensor([[-100.0, 100.0, 0.0]]))
    assert math.isfinite(big.item()) and big.item() == pytest.approx(400.0, rel=1e-6)  # (1 - 0)(0 + 200) + (0 - 1)(-200 - 0)


def test_one_symmetric_kl_and_one_two_class_and_the_values_of_before():
    """SMART's symmetric_kl is the sum of both KLs, R-Drop's rdrop_kl half of it (another name, so that neither is
    taken for the other); two_class is one function; every divergence has the value (bits) it had before."""
    assert not hasattr(rdrop, "symmetric_kl") and rdrop.two_class is smart.two_class is losses.two_class
    g = torch.Generator().manual_seed(0)
    p, q = torch.randn(4, 3, generator=g) * 3, torch.randn(4, 3, generator=g) * 3
    z1, z2 = torch.randn(4, generator=g) * 2, torch.randn(4, generator=g) * 2
    old = {"classification": ("0x1.ba27f8p+1", "0x1.ba27f6p+2"), "binary": ("0x1.5ea744p-1", "0x1.5ea746p+0"),
           "regression": ("0x1.e13c1cp+2", "0x1.e13c1cp+2")}                 # (R-Drop's, SMART's) before
    for kind, (r, sm) in old.items():
        a, b = (p, q) if kind == "classification" else (z1, z2)
        assert rdrop.output_divergence(a, b, kind).item() == float.fromhex(r), kind
        assert smart.divergence(a, b, kind).item() == float.fromhex(sm), kind
    assert rdrop.rdrop_kl(p, q).item() == pytest.approx(smart.symmetric_kl(p, q).item() / 2, rel=1e-6)
    total, _ = rdrop.rdrop_loss(torch.tensor(0.5), torch.tensor(0.7), p, q, "classification", 2.0)
    assert total.item() == float.fromhex("0x1.e08e5ep+2")


def test_binary_divergence_is_the_bernoulli_symmetric_kl_and_regression_the_squared_error():
    a, b = torch.tensor([0.3, -2.0]), torch.tensor([1.5, 100.0])

    def ber(p, q):
        return p * math.log(p / q) + (1 - p) * math.log((1 - p) / (1 - q))

    sa, sb = 1 / (1 + math.exp(-0.3)), 1 / (1 + math.exp(-1.5))
    assert divergence(a[:1], b[:1], "binary").item() == pytest.approx(ber(sa, sb) + ber(sb, sa), rel=1e-5)
    assert math.isfinite(divergence(a, b, "binary").item())        # sigmoid(100) is 1 in floats: still finite
    assert divergence(a, b, "regression").item() == pytest.approx(((0.3 - 1.5) ** 2 + 102.0 ** 2) / 2, rel=1e-6)
    with pytest.raises(ValueError, match="kind must be one of"):
        divergence(a, b, "ranking")


# ------------------------------------------------------------------ the perturbation

def test_ascent_step_normalises_each_example_by_its_infinity_norm_over_all_inputs_and_projects():
    g1 = torch.tensor([[[1.0, -4.0]], [[0.0, 0.0]]])               # (B=2, T=1, H=2): the first input
    g2 = torch.tensor([[[2.0, 0.5], [0.0, 1.0]], [[0.0, 0.0], [0.0, 0.0]]])  # (2, 2, 2): the second input
    zero = [torch.zeros_like(g1), torch.zeros_like(g2)]
    d1, d2 = ascent_step(zero, [g1, g2], eta=1.0, epsilon=10.0)     # a large ball: no projection
    assert torch.equal(d1[0], g1[0] / 4) and torch.equal(d2[0], g2[0] / 4)  # ||g||_inf of example 0 is 4 (in g1)
    assert torch.equal(d1[1], torch.zeros(1, 2)) and torch.equal(d2[1], torch.zeros(2, 2))  # no gradient, no move
    d1, d2 = ascent_step([torch.full_like(g1, 0.1), torch.zeros_like(g2)], [g1, g2], eta=1.0, epsilon=0.4)
    torch.testing.assert_close(d1[0], torch.tensor([[0.35, -0.4]]))  # 0.1 + 0.25; 0.1 - 1 projected onto -0.4
    torch.testing.assert_close(d2[0], (g2[0] / 4).clamp(-0.4, 0.4))
    assert d1.abs().max() <= 0.4 and d2.abs().max() <= 0.4


def test_one_perturbation_step_on_a_linear_model_equals_the_hand_computation():
    torch.manual_seed(0)
    w = torch.tensor([0.5, -2.0, 1.0])
    x = [torch.randn(2, 1, 3)]

    def f(xs):
        return (xs[0] * w).sum((1, 2))                              # (B,), a regression output

    config = SmartConfig(steps=1, sigma=1e-3, eta=1e-3, epsilon=5e-4)
    torch.manual_seed(1)
    (delta,) = adversarial_perturbation(f, x, f(x), "regression", config)
    torch.manual_seed(1)
    nu = 1e-3 * torch.randn(2, 1, 3)
    # l_s = mean_i (nu_i . w)^2, so its gradient in example i is (2 / B)(nu_i . w) w; normalised: sign(nu_i . w) w / 2
    direction = torch.sign((nu * w).sum((1, 2)))[:, None, None] * w / 2.0
    torch.testing.assert_close(delta, (nu + 1e-3 * direction).clamp(-5e-4, 5e-4), rtol=0, atol=1e-9)


@pytest.mark.parametrize("design", ["bi-encoder", "cross-encoder"])
@pytest.mark.parametrize("steps", [1, 3])
def test_after_k_steps_the_perturbation_is_inside_the_epsilon_ball_and_no_parameter_gets_a_gradient(
        design, steps, tiny_config, tokenizer):
    torch.manual_seed(0)
    model = MultitaskBert(minbert.BertModel(tiny_config), MultitaskConfig(design=design, head_hidden=16))
    batch = pair_batch(tokenizer)
    inputs = model.inputs("para", batch)
    x = model.embed(inputs)
    y = model.predict_from_embeddings("para", x, inputs)
    config = SmartConfig(steps=steps, sigma=1e-4, epsilon=1e-5)     # the noise starts outside the ball
    delta = adversarial_perturbation(lambda e: model.predict_from_embeddings("para", e, inputs), x, y, "binary", config)
    assert len(delta) == (2 if design == "bi-encoder" else 1)
    for d, h in zip(delta, x):
        assert d.shape == h.shape and not d.requires_grad
        assert d.abs().max().item() <= 1e-5 and d.abs().max().item() > 0
    assert all(p.grad is None for p in model.parameters())


# ------------------------------------------------------------------ the presets (the public code's step)

def test_rescale_step_equals_the_hand_computation_per_token():
    delta = [torch.tensor([[[0.5, -1.0], [0.0, 2.0]]])]               # (B=1, T=2, H=2)
    grad = [torch.tensor([[[10.0, 0.0], [-4.0, 0.0]]])]
    (out,) = rescale_step(delta, grad, eta=0.25, epsilon=0.5)
    # s = delta + 0.25 g = [[3.0, -1.0], [-1.0, 2.0]]; token norms 3 and 2; s / (norm + 0.5)
    torch.testing.assert_close(out, torch.tensor([[[3.0 / 3.5, -1.0 / 3.5], [-1.0 / 2.5, 2.0 / 2.5]]]))


@pytest.mark.parametrize("name", ["mt-dnn", "vat", "paper"])
def test_each_presets_step_on_a_linear_model_equals_the_hand_computation(name):
    config = SmartConfig.preset(name, steps=1)
    rule, eta, epsilon, sigma = PRESETS[name]
    assert (config.rule, config.eta, config.epsilon, config.sigma) == (rule, eta, epsilon, sigma)
    torch.manual_seed(0)
    w = torch.tensor([0.5, -2.0, 1.0], dtype=torch.float64)        # float64: the hand computation's rounding is nil
    x = [torch.zeros(2, 2, 3, dtype=torch.float64)]                # f(x) = 0: l_s's float32 cast loses nothing

    def f(xs):
        return (xs[0] * w).sum((1, 2))                              # (B,), a regression output

    torch.manual_seed(1)
    (delta,) = adversarial_perturbation(f, x, f(x), "regression", config)
    torch.manual_seed(1)
    nu = sigma * torch.randn(2, 2, 3, dtype=torch.float64)
    a = (nu * w).sum((1, 2))[:, None, None]                         # f(x + nu) - f(x), (B, 1, 1)
    g = 2.0 * a * w / 2                                             # d/dnu of mean_b a_b^2: each token (2/B) a_b w
    if name == "paper":
        expected = (nu + eta * g / g.abs().amax((1, 2), keepdim=True)).clamp(-epsilon, epsilon)
    else:
        s = nu + eta * g
        expected = s / (s.abs().amax(-1, keepdim=True) + epsilon)
        assert expected.abs().amax(-1).min() > 0.5                  # radius n / (n + eps) ~ 1, n ~ 1e-5: no eps ball
    torch.testing.assert_close(delta, expected, rtol=1e-9, atol=1e-15)
    assert SmartConfig.preset(name, eta=0.5, epsilon=None).eta == 0.5   # explicit settings override; None keeps
    with pytest.raises(ValueError, match="preset must be one of"):
        SmartConfig.preset("alice")


def test_r_s_sends_a_gradient_to_both_the_perturbed_and_the_clean_output():
    w = torch.tensor([0.5, -2.0, 1.0], requires_grad=True)
    x = [torch.tensor([[[1.0, 2.0, 3.0]], [[-1.0, 0.0, 1.0]]])]    # (B=2, T=1, H=3)

    def f(xs):
        return (xs[0] * w).sum((1, 2))

    target = f(x) * 2.0                                             # a target with its own graph to w
    config = SmartConfig(steps=0, sigma=0.0)                        # x~ = x: R_s = mean (f(x) - 2 f(x))^2 = mean f(x)^2
    r = smoothness_loss(f, x, target, "regression", config)
    (grad,) = torch.autograd.grad(r, w)
    fx = (x[0] * w.detach()).sum((1, 2))
    # d/dw mean_b (f_b - 2 f_b)^2 = mean_b 2 (f_b - 2 f_b)(x_b - 2 x_b) = mean_b 2 f_b x_b: both sides' terms
    by_hand = (2 * fx[:, None] * x[0].sum(1)).mean(0)
    torch.testing.assert_close(grad, by_hand)
    detached_only = (2 * -fx[:, None] * x[0].sum(1)).mean(0)       # what a detached target would give
    assert not torch.allclose(grad, detached_only)


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("dropout", ["on", "off"])
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_bregman_is_exactly_zero_at_theta_tilde_equal_theta(symmetric, dropout, mode, tiny_config, tokenizer):
    torch.manual_seed(0)
    config = MultitaskConfig(design="bi-encoder", head_hidden=16, symmetric_pairs=symmetric)
    model = MultitaskBert(minbert.BertModel(tiny_config), config)
    smart = model.add_smart(SmartConfig.preset("vat", bregman=True, dropout=dropout == "on"))
    batch = labelled(tokenizer, "para")
    model.train(mode == "train")
    inputs = model.inputs("para", batch)
    h = model.embed(inputs)
    y = model.predict_from_embeddings("para", h, inputs)
    smart.reset_stats()
    smart(model, "para", "binary", batch, inputs, h, y, torch.zeros(()))
    assert smart.stats["bregman"] == 0.0 and smart.stats["r_s"] > 0
    assert model.training == (mode == "train")                      # the mode is restored
    with torch.no_grad():                                           # theta moves: the term is no longer 0
        model.head["para"].fc2.bias.add_(1.0)
    smart(model, "para", "binary", batch, inputs, h, y, torch.zeros(()))
    assert smart.stats["bregman"] > 0


# ------------------------------------------------------------------ the SMART step

def one_step(model: MultitaskBert, task: str, batch: dict, seed: int = 0) -> MultitaskBert:
    """One optimiser step on one batch, as fit() takes it (post_step: the momentum update)."""
    optimizer = minbert.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    torch.manual_seed(seed)
    model.loss(task, batch).backward()
    optimizer.step()
    if model.smart is not None and model.smart.names:
        model.smart.update(model)
    return model


def labelled(tokenizer, task: str) -> dict:
    if task == "sst":
        s = tokenizer(["a fine film", "dull and far too long , with nothing to say", "ok"])
        return {"input_ids": s.input_ids, "attention_mask": s.attention_mask, "labels": torch.tensor([4, 0, 2])}
    labels = torch.tensor([1.0, 1.0, 0.0]) if task == "para" else torch.tensor([4.2, 5.0, 0.4])
    return pair_batch(tokenizer) | {"labels": labels}


@pytest.mark.parametrize("design, task, dropout", [("cross-encoder", "sst", "on"), ("cross-encoder", "para", "off"),
                                                    ("bi-encoder", "sts", "on"), ("bi-encoder", "para", "off")])
def test_with_lambda_and_mu_zero_a_smart_step_equals_a_plain_step_exactly(design, task, dropout, tiny_config, tokenizer):
    torch.manual_seed(0)
    plain = MultitaskBert(minbert.BertModel(tiny_config), MultitaskConfig(design=design, head_hidden=16))
    smart, control = copy.deepcopy(plain), copy.deepcopy(plain)
    smart.add_smart(SmartConfig(lambda_s=0.0, mu=0.0, bregman=True, dropout=dropout == "on"))
    control.add_smart(SmartConfig(lambda_s=1.0, mu=0.0, bregman=True, dropout=dropout == "on"))
    batch = labelled(tokenizer, task)
    for m in (plain, smart, control):
        one_step(m, task, batch)
    for (name, a), b, c in zip(plain.named_parameters(), smart.parameters(), control.parameters()):
        assert torch.equal(a, b), name
    assert any(not torch.equal(a, c) for a, c in zip(plain.parameters(), control.parameters()))  # lambda_s 1 counts


def test_the_momentum_copy_follows_its_update_rule(tiny_config, tokenizer):
    tilde, theta = torch.tensor([1.0, -2.0, 0.5]), torch.tensor([3.0, 2.0, -0.25])   # dyadic: every step is exact
    momentum_update(tilde, theta, beta=0.75)
    assert torch.equal(tilde, 0.25 * torch.tensor([3.0, 2.0, -0.25]) + 0.75 * torch.tensor([1.0, -2.0, 0.5]))
    torch.manual_seed(0)
    model = MultitaskBert(minbert.BertModel(tiny_config), MultitaskConfig(head_hidden=16))
    model.bert.requires_grad_(False)
    model.bert.layers[1].bm2.requires_grad_(True)                   # the copy follows the trainable parameters only
    theta0 = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    smart = model.add_smart(SmartConfig(bregman=True, beta=0.9))
    assert smart.names == list(theta0) and "bert.layers.1.bm2" in smart.names and "bert.layers.0.bm2" not in smart.names
    batch = labelled(tokenizer, "sst")
    expected = {n: t.double() for n, t in theta0.items()}           # theta~_1 = theta_0
    for step in range(3):
        one_step(model, "sst", batch, seed=step)
        params = dict(model.named_parameters())
        expected = {n: 0.1 * params[n].detach().double() + 0.9 * t for n, t in expected.items()}
    for n, t in smart.tilde().items():
        torch.testing.assert_close(t.double(), expected[n], rtol=0, atol=1e-6)
    for n in ("bert.layers.1.bm2", "head.sst.fc2.weight"):           # trained: theta~ lags between theta_0 and theta
        t = smart.tilde()[n]
        assert not torch.equal(t, theta0[n]) and not torch.equal(t, dict(model.named_parameters())[n])
    state = model.state_dict()                                      # the copy travels with the model's state
    assert torch.equal(state["smart.momentum/bert/layers/1/bm2"], smart.tilde()["bert.layers.1.bm2"])


def count_encoder_passes(model: MultitaskBert) -> list[int]:
    calls = [0]
    model.bert.register_forward_pre_hook(lambda module, args: calls.__setitem__(0, calls[0] + 1))
    return calls


@pytest.mark.parametrize("dropout, bregman, passes", [("on", False, 3), ("off", False, 4), ("on", True, 5),
                                                      ("off", True, 5)])
def test_one_step_costs_the_task_pass_a_perturbation_pass_and_the_adversarial_pass(
        dropout, bregman, passes, tiny_config, tokenizer):
    torch.manual_seed(0)
    model = MultitaskBert(minbert.BertModel(tiny_config), MultitaskConfig(head_hidden=16))
    model.add_smart(SmartConfig(steps=1, bregman=bregman, dropout=dropout == "on"))
    calls = count_encoder_passes(model)
    model.train()
    model.loss("sst", labelled(tokenizer, "sst")).backward()
    # K = 1: the task pass, one perturbation pass, the adversarial pass; dropout off: a clean pass without a graph;
    # Bregman: a pass with theta~ without a graph and, with dropout on, a clean pass with theta (dropout off: the
    # clean target's pass serves both)
    assert calls[0] == passes
    model.eval()
    calls[0] = 0
    model.loss("sst", labelled(tokenizer, "sst"))                   # no regulariser outside training
    assert calls[0] == 1


# ------------------------------------------------------------------ the CLI

SMART_FLAGS = {"smart_lambda": "lambda_s", "smart_steps": "steps", "smart_eta": "eta", "smart_epsilon": "epsilon",
               "smart_sigma": "sigma", "smart_mu": "mu", "smart_beta": "beta"}   # the flag's field -> SmartConfig's


@pytest.mark.parametrize(("flag", "name"), SMART_FLAGS.items())
def test_smart_flags_accept_exactly_what_smartconfig_accepts(flag: str, name: str) -> None:
    """One set of checks: each flag's parser is SmartConfig's own check of the field."""
    parse = {f.name: f.metadata["setting"] for f in dataclasses.fields(Smart)}[flag].parse
    kind = int if name == "steps" else float
    for text in ("-1", "0", "0.5", "1", "3") if kind is int else ("-1", "0", "1e-6", "0.5", "1", "3"):
        if kind is int and "." in text:
            continue                                          # not an integer: no step count to compare
        try:
            SmartConfig(**{name: kind(text)})
            library = True
        except ValueError:
            library = False
        try:
            cli = parse(text) == kind(text)
        except argparse.ArgumentTypeError:
            cli = False
        assert cli == library, (flag, text)


def test_smart_defaults_are_the_librarys_but_the_preset_which_says_so() -> None:
    cli = Smart(smart=True)
    for flag, name in {"smart_lambda": "lambda_s", "smart_steps": "steps", "smart_mu": "mu", "smart_beta": "beta",
                       "smart_bregman": "bregman"}.items():
        assert getattr(cli, flag) == getattr(SmartConfig, name), flag
    assert cli.config() == SmartConfig.preset("mt-dnn") != SmartConfig()       # the one default that is not
    preset = {f.name: f.metadata["setting"] for f in dataclasses.fields(Smart)}["smart_perturbation"].help
    assert "Default: mt-dnn, not SmartConfig()'s paper" in preset
    assert "but --smart-perturbation" in " ".join(multitask_settings.__doc__.split())


def test_smart_cli_bi_encoder_trains_with_bregman_and_without_dropout(tiny_dir, files, tmp_path, capsys):  # noqa: F811
    out = run(parse_settings(argv(tiny_dir, files, tmp_path, "smart", "--epochs", "1", "--design",
                                             "bi-encoder", "--smart", "--smart-lambda", "5", "--smart-epsilon", "1e-6",
                                             "--smart-bregman", "--smart-dropout", "off")))
    assert math.isfinite(out["history"][0]["train_loss"]) and set(out["dev"]) >= {"overall"}
    (smart,) = out["smart"]                                         # one epoch: R_s and D_Breg logged, shares in (0, 1)
    assert smart["smart_r_s"] > 0 and 0 < smart["smart_r_s_share"] < 1 and 0 <= smart["smart_bregman_share"] < 1
    state = load_checkpoint(tmp_path / "smart.pt")["model"]
    assert any(k.startswith("smart.momentum/bert/") for k in state)
    capsys.readouterr()
    with pytest.raises(SystemExit) as stopped:                      # SmartConfig's check, at the flag
        parse_settings(argv(tiny_dir, files, tmp_path, "bad", "--smart", "--smart-beta", "1"))
    assert stopped.value.code == 2 and "--smart-beta" in capsys.readouterr().err


def test_smart_cli_cross_encoder_kill_and_resume_carries_the_momentum_copy(tiny_dir, files, tmp_path, monkeypatch):  # noqa: F811
    extra = ("--epochs", "2", "--max-train-examples", "16", "--smart", "--smart-bregman", "--smart-beta", "0.5")
    whole = run(parse_settings(argv(tiny_dir, files, tmp_path, "whole", *extra)))
    real_fit = multitask.fit

    monkeypatch.setattr(multitask, "fit", killed_after_first_epoch(real_fit))
    with pytest.raises(Interrupted):
        run(parse_settings(argv(tiny_dir, files, tmp_path, "split", *extra)))
    monkeypatch.setattr(multitask, "fit", real_fit)
    resumed = run(parse_settings(argv(tiny_dir, files, tmp_path, "split", *extra, "--resume", str(tmp_path / "split.pt"))))
    assert len(whole["smart"]) == 2 and resumed["smart"] == whole["smart"]      # the summary: both epochs, as run whole
    a, b = load_checkpoint(tmp_path / "whole.pt")["model"], load_checkpoint(tmp_path / "split.pt")["model"]
    assert set(a) == set(b) and any(k.startswith("smart.momentum/") for k in a)
    for key in a:
        assert torch.equal(a[key], b[key]), key


@pytest.mark.parametrize("design", ["bi-encoder", "cross-encoder"])
def test_smart_s_path_checks_its_inputs_where_they_come_in(tiny_config, tokenizer, design):
    """SMART embeds the tokens and runs predict_from_embeddings, not bert(input_ids, ...): the batch's shapes are
    checked once, where inputs() takes them, in one line naming the input (a (B, 1) mask would broadcast)."""
    model = MultitaskBert(minbert.BertModel(tiny_config), MultitaskConfig(design=design, head_hidden=16))
    model.add_smart(SmartConfig(steps=1))
    model.train()
    sst, para = labelled(tokenizer, "sst"), labelled(tokenizer, "para")
    for task, batch, name in (("sst", sst | {"attention_mask": sst["attention_mask"][:, :1]}, "attention_mask"),
                              ("sst", sst | {"input_ids": sst["input_ids"][0]}, "input_ids"),
                              ("para", para | {"attention_mask_2": para["attention_mask_2"][:, :1]}, "attention_mask_2"),
                              ("para", para | {"input_ids_1": para["input_ids_1"][0]}, "input_ids_1")):
        with pytest.raises(ValueError, match=rf"^{name} has shape \(\d+(, 1)?,?\), expected \(B, T\)[^\n]*$"):
            model.loss(task, batch)
