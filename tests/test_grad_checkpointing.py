"""Gradient checkpointing (BertModel.gradient_checkpointing): the same gradients as the plain run, less kept for backward.

Train mode with dropout on, a fixed seed and a padded batch: torch.utils.checkpoint restores the random state before
it recomputes a layer, so the dropout masks of the recomputation are the ones of the forward pass.
"""

from __future__ import annotations

import pytest
import torch

import minbert
from minbert.deebert import DeeBert, DeeBertConfig
from minbert.pals import PALs, PalsConfig

pytestmark = pytest.mark.usefixtures("one_thread")
TOL = 1e-6


def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1000, 2000, (3, 10), generator=g)
    mask = torch.tensor([[1] * 10, [1] * 7 + [0] * 3, [1] * 4 + [0] * 6])
    types = torch.tensor([[0] * 5 + [1] * 5, [0] * 4 + [1] * 3 + [0] * 3, [0] * 10])
    return ids * mask, mask, types


def gradients(model: torch.nn.Module, loss_of, checkpointing: bool, seed: int = 7) -> tuple[float, dict]:
    """One forward and backward in train mode with the seed set; the loss and every parameter's gradient."""
    model.train()
    model.zero_grad(set_to_none=True)
    encoder = model if isinstance(model, minbert.BertModel) else model.bert
    encoder.gradient_checkpointing = checkpointing
    torch.manual_seed(seed)
    loss = loss_of(model)
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def assert_same(plain: tuple[float, dict], checkpointed: tuple[float, dict]) -> None:
    assert plain[0] == pytest.approx(checkpointed[0], abs=TOL)
    assert plain[1].keys() == checkpointed[1].keys() and len(plain[1]) > 0
    for name, g in plain[1].items():
        diff = (g - checkpointed[1][name]).abs().max().item()
        assert diff <= TOL, f"{name}: the checkpointed gradient differs by {diff:.2e}"


def encoder_loss(model: minbert.BertModel) -> torch.Tensor:
    ids, mask, types = batch()
    out = model(ids, mask, types)
    return out.last_hidden_state.square().mean() + out.pooler_output.sum()


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_gradients_equal_the_plain_run(attn: str, tiny_config: minbert.BertConfig) -> None:
    tiny_config.attn_implementation = attn
    tiny_config.hidden_dropout_prob = tiny_config.attention_probs_dropout_prob = 0.3  # dropout clearly on
    torch.manual_seed(0)
    model = minbert.BertModel(tiny_config)
    plain = gradients(model, encoder_loss, False)
    assert_same(plain, gradients(model, encoder_loss, True))
    other_seed = gradients(model, encoder_loss, False, seed=8)   # the dropout masks matter: the check has teeth
    assert abs(other_seed[0] - plain[0]) > 1e-4


def test_the_random_state_is_what_makes_them_equal(tiny_config: minbert.BertConfig, monkeypatch) -> None:
    """Without torch's preserve_rng_state (its default) the recomputed dropout masks differ: the check has teeth."""
    from torch.utils import checkpoint
    tiny_config.hidden_dropout_prob = 0.3
    torch.manual_seed(0)
    model = minbert.BertModel(tiny_config)
    plain = gradients(model, encoder_loss, False)
    real = checkpoint.checkpoint
    monkeypatch.setattr(checkpoint, "checkpoint", lambda *a, **k: real(*a, **k, preserve_rng_state=False))
    loss, grads = gradients(model, encoder_loss, True)
    assert loss == plain[0]  # the forward pass is the same; only the backward's recomputation draws anew
    assert max((g - grads[n]).abs().max().item() for n, g in plain[1].items()) > 1e-3


def test_less_is_kept_for_the_backward_pass(tiny_config: minbert.BertConfig) -> None:
    """What autograd saves for backward: with checkpointing, only each layer's input (and the mask) per layer."""
    torch.manual_seed(0)
    model = minbert.BertModel(tiny_config).train()

    def saved_bytes(checkpointing: bool) -> int:
        model.gradient_checkpointing = checkpointing
        total = 0

        def pack(t: torch.Tensor) -> torch.Tensor:
            nonlocal total
            total += t.numel() * t.element_size()
            return t
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            encoder_loss(model)
        return total
    plain, checkpointed = saved_bytes(False), saved_bytes(True)
    assert checkpointed < plain / 2, (plain, checkpointed)


