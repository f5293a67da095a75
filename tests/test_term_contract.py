"""The terms' contract (tasks/core/terms.py), checked where a student's term breaks it, with a message naming the term
and its file:line instead of a raw torch traceback far from it: a numpy scalar in a term's log or state (which would
make every checkpoint unreadable), a settings section no registered term reads (a forgotten register_term), a term
whose section Settings lacks, loss() and build() results the loop cannot use, a stat named as the loop's own record
keys, and a term named as a part of the model whatever the run's flags."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import ROOT
from torch import nn

from tasks.core.checkpoints import load_checkpoint, save_checkpoint
from tasks.core.errors import ConfigurationError, ResumeError, TermError
from tasks.core.settings import section, setting
from tasks.core.terms import TERMS, Context, Extension, Term, TermLog, TermSet, build_terms, check_terms

HERE = Path(__file__).resolve().relative_to(ROOT).as_posix()


@dataclass
class Mine:
    """A term's section."""

    mine_beta: float = setting(0.0, help="the term's weight")


@dataclass
class Other:
    """The command's own section."""

    lr: float = setting(1e-3, help="the learning rate")


@dataclass
class Settings:
    """A command's settings: its own section and a term's."""

    other: Other = section(Other)
    mine: Mine = section(Mine)


def line_of(f) -> str:
    return f"{HERE}:{inspect.getsourcelines(f)[1]}"


# 1. numpy scalars: a log value is kept as a float; a state that weights_only loading refuses is refused when saved

def test_a_numpy_scalar_logged_is_kept_as_a_python_float():
    log = TermLog()
    log.add("beta", np.float64(0.25))
    log.add("beta", np.float32(0.75))
    assert type(log.sums["beta"]) is float
    buffer = BytesIO()
    torch.save({"sums": log.sums}, buffer)
    buffer.seek(0)
    assert torch.load(buffer, weights_only=True) == {"sums": {"beta": 1.0}}
    assert log.means() == {"beta": 0.5}


class Counting(Extension):
    def __init__(self, steps):
        self.steps = steps

    def state(self) -> dict:
        return super().state() | {"warmup": {"steps": self.steps}}


def test_a_state_that_a_checkpoint_cannot_hold_is_refused_when_saved_naming_the_term_and_key():
    ok = TermSet([(Term("mine", "mine", None), Counting(3)), (Term("t", "mine", None), Counting(torch.tensor(3)))])
    assert ok.state()["mine"]["warmup"] == {"steps": 3}
    bad = TermSet([(Term("confpen", "mine", None), Counting(np.int64(3)))])
    with pytest.raises(TermError) as refused:
        bad.state()
    message = str(refused.value)
    assert "term 'confpen'" in message and "state()['warmup']['steps']" in message and "numpy" in message
    assert "int(" in message


def test_a_numpy_key_is_refused_and_a_state_dict_is_walked_not_pickled(monkeypatch):
    """A key a checkpoint cannot hold is refused like a value; an OrderedDict (a state_dict()) is walked, not saved
    whole to memory and read back at every checkpoint."""
    bad = TermSet([(Term("ema", "mine", None), Counting({np.int64(3): 1.0}))])
    with pytest.raises(TermError, match=r"the key np.int64\(3\) of state\(\)\['warmup'\]\['steps'\] is a numpy"):
        bad.state()
    monkeypatch.setattr(torch, "save", lambda *a, **k: pytest.fail("a state_dict was pickled"))
    teacher = nn.Linear(4, 4).state_dict()
    state = TermSet([(Term("ema", "mine", None), Counting(teacher))]).state()
    assert state["ema"]["warmup"]["steps"] is teacher


