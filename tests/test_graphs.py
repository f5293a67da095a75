"""--cuda-graphs (tasks/core/graphs.py) where there is no GPU: the settings it refuses, each named; the shape a graph
is kept for; checkpoints written as without graphs. What only a GPU shows (a replay's numbers, no synchronisation,
exact resume) is in tests/test_cuda_step.py."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace

import pytest
import torch
from test_save_every import multitask_argv

import minbert
from tasks import multitask
from tasks.core import data, train, training_setup
from tasks.core.batching import to_device
from tasks.core.checkpoints import load_checkpoint
from tasks.core.graphs import StepGraphs, check_graphs, float_learning_rates, shape_key, tensors_of
from tasks.core.loop import FitOptions, Work
from tasks.core.recipe import Recipe
from tasks.core.train import fit

CUDA = torch.device("cuda")


def test_the_settings_a_graph_cannot_hold_are_refused_by_name():
    params = [torch.nn.Parameter(torch.ones(2))]
    fused = torch.optim.AdamW(params, fused=True)
    main_job = Recipe(precision="bf16", cuda_graphs=True)
    check_graphs(CUDA, main_job, fused)                            # the main job's settings on a GPU: accepted
    for recipe, optimizer, named in [
            (main_job, torch.optim.AdamW(params), "--optimizer fused .* this run's is torch"),
            (main_job, minbert.AdamW(params), "--optimizer fused .* this run's is course"),
            (replace(main_job, precision="fp16"), fused, "fp32 or bf16"),
            (replace(main_job, grad_accum=2), fused, "--grad-accum 1"),
            (replace(main_job, gradual_unfreezing=0.5), fused, "--gradual-unfreezing 0"),
            (replace(main_job, compile="reduce-overhead"), fused, "--compile off")]:
        with pytest.raises(ValueError, match="--cuda-graphs needs .*" + named):
            check_graphs(CUDA, recipe, optimizer)
    with pytest.raises(ValueError, match="needs a CUDA device .this run's is cpu.; one process .no torchrun.; no "
                                         "extension term .*; no post-step hook$"):
        check_graphs(torch.device("cpu"), main_job, fused, parallel=True, terms=True, post_step=True)


def test_gradient_checkpointing_is_refused_by_name(tiny_config):
    """A checkpointed layer's recomputation saves the CUDA generator's state, which a capture refuses: fit names it
    among the needs before any step, instead of a capture failing with another step's advice."""
    fused = torch.optim.AdamW([torch.nn.Parameter(torch.ones(2))], fused=True)
    with pytest.raises(ValueError, match="--cuda-graphs needs no --gradient-checkpointing"):
        check_graphs(CUDA, Recipe(cuda_graphs=True), fused, checkpointing=True)
    model = minbert.BertModel(tiny_config)
    model.gradient_checkpointing = True
    work = Work(model, torch.optim.AdamW(model.parameters(), fused=True), lambda epoch: pytest.fail("a step ran"),
                lambda m, b: pytest.fail("a step ran"), lambda m: {"m": 0.0}, "m")
    with pytest.raises(ValueError, match="a CUDA device .this run's is cpu.; no --gradient-checkpointing"):
        fit(work, Recipe(cuda_graphs=True), FitOptions(epochs=1, device=torch.device("cpu"), seed=0, progress=False))


class FakeCapture:
    """torch.cuda.graph's shape on a CPU: its exit ends the capture, which raises after an invalidated one."""
    invalidated = False

    def __init__(self, graph, pool=None, stream=None):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if FakeCapture.invalidated:
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture")


def cpu_graphs(monkeypatch) -> StepGraphs:
    """A StepGraphs on the CPU: torch.cuda.graph as FakeCapture, no synchronisation, no copies into the inputs."""
    monkeypatch.setattr(torch.cuda, "graph", FakeCapture)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr("tasks.core.graphs._copy_into", lambda static, b: None)
    graphs = StepGraphs.__new__(StepGraphs)
    graphs.device, graphs.pool, graphs.stream = torch.device("cpu"), None, None
    graphs.optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.ones(2))])
    graphs.graphs, graphs.seen, graphs.counts = {}, set(), {"eager": 0, "captured": 0, "replayed": 0}
    graphs.seconds = dict.fromkeys(StepGraphs.PARTS, 0.0)
    return graphs


@pytest.mark.parametrize("raised, invalidates, expected", [
    (RuntimeError("operation not permitted when stream is capturing"), True,
     (RuntimeError, "could not be captured as a CUDA graph .operation not permitted when stream is capturing.")),
    (None, True, (RuntimeError, "could not be captured as a CUDA graph .CUDA error: operation failed due to")),
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), True,
     (torch.OutOfMemoryError, "^CUDA out of memory")),
    (KeyError("labels"), True, (KeyError, "labels"))])