def test_the_flag_sets_every_layer_and_no_grad_runs_plain(tiny_config: minbert.BertConfig) -> None:
    torch.manual_seed(0)
    model = minbert.BertModel(tiny_config).eval()
    assert model.gradient_checkpointing is False and not any(layer.checkpointing for layer in model.layers)
    ids, mask, types = batch()
    with torch.no_grad():
        before = model(ids, mask, types).last_hidden_state
    model.gradient_checkpointing = True
    assert model.gradient_checkpointing is True and all(layer.checkpointing for layer in model.layers)
    with torch.no_grad():
        assert torch.equal(model(ids, mask, types).last_hidden_state, before)
    assert "checkpointing" not in str(model.state_dict().keys())
    model.gradient_checkpointing = False
    assert not any(layer.checkpointing for layer in model.layers)


@pytest.mark.parametrize("variant", ["standard", "concat"])
def test_pals_adapters_are_recomputed_too(variant: str, tiny_config: minbert.BertConfig) -> None:
    """The adapter hook runs inside the checkpointed layer; its parameters' gradients are the plain run's."""
    tiny_config.hidden_dropout_prob = 0.3
    torch.manual_seed(0)
    bert = minbert.BertModel(tiny_config)
    pals = PALs(tiny_config, ["sst"], PalsConfig(size=16, heads=2, variant=variant))
    pals.attach(bert)
    pals.task = "sst"
    model = torch.nn.ModuleDict({"bert": bert, "pals": pals})
    model.bert = bert  # gradients() finds the encoder here
    plain = gradients(model, lambda m: encoder_loss(m.bert), False)
    assert any(n.startswith("pals.") for n in plain[1])
    assert_same(plain, gradients(model, lambda m: encoder_loss(m.bert), True))


def test_deebert_runs_its_layers_one_at_a_time_checkpointed(tiny_config: minbert.BertConfig) -> None:
    """DeeBERT calls the layers itself (between them sit its off-ramps): the layers checkpoint there too."""
    tiny_config.hidden_dropout_prob = 0.3
    torch.manual_seed(0)
    model = DeeBert(minbert.BertModel(tiny_config), DeeBertConfig(num_labels=3))

    def loss_of(m: DeeBert) -> torch.Tensor:
        ids, mask, types = batch()
        return m.all_logits(ids, mask, types).logsumexp(-1).mean()
    assert_same(gradients(model, loss_of, False), gradients(model, loss_of, True))


# ---------------------------------------------------------------- --gradient-checkpointing in every training command

class Reached(Exception):
    """Raised by the spy at the first checkpointed layer: the flag reached the model that trains."""


@pytest.mark.parametrize("command", ["classifier", "multitask", "simcse", "deebert"])
def test_the_flag_reaches_the_encoder_in_every_command(command, tiny_dir, multitask_files, tmp_path, monkeypatch):
    from test_save_every import multitask_argv
    from test_typed_runs import classifier_argv, deebert_argv, simcse_argv
    from torch.utils import checkpoint

    from tasks import classifier, deebert, multitask, simcse
    module = {"classifier": classifier, "multitask": multitask, "simcse": simcse, "deebert": deebert}[command]
    argv = {"classifier": lambda: classifier_argv(tiny_dir, tmp_path),
            "multitask": lambda: multitask_argv(tiny_dir, multitask_files),
            "simcse": lambda: simcse_argv(tiny_dir, tmp_path), "deebert": lambda: deebert_argv(tiny_dir, tmp_path),
            }[command]() + ["--run-dir", str(tmp_path / "run")]
    assert module.parse_settings(argv).training.gradient_checkpointing is False

    def spy(*args, **kwargs):
        raise Reached
    monkeypatch.setattr(checkpoint, "checkpoint", spy)
    settings = module.parse_settings(argv + ["--gradient-checkpointing"])
    assert settings.training.gradient_checkpointing is True
    with pytest.raises(Reached):
        module.run(settings)


def test_a_classifier_run_is_the_same_with_the_flag(tiny_dir, tmp_path):
    """One epoch of the classifier (dropout on) with and without --gradient-checkpointing: the same weights."""
    from test_typed_runs import classifier_argv

    from tasks import classifier
    from tasks.core.checkpoints import load_checkpoint
    base = classifier_argv(tiny_dir, tmp_path) + ["--epochs", "1"]
    for name, extra in (("plain", []), ("ckpt", ["--gradient-checkpointing"])):
        classifier.run(classifier.parse_settings(base + ["--run-dir", str(tmp_path / name), *extra]))
    a, b = (load_checkpoint(tmp_path / name / "checkpoint.pt") for name in ("plain", "ckpt"))
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