def test_an_unreadable_checkpoint_keeps_torchs_reason_and_is_not_called_damaged(tmp_path):
    save_checkpoint(tmp_path / "c.pt", {"model": {}, "terms": {"confpen": {"steps": np.int64(3)}}})
    with pytest.raises(ResumeError) as refused:
        load_checkpoint(tmp_path / "c.pt")
    message = str(refused.value)
    assert "Unsupported global" in message and "numpy" in message and "damaged" not in message
    (tmp_path / "d.pt").write_bytes((tmp_path / "c.pt").read_bytes()[:100])          # a truncated file as before
    with pytest.raises(ResumeError, match="truncated or damaged"):
        load_checkpoint(tmp_path / "d.pt")


# 2 and 7: every section is read by the command or a registered term; every term's section exists

def mine_term(section: Mine, context: Context) -> Extension | None:
    return Extension() if section.mine_beta > 0 else None


def test_a_section_no_registered_term_reads_is_refused(monkeypatch):
    monkeypatch.setitem(TERMS, "cmd", [])
    with pytest.raises(ConfigurationError) as refused:
        check_terms("cmd", Settings(), own=("other",))
    message = str(refused.value)
    assert f"Settings.mine ({line_of(Mine)})" in message and "register_term('cmd', Term(" in message
    assert "section='mine'" in message and "add 'mine' to the command's OWN_SECTIONS (tasks/cmd/__init__.py)" in message
    check_terms("cmd", Settings(), own=("other", "mine"))                          # read by the command itself
    monkeypatch.setitem(TERMS, "cmd", [Term("mine", "mine", mine_term)])
    check_terms("cmd", Settings(), own=("other",))                                  # registered: accepted


def test_a_term_whose_section_settings_lacks_is_refused_before_any_work(monkeypatch):
    monkeypatch.setitem(TERMS, "cmd", [Term("mine", "mien", mine_term)])
    with pytest.raises(ConfigurationError) as refused:
        check_terms("cmd", Settings(), own=("other", "mine"))
    message = str(refused.value)
    assert "term 'mine'" in message and "Settings.mien" in message and f"({HERE})" in message
    assert "mien: YourSection = section(YourSection)" in message and line_of(mine_term) in message
    context = Context(nn.Module(), [], torch.device("cpu"), Settings())
    with pytest.raises(ConfigurationError, match="Settings.mien"):                  # build_terms says the same
        build_terms("cmd", Settings(), context)


# 3. what loss() and build() return

class Returns(Extension):
    def __init__(self, make):
        self.make = make

    def loss(self, fwd, inner):
        return self.make(inner(fwd))


@pytest.mark.parametrize(("make", "said"), [
    (lambda loss: loss.item(), "returned float"),
    (lambda loss: (loss, loss), "returned tuple"),
    (lambda loss: None, "returned None"),
    (lambda loss: loss * torch.ones(4), "a tensor of shape (4,)"),
    (lambda loss: loss.detach(), "does not require grad"),
], ids=["float", "tuple", "none", "per-example", "detached"])
def test_a_loss_that_is_not_one_scalar_tensor_with_grad_names_the_term_and_its_line(make, said):
    weight = nn.Parameter(torch.tensor(2.0))
    fwd = SimpleNamespace(model=nn.Linear(1, 1).train())
    terms = TermSet([(Term("confpen", "mine", None), Returns(make))])
    with pytest.raises(TermError) as refused:
        terms.loss(fwd, lambda f: weight * 3)
    message = str(refused.value)
    assert said in message and "term 'confpen'" in message and f"Returns.loss, {line_of(Returns.loss)}" in message
    fwd.model.eval()
    with torch.no_grad():                                     # not training: no gradient asked for
        assert TermSet([(Term("t", "mine", None), Returns(lambda x: x))]).loss(fwd, lambda f: weight * 3).item() == 6


