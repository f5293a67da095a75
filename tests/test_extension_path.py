"""The final project's path, as docs/extensions.md walks it with R-Drop: one library module (minbert/rdrop.py), one
settings section (tasks/multitask/settings.py RDrop) and one registered term (tasks/multitask/terms.py); run(), fit()
and the loop name no extension. Then the resume rule for a setting newer than a run: a run directory written at
a1db91d (before R-Drop existed) resumes and predicts at this commit, and a setting without `before` says so. Then, with
terms defined here, the page's "A term's state, weights and resumes": a term's state and a batches() drawing from the
global RNG resume to the uninterrupted run, predict reads a run whose term keeps weights in the model; and the
atomic writers give a checkpoint the mode the umask gives a new file."""

from __future__ import annotations

import contextlib
import inspect
import json
import math
import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path

import pytest
import torch
import warm
from conftest import ROOT, TEST_DEVICE, kill_after
from test_faults import assert_same_run, killed
from test_typed_multitask import SIX, argv
from torch import nn

from assignments.profiles import PROFILES
from minbert.rdrop import output_divergence, rdrop_kl, rdrop_loss
from tasks import multitask, predict
from tasks.core import train
from tasks.core.checkpoints import KILL_AT_STEP, check_config, load_checkpoint, run_differences, save_checkpoint
from tasks.core.errors import ConfigurationError, ResumeError
from tasks.core.evaluation import write_text
from tasks.core.resume import resume_config
from tasks.core.settings import section, setting
from tasks.core.terms import TERMS, Context, Extension, Term
from tasks.core.train import Interrupted, watching

pytestmark = pytest.mark.usefixtures("one_thread")
OLD_COMMIT = "a1db91d"           # before R-Drop and the terms


def test_rdrop_loss_by_hand():
    """P = [0.5, 0.5], Q = [0.9, 0.1]: 1/2 (KL(P || Q) + KL(Q || P)) written out; the mean of the losses plus alpha D."""
    p, q = torch.tensor([[0.5, 0.5]]).log(), torch.tensor([[0.9, 0.1]]).log()
    kl_pq = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    kl_qp = 0.9 * math.log(0.9 / 0.5) + 0.1 * math.log(0.1 / 0.5)
    want = (kl_pq + kl_qp) / 2
    assert rdrop_kl(p, q).item() == pytest.approx(want, rel=1e-6)
    assert rdrop_kl(q, p).item() == pytest.approx(want, rel=1e-6)
    # the paraphrase logit: sigmoid(0) = 0.5, sigmoid(-log 9) = 0.1, the same two distributions
    assert output_divergence(torch.tensor([0.0]), torch.tensor([-math.log(9.0)]), "binary").item() == pytest.approx(
        want, rel=1e-6)
    # STS: the mean squared difference, (1 - 2)^2 and (2 - 4)^2
    assert output_divergence(torch.tensor([1.0, 2.0]), torch.tensor([2.0, 4.0]), "regression").item() == 2.5
    total, d = rdrop_loss(torch.tensor(1.0), torch.tensor(3.0), p, q, "classification", alpha=2.0)
    assert d.item() == pytest.approx(want, rel=1e-6) and total.item() == pytest.approx(2.0 + 2.0 * want, rel=1e-6)
    assert rdrop_kl(p, p).item() == 0.0


def test_rdrop_is_one_module_one_section_one_registration(monkeypatch):
    """docs/extensions.md's three places hold every line that names R-Drop; the command and the loop hold none."""
    monkeypatch.setitem(TERMS, "multitask", [*TERMS["multitask"], Term("mine", "rdrop", lambda s, c: None)])  # yours
    named = sorted(str(p.relative_to(ROOT)) for folder in ("minbert", "tasks") for p in (ROOT / folder).rglob("*.py")
                   if "rdrop" in p.read_text(encoding="utf-8").lower())
    assert named == ["minbert/rdrop.py", "tasks/multitask/settings.py", "tasks/multitask/terms.py"]
    settings = (ROOT / "tasks/multitask/settings.py").read_text().splitlines()
    start = settings.index("class RDrop:")
    outside = [line for i, line in enumerate(settings) if "rdrop" in line.lower() and not start <= i < start + 12]
    assert [" ".join(line.split()) for line in outside] == ["rdrop R-Drop's regulariser -> minbert.rdrop",
                                                             "rdrop: RDrop = section(RDrop)"]
    assert [t.name for t in TERMS["multitask"]].count("rdrop") == 1      # its one registration, wherever yours go
    for code in (multitask.run, train.fit, train._Loop, train.LoopCheckpoint):  # nor any other extension's
        assert not {"smart", "pcgrad", "surgery", "embedding"} & set(inspect.getsource(code).lower().split()), code


