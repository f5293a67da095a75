"""The course's optimizer test: your AdamW, 1000 steps on a small linear map, against the weights the course stored.

    python optimizer_test.py      # from the tree's root

The problem, the seed and the stored weights (assignments/fixtures/optimizer_test.npy, the course's
optimizer_test.npy byte for byte) are the CS224N starter's own; so is the comparison (torch.allclose).
`python -m assignments.check adamw` checks the same AdamW step by step and says where it differs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import minbert  # first: it refuses a Python older than 3.10 in one line

HERE = Path(__file__).resolve().parent

import numpy as np
import torch

seed = 0


def test_optimizer(opt_class: type) -> torch.Tensor:
    """1000 AdamW steps of a squared error on a bias-free Linear(3, 2); returns the weight after them."""
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    model = torch.nn.Linear(3, 2, bias=False)
    opt = opt_class(
        model.parameters(),
        lr=1e-3,
        weight_decay=1e-4,
        correct_bias=True,
    )
    for _ in range(1000):
        opt.zero_grad()
        x = torch.FloatTensor(rng.uniform(size=[model.in_features]))
        y_hat = model(x)
        y = torch.Tensor([x[0] + x[1], -x[2]])
        loss = ((y - y_hat) ** 2).sum()
        loss.backward()
        opt.step()
    return model.weight.detach()


def main() -> int:
    if Path(minbert.__file__).resolve().parents[1] != HERE:
        print(f"minbert was imported from {Path(minbert.__file__).parent}, not from this tree {HERE}: run "
              f"python optimizer_test.py from {HERE}; if it still does, pip uninstall minbert", file=sys.stderr)
        return 2
    from minbert.optim import AdamW
    ref = torch.tensor(np.load(HERE / "assignments" / "fixtures" / "optimizer_test.npy"))
    try:
        actual = test_optimizer(AdamW)
    except NotImplementedError as e:
        from tasks.core.unfinished import unfinished_message
        print(unfinished_message(e) or f"NotImplementedError: {e}", file=sys.stderr)
        return 1
    if not torch.allclose(ref, actual):
        print(f"Optimizer test failed: your AdamW's weights after 1000 steps differ from optimizer_test.npy (max abs "
              f"diff {(ref - actual).abs().max().item():.3g}). python -m assignments.check adamw says where",
              file=sys.stderr)
        return 1
    print("Optimizer test passed!")
    return 0


if __name__ == "__main__":
    sys.exit(main())