def test_a_build_that_returns_the_class_or_another_object_names_the_term_and_its_line(monkeypatch):
    context = Context(nn.Module(), [], torch.device("cpu"), Settings())
    monkeypatch.setitem(TERMS, "cmd", [Term("mine", "mine", build := lambda s, c: Returns)])
    with pytest.raises(TermError) as refused:
        build_terms("cmd", Settings(), context)
    message = str(refused.value)
    assert "term 'mine'" in message and "the class Returns, not an instance" in message and line_of(build) in message
    monkeypatch.setitem(TERMS, "cmd", [Term("mine", "mine", lambda s, c: 0.5)])
    with pytest.raises(TermError, match="returned float"):
        build_terms("cmd", Settings(), context)


# 5. a stat named as the loop's own record keys

class Logs(Extension):
    def __init__(self, key):
        self.key = key

    def epoch_stats(self, means):
        return {self.key: 1.0}


@pytest.mark.parametrize("key", ["train_loss", "train_loss_sst", "epoch", "dev_overall", "train_seconds", "kind"])
def test_a_stat_named_as_the_loops_own_record_keys_is_refused(key):
    terms = TermSet([(Term("confpen", "mine", None), Logs(key))])
    with pytest.raises(ConfigurationError) as refused:
        terms.epoch_end()
    assert "term 'confpen'" in str(refused.value) and repr(key) in str(refused.value)
    assert f"after it (confpen_...) in its epoch_stats ({line_of(Logs.epoch_stats)})" in str(refused.value)
    assert TermSet([(Term("confpen", "mine", None), Logs("confpen_beta"))]).epoch_end() == {"confpen_beta": 1.0}


# 6. a term named as a part of the model, whatever the run's flags

class Model(nn.Module):
    def __init__(self, pals: bool):
        super().__init__()
        self.head = nn.Linear(1, 1)
        self.pals = nn.Linear(1, 1) if pals else None        # a part the flags add (--pals)
        self.smart = None                                     # a slot its term fills


class Fills(Extension):
    def __init__(self, context: Context, name: str):
        setattr(context.model, name, nn.Linear(1, 1))


@pytest.mark.parametrize("flag", [False, True], ids=["part-absent", "part-present"])
@pytest.mark.parametrize("name", ["pals", "head", "forward"])
def test_a_term_named_as_a_part_of_the_model_is_refused_whatever_the_flags(monkeypatch, name, flag):
    monkeypatch.setitem(TERMS, "cmd", [Term(name, "mine", lambda s, c: Fills(c, name))])
    with pytest.raises(ConfigurationError, match=f"the term {name!r} has the name of the model's own {name!r}") as e:
        build_terms("cmd", Settings(), Context(Model(flag), [], torch.device("cpu"), Settings()))
    assert f"its build: {HERE}:" in str(e.value)


def test_the_term_that_fills_its_slot_of_the_model_is_accepted(monkeypatch):
    monkeypatch.setitem(TERMS, "cmd", [Term("smart", "mine", lambda s, c: Fills(c, "smart"), slot=True)])
    model = Model(False)
    assert len(build_terms("cmd", Settings(), Context(model, [], torch.device("cpu"), Settings())).active) == 1
    assert isinstance(model.smart, nn.Linear)


def test_the_multitask_command_refuses_a_section_whose_term_is_not_registered_before_reading_a_file(monkeypatch):
    """The slip the page's step 3 invites: the section and its flag exist, the register_term line does not."""
    from tasks import multitask

    monkeypatch.setitem(TERMS, "multitask", [t for t in TERMS["multitask"] if t.name != "rdrop"])
    monkeypatch.setattr(multitask, "load_files", lambda *a: pytest.fail("read the files"))
    with pytest.raises(ConfigurationError) as refused:
        multitask.run(multitask.parse_settings(["--rdrop-alpha", "0.5", "--device", "cpu"]))
    message = str(refused.value)
    from tasks.multitask.settings import RDrop
    where = f"tasks/multitask/settings.py:{inspect.getsourcelines(RDrop)[1]}"
    assert f"Settings.rdrop ({where}) is read by no registered term of multitask" in message
    assert "section='rdrop'" in message and "(tasks/multitask/terms.py, beside the command's other terms)" in message