def test_a_failed_capture_reports_the_steps_own_error(raised, invalidates, expected, monkeypatch):
    """The step's error, not the one ending an invalidated capture raises after it; out of memory and errors that
    are not CUDA's pass as they are, not relabelled as a read back to the host."""
    monkeypatch.setattr(torch.cuda, "graph", FakeCapture)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda: object())
    monkeypatch.setattr(FakeCapture, "invalidated", invalidates)
    graphs = cpu_graphs(monkeypatch)
    batch = {"task": "sst", "input_ids": torch.ones(2, 32, dtype=torch.long)}
    graphs.seen = {shape_key(batch)}                                   # its eager step ran: this one is captured

    def body(on_device):
        if raised is not None:
            raise raised
        return torch.zeros(())
    kind, message = expected
    with pytest.raises(kind, match=message):
        graphs.step(batch, body)
    assert graphs.graphs == {} and graphs.counts["captured"] == 0


def test_the_one_time_work_is_timed_apart_and_a_replay_waits_for_nothing(monkeypatch):
    """StepGraphs.seconds: the run's first step, the other shapes' eager steps, the captures and their first replays,
    each between two synchronisations; a replay adds no time and makes no synchronisation (a clock that only the
    steps move: an eager step 1 s, a capture 10 s, a replay 0.5 s)."""
    clock, syncs = [0.0], []

    class Graph:
        def replay(self):
            clock[0] += 0.5
    graphs = cpu_graphs(monkeypatch)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: syncs.append(device))
    monkeypatch.setattr("tasks.core.graphs.time.perf_counter", lambda: clock[0])
    capturing = [False]

    def body(on_device):
        clock[0] += 10.0 if capturing[0] else 1.0
        return torch.zeros(())

    class Capture(FakeCapture):
        def __enter__(self):
            capturing[0] = True

        def __exit__(self, *exc):
            capturing[0] = False
    monkeypatch.setattr(torch.cuda, "graph", Capture)
    a = {"task": "sst", "input_ids": torch.ones(2, 32, dtype=torch.long)}
    b = {"task": "sst", "input_ids": torch.ones(2, 64, dtype=torch.long)}
    for batch in (a, a, a, b, b, b, a, b):
        replay, before = shape_key(batch) in graphs.graphs, len(syncs)
        graphs.step(batch, body)
        assert not replay or len(syncs) == before                 # a replay: no synchronisation
    assert graphs.counts == {"eager": 2, "captured": 2, "replayed": 4}
    assert graphs.seconds == {"first step": 1.0, "eager": 1.0, "capture": 20.0, "first replay": 1.0}
    assert len(syncs) == 2 * 6                                     # two eager steps, two captures, two first replays
    assert graphs.describe_seconds() == ("CUDA graphs' one-time work: first step 1.00 s, 1 other eager 1.00 s, "
                                         "2 captures 20.00 s, their first replays 1.00 s")


def test_fit_refuses_graphs_before_any_step_naming_each_need():
    """fit() hands check_graphs what the run has: the device, the optimiser, a post-step hook (and torchrun and
    the extension terms, which a CPU test cannot start)."""
    model = torch.nn.Linear(2, 1)
    stepped = []
    for optimizer, post_step, expected in [
            (torch.optim.AdamW(model.parameters(), fused=True), None, "a CUDA device .this run's is cpu.$"),
            (torch.optim.AdamW(model.parameters()), lambda m: None,
             "a CUDA device .*; --optimizer fused .* this run's is torch.; no post-step hook$")]:
        work = Work(model, optimizer, lambda epoch: stepped.append(epoch) or [], lambda m, b: m(b["x"]).sum(),
                    lambda m: {"m": 0.0}, "m", post_step)
        with pytest.raises(ValueError, match="--cuda-graphs needs " + expected):
            fit(work, Recipe(cuda_graphs=True), FitOptions(epochs=1, device=torch.device("cpu"), seed=0,
                                                           progress=False))
    assert stepped == []


def test_a_graph_is_kept_per_task_and_tensor_shape():
    def batch(task, B, T, dtype=torch.long):
        return {"task": task, "ids": [str(i) for i in range(B)], "input_ids": torch.zeros(B, T, dtype=dtype),
                "labels": torch.zeros(B)}
    assert shape_key(batch("sst", 16, 32)) == shape_key({**batch("sst", 16, 32), "ids": ["x"] * 16})
    keys = {shape_key(b) for b in (batch("sst", 16, 32), batch("para", 16, 32), batch("sst", 16, 64),
                                   batch("sst", 4, 32), batch("sst", 16, 32, torch.int32),
                                   {**batch("sst", 16, 32), "labels": [torch.zeros(16)]},      # the same tensors,
                                   {**batch("sst", 16, 32), "scale": 2.0})}                    # another structure
    assert len(keys) == 7


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