def test_a_tiny_rdrop_run_logs_its_term_and_resumes_after_sigkill_bit_for_bit(tiny_dir, multitask_files, tmp_path):
    whole, split = tmp_path / "whole", tmp_path / "split"
    flags = ["--rdrop-alpha", "1.0", "--epochs", "2"]
    out = multitask.run(multitask.parse_settings(argv(tiny_dir, multitask_files, whole, *flags)))
    for epoch in out["rdrop"]:                                                   # the summary, per epoch
        assert math.isfinite(epoch["rdrop_divergence"]) and epoch["rdrop_divergence"] > 0 and 0 < epoch["rdrop_share"]
    assert all(r["rdrop_divergence"] > 0 for r in out["history"])                  # the records: curves, history
    curves = [json.loads(line) for line in (whole / "checkpoint.curves.jsonl").read_text().splitlines()]
    assert [line["rdrop_divergence"] for line in curves if "rdrop_divergence" in line] == [
        r["rdrop_divergence"] for r in out["history"]]
    done = load_checkpoint(whole / "checkpoint.pt")
    step = done["optimizer_steps"] // done["epoch"] + 3                               # inside epoch 2
    killed("multitask", argv(tiny_dir, multitask_files, split, *flags), tmp_path, **{KILL_AT_STEP: str(step)})
    with pytest.raises(ResumeError, match=r"rdrop.rdrop_alpha: checkpoint 1.0, now 0.5"):
        multitask.run(multitask.parse_settings(["--resume", str(split), "--rdrop-alpha", "0.5"]))
    resumed = multitask.run(multitask.parse_settings(["--resume", str(split)]))
    assert resumed["rdrop"] == out["rdrop"] and len(out["rdrop"]) == 2              # the summary: epoch 1 too
    again = load_checkpoint(split / "checkpoint.pt")
    for part in ("model", "best_state"):
        for key in done[part]:
            assert torch.equal(done[part][key], again[part][key]), (part, key)
    strip = [[{k: v for k, v in h.items() if not k.endswith("seconds")} for h in c["history"]] for c in (done, again)]
    assert strip[0] == strip[1]
    for name in SIX:
        assert (split / "predictions" / name).read_text() == (whole / "predictions" / name).read_text(), name


def old_tree(tmp_path: Path) -> Path:
    """The repository at OLD_COMMIT (git archive), with this checkout's data/."""
    try:
        tar = subprocess.run(["git", "-C", str(ROOT), "archive", OLD_COMMIT, "minbert", "tasks"], capture_output=True,
                             check=True, timeout=60).stdout
    except (subprocess.CalledProcessError, FileNotFoundError):
        pytest.skip(f"needs git and the commit {OLD_COMMIT} (a clone of the repository, not an exported tree)")
    tree = tmp_path / "old"
    with tarfile.open(fileobj=BytesIO(tar)) as archive:
        archive.extractall(tree, filter="data")
    return tree


def test_a_run_directory_written_before_rdrop_resumes_and_predicts_here(tiny_dir, multitask_files, tmp_path):
    """Written at a1db91d and killed after epoch 1 of 2; here: --resume DIR (rdrop.rdrop_alpha absent from it counts
    as its before=0.0) finishes it, predict DIR reads its run.json; a new R-Drop alpha is refused."""
    tree, run = old_tree(tmp_path), tmp_path / "old-run"
    flags = argv(tiny_dir, multitask_files, run, "--epochs", "2")
    steps = load_steps_of_one_epoch(tree, flags, tmp_path)
    proc = warm.run([sys.executable, "-m", "tasks.multitask", *flags], cwd=tree, capture_output=True, text=True,
                    timeout=300, check=False, env={**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1",
                                                   KILL_AT_STEP: str(steps + 1)})
    assert proc.returncode < 0, proc.stderr[-2000:]
    stored = load_checkpoint(run / "checkpoint.pt")
    assert stored["epoch"] == 1 and not any(k.startswith("rdrop.") for k in stored["config"])
    with pytest.raises(ResumeError, match=r"rdrop.rdrop_alpha: checkpoint 0.0, now 1.0"):
        multitask.run(multitask.parse_settings(["--resume", str(run), "--rdrop-alpha", "1"]))
    out = multitask.run(multitask.parse_settings(["--resume", str(run)]))
    assert out["best_epoch"] >= 1 and len(out["history"]) == 2
    assert predict.main([str(run), "--out", str(tmp_path / "pred"), "--device", TEST_DEVICE,
                         "--eval-batch-size", "8"]) == 0
    for name in SIX:
        assert (tmp_path / "pred" / name).read_text() == (run / "predictions" / name).read_text(), name


