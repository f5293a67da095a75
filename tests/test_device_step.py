"""The step that never waits for a GPU (tasks/core/step.py), shown on the CPU: the losses read every N steps give the
same run as reading each step's (weights, history, curves, an exact resume after a kill); a multitask training step
with the pairs joined on the CPU reads no value back to the host (the CPU's stand-in for CUDA's sync debug mode);
padding to a few lengths leaves the loss as it is; the attention kernel and compile settings are checked.
tests/test_cuda.py runs the same step on a GPU under torch.cuda.set_sync_debug_mode("error")."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from host_reads import no_host_reads
from test_faults import killed
from test_save_every import multitask_argv

import minbert
import minbert.model
from minbert.multitask import EncoderInput, MultitaskBert, MultitaskConfig
from tasks import multitask
from tasks.core import step
from tasks.core.batching import pad_lengths, position_limit, to_device
from tasks.core.checkpoints import KILL_AT_STEP, load_checkpoint
from tasks.core.step import LossReads, Taken, attention_kernels, read_every
from tasks.multitask.model import prepare_inputs

pytestmark = pytest.mark.usefixtures("one_thread")


def curve_lines(run: Path) -> list[dict]:
    lines = [json.loads(line) for line in (run / "checkpoint.curves.jsonl").read_text().splitlines()]
    return [{k: v for k, v in d.items() if not k.endswith("seconds")} for d in lines]


def same_weights(a: dict, b: dict) -> None:
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key


def test_losses_read_every_4_steps_make_the_same_run_as_each_step(tiny_dir, multitask_files, tmp_path):
    argv = multitask_argv(tiny_dir, multitask_files)
    each, every4 = tmp_path / "each", tmp_path / "every4"
    multitask.run(multitask.parse_settings(argv + ["--run-dir", str(each)]))
    multitask.run(multitask.parse_settings(argv + ["--run-dir", str(every4), "--read-every", "4"]))
    a, b = load_checkpoint(each / "checkpoint.pt"), load_checkpoint(every4 / "checkpoint.pt")
    assert a["optimizer_steps"] // a["epoch"] % 4 != 0, "the test needs an epoch's last stretch shorter than 4"
    same_weights(a, b)
    strip = [[{k: v for k, v in h.items() if not k.endswith("seconds")} for h in s["history"]] for s in (a, b)]
    assert strip[0] == strip[1]                       # the epochs' mean losses, each task's, bit for bit
    steps = [d for d in curve_lines(every4) if d.get("kind") == "step"]
    assert len(steps) == a["optimizer_steps"] and curve_lines(each) == curve_lines(every4)   # every step's loss


def test_a_run_reading_every_3_steps_killed_mid_epoch_resumes_to_the_same_run(tiny_dir, multitask_files, tmp_path):
    argv = multitask_argv(tiny_dir, multitask_files) + ["--read-every", "3"]
    whole, split = tmp_path / "whole", tmp_path / "split"
    multitask.run(multitask.parse_settings(argv[:-2] + ["--run-dir", str(whole)]))   # reads every step
    done = load_checkpoint(whole / "checkpoint.pt")
    per_epoch = done["optimizer_steps"] // done["epoch"]
    save_at, kill_at = per_epoch + 2, per_epoch + 4   # a step checkpoint in epoch 2 between two reads, then 2 steps
    killed("multitask", argv + ["--run-dir", str(split), "--save-every", str(save_at)], tmp_path,
           **{KILL_AT_STEP: str(kill_at)})
    assert load_checkpoint(split / "checkpoint.pt")["within_epoch"]["groups"] == 2
    multitask.run(multitask.parse_settings(["--resume", str(split)]))
    again = load_checkpoint(split / "checkpoint.pt")
    same_weights(done, again)
    strip = [[{k: v for k, v in h.items() if not k.endswith("seconds")} for h in s["history"]] for s in (done, again)]
    assert strip[0] == strip[1]
    assert curve_lines(whole) == curve_lines(split)


def pair_batch(seed: int = 0, B: int = 4) -> dict:
    """A collated paraphrase batch, each sentence tokenised alone and right-padded (rows of different lengths)."""
    g = torch.Generator().manual_seed(seed)
    out: dict = {"task": "para", "ids": [f"p{i}" for i in range(B)], "labels": torch.tensor([0.0, 1.0] * (B // 2))}
    for k, T in ((1, 9), (2, 7)):
        n = torch.randint(3, T + 1, (B,), generator=g)
        n[0] = T
        mask = (torch.arange(T)[None, :] < n[:, None]).long()                 # (B, T)
        ids = torch.randint(1000, 2000, (B, T), generator=g) * mask
        ids[:, 0] = 101
        ids[torch.arange(B), n - 1] = 102
        out[f"input_ids_{k}"], out[f"attention_mask_{k}"] = ids, mask
    return out


@pytest.fixture
def tiny_multitask(tiny_config) -> MultitaskBert:
    torch.manual_seed(0)
    return MultitaskBert(minbert.BertModel(tiny_config), MultitaskConfig(head_hidden=16))


def device_step(model: MultitaskBert, batch: dict) -> torch.Tensor:
    """A step's work as fit() does it on a GPU up to the update: the batch copied, the loss and its gradients, the
    clipping. (The update is torch's AdamW: on the CPU its step counts are read on the host; on a GPU the fused one
    keeps them on the device, which tests/test_cuda.py checks under CUDA's sync debug mode.)"""
    batch = to_device(batch, "cpu")
    loss = model.loss(batch["task"], batch)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    return loss.detach()


def test_a_multitask_step_with_the_pairs_joined_on_the_cpu_reads_nothing_back(tiny_multitask, monkeypatch):
    """The GPU's path on the CPU (the layers do not look at the mask: skips_padding false): with the batch prepared
    (pairs joined by the model's inputs() before the copy) the forward, backward, clipping and update read no value;
    the same batch unprepared joins the pair on the device and is caught reading one (the guard can fail)."""
    monkeypatch.setattr(minbert.model, "skips_padding", lambda mask: False)
    model = tiny_multitask.train()
    prepared = prepare_inputs(model, pair_batch(1))
    assert [type(x) for x in prepared["encoder_inputs"]] == [EncoderInput]
    with no_host_reads():
        loss = device_step(model, prepared)
    assert torch.isfinite(loss) and all(p.grad is not None for p in model.bert.layers.parameters())
    with no_host_reads(), pytest.raises(RuntimeError, match="reads a value back"):
        device_step(model, pair_batch(2))                                 # join_pairs on the device: int(T.max())


def test_the_prepared_inputs_are_what_the_model_would_join_itself(tiny_multitask):
    model = tiny_multitask.eval()
    batch = pair_batch(3)
    prepared = prepare_inputs(model, batch)
    (joined,) = model.pair_inputs(batch["input_ids_1"], batch["attention_mask_1"], batch["input_ids_2"],
                                  batch["attention_mask_2"])
    for ours, theirs in zip(prepared["encoder_inputs"][0], joined):
        assert torch.equal(ours, theirs)
    with torch.no_grad():
        assert torch.equal(model.loss("para", prepared), model.loss("para", batch))
    swapped = minbert.multitask.swap_pairs(prepared)                 # symmetric pairs: the swapped order is joined anew
    assert "encoder_inputs" not in swapped


def test_padding_to_a_few_lengths_leaves_the_loss_as_it_is(tiny_multitask):
    model = tiny_multitask.eval()
    batch = prepare_inputs(model, pair_batch(4))
    padded = pad_lengths(batch, 32)
    x = padded["encoder_inputs"][0]
    assert isinstance(x, EncoderInput) and x.input_ids.shape[1] == 32 and padded["input_ids_1"].shape[1] == 32
    assert torch.equal(padded["labels"], batch["labels"]) and padded["ids"] == batch["ids"]
    assert torch.equal(x.attention_mask[:, :batch["encoder_inputs"][0].input_ids.shape[1]],
                       batch["encoder_inputs"][0].attention_mask)
    with torch.no_grad():
        torch.testing.assert_close(model.loss("para", padded), model.loss("para", batch), rtol=1e-6, atol=1e-6)
    assert pad_lengths(batch, 1) is batch


def test_padding_stops_at_the_models_positions(tiny_config):
    """A model with 40 positions takes a (2, 40) batch; padded to 64 it would refuse it: the padding stops at 40."""
    model = minbert.BertModel(replace(tiny_config, max_position_embeddings=40)).eval()
    batch = {"input_ids": torch.ones(2, 40, dtype=torch.long), "attention_mask": torch.ones(2, 40, dtype=torch.long),
             "token_type_ids": torch.zeros(2, 40, dtype=torch.long)}
    limit = position_limit(torch.nn.ModuleDict({"bert": model}))
    assert limit == 40 and position_limit(torch.nn.Linear(2, 2)) is None
    padded = pad_lengths(batch, 32, limit)
    assert padded["input_ids"].shape == (2, 40)
    with torch.no_grad():
        model(**padded)
    assert pad_lengths(batch, 32)["input_ids"].shape == (2, 64)                     # without the limit: past it
    short = {k: v[:, :20] for k, v in batch.items()}
    assert pad_lengths(short, 32, limit)["input_ids"].shape == (2, 32)              # below it: rounded up as before
    long = {k: torch.ones(2, 50, dtype=torch.long) for k in batch}
    assert pad_lengths(long, 32, limit)["input_ids"].shape == (2, 64)               # already past: the model says so


def test_to_device_keeps_the_structure_of_a_batch():
    batch = {"task": "sts", "ids": ["a", "b"], "x": torch.ones(2, 3),
             "encoder_inputs": [EncoderInput(torch.ones(2, 3, dtype=torch.long), torch.ones(2, 3), None)],
             "round": {"sst": {"y": torch.zeros(2)}}}
    moved = to_device(batch, "cpu")
    assert moved["ids"] == ["a", "b"] and moved["task"] == "sts"
    assert isinstance(moved["encoder_inputs"][0], EncoderInput) and moved["encoder_inputs"][0].token_type_ids is None
    assert torch.equal(moved["round"]["sst"]["y"], torch.zeros(2))


def test_loss_reads_give_each_batch_its_loss_in_order_and_empty_themselves():
    reads = LossReads(every=2)
    reads.add(0, 0, [Taken(torch.tensor(1.5), "sst", 4, 4), Taken(torch.tensor(2.5), "para", 4, 4)])
    assert not reads.due(0) and reads.due(1)
    reads.add(1, 0, [Taken(torch.tensor(float("nan")), None, 2, 4)])
    (s0, e0, first), (s1, _, second) = reads.read()
    assert (s0, e0, s1) == (0, 0, 1) and [v for v, _ in first] == [1.5, 2.5] and [t.task for _, t in first] == [
        "sst", "para"]
    assert second[0][0] != second[0][0]                                # the NaN comes through to be reported
    assert reads.read() == [] and reads.steps == []


def test_read_every_defaults_and_checks():
    assert read_every(torch.device("cpu"), None) == 1
    assert read_every(torch.device("cuda"), None) == step.READ_EVERY_GPU
    assert read_every(torch.device("cpu"), 5) == 5
    with pytest.raises(ValueError, match="N >= 1"):
        read_every(torch.device("cpu"), 0)


def test_the_attention_kernel_is_checked_and_left_to_torch_on_the_cpu():
    with attention_kernels(torch.device("cpu"), "cudnn"):
        pass
    with pytest.raises(ValueError, match="attention kernel must be one of"):
        attention_kernels(torch.device("cpu"), "fastest")
    with pytest.raises(SystemExit):
        multitask.parse_settings(["--attention-kernel", "fastest"])
    assert multitask.parse_settings(["--compile", "reduce-overhead"]).recipe.compile == "reduce-overhead"


def test_a_diverged_loss_read_late_names_its_own_step(tiny_dir, multitask_files, tmp_path):
    """With the losses read every 4 steps, a NaN is reported as the step it came from: the same error, step and task
    as when every step's loss is read at once (not the later step that read it)."""
    from tasks.core.errors import TrainingError
    messages = []
    for every in ("1", "4"):
        argv = multitask_argv(tiny_dir, multitask_files) + ["--read-every", every, "--run-dir",
                                                             str(tmp_path / every), "--lr", "1e4", "--max-grad-norm",
                                                             "1e9"]
        with pytest.raises(TrainingError, match=r"optimiser step \d+") as caught:
            multitask.run(multitask.parse_settings(argv))
        messages.append(str(caught.value).replace(str(tmp_path / every), "RUN"))
    assert "training loss is nan" in messages[0] or "training loss is inf" in messages[0]
    step = int(messages[0].split("optimiser step ")[1].split(",")[0].split(";")[0])
    assert step % 4 != 0, "the test needs a NaN that is not at the end of a stretch of 4"
    assert messages[1] == messages[0]


def test_a_compiled_step_traces_whole_trains_and_resumes_exactly(tiny_dir, multitask_files, tmp_path, monkeypatch):
    """--compile: the loss's forward and backward through torch.compile, the sequences padded to a multiple of 32
    tokens. Traced here by torch.compile's own aot_eager backend (what inductor would take, without its code
    generation: minutes on two cores): the step is one graph per task without a break (a value read back, a
    data-dependent shape would break it), shapes recompile a bounded number of times, the run trains, and a run
    stopped after its first epoch resumes to the uninterrupted run's weights and history."""
    import torch._dynamo
    from conftest import kill_after
    from torch._dynamo.utils import counters

    from tasks.core.train import Interrupted, watching
    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda f, mode=None: real(f, backend="aot_eager"))
    torch._dynamo.reset()
    counters.clear()
    argv = multitask_argv(tiny_dir, multitask_files) + ["--compile", "default"]
    multitask.run(multitask.parse_settings(argv + ["--run-dir", str(tmp_path / "whole")]))
    done = load_checkpoint(tmp_path / "whole" / "checkpoint.pt")
    steps = [d for d in curve_lines(tmp_path / "whole") if d.get("kind") == "step"]
    assert done["optimizer_steps"] == len(steps) > 0 and all(abs(d["loss"]) < 1e3 for d in steps)
    assert dict(counters["graph_break"]) == {}
    assert 3 <= counters["stats"]["unique_graphs"] <= 12    # 3 tasks, each shape at most once more (dynamic sizes)
    with pytest.raises(Interrupted), watching(kill_after(1)):
        multitask.run(multitask.parse_settings(argv + ["--run-dir", str(tmp_path / "split")]))
    multitask.run(multitask.parse_settings(["--resume", str(tmp_path / "split")]))
    again = load_checkpoint(tmp_path / "split" / "checkpoint.pt")
    same_weights(done, again)
    strip = [[{k: v for k, v in h.items() if not k.endswith("seconds")} for h in s["history"]] for s in (done, again)]
    assert strip[0] == strip[1]


def test_the_docs_state_the_step_defaults_the_code_has():
    text = " ".join((Path(__file__).resolve().parents[1] / "docs" / "training.md").read_text().split())
    assert f"every step on the CPU, every {step.READ_EVERY_GPU} on a GPU" in text
    assert f"padded to a multiple of {step.PAD_MULTIPLE}" in text
    assert "default `auto`: the memory-efficient kernel" in text
    help_text = " ".join(multitask.build_parser().format_help().split())
    assert f"every step on the CPU, every {step.READ_EVERY_GPU} on a GPU" in help_text
