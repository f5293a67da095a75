"""The SimCSE extension's checks (minbert/simcse.py): the unsupervised SimCSE loss and the report's margin loss.

Both are pure functions of sentence embeddings: the checks compare with hand computations and with the
reference on random embeddings (assignments/fixtures/simcse.safetensors).
"""

from __future__ import annotations

import math

import torch

from .common import Part, compare, differentiable, load_fixture

FILE = "minbert/simcse.py"


def check_unsup() -> None:
    from minbert.simcse import unsup_simcse_loss
    what = f"unsup_simcse_loss() in {FILE}"
    # by hand: z1 = z2 = 1.5 I (2 x 2), t = 0.5: cos = I, logits = 2 I, and each row's loss is
    # -log(e^2 / (e^2 + e^0)) = log(1 + e^-2). The mistakes give other numbers on these inputs: the dot products
    # z1 z2^T = 2.25 I give logits 4.5 I, a fixed temperature 0.05 gives 20 I (a loss of ~2e-9)
    z = 1.5 * torch.eye(2)
    compare(f"{what} by hand: z1 = z2 = 1.5 I (two sentences, H = 2), temperature 0.5: cos(z1_i, z2_j) is 1 on the "
            "diagonal and 0 off it, so the loss is log(1 + e^-2)", unsup_simcse_loss(z, z.clone(), 0.5),
            torch.tensor(math.log1p(math.exp(-2.0))), hints={
                "the temperature is not applied: divide the cosines by it": torch.tensor(math.log1p(math.exp(-1.0))),
                "the cosines are multiplied by the temperature: divide them by it":
                torch.tensor(math.log1p(math.exp(-0.5))),
                "the temperature argument is not used: a number of your own (SimCSE's 0.05) stands in its place":
                torch.tensor(math.log1p(math.exp(-20.0))),
                "the dot products are used, not the cosines (cosine_matrix normalises the vectors)":
                torch.tensor(math.log1p(math.exp(-4.5))),
                "the loss is summed over the batch instead of averaged": torch.tensor(2 * math.log1p(math.exp(-2.0)))},
            shape_hint="The loss is one number, the mean over the batch: a 0-d tensor")
    f = load_fixture("simcse")
    z1, z2 = f["z1"].clone().requires_grad_(), f["z2"]
    t = float(f["temperature"])
    hints = {"the temperature is not applied: divide the cosines by it": f["unsup_no_temperature"],
             "the cosines are multiplied by the temperature: divide them by it": f["unsup_times_temperature"],
             "the dot products are used, not the cosines (cosine_matrix normalises the vectors)": f["unsup_dot"],
             "the loss is averaged over both directions, z1 -> z2 and z2 -> z1: SimCSE takes z1 -> z2":
             f["unsup_both_directions"],
             "the loss is summed over the batch instead of averaged": f["unsup_sum"]}
    loss = unsup_simcse_loss(z1, z2, t)
    compare(f"{what} on random embeddings (6, 8) of different norms, temperature {t:g}", loss, f["unsup"],
            hints=hints, shape_hint="The loss is one number, the mean over the batch: a 0-d tensor")
    differentiable(what, loss)
    compare(f"{what} with the default temperature (0.05)", unsup_simcse_loss(f["z1"], f["z2"]), f["unsup_default"],
            hint="Use the temperature argument, not a number of your own")


# The margin loss's mistakes, keyed by the suffix of their fixture keys (margin_{distance}_loss{suffix}).
MARGIN_HINTS = {
    "_swapped": "the branches are swapped: y = 1 (a paraphrase) takes y d^2, y = 0 takes max(0, margin - d)^2",
    "_all_pull": "the paraphrase branch is used for the other pairs: y = 0 takes max(0, margin - d)^2",
    "_no_clamp": "max(0, .) is left out: (margin - d)^2 also counts the pairs already further apart than the margin",
    "_reversed": "max(0, d - margin) is used: the other pairs are pushed until max(0, margin - d) is 0",
    "_not_squared": "the distances are not squared",
    "_push_not_squared": "the push term max(0, margin - d) is not squared: y = 0 takes its square, as y = 1 takes d^2",
    "_no_half": "the factor 0.5 is left out",
    "_sum": "the loss is summed over the batch instead of averaged",
    "_cos": "d is the cosine itself: the cosine distance is 1 - cos",
    "_normalised": "the vectors are normalised first: the Euclidean distance is on the raw vectors",
}


