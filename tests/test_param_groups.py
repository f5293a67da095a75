"""The recipe's parameter groups (minbert/param_groups.py): weight decay spares biases and LayerNorm gains by a name
rule, and layer-wise learning-rate decay gives layer l of L lr * decay^(L - l); both against a hand computation."""

import pytest
import torch
from torch import nn

import minbert
from minbert.multitask import MultitaskBert, MultitaskConfig
from minbert.param_groups import no_decay, param_groups, unfreeze_step
from tasks.classifier import parse_settings
from tasks.core.checkpoints import check_config
from tasks.core.errors import ResumeError
from tasks.core.recipe import Recipe
from tasks.core.resume import before_values, resume_config


class Classifier(nn.Module):
    """A BERT inside a model, with a head of torch's own Linear (weight, bias)."""

    def __init__(self, config):
        super().__init__()
        self.bert = minbert.BertModel(config)
        self.head = nn.Linear(config.hidden_size, 3)


def by_name(model, groups):
    """{parameter name: (lr, weight decay)} of the optimiser groups."""
    names = {id(p): n for n, p in model.named_parameters()}
    return {names[id(p)]: (g["lr"], g["weight_decay"]) for g in groups for p in g["params"]}


def test_the_name_rule_spares_exactly_the_biases_and_layernorm_gains(tiny_config):
    model = Classifier(tiny_config)
    spared = sorted(n for n, _ in model.named_parameters() if no_decay(n))
    # By hand, from the paper's notation: every bias and LayerNorm gain, and nothing else.
    layer = ["bLN1", "bLN2", "bk", "bm1", "bm2", "bm3", "bq", "bv", "gLN1", "gLN2"]
    expected = sorted(["bert.embeddings.bLN", "bert.embeddings.gLN", "bert.pooler.bp", "head.bias"]
                      + [f"bert.layers.{i}.{x}" for i in range(2) for x in layer])
    assert spared == expected
    # ... which are all of the model's vectors: every 1-d parameter, no matrix.
    assert spared == sorted(n for n, p in model.named_parameters() if p.dim() == 1)


def test_layer_decay_and_weight_decay_equal_a_hand_computation(tiny_config):
    model = Classifier(tiny_config)          # L = 2 layers
    lr, wd, d, head = 1e-3, 0.01, 0.5, 10.0
    got = by_name(model, param_groups(model, model.parameters(), lr, wd, layer_decay=d, head_lr_scale=head))
    hand = {"bert.embeddings.word.weight": (lr * d ** 2, wd),      # depth 0: lr * d^L
            "bert.embeddings.gLN": (lr * d ** 2, 0.0),
            "bert.layers.0.Wq": (lr * d, wd),                       # layer 1 of 2: lr * d^(2-1)
            "bert.layers.0.bq": (lr * d, 0.0),
            "bert.layers.1.Wm3": (lr, wd),                          # layer 2 of 2: lr
            "bert.layers.1.gLN2": (lr, 0.0),
            "bert.pooler.Wp": (lr, wd),                             # above the top layer: lr
            "head.weight": (lr * head, wd),                         # a head: its own multiplier
            "head.bias": (lr * head, 0.0)}
    for name, (want_lr, want_wd) in hand.items():
        assert got[name][0] == pytest.approx(want_lr, rel=1e-12), name
        assert got[name][1] == want_wd, name
    assert set(got) == {n for n, _ in model.named_parameters()}   # every parameter exactly once
    # one group per distinct (lr, weight decay): 4 depths x 2 + the head's 2
    assert len(param_groups(model, model.parameters(), lr, wd, d, head)) == 8


def test_the_trivial_recipe_is_one_group_as_before(tiny_config):
    model = Classifier(tiny_config)
    params = [p for p in model.parameters()]
    groups = param_groups(model, params, 2e-5, 0.0)
    assert len(groups) == 1 and groups[0]["params"] == params and groups[0]["lr"] == 2e-5
    both = param_groups(model, params, 2e-5, 0.1, decay_biases_and_gains=True)
    assert len(both) == 1 and both[0]["weight_decay"] == 0.1


