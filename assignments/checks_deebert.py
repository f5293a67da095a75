"""The DeeBERT extension's checks (minbert/deebert.py): the exit entropy and the batched early-exit loop.

The encoder is common.StandInBert (six layers), so that these parts do not run part 1's code, and the
early-exit check uses exit rules that do not call entropy(), so that each part depends on its own function.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .common import Fail, Part, StandInBert, _state, _tiny_config, add_hint, compare, load_fixture

FILE = "minbert/deebert.py"
NUM_LAYERS, NUM_LABELS = 6, 3


@dataclass(frozen=True)
class ConfidenceExit:
    """A stand-in exit rule: leave once the largest class probability exceeds the threshold (no entropy())."""

    threshold: float

    def start(self, batch_size: int, device: torch.device) -> dict[str, torch.Tensor]:
        return {}

    def step(self, logits: torch.Tensor, state: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        return logits.softmax(-1).amax(-1) > self.threshold, state


def exit_rules(thresholds: torch.Tensor) -> list[tuple[str, object]]:
    """The rules the check runs, with their descriptions: confidence thresholds, and PABEE's patience (stateful)."""
    from minbert.deebert import PatienceExit
    rules: list[tuple[str, object]] = [(f"an exit when max softmax probability > {t:.4f}", ConfidenceExit(t))
                                       for t in thresholds.tolist()]
    return rules + [(f"PatienceExit({p}) (a rule with per-sample state)", PatienceExit(p)) for p in (1, 2)]


def deebert_model() -> torch.nn.Module:
    """DeeBert on a six-layer stand-in encoder (H = 32), three classes, off-ramps pooling the mean."""
    from minbert.deebert import DeeBert, DeeBertConfig
    return DeeBert(StandInBert(_tiny_config(), num_layers=NUM_LAYERS), DeeBertConfig(NUM_LABELS, pooling="mean"))


def _minus_inf_hint(got: object) -> str:
    if isinstance(got, torch.Tensor) and bool(got.isnan().any()):
        return ("It has NaN where a logit is -inf: there p = 0 and log p = -inf, and 0 * -inf = nan; the term "
                "0 log 0 must count as 0 (keep log p finite, e.g. at the dtype's smallest value)")
    return ""


def check_entropy() -> None:
    from minbert.deebert import entropy
    what = f"entropy() in {FILE}"
    # by hand: logits (0, ln 3) give p = (1/4, 3/4) and H = -(1/4 ln 1/4 + 3/4 ln 3/4) = ln 4 - (3/4) ln 3
    h = math.log(4.0) - 0.75 * math.log(3.0)
    z = torch.tensor([0.0, math.log(3.0)])
    hints = {"the minus sign is left out": torch.tensor(-h),
             "H is divided by ln 2: log base 2 (bits) is used, or H is normalised although normalize=False":
             torch.tensor(h / math.log(2.0))}
    compare(f"{what} of the logits (0, ln 3), where p = (1/4, 3/4) and H = ln 4 - (3/4) ln 3 (a 1-D input "
            "gives a 0-d tensor)", entropy(z), torch.tensor(h), hints=hints)
    compare(f"{what} with normalize=True of the logits (0, ln 3): H / ln 2", entropy(z, normalize=True),
            torch.tensor(h / math.log(2.0)), hint="With normalize, divide H by ln C (C = 2 classes here)")
    big = torch.tensor([[1000.0, -1000.0, 0.0], [1000.0, 1000.0, -1000.0], [-1000.0, -1000.0, -1000.0]])
    compare(f"{what} at logits of +-1000 (expected 0, ln 2, ln 3: finite)", entropy(big),
            torch.tensor([0.0, math.log(2.0), math.log(3.0)]),
            hint="It must stay finite: take log p from F.log_softmax (exp(1000) overflows to inf, and log of a "
                 "softmax that underflowed to 0 is -inf, with 0 * -inf = nan)")
    # a logit of -inf: that class has p = 0 and log p = -inf, and 0 log 0 counts as 0, so H is that of (1/4, 3/4)
    ninf = torch.tensor([[0.0, -math.inf, math.log(3.0)], [-math.inf, 0.0, -math.inf]])
    compare(f"{what} of the logits (0, -inf, ln 3) and (-inf, 0, -inf), where p = (1/4, 0, 3/4) and (0, 1, 0) "
            "(expected ln 4 - (3/4) ln 3 and 0: finite)", entropy(ninf), torch.tensor([h, 0.0]),
            hint=lambda got: _minus_inf_hint(got))
    f = load_fixture("deebert_entropy")
    compare(f"{what} of random logits (2, 3, 5), over the last dimension", entropy(f["logits"]), f["entropy"],
            shape_hint="Sum over the classes, the last dimension: (..., C) -> (...)")
    compare(f"{what} with normalize=True of random logits (2, 3, 5)", entropy(f["logits"], normalize=True),
            f["entropy_normalized"], hint="With normalize, divide H by ln C (C = 5 classes here)")


