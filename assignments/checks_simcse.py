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
    # by hand: z1 = z2 = 3 I (2 x 2), t = 0.5: cos = I, logits = 2 I, and each row's loss is
    # -log(e^2 / (e^2 + e^0)) = log(1 + e^-2)
    z = 3.0 * torch.eye(2)
    compare(f"{what} by hand: z1 = z2 = 3 I (two sentences, H = 2), temperature 0.5: cos(z1_i, z2_j) is 1 on the "
            "diagonal and 0 off it, so the loss is log(1 + e^-2)", unsup_simcse_loss(z, z.clone(), 0.5),
            torch.tensor(math.log1p(math.exp(-2.0))), hints={
                "the temperature is not applied: divide the cosines by it": torch.tensor(math.log1p(math.exp(-1.0))),
                "the cosines are multiplied by the temperature: divide them by it":
                torch.tensor(math.log1p(math.exp(-0.5))),
                "the dot products are used, not the cosines (cosine_matrix normalises the vectors)":
                torch.tensor(math.log1p(math.exp(-18.0)))},
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


def check_margin() -> None:
    from minbert.simcse import margin_loss
    what = f"margin_loss() in {FILE}"
    # by hand: e1 = (1, 0); e2 = (0, 1) is at cosine distance 1, e2 = (1, 1) at 1 - 1/sqrt(2)
    e1, e2 = torch.tensor([[1.0, 0.0], [1.0, 0.0]]), torch.tensor([[0.0, 1.0], [1.0, 1.0]])
    d = 1.0 - 1.0 / math.sqrt(2.0)
    cases = (("y = (1, 1)", torch.tensor([1, 1]), (0.5 * 1.0 + 0.5 * d * d) / 2, {
                 "the branches are swapped: y = 1 (a paraphrase) takes y d^2, y = 0 takes max(0, margin - d)^2":
                 torch.tensor((0.0 + 0.5 * (0.5 - d) ** 2) / 2)}),
             ("y = (0, 0)", torch.tensor([0, 0]), (0.0 + 0.5 * (0.5 - d) ** 2) / 2, {
                 "the paraphrase branch is used for the other pairs: y = 0 takes max(0, margin - d)^2":
                 torch.tensor((0.5 * 1.0 + 0.5 * d * d) / 2),
                 "max(0, .) is left out: (margin - d)^2 also counts the pairs already further apart than the margin":
                 torch.tensor((0.5 * 0.25 + 0.5 * (0.5 - d) ** 2) / 2)}),
             ("y = (1, 0) (integers)", torch.tensor([1, 0]), (0.5 + 0.5 * (0.5 - d) ** 2) / 2, {
                 "the branches are swapped: y = 1 (a paraphrase) takes y d^2, y = 0 takes max(0, margin - d)^2":
                 torch.tensor((0.0 + 0.5 * d * d) / 2),
                 "the factor 0.5 is left out": torch.tensor((1.0 + (0.5 - d) ** 2) / 2)}))
    for label, y, expected, hints in cases:
        compare(f"{what} by hand: e1 = (1, 0), (1, 0); e2 = (0, 1), (1, 1), at cosine distances 1 and 1 - 1/sqrt(2); "
                f"{label}, margin 0.5", margin_loss(e1, e2, y, 0.5), torch.tensor(expected), hints=hints,
                shape_hint="The loss is one number, the mean over the batch: a 0-d tensor")
    f = load_fixture("simcse")
    for distance in ("cosine", "euclidean"):
        m = float(f[f"margin_{distance}"])
        key = f"margin_{distance}_loss"
        hints = {"the branches are swapped: y = 1 (a paraphrase) takes y d^2, y = 0 takes max(0, margin - d)^2":
                 f[f"{key}_swapped"],
                 "max(0, .) is left out: (margin - d)^2 also counts the pairs already further apart than the margin":
                 f[f"{key}_no_clamp"],
                 "max(0, d - margin) is used: the other pairs are pushed until max(0, margin - d) is 0":
                 f[f"{key}_reversed"],
                 "the distances are not squared": f[f"{key}_not_squared"],
                 "the factor 0.5 is left out": f[f"{key}_no_half"],
                 "the loss is summed over the batch instead of averaged": f[f"{key}_sum"]}
        hints.update({"d is the cosine itself: the cosine distance is 1 - cos": f[f"{key}_cos"]} if distance == "cosine"
                     else {"the vectors are normalised first: the Euclidean distance is on the raw vectors":
                           f[f"{key}_normalised"]})
        e1 = f["e1"].clone().requires_grad_()
        loss = margin_loss(e1, f["e2"], f["y"], m, distance)
        compare(f'{what} with distance="{distance}", margin {m:g}, on random pairs (6, 8) with 0/1 labels (long)',
                loss, f[key], hints=hints, shape_hint="The loss is one number, the mean over the batch: a 0-d tensor")
        differentiable(what, loss)


SIMCSE_PARTS = [Part(*p[:4], files=(FILE,), group="simcse", fixtures=p[4]) for p in [
    ("simcse_unsup", 10, f"unsup_simcse_loss() in {FILE}", check_unsup, ("simcse",)),
    ("simcse_margin", 10, f"margin_loss() in {FILE}", check_margin, ("simcse",)),
]]
