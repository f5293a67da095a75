"""PCGrad (minbert.pcgrad) and the sentence-embedding objectives (minbert.sentence_losses) against hand computations."""

from __future__ import annotations

import math
import random

import pytest
import torch
from torch import nn

from minbert.pcgrad import pcgrad_coefficients, pcgrad_project, projection_stats, surgery_loss
from minbert.sentence_losses import cosent_loss, cosine_similarity_loss, mnrl_loss


def test_pcgrad_projects_two_conflicting_2d_gradients_by_hand():
    # g1 = (1, 0), g2 = (-1, 1): g1 . g2 = -1 < 0.
    # g1' = g1 - (-1 / |g2|^2) g2 = (1, 0) + 0.5 (-1, 1) = (0.5, 0.5);  g2' = g2 - (-1 / |g1|^2) g1 = (0, 1)
    g1, g2 = torch.tensor([1.0, 0.0]), torch.tensor([-1.0, 1.0])
    p1, p2 = pcgrad_project([g1, g2], random.Random(3))
    assert torch.allclose(p1, torch.tensor([0.5, 0.5]))
    assert torch.allclose(p2, torch.tensor([0.0, 1.0]))
    assert abs(float(p1 @ g2)) < 1e-7 and abs(float(p2 @ g1)) < 1e-7   # each now orthogonal to the other's


def test_pcgrad_leaves_non_conflicting_gradients_unchanged():
    g1, g2 = torch.tensor([1.0, 2.0]), torch.tensor([3.0, -1.0])      # dot = 1 >= 0
    p1, p2 = pcgrad_project([g1, g2])
    assert torch.equal(p1, g1) and torch.equal(p2, g2)


def test_pcgrad_on_three_tasks_equals_algorithm_1_written_on_vectors():
    torch.manual_seed(0)
    grads = [torch.randn(50, dtype=torch.float64) for _ in range(3)]
    grads[1] = -grads[0] + 0.3 * grads[1]                            # make some pairs conflict
    want = []
    order = random.Random(7)
    for i, g in enumerate(grads):                                    # Yu et al. (2020), Alg. 1, literally
        g = g.clone()
        others = [j for j in range(3) if j != i]
        order.shuffle(others)
        for j in others:
            if g @ grads[j] < 0:
                g = g - (g @ grads[j]) / (grads[j] @ grads[j]) * grads[j]
        want.append(g)
    got = pcgrad_project(grads, random.Random(7))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_surgery_loss_projects_shared_parameters_and_keeps_each_heads_own():
    # shared w (2-D); task losses w . a + h1 and w . b + 2 h2: dL1/dw = a, dL2/dw = b, the heads get 1 and 2.
    w, h1, h2 = nn.Parameter(torch.zeros(2)), nn.Parameter(torch.zeros(1)), nn.Parameter(torch.zeros(1))
    a, b = torch.tensor([1.0, 0.0]), torch.tensor([-1.0, 1.0])
    losses = [w @ a + h1.sum(), w @ b + 2 * h2.sum()]
    loss = surgery_loss(losses, [w, h1, h2])
    assert math.isclose(loss.item(), 0.0)                              # the mean of the two losses' values
    loss.backward()
    assert torch.allclose(w.grad, torch.tensor([0.5, 1.5]))           # (0.5, 0.5) + (0, 1), by hand above
    assert h1.grad.item() == 1.0 and h2.grad.item() == 2.0


def test_surgery_loss_unprojected_sums_the_task_gradients():
    # the control (--gradient-surgery sum): the same conflicting a, b as above, summed as they are: (0, 1)
    w, h1, h2 = nn.Parameter(torch.zeros(2)), nn.Parameter(torch.zeros(1)), nn.Parameter(torch.zeros(1))
    a, b = torch.tensor([1.0, 0.0]), torch.tensor([-1.0, 1.0])
    surgery_loss([w @ a + h1.sum(), w @ b + 2 * h2.sum()], [w, h1, h2], project=False).backward()
    assert torch.equal(w.grad, torch.tensor([0.0, 1.0]))
    assert h1.grad.item() == 1.0 and h2.grad.item() == 2.0


def test_surgery_loss_workspace_reuses_its_matrix_and_gives_the_same_gradients():
    # two rounds with a kept workspace against two without: the same gradients, one (n, D) matrix written over
    torch.manual_seed(0)
    w, h1, h2 = nn.Parameter(torch.randn(3, 4)), nn.Parameter(torch.randn(4)), nn.Parameter(torch.randn(4))
    x = torch.randn(2, 3, 4)
    def losses(r):
        return [(w * x[r]).sum() ** 2 + h1 @ w[0], -(w * x[r]).sum() + 3 * (h2 @ w[1]) ** 2]
    workspace, seen, want = {}, set(), []
    for r in range(2):
        for ws in (None, workspace):
            for p in (w, h1, h2):
                p.grad = None
            surgery_loss(losses(r), [w, h1, h2], random.Random(r), workspace=ws).backward()
            want.append([p.grad.clone() for p in (w, h1, h2)])
        seen.add(workspace["F"].data_ptr())
        for a, b in zip(want[-2], want[-1]):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert len(seen) == 1 and workspace["F"].shape == (2, 3 * 4)   # only w is shared
    first = surgery_loss(losses(0), [w, h1, h2], workspace=workspace)
    surgery_loss(losses(1), [w, h1, h2], workspace=workspace)      # writes over the first call's gradients
    with pytest.raises(RuntimeError, match="wrote over the workspace"):
        first.backward()


