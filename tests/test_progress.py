"""The progress bars (tasks/core/progress.py): where stderr is not a terminal, a run redraws its training bar and its
dev bar a bounded number of times, not once per step; the loss shown never forces a redraw; the one prediction loop
shows a bar within showing() and predicts the same numbers with it as without; a fit with a part names it."""

from __future__ import annotations

import torch
from conftest import fit_with
from torch import nn

from tasks.core.evaluation import predict_batches
from tasks.core.progress import showing

CPU = torch.device("cpu")
STEPS, DEV_BATCHES = 400, 300


def batches(n: int, seed: int) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    return [{"x": torch.randn(2, 3, generator=g), "y": torch.randn(2, 1, generator=g)} for _ in range(n)]


def square_loss(model: nn.Module, batch: dict) -> torch.Tensor:
    return ((model(batch["x"]) - batch["y"]) ** 2).mean()


def train(**keywords) -> None:
    torch.manual_seed(0)
    model, train_batches, dev = nn.Linear(3, 1), batches(STEPS, 1), batches(DEV_BATCHES, 2)

    def evaluate(m: nn.Module) -> dict[str, float]:
        return {"sum": float(sum(y.sum() for y in predict_batches(m, dev, lambda net, b: net(b["x"]), CPU)))}
    fit_with(model, torch.optim.SGD(model.parameters(), lr=0.01), lambda epoch: train_batches, square_loss, evaluate,
             metric="sum", epochs=1, device=CPU, log=lambda s: None, **keywords)


def test_a_piped_run_redraws_a_bounded_number_of_times(capfd, one_thread):
    """stderr captured (a pipe, as in a log file or the notebook): STEPS optimiser steps and DEV_BATCHES dev batches
    give a few redraws, where a redraw per step (set_postfix's default refresh) gave over STEPS."""
    train()
    err = capfd.readouterr().err
    assert err.count("\r") <= 12, err.count("\r")
    assert "epoch 1/1" in err and "dev" in err, err


def test_no_progress_shows_no_bar(capfd, one_thread):
    train(progress=False)
    assert capfd.readouterr().err == ""


def test_a_fit_with_a_part_names_it_on_its_bar(capfd, one_thread):
    train(part="stage 2")
    assert "stage 2 epoch 1/1" in capfd.readouterr().err


def test_the_prediction_loop_predicts_the_same_with_a_bar(capfd):
    model, dev = nn.Linear(3, 1), batches(20, 3)
    plain = predict_batches(model, dev, lambda m, b: m(b["x"]), CPU)
    with showing("test"):
        shown = predict_batches(model, iter(dev), lambda m, b: m(b["x"]), CPU, total=len(dev))
    assert all(torch.equal(a, b) for a, b in zip(plain, shown, strict=True))
    assert "test" in capfd.readouterr().err


def test_the_runs_page_states_the_throttle_the_code_and_the_notebook_use():
    # docs/runs.md's two figures: the piped bar's seconds (PIPED_SECONDS) and the notebook run()'s TQDM_MININTERVAL
    import json
    from pathlib import Path

    from tasks.core.progress import PIPED_SECONDS
    root = Path(__file__).resolve().parents[1]
    page = " ".join((root / "docs" / "runs.md").read_text(encoding="utf-8").split())
    assert f"redrawn at most every {PIPED_SECONDS:g} s" in page
    cells = json.loads((root / "notebooks" / "minbert.ipynb").read_text(encoding="utf-8"))["cells"]
    code = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    assert 'os.environ.get("TQDM_MININTERVAL", "1")' in code and "`run()` sets 1" in page
