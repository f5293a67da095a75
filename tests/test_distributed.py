"""Data parallelism: two CPU processes (gloo) train as one process does, resume exactly, and only rank 0 writes.

One test starts two processes (torch.multiprocessing, forked, each told its rank through the environment
variables torchrun sets) that run the classifier CLI and a multitask-style fit() several times; the parent
compares what they wrote with single-process runs of the same settings.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from conftest import DATA, killed_after_first_epoch
from torch import nn

import minbert
from tasks import classifier
from tasks.core.checkpoints import load_checkpoint
from tasks.core.distributed import batch_rows, shard
from tasks.core.recipe import Recipe
from tasks.core.train import FitOptions, Interrupted, Work, fit

pytestmark = pytest.mark.usefixtures("one_thread")

TOL = 2e-5  # parameters after 12 AdamW steps at lr 1e-3: one process and two agree to float32 summation order


def tiny_config(dropout: float) -> minbert.BertConfig:
    return minbert.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                              intermediate_size=64, max_position_embeddings=128, hidden_dropout_prob=dropout,
                              attention_probs_dropout_prob=dropout)


def make_inputs(root: Path, minilm_dir: Path) -> dict[str, str]:
    """Two tiny checkpoints (dropout off and on) and slices of the SST files, under root."""
    for name, p in (("tiny0", 0.0), ("tiny1", 0.1)):
        torch.manual_seed(0)
        minbert.save_pretrained(minbert.BertModel(tiny_config(p)), root / name)
        (root / name / "vocab.txt").write_bytes((minilm_dir / "vocab.txt").read_bytes())

    def piece(source: Path, name: str, start: int, stop: int) -> str:
        lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
        (root / name).write_text(lines[0] + "".join(lines[1 + start:1 + stop]), encoding="utf-8")
        return str(root / name)
    return {"train": piece(DATA / "ids-sst-train.csv", "train.csv", 0, 48),
            "dev": piece(DATA / "ids-sst-dev.csv", "dev.csv", 0, 40),
            "test": piece(DATA / "ids-sst-dev.csv", "test.csv", 40, 70)}


def argv(root: Path, files: dict, name: str, model: str, *extra: str) -> list[str]:
    return ["--model", str(root / model), "--train-file", files["train"], "--dev-file", files["dev"],
            "--test-file", files["test"], "--device", "cpu", "--batch-size", "8", "--lr", "1e-3", "--dropout", "0",
            "--checkpoint", str(root / f"{name}.pt"), "--predictions-dir", str(root / name), *extra]


RECIPE = ("--epochs", "3", "--precision", "bf16", "--warmup-ratio", "0.2", "--max-grad-norm", "1.0",
          "--grad-accum", "2", "--no-progress")


# ---------------------------------------------------------------- a multitask-style model: one head per batch

class TwoTasks(nn.Module):
    """An encoder with a 5-way sentence head and a bi-encoder pair head; a batch trains one of them."""

    def __init__(self) -> None:
        super().__init__()
        self.bert = minbert.BertModel(tiny_config(0.0))
        self.sst = nn.Linear(32, 5)
        self.pair = nn.Linear(32, 32)

    def embed(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.bert(ids, mask).last_hidden_state[:, 0]                                  # (B, H)


def two_task_loss(model: TwoTasks, batch: dict) -> torch.Tensor:
    if batch["task"] == "sst":
        return F.cross_entropy(model.sst(model.embed(batch["input_ids"], batch["attention_mask"])), batch["labels"])
    a = model.pair(model.embed(batch["input_ids_1"], batch["attention_mask_1"]))             # (B, H)
    b = model.pair(model.embed(batch["input_ids_2"], batch["attention_mask_2"]))
    return F.mse_loss(F.cosine_similarity(a.float(), b.float()), batch["labels"])


def two_task_batches(epoch: int) -> list[dict]:
    """Batches of 6 and 5 rows, alternating the two tasks, drawn from the epoch alone."""
    g = torch.Generator().manual_seed(100 + epoch)

    def ids(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        mask = (torch.arange(7)[None] < torch.randint(3, 8, (n, 1), generator=g)).long()     # (n, T)
        return torch.randint(1000, 2000, (n, 7), generator=g) * mask, mask
    out = []
    for i, n in enumerate((6, 5, 6, 5)):
        if i % 2 == 0:
            x, m = ids(n)
            out.append({"task": "sst", "input_ids": x, "attention_mask": m, "labels": torch.randint(0, 5, (n,), generator=g),
                        "ids": [f"s{i}-{j}" for j in range(n)]})
        else:
            (x1, m1), (x2, m2) = ids(n), ids(n)
            out.append({"task": "pair", "input_ids_1": x1, "attention_mask_1": m1, "input_ids_2": x2,
                        "attention_mask_2": m2, "labels": torch.rand(n, generator=g) * 2 - 1})
    return out


def two_task_fit(path: Path) -> None:
    torch.manual_seed(0)
    model = TwoTasks()
    fit(Work(model, torch.optim.AdamW(model.parameters(), lr=1e-3), two_task_batches, two_task_loss,
             lambda m: {"zero": 0.0}, "zero"), Recipe(grad_accum=2),
        FitOptions(2, torch.device("cpu"), checkpoint=path, progress=False, log=lambda s: None))


# ---------------------------------------------------------------- the two processes

def worker(rank: int, world: int, port: int, root: str, files: dict) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    root = Path(root)
    written, real_replace = [], os.replace

    def spy(src, dst):  # every file the project writes ends with os.replace (atomic writes)
        written.append(str(dst))
        real_replace(src, dst)
    out, err = io.StringIO(), io.StringIO()
    os.replace = spy
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            classifier.run(classifier.parse_settings(argv(root, files, "ddp", "tiny0", "--epochs", "2")))
            classifier.run(classifier.parse_settings(argv(root, files, "whole", "tiny1", *RECIPE)))
            real_fit = classifier.fit

            classifier.fit = killed_after_first_epoch(real_fit)
            with contextlib.suppress(Interrupted):
                classifier.run(classifier.parse_settings(argv(root, files, "split", "tiny1", *RECIPE)))
            classifier.fit = real_fit
            classifier.run(classifier.parse_settings(
                argv(root, files, "split", "tiny1", *RECIPE, "--resume", str(root / "split.pt"))))
            two_task_fit(root / "two_tasks_ddp.pt")
    finally:
        os.replace = real_replace
    (root / f"rank{rank}.json").write_text(json.dumps({"written": written, "out": out.getvalue(),
                                                       "err": err.getvalue()}))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_train_as_one(tmp_path: Path, minilm_dir: Path) -> None:
    files = make_inputs(tmp_path, minilm_dir)
    # forked, not spawned: each starts with torch and the project imported, as this process has them (about 2.5 s of
    # start-up each less); they set their own rank, threads and process group (tests/test_faults.py: a cold torchrun)
    mp.start_processes(worker, args=(2, free_port(), str(tmp_path), files), nprocs=2, join=True, start_method="fork")
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]

    # only rank 0 logs, shows the progress bar and writes checkpoints and prediction files
    assert ranks[1] == {"written": [], "out": "", "err": ""}, ranks[1]
    assert "epoch 2/2" in ranks[0]["out"] and "data parallel: 2 processes (gloo)" in ranks[0]["out"]
    assert "epoch 1/2" in ranks[0]["err"]                                     # the tqdm bar of the first run
    for name in ("ddp", "whole", "split"):
        assert str(tmp_path / f"{name}.pt") in ranks[0]["written"]
        assert sorted(p.name for p in (tmp_path / name).iterdir()) == ["sst-dev-output.csv", "sst-test-output.csv"]
    assert not [p for p in tmp_path.rglob(".*")], "no temporary file left behind"

    # two ranks with global batch 8 = one process with batch 8 (dropout off): parameters, losses, dev accuracy
    one = classifier.run(classifier.parse_settings(argv(tmp_path, files, "one", "tiny0", "--epochs", "2",
                                                                   "--no-progress")))
    a, b = load_checkpoint(tmp_path / "ddp.pt"), load_checkpoint(tmp_path / "one.pt")
    assert len(a["rng_ranks"]) == 2 and a["optimizer_steps"] == b["optimizer_steps"] == 12
    for key, value in b["model"].items():
        torch.testing.assert_close(a["model"][key], value, rtol=0, atol=TOL, msg=key)
    for x, y in zip(a["history"], one["history"]):
        assert x["train_loss"] == pytest.approx(y["train_loss"], rel=1e-5)
        assert x["dev_accuracy"] == y["dev_accuracy"]
    for split in ("dev", "test"):
        assert (tmp_path / "ddp" / f"sst-{split}-output.csv").read_text() == \
            (tmp_path / "one" / f"sst-{split}-output.csv").read_text()

    # a DDP run (bf16, warm-up, clipping, accumulation, dropout on) killed after epoch 1 and resumed = uninterrupted
    w, s = load_checkpoint(tmp_path / "whole.pt"), load_checkpoint(tmp_path / "split.pt")
    assert w["epoch"] == s["epoch"] == 3 and w["optimizer_steps"] == s["optimizer_steps"] == 9
    for key in w["model"]:
        assert torch.equal(w["model"][key], s["model"][key]), key
        assert torch.equal(w["best_state"][key], s["best_state"][key]), key
    strip = [{k: v for k, v in h.items() if not k.endswith("seconds")} for h in w["history"]]
    assert strip == [{k: v for k, v in h.items() if not k.endswith("seconds")} for h in s["history"]]
    assert (tmp_path / "whole" / "sst-test-output.csv").read_text() == \
        (tmp_path / "split" / "sst-test-output.csv").read_text()

    # a batch that names its task and uses one head, pairs of sentences split by rank: as one process
    two_task_fit(tmp_path / "two_tasks_one.pt")
    a, b = load_checkpoint(tmp_path / "two_tasks_ddp.pt"), load_checkpoint(tmp_path / "two_tasks_one.pt")
    for key, value in b["model"].items():
        torch.testing.assert_close(a["model"][key], value, rtol=0, atol=TOL, msg=key)
    torch.manual_seed(0)
    initial = TwoTasks().state_dict()
    assert not torch.equal(b["model"]["pair.weight"], initial["pair.weight"])              # both heads trained
    assert not torch.equal(b["model"]["sst.weight"], initial["sst.weight"])
    for x, y in zip(a["history"], b["history"]):
        assert x["train_loss_sst"] == pytest.approx(y["train_loss_sst"], rel=1e-5)
        assert x["train_loss_pair"] == pytest.approx(y["train_loss_pair"], rel=1e-5)


def test_shard_splits_every_row_field_and_keeps_the_rest() -> None:
    batch = {"input_ids_1": torch.arange(10).view(5, 2), "input_ids_2": torch.arange(5), "ids": list("abcde"),
             "task": "para", "scale": torch.tensor(2.0)}
    assert batch_rows(batch) == 5
    parts = [shard(batch, r, 2) for r in range(2)]
    assert [n for _, n in parts] == [2, 3]
    assert parts[0][0]["ids"] == ["a", "b"] and parts[1][0]["ids"] == ["c", "d", "e"]
    assert torch.equal(torch.cat([p["input_ids_1"] for p, _ in parts]), batch["input_ids_1"])
    assert parts[1][0]["task"] == "para" and parts[1][0]["scale"] is batch["scale"]
    one = {"input_ids": torch.ones(1, 3), "ids": ["z"]}
    (p0, n0), (p1, n1) = shard(one, 0, 2), shard(one, 1, 2)
    assert (n0, n1) == (0, 1) and p0["ids"] == p1["ids"] == ["z"]   # a rank with no row runs the last one, weighted 0