def test_only_the_given_parameters_are_grouped_and_strangers_are_refused(tiny_config):
    model = Classifier(tiny_config)
    head_only = list(model.head.parameters())
    groups = param_groups(model, head_only, 1e-3, 0.1, layer_decay=0.9)
    assert [p for g in groups for p in g["params"]] == head_only
    with pytest.raises(ValueError, match="not a parameter of the model"):
        param_groups(model, [nn.Parameter(torch.zeros(3))], 1e-3, 0.0)
    with pytest.raises(ValueError, match="layer_decay"):
        param_groups(model, head_only, 1e-3, 0.0, layer_decay=0.0)


def test_the_multitask_model_heads_take_the_head_rate(tiny_config):
    model = MultitaskBert(minbert.BertModel(tiny_config), MultitaskConfig())
    got = by_name(model, param_groups(model, model.parameters(), 1.0, 0.0, layer_decay=0.8, head_lr_scale=3.0))
    assert got["bert.embeddings.word.weight"][0] == pytest.approx(0.64)
    heads = [n for n in got if not n.startswith("bert.")]
    assert heads and all(got[n][0] == 3.0 for n in heads)


def test_the_recipe_builds_the_groups_into_its_optimiser(tiny_config):
    model = Classifier(tiny_config)
    recipe = Recipe(layer_decay=0.5, head_lr_scale=2.0)
    opt = recipe.optimizer_for(model, list(model.parameters()), 1e-3, 0.01)
    lrs = sorted({g["lr"] for g in opt.param_groups})
    assert lrs == pytest.approx([2.5e-4, 5e-4, 1e-3, 2e-3])
    assert {g["weight_decay"] for g in opt.param_groups} == {0.0, 0.01}


def test_an_older_typed_checkpoint_resumes_with_the_knobs_at_their_old_values():
    now = resume_config(parse_settings(["--layer-decay", "1", "--head-lr-scale", "1", "--weight-decay", "0"]))
    stored = {k: v for k, v in now.items() if k not in ("recipe.layer_decay", "recipe.head_lr_scale",
                                                         "recipe.decay_biases_and_gains")}   # before these knobs
    check_config("old.pt", stored, now)                 # wd 0: which parameters it spares is moot
    with pytest.raises(ResumeError, match="layer_decay"):
        check_config("old.pt", stored, now | {"recipe.layer_decay": 0.9})
    assert before_values(Recipe)["decay_biases_and_gains"] is True   # before the rule, decay reached every parameter
    with pytest.raises(ResumeError, match="decay_biases_and_gains"):
        check_config("old.pt", stored | {"training.weight_decay": 0.01}, now | {"training.weight_decay": 0.01})


def test_gradual_unfreezing_steps_equal_a_hand_computation(tiny_config):
    """Depth d of L = 2 joins at ceil((L + 1 - d) * U * T / (L + 1)); heads at 0."""
    model = Classifier(tiny_config)
    hand = {0.5: {"head.weight": 0, "bert.pooler.Wp": 2, "bert.layers.1.Wq": 2, "bert.layers.0.bLN2": 4,
                  "bert.embeddings.word.weight": 6},                  # T = 12: ceil(1 * 6 / 3), ceil(2 * 6 / 3), 6
            0.25: {"head.bias": 0, "bert.pooler.bp": 1, "bert.layers.1.Wm3": 1, "bert.layers.0.Wq": 2,
                   "bert.embeddings.gLN": 3},                         # T = 12: ceil(1 * 3 / 3), ceil(2), ceil(3)
            0.0: {"head.weight": 0, "bert.layers.0.Wq": 0, "bert.embeddings.word.weight": 0}}
    for fraction, want in hand.items():
        assert {n: unfreeze_step(n, model, fraction, 12) for n in want} == want, fraction
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        unfreeze_step("head.weight", model, 1.0, 12)