def test_projection_stats_against_the_projected_vectors():
    # three random 50-D gradients with conflicts: the stats from the Gram matrix equal those from the vectors
    torch.manual_seed(4)
    grads = [torch.randn(50, dtype=torch.float64) for _ in range(3)]
    grads[1] = -grads[0] + 0.3 * grads[1]                               # g0 . g1 < 0
    F = torch.stack(grads)
    C = pcgrad_coefficients(F @ F.T, random.Random(2))
    projected = pcgrad_project(grads, random.Random(2))
    stats = projection_stats(F @ F.T, C)
    want = (sum(projected) - sum(grads)).norm() / sum(grads).norm()
    conflicts = sum(float(grads[i] @ grads[j]) < 0 for i in range(3) for j in range(i + 1, 3))
    assert stats["pairs"] == 3 and stats["conflicts"] == conflicts >= 1
    assert math.isclose(stats["change"], float(want), rel_tol=1e-9) and stats["change"] > 0
    no_conflict = torch.eye(3, dtype=torch.float64)                     # orthogonal gradients: nothing projected
    assert projection_stats(no_conflict, pcgrad_coefficients(no_conflict)) == {"pairs": 3, "conflicts": 0, "change": 0.0}


def test_cosent_by_hand():
    cos, gold = torch.tensor([0.9, 0.5, 0.1]), torch.tensor([3.0, 1.0, 2.0])
    # pairs with gold_i > gold_j: (0, 1), (0, 2), (2, 1): exp(20 (cos_j - cos_i)) = e^-8, e^-16, e^8
    expected = math.log(1 + math.exp(-8) + math.exp(-16) + math.exp(8))
    assert math.isclose(cosent_loss(cos, gold).item(), expected, rel_tol=1e-6)
    assert math.isclose(cosent_loss(cos, torch.ones(3)).item(), 0.0, abs_tol=1e-7)   # no ranked pair: log 1


def test_cosine_similarity_loss_by_hand():
    u, v = torch.tensor([[1.0, 0.0], [1.0, 1.0]]), torch.tensor([[0.0, 1.0], [1.0, 1.0]])
    # cosines 0 and 1; gold 2.5 and 5 -> targets 0.5 and 1: ((0 - 0.5)^2 + 0) / 2
    assert math.isclose(cosine_similarity_loss(u, v, torch.tensor([2.5, 5.0])).item(), 0.125, rel_tol=1e-6)


def test_mnrl_by_hand():
    u = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    v = torch.tensor([[3.0, 0.0], [1.0, 1.0]])
    # cosines: u0.v0 = 1, u0.v1 = 1/sqrt2, u1.v0 = 0, u1.v1 = 1/sqrt2
    r = 1 / math.sqrt(2)
    for scale in (20.0, 2.0):
        l0 = -math.log(math.exp(scale) / (math.exp(scale) + math.exp(scale * r)))
        l1 = -math.log(math.exp(scale * r) / (math.exp(0) + math.exp(scale * r)))
        assert math.isclose(mnrl_loss(u, v, scale=scale).item(), (l0 + l1) / 2, rel_tol=1e-4, abs_tol=1e-6)
        # only pair 1 is a duplicate: it alone is an anchor, v0 still its negative
        assert math.isclose(mnrl_loss(u, v, torch.tensor([0, 1]), scale).item(), l1, rel_tol=1e-4, abs_tol=1e-6)
    assert mnrl_loss(u, v, torch.tensor([0, 0])).item() == 0.0


def test_pcgrad_without_an_rng_draws_a_new_order_each_call_and_repeats_per_process():
    """Alg. 1 draws a random order every step: calls without an rng advance one module-level generator (seeded, so a
    process's sequence of calls repeats) instead of each starting from the same seed."""
    from minbert import pcgrad

    gram = torch.full((4, 4), -1.0, dtype=torch.float64) + torch.diag(torch.full((4,), 5.0, dtype=torch.float64))
    state = pcgrad.ORDER.getstate()
    first = [tuple(pcgrad_coefficients(gram).flatten().tolist()) for _ in range(20)]   # every pair conflicts
    assert len(set(first)) > 1
    pcgrad.ORDER.setstate(state)
    assert [tuple(pcgrad_coefficients(gram).flatten().tolist()) for _ in range(20)] == first
    assert torch.equal(pcgrad_coefficients(gram, random.Random(5)), pcgrad_coefficients(gram, random.Random(5)))