@pytest.mark.parametrize("command", ["classifier", "multitask"])
def test_a_cli_refuses_graphs_on_a_cpu_in_one_line_before_loading_or_writing(command, tiny_dir, multitask_files,
                                                                             tmp_path, monkeypatch, capsys):
    """--cuda-graphs --device cpu: one `error:` line, exit 1 (a ConfigurationError, not a traceback), raised where
    the command picks its device: no data file read, no model loaded, no run.json written."""
    from tasks import classifier
    from tasks.core.errors import run_cli

    sst_train, sst_dev, sst_test = multitask_files["sst"]
    argv = (multitask_argv(tiny_dir, multitask_files) if command == "multitask" else
            ["--model", str(tiny_dir), "--device", "cpu", "--batch-size", "8", "--epochs", "1", "--no-progress",
             "--train-file", sst_train, "--dev-file", sst_dev, "--test-file", sst_test])
    argv += ["--cuda-graphs", "--run-dir", str(tmp_path / "run")]
    monkeypatch.setattr(minbert, "load_pretrained", lambda *a, **k: pytest.fail("the model was loaded"))
    monkeypatch.setattr(data, "_read", lambda *a, **k: pytest.fail("a data file was read"))
    main = classifier.main if command == "classifier" else multitask.main
    assert run_cli(lambda: main(argv)) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [("error: --cuda-graphs needs a CUDA device (this run's is cpu): leave it off, or run on a GPU "
                    "(--device cuda)")], err
    assert not list(tmp_path.rglob("run.json")) and not (tmp_path / "run").exists()


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_loops_graphed_path_trains_what_the_plain_path_does(precision, tiny_dir_without_dropout, multitask_files,
                                                                tmp_path, monkeypatch, capsys):
    """fit()'s --cuda-graphs path on the CPU, with StepGraphs' capture and replay swapped for the eager step they
    replay (a GPU shows the replays themselves: tests/test_cuda_step.py): each batch prepared and padded on the CPU,
    the learning rate a tensor filled before each step, the losses read and the checkpoint's learning rates floats.
    fp32: the weights and losses of the plain run (padding to 32 tokens moves them by rounding only). bf16: padding
    alone, no graph, moves some weights by more than 1e-4 (4e-3 at most on machine C, mostly the key biases, whose
    gradient is rounding noise that AdamW scales up): why test_cuda_step.py compares graphed and eager CLI runs in
    fp32 only."""
    class EagerSteps(StepGraphs):
        def __init__(self, device, optimizer):
            self.device, self.optimizer = device, optimizer
            self.seen, self.counts = set(), {"eager": 0, "captured": 0, "replayed": 0}
            self.seconds = dict.fromkeys(StepGraphs.PARTS, 0.0)

        def on_stream(self):
            return nullcontext()

        def step(self, batch, body):
            key = shape_key(batch)
            self.counts["replayed" if key in self.seen else "eager"] += 1
            self.seen.add(key)
            assert all(t.shape[-1] % 32 == 0 for t in tensors_of(batch) if t.dim() == 2 and not t.is_floating_point())
            return body(to_device(batch, self.device)).clone()

    monkeypatch.setattr(train, "StepGraphs", EagerSteps)
    monkeypatch.setattr(train, "check_graphs", lambda *args: None)          # it refuses the CPU
    monkeypatch.setattr(training_setup, "check_graphs_device", lambda device: None)   # so does the CLI's start
    argv = multitask_argv(tiny_dir_without_dropout, multitask_files) + ["--dropout", "0", "--precision", precision]
    multitask.run(multitask.parse_settings(argv + ["--run-dir", str(tmp_path / "plain")]))
    capsys.readouterr()
    multitask.run(multitask.parse_settings(argv + ["--cuda-graphs", "--run-dir", str(tmp_path / "graphed")]))
    out = capsys.readouterr().out
    assert "CUDA graphs: 0 shapes captured, 21 steps replayed, 9 eager" in out
    assert "CUDA graphs' one-time work: first step 0.00 s, 8 other eager 0.00 s, 0 captures" in out   # EagerSteps times none
    a, b = (load_checkpoint(tmp_path / r / "checkpoint.pt") for r in ("plain", "graphed"))
    worst = max((b["model"][key] - a["model"][key]).abs().max().item() for key in a["model"])
    if precision == "fp32":
        for key in a["model"]:
            torch.testing.assert_close(b["model"][key], a["model"][key], rtol=1e-4, atol=1e-5)
    else:
        assert worst > 1e-4, worst
    assert [h["train_loss"] for h in b["history"]] == pytest.approx([h["train_loss"] for h in a["history"]],
                                                                     rel=1e-6 if precision == "fp32" else 1e-3)
    assert [g["lr"] for g in b["optimizer"]["param_groups"]] == pytest.approx(
        [g["lr"] for g in a["optimizer"]["param_groups"]], rel=1e-6)
    assert all(type(g["lr"]) is float and g["capturable"] is False for g in b["optimizer"]["param_groups"])