def _by_hand(d: list[float], y: list[int], margin: float, *, swap: bool = False, all_pull: bool = False,
             clamp: bool = True, reverse: bool = False, pull: int = 2, push: int = 2, half: float = 0.5,
             total: bool = False) -> torch.Tensor:
    """The margin loss of the distances d and labels y on Python floats, or with one of the mistakes above."""
    terms = []
    for di, yi in zip(d, y):
        yi = 1 if all_pull else (1 - yi if swap else yi)
        gap = di - margin if reverse else margin - di
        terms.append(half * (yi * di ** pull + (1 - yi) * (max(0.0, gap) if clamp else gap) ** push))
    return torch.tensor(sum(terms) if total else sum(terms) / len(terms))


def check_margin() -> None:
    from minbert.simcse import margin_loss
    what = f"margin_loss() in {FILE}"
    # by hand: e1 = (1, 0) three times; e2 = (0, 1) is at cosine distance 1, (1, 1) at 1 - 1/sqrt(2), (-1, 0) at 2
    e1 = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    e2 = torch.tensor([[0.0, 1.0], [1.0, 1.0], [-1.0, 0.0]])
    d = 1.0 - 1.0 / math.sqrt(2.0)
    ds, cos = [1.0, d, 2.0], [0.0, 1.0 / math.sqrt(2.0), -1.0]
    cases = (("y = (1, 1, 1)", [1, 1, 1], (0.5 * 1.0 + 0.5 * d * d + 0.5 * 4.0) / 3),
             ("y = (1, 0, 1)", [1, 0, 1], (0.5 * 1.0 + 0.5 * (0.5 - d) ** 2 + 0.5 * 4.0) / 3),
             ("y = (0, 0, 1)", [0, 0, 1], (0.0 + 0.5 * (0.5 - d) ** 2 + 0.5 * 4.0) / 3))
    for label, y, expected in cases:
        # the mistakes on these inputs (a mistake that gives the right answer here is not offered: compare())
        wrong = {"_swapped": _by_hand(ds, y, 0.5, swap=True), "_all_pull": _by_hand(ds, y, 0.5, all_pull=True),
                 "_no_clamp": _by_hand(ds, y, 0.5, clamp=False), "_reversed": _by_hand(ds, y, 0.5, reverse=True),
                 "_not_squared": _by_hand(ds, y, 0.5, pull=1, push=1),
                 "_push_not_squared": _by_hand(ds, y, 0.5, push=1), "_no_half": _by_hand(ds, y, 0.5, half=1.0),
                 "_sum": _by_hand(ds, y, 0.5, total=True), "_cos": _by_hand(cos, y, 0.5)}
        compare(f"{what} by hand: e1 = (1, 0), (1, 0), (1, 0); e2 = (0, 1), (1, 1), (-1, 0), at cosine distances 1, "
                f"1 - 1/sqrt(2) and 2; {label} (integers), margin 0.5", margin_loss(e1, e2, torch.tensor(y), 0.5),
                torch.tensor(expected), hints={MARGIN_HINTS[k]: v for k, v in wrong.items()},
                shape_hint="The loss is one number, the mean over the batch: a 0-d tensor")
    f = load_fixture("simcse")
    for distance in ("cosine", "euclidean"):
        m = float(f[f"margin_{distance}"])
        key = f"margin_{distance}_loss"
        own = "_cos" if distance == "cosine" else "_normalised"
        hints = {text: f[f"{key}{suffix}"] for suffix, text in MARGIN_HINTS.items()
                 if suffix not in ("_cos", "_normalised") or suffix == own}
        e1 = f["e1"].clone().requires_grad_()
        loss = margin_loss(e1, f["e2"], f["y"], m, distance)
        compare(f'{what} with distance="{distance}", margin {m:g}, on random pairs (6, 8) with 0/1 labels (long)',
                loss, f[key], hints=hints, shape_hint="The loss is one number, the mean over the batch: a 0-d tensor")
        differentiable(what, loss)


SIMCSE_PARTS = [Part(*p[:4], files=(FILE,), group="simcse", fixtures=p[4]) for p in [
    ("simcse_unsup", 10, f"unsup_simcse_loss() in {FILE}", check_unsup, ("simcse",)),
    ("simcse_margin", 10, f"margin_loss() in {FILE}", check_margin, ("simcse",)),
]]