def load_steps_of_one_epoch(tree: Path, flags: list[str], tmp_path: Path) -> int:
    """The optimiser steps of one epoch of these settings, from a 1-epoch run of the old tree."""
    probe = tmp_path / "probe"
    one = flags + ["--epochs", "1", "--run-dir", str(probe), "--no-predictions"]
    warm.run([sys.executable, "-m", "tasks.multitask", *one], cwd=tree, capture_output=True, timeout=300,
             check=True, env={**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"})
    return load_checkpoint(probe / "checkpoint.pt")["optimizer_steps"]


# An extension's own state across a resume (docs/extensions.md, "A term's state"): terms defined here, registered for
# the multitask command for one test (last, as register_term adds them), each reading R-Drop's section (left off).

class Balance(Extension):
    """State kept across epochs, as Dynamic Weight Average's (Liu et al., 2019, eq. 1) is: each task's loss divided by
    its mean loss of the previous epoch (1 in the first)."""

    def __init__(self) -> None:
        self.last: dict[str, float] = {}

    def loss(self, fwd, inner) -> torch.Tensor:
        loss = inner(fwd)
        if fwd.model.training:
            self.log.add(fwd.task, loss)
        return loss / self.last.get(fwd.task, 1.0)

    def epoch_stats(self, means: dict[str, float]) -> dict[str, float]:
        self.last = means
        return {f"balance_{t}": v for t, v in sorted(means.items())}

    def state(self) -> dict:
        return super().state() | {"last": dict(self.last)}

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        self.last = dict(state["last"])


class Shuffled(Sequence):
    """The epoch's batches in an order drawn from torch's global RNG when batches() is called, and one more draw each
    time a batch is taken (thrown away: nothing of it is kept)."""

    def __init__(self, inner: Sequence) -> None:
        self.inner, self.order = inner, torch.randperm(len(inner)).tolist()

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, i: int) -> dict:
        batch = self.inner[self.order[i]]
        torch.rand(1)
        return batch


class Shuffle(Extension):
    def batches(self, inner: Sequence, generator: torch.Generator) -> Sequence:
        return Shuffled(inner)


class Pooled(Sequence):
    """The epoch's batches drawn without replacement as they are read, from the generator batches() is given (a term
    that samples as it goes and keeps what it drew: each draw depends on the ones before)."""

    def __init__(self, inner: Sequence, generator: torch.Generator) -> None:
        self.inner, self.pool, self.generator, self.read = inner, list(range(len(inner))), generator, 0

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i: int) -> dict:
        if i >= len(self.inner):
            raise IndexError(i)
        assert i == self.read, "read in order, once"
        self.read += 1
        return self.inner[self.pool.pop(int(torch.randint(len(self.pool), (1,), generator=self.generator)))]


class Pool(Extension):
    def batches(self, inner: Sequence, generator: torch.Generator) -> Sequence:
        return Pooled(inner, generator)


class Uncertainty(Extension):
    """A trainable weight kept in the model under the term's name (Kendall et al., 2018, eq. 7's form): L e^-s + s."""

    def __init__(self, context: Context) -> None:
        context.model.add_module("uncertainty", nn.Module())
        context.model.uncertainty.s = nn.Parameter(torch.zeros(()))
        context.params.append(context.model.uncertainty.s)

    def loss(self, fwd, inner) -> torch.Tensor:
        s = fwd.model.uncertainty.s
        return inner(fwd) * torch.exp(-s) + s


def with_term(monkeypatch, name: str, make) -> None:
    monkeypatch.setitem(TERMS, "multitask", [*TERMS["multitask"], Term(name, "rdrop", lambda section, c: make(c))])


def stop_after_step(step: int):
    """tasks.core.train's maybe_kill that stops the run (Interrupted) right after optimiser step `step`."""
    def maybe_kill(variable: str, count: int) -> None:
        if variable == KILL_AT_STEP and count == step:
            raise Interrupted(f"stopped after step {step}")
    return maybe_kill