def _alone(early_exit, model, ids, mask, lengths, rule) -> tuple[torch.Tensor, torch.Tensor]:
    """Algorithm 1: each sample on its own, without padding; (logits (B, C), exit layers (B,))."""
    outs = [early_exit(model, ids[b:b + 1, :n], mask[b:b + 1, :n], None, rule) for b, n in enumerate(lengths)]
    for o in outs:
        if not hasattr(o, "logits") or not hasattr(o, "layers"):
            raise Fail(f"early_exit() in {FILE} returned {type(o).__name__}, expected an ExitOutput(logits, layers, "
                       "token_layers)")
    return torch.cat([o.logits for o in outs]), torch.cat([o.layers for o in outs])


def check_exit() -> None:
    from minbert.deebert import early_exit
    f = load_fixture("deebert_exit")
    model = deebert_model()
    model.load_state_dict(_state(f, "param."))
    model.eval()
    ids, mask = f["input_ids"], f["attention_mask"]
    lengths = mask.sum(1).tolist()
    what = f"early_exit() in {FILE}"
    batch = f"the padded batch of {len(lengths)} samples of lengths {lengths}"
    for i, (name, rule) in enumerate(exit_rules(f["thresholds"])):
        layers, logits = f[f"rule{i}_layers"], f[f"rule{i}_logits"]
        one_logits, one_layers = _alone(early_exit, model, ids, mask, lengths, rule)
        compare(f"{what} with {name}, each sample run alone (batch size 1): the exit layers", one_layers, layers,
                hints={"the exit layers are counted from 0: they are 1-based": layers - 1})
        compare(f"{what} with {name}, each sample run alone (batch size 1): the logits", one_logits, logits)
        for trim in (True, False):
            try:
                out = early_exit(model, ids, mask, None, rule, trim=trim)
            except (RuntimeError, IndexError, ValueError) as e:
                add_hint(e, f"(on {batch}, trim={trim}; each sample run alone passes) When samples leave, keep the "
                            "others' rows in h, mask, bias and every tensor of the rule's state alike, and write "
                            "the leaving ones to out[rows[done]], their original rows")
                raise
            on_batch = f"{what} with {name} on {batch}, trim={trim}"
            hint = ("Each sample run alone is right but not in the batch: write the leaving samples to their "
                    "original rows (out[rows[done]], layers[rows[done]]) and keep the others' rows in h, mask, "
                    "bias and the rule's state alike")
            compare(f"{on_batch}: the exit layers (compared with each sample run alone)", out.layers, layers,
                    hint=hint)
            compare(f"{on_batch}: the logits (compared with each sample run alone)", out.logits, logits, hint=hint)
            compare(f"{on_batch}: token_layers", torch.tensor(out.token_layers),
                    f[f"rule{i}_work_{'trim' if trim else 'full'}"],
                    hint="token_layers is the sum over the layers run of the running batch's rows x columns "
                         "(h.shape[0] * h.shape[1] after each layer)" + (
                             ". With trim, drop the columns no running sample needs, mask.bool().any(0), from h, "
                             "mask and bias" if trim else ""))


DEEBERT_PARTS = [Part(*p[:4], files=(FILE,), group="deebert", fixtures=p[4]) for p in [
    ("deebert_entropy", 10, f"entropy() in {FILE}", check_entropy, ("deebert_entropy",)),
    ("deebert_exit", 20, f"early_exit() in {FILE}", check_exit, ("deebert_exit",)),
]]
