"""--cuda-graphs (tasks/core/graphs.py) where there is no GPU: the settings it refuses, each named; the shape a graph
is kept for; checkpoints written as without graphs. What only a GPU shows (a replay's numbers, no synchronisation,
exact resume) is in tests/test_cuda_step.py."""

from __future__ import annotations

import pytest
import torch

from tasks.core.graphs import check_graphs, float_learning_rates, shape_key
from tasks.core.loop import FitOptions, Work
from tasks.core.recipe import Recipe
from tasks.core.train import fit

CUDA = torch.device("cuda")
FINE = {"optimizer_kind": "fused", "precision": "bf16", "grad_accum": 1, "gradual_unfreezing": 0.0,
        "compile_mode": "off", "extras": []}


def test_the_settings_a_graph_cannot_hold_are_refused_by_name():
    check_graphs(CUDA, **FINE)                                   # the main job's settings on a GPU: accepted
    for change, named in [({"optimizer_kind": "AdamW"}, "--optimizer fused"), ({"precision": "fp16"}, "fp32 or bf16"),
                          ({"grad_accum": 2}, "--grad-accum 1"), ({"gradual_unfreezing": 0.5}, "--gradual-unfreezing 0"),
                          ({"compile_mode": "reduce-overhead"}, "--compile off"),
                          ({"extras": ["no extension term"]}, "no extension term")]:
        with pytest.raises(ValueError, match="--cuda-graphs needs .*" + named):
            check_graphs(CUDA, **{**FINE, **change})
    with pytest.raises(ValueError, match="a CUDA device .this run's is cpu"):
        check_graphs(torch.device("cpu"), **FINE)


def test_fit_refuses_graphs_on_the_cpu_before_any_step():
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.AdamW(model.parameters(), fused=True)
    stepped = []
    work = Work(model, optimizer, lambda epoch: stepped.append(epoch) or [], lambda m, b: m(b["x"]).sum(),
                lambda m: {"m": 0.0}, "m")
    with pytest.raises(ValueError, match="--cuda-graphs needs a CUDA device"):
        fit(work, Recipe(cuda_graphs=True), FitOptions(epochs=1, device=torch.device("cpu"), seed=0, progress=False))
    assert stepped == []


def test_a_graph_is_kept_per_task_and_tensor_shape():
    def batch(task, B, T, dtype=torch.long):
        return {"task": task, "ids": [str(i) for i in range(B)], "input_ids": torch.zeros(B, T, dtype=dtype),
                "labels": torch.zeros(B)}
    assert shape_key(batch("sst", 16, 32)) == shape_key({**batch("sst", 16, 32), "ids": ["x"] * 16})
    keys = {shape_key(b) for b in (batch("sst", 16, 32), batch("para", 16, 32), batch("sst", 16, 64),
                                   batch("sst", 4, 32), batch("sst", 16, 32, torch.int32))}
    assert len(keys) == 5


def test_a_checkpoint_keeps_float_learning_rates():
    """The optimiser's state as a checkpoint keeps it: under --cuda-graphs the learning rate is a tensor on the GPU
    and the group capturable; written, it is the float and the flag a run without graphs writes."""
    params = [torch.nn.Parameter(torch.ones(3))]
    plain = torch.optim.AdamW(params, lr=1e-3, fused=True)
    graphed = torch.optim.AdamW(params, lr=torch.tensor(2e-3), fused=True, capturable=True)
    state = float_learning_rates(graphed.state_dict())
    assert state["param_groups"][0]["lr"] == pytest.approx(2e-3) and isinstance(state["param_groups"][0]["lr"], float)
    assert state["param_groups"][0]["capturable"] is False
    assert set(state["param_groups"][0]) == set(plain.state_dict()["param_groups"][0])
    assert torch.is_tensor(graphed.param_groups[0]["lr"])              # the optimiser itself keeps its tensor