def interrupted_then_resumed(run_argv: list[str], run_dir: Path, monkeypatch, step: int | None = None) -> dict:
    """The run stopped after epoch 1 (step None) or after optimiser step `step`, then resumed: its summary."""
    stop = watching(kill_after(1)) if step is None else contextlib.nullcontext()
    with monkeypatch.context() as m, pytest.raises(Interrupted), stop:
        if step is not None:
            m.setattr(train, "maybe_kill", stop_after_step(step))
        multitask.run(multitask.parse_settings(run_argv))
    return multitask.run(multitask.parse_settings(["--resume", str(run_dir)]))


def assert_same(whole: Path, split: Path) -> None:
    done, again = load_checkpoint(whole / "checkpoint.pt"), load_checkpoint(split / "checkpoint.pt")
    assert_same_run(done, again)
    for name in SIX:
        assert (split / "predictions" / name).read_text() == (whole / "predictions" / name).read_text(), name


def test_a_term_that_keeps_state_across_epochs_resumes_to_the_uninterrupted_run(tiny_dir, multitask_files, tmp_path,
                                                                                monkeypatch):
    """Stopped after epoch 1 (the end-of-epoch checkpoint) and inside epoch 2 (a --save-every one), then resumed: the
    weights, the history and the term's summary (run.json and multitask-summary.json) are the uninterrupted run's."""
    with_term(monkeypatch, "balance", lambda context: Balance())
    whole = tmp_path / "whole"
    out = multitask.run(multitask.parse_settings(argv(tiny_dir, multitask_files, whole, "--epochs", "2")))
    assert [sorted(e) for e in out["rdrop"]] == [["balance_para", "balance_sst", "balance_sts"]] * 2
    per_epoch = load_checkpoint(whole / "checkpoint.pt")["optimizer_steps"] // 2
    for name, step in (("after-epoch", None), ("in-epoch", per_epoch + 3)):
        split = tmp_path / name
        flags = argv(tiny_dir, multitask_files, split, "--epochs", "2", "--save-every", str(per_epoch + 2))
        resumed = interrupted_then_resumed(flags, split, monkeypatch, step)
        assert_same(whole, split)
        assert run_differences(whole, split) == []                            # the students' check agrees
        assert resumed["rdrop"] == out["rdrop"], name
        for file in ("run.json", "predictions/multitask-summary.json"):
            was, now = (json.loads((d / file).read_text()) for d in (whole, split))
            assert now.get("result", now)["rdrop"] == was.get("result", was)["rdrop"], (name, file)


class Forgetful(Balance):
    """Balance with state() and load_state() left out: its weights of the last epoch are lost on a resume."""

    state, load_state = Extension.state, Extension.load_state


def test_the_students_resume_check_finds_a_term_whose_state_is_not_saved(tiny_dir, multitask_files, tmp_path,
                                                                         monkeypatch):
    """docs/extensions.md's "Check a term's resume": run_differences names what the forgotten state changed."""
    with_term(monkeypatch, "balance", lambda context: Forgetful())
    whole, split = tmp_path / "whole", tmp_path / "split"
    multitask.run(multitask.parse_settings(argv(tiny_dir, multitask_files, whole, "--epochs", "2")))
    interrupted_then_resumed(argv(tiny_dir, multitask_files, split, "--epochs", "2"), split, monkeypatch)
    found = run_differences(whole, split)
    assert any(k.startswith("model.") for k in found), found
    assert any(k.startswith("history epoch 2 train_loss") for k in found), found


@pytest.mark.parametrize("term", [Shuffle, Pool], ids=["global-rng-when-called", "its-generator-as-read"])
def test_a_term_whose_batches_draw_random_numbers_resumes_within_an_epoch_bit_for_bit(term, tiny_dir, multitask_files,
                                                                                    tmp_path, monkeypatch):
    """batches() sees the global RNG as at the epoch's start on a resume too, and the steps the RNG of the checkpoint;
    a sequence drawing from batches()'s own generator as it is read takes the same batches again."""
    with_term(monkeypatch, "shuffle", lambda context: term())
    whole, split = tmp_path / "whole", tmp_path / "split"
    multitask.run(multitask.parse_settings(argv(tiny_dir, multitask_files, whole, "--epochs", "2")))
    per_epoch = load_checkpoint(whole / "checkpoint.pt")["optimizer_steps"] // 2
    flags = argv(tiny_dir, multitask_files, split, "--epochs", "2", "--save-every", str(per_epoch + 2))
    interrupted_then_resumed(flags, split, monkeypatch, per_epoch + 3)
    assert_same(whole, split)


def test_predict_loads_a_run_whose_term_keeps_weights_in_the_model(tiny_dir, multitask_files, tmp_path, monkeypatch):
    """The model predict builds has no term: the weights a registered term keeps under its name are left out."""
    with_term(monkeypatch, "uncertainty", Uncertainty)
    run = tmp_path / "run"
    multitask.run(multitask.parse_settings(argv(tiny_dir, multitask_files, run, "--epochs", "1")))
    assert load_checkpoint(run / "checkpoint.pt")["best_state"]["uncertainty.s"].item() != 0.0   # it trained
    assert predict.main([str(run), "--out", str(tmp_path / "pred"), "--device", TEST_DEVICE,
                         "--eval-batch-size", "8"]) == 0
    for name in SIX:
        assert (tmp_path / "pred" / name).read_text() == (run / "predictions" / name).read_text(), name


def test_a_term_named_as_a_part_of_the_model_is_refused(tiny_dir, multitask_files, tmp_path, monkeypatch):
    """Its weights would sit under the model's own name, and predict, which drops a term's weights, would drop the
    model's too without a word."""
    with_term(monkeypatch, "head", Uncertainty)
    with pytest.raises(ConfigurationError, match="the term 'head' has the name of the model's own 'head'"):
        multitask.run(multitask.parse_settings(argv(tiny_dir, multitask_files, tmp_path / "run", "--epochs", "1")))


@dataclass
class Older:
    alpha: float = setting(0.5, help="a setting every run had")
    beta: float = setting(0.0, help="a setting newer than the run")


@dataclass
class OlderRun:
    older: Older = section(Older)


def test_a_new_setting_without_before_says_so_when_an_older_run_resumes():
    with pytest.raises(ResumeError) as refused:
        check_config("old.pt", {"older.alpha": 0.5}, resume_config(OlderRun()))
    message = str(refused.value)
    assert "older.beta: the run predates this setting" in message and "declare before=VALUE" in message
    assert "class Older in tests/test_extension_path.py" in message and "alpha" not in message
    with pytest.raises(ResumeError, match=r"older.alpha: checkpoint 0.5, now 1.0"):      # a plain difference as before
        check_config("old.pt", {"older.alpha": 0.5, "older.beta": 0.0}, resume_config(OlderRun(Older(alpha=1.0))))


@pytest.mark.parametrize("umask", [0o002, 0o022, 0o077])
def test_atomic_writes_honour_the_umask(umask, tmp_path):
    """A checkpoint and a replaced text file get the mode a new file gets (mkstemp's own is 0600)."""
    old = os.umask(umask)
    try:
        save_checkpoint(tmp_path / "checkpoint.pt", {"epoch": 1})
        write_text(tmp_path / "out.txt", "x")
    finally:
        os.umask(old)
    for name in ("checkpoint.pt", "out.txt"):
        assert oct((tmp_path / name).stat().st_mode & 0o777) == oct(0o666 & ~umask), name


def test_the_readme_leads_to_the_extension_path():
    """From the reading path and from the extensions table (R-Drop's row, the worked example)."""
    readme = (ROOT / "README.md").read_text()
    assert "(docs/extensions.md)" in readme[readme.index("## Reading path"):readme.index("## Handing it out")]
    row = next(line for line in readme[readme.index("## Extensions"):].splitlines() if "R-Drop" in line)
    assert "`minbert/rdrop.py`" in row and "--rdrop-alpha" in row and "[extensions](docs/extensions.md)" in row


def test_the_page_names_setting_arguments_that_exist_and_shows_a_field_as_the_code_has_it():
    page = (ROOT / "docs" / "extensions.md").read_text()
    named = {k for call in re.findall(r"`setting\(([^`]*)\)`", page) for k in re.findall(r"(\w+)=", call)}
    assert named and named <= set(inspect.signature(setting).parameters), named
    code = " ".join((ROOT / "tasks" / "multitask" / "settings.py").read_text().split())
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)
    assert any("rdrop_alpha: float = setting(" in b and " ".join(b.split()) in code for b in blocks)


def test_the_pages_a_tree_ships_name_only_commands_that_tree_has():
    """A `python -m tasks.X` on a page a profile ships is one of its commands, or its sentence says whose it is."""
    for profile in PROFILES.values():
        for page in profile.docs:
            text = " ".join((ROOT / page).read_text().split())
            for m in re.finditer(r"python -m (tasks(?:\.\w+)+)", text):
                if profile.commands is None or m.group(1) in profile.commands:
                    continue
                sentence = text[text.rfind(". ", 0, m.start()) + 1:text.find(". ", m.end())]
                assert "reference repository" in sentence, (profile.name, page, sentence)
