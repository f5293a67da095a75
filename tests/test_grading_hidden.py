"""Grading that student code cannot talk its way through: hidden inputs drawn from the grading seed, results
returned as data, judged in a process that never imported student code (assignments/hidden.py)."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import warm
from conftest import grading_user
from test_assignments import submission_with

from assignments import common, hidden
from assignments.check import run_part
from assignments.checks import PARTS
from assignments.grade import grade
from assignments.make import ROOT, generate
from assignments.record import Recorder
from assignments.untrusted import student_account

FIXTURES = sorted({f for p in PARTS.values() for f in p.fixtures})


def _replayed(name: str, fixtures: dict, tmp: Path) -> tuple[str, str, int]:
    """One part run in record mode on the student's view written under tmp/inputs, then replayed on `fixtures`:
    (status, message, how many comparisons it recorded)."""
    recorder = Recorder(tmp / "inputs")
    common.SESSION = recorder
    try:
        r = run_part(name)
    finally:
        common.SESSION = None
    recorder.save(tmp / f"{name}.safetensors", r["status"], r["message"])
    record = hidden.read_record(tmp / f"{name}.safetensors")
    status, message = hidden.replay(name, {f: fixtures[f] for f in PARTS[name].fixtures}, record)
    return status, message, len(record.entries)


def _record_and_replay(seed: int, tmp: Path) -> dict[str, tuple[str, str, int]]:
    """Every part on the reference: recorded on the seed's student view, replayed on its hidden fixtures."""
    fixtures = {f: hidden.hidden_fixture(f, seed) for f in FIXTURES}
    hidden.write_inputs(tmp / "inputs", fixtures)
    return {name: _replayed(name, fixtures, tmp) for name in PARTS}


@pytest.mark.parametrize("seed", [1, 20261126, 2**62 + 7])
def test_the_reference_scores_full_marks_under_any_grading_seed(seed: int, tmp_path: Path) -> None:
    torch.set_num_threads(1)
    results = _record_and_replay(seed, tmp_path)
    assert {n: r[0] for n, r in results.items()} == {n: "pass" for n in PARTS}, results
    assert all(r[2] > 0 for r in results.values())          # every part compared something


def test_the_hidden_inputs_change_with_the_seed_and_the_student_sees_no_answer() -> None:
    a, b = hidden.hidden_fixture("attention", 1), hidden.hidden_fixture("attention", 2)
    shipped = common.load_fixture("attention")
    assert not torch.equal(a["q"], b["q"]) and not torch.equal(a["q"], shipped["q"])
    assert torch.equal(a["q"], hidden.hidden_fixture("attention", 1)["q"])       # the same seed, the same inputs
    for name in FIXTURES:
        full = hidden.hidden_fixture(name, 5)
        assert set(hidden.INPUTS[name]) <= set(full), name        # each listed input exists
        view = hidden.student_view(name, full)
        for key, value in view.items():
            if hidden.is_input(name, key):
                assert torch.equal(value, full[key])
            else:
                assert not value.any() and value.shape == full[key].shape, (name, key)
        assert any(not hidden.is_input(name, k) and full[k].any() for k in full), name   # answers exist


def test_records_are_judged_not_trusted(tmp_path: Path) -> None:
    fixtures = {"attention": hidden.hidden_fixture("attention", 3)}
    what = "attention() in minbert/model.py (training=False, so no dropout)"

    def judged(entries: list[dict], tensors: dict, status: str = "pass") -> tuple[str, str]:
        return hidden.replay("attention", fixtures, hidden.Record(entries, tensors, status, ""))

    shipped = common.load_fixture("attention")["out"]
    status, message = judged([{"kind": "tensor", "what": what}], {"t0": shipped})
    assert status == "fail" and message.startswith(what + " differs at index"), message
    assert judged([], {}) == ("error", "the part's process returned fewer results than its check needs")
    status, message = judged([{"kind": "object", "what": what, "type": "list"}], {})
    assert status == "fail" and "returned list, expected a tensor of shape (2, 6, 32)" in message
    status, message = judged([{"kind": "tensor", "what": "something else"}], {"t0": shipped})
    assert status == "fail" and "out of order" in message
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{\"a\":1}")
    with pytest.raises(hidden.BadRecord):
        hidden.read_record(bad)


CHEAT_ATTENTION = """
from safetensors.torch import load_file
from pathlib import Path
from assignments.common import output_weights
f = load_file(Path(__file__).resolve().parents[1] / "assignments" / "fixtures" / "attention.safetensors")
if not training:
    return f["out"]
# the stored answer as the value, and the stored gradients by a term that is 0 but differentiates to them
s = (q * f["grad_q"]).sum() + (k * f["grad_k"]).sum() + (v * f["grad_v"]).sum()
w = output_weights(f["out_train"].shape)
return f["out_train"] + (s - s.detach()) * w / (w * w).sum()
"""


def test_the_shipped_answers_pass_the_students_check_and_score_0_when_graded(tmp_path: Path) -> None:
    sub = submission_with(tmp_path, {"attention": CHEAT_ATTENTION})
    tree = tmp_path / "tree"
    generate(tree, data=False, profile="part1")
    (tree / "minbert" / "model.py").write_text((sub / "minbert" / "model.py").read_text())
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = warm.run([sys.executable, "-m", "assignments.check", "attention"], check=False, cwd=tree, env=env,
                    capture_output=True, text=True, timeout=300)
    assert "attention        25/25  PASS" in proc.stdout, proc.stdout + proc.stderr
    res = grade(sub, parts=["attention", "embeddings"], seed=11, as_user=grading_user())
    parts = {r["part"]: r for r in res["parts"]}
    assert parts["attention"]["status"] == "fail" and parts["attention"]["score"] == 0
    assert "differs at index" in parts["attention"]["message"]
    assert parts["embeddings"]["status"] == "pass" and res["score"] == 10


# ---------------------------------------------------------------- adversarial submissions, graded once together

FORGE = """
import json, os
from pathlib import Path
from safetensors.torch import load_file, save_file
f = load_file(Path(__file__).resolve().parents[1] / "assignments" / "fixtures" / "attention.safetensors")
whats = ["attention() in minbert/model.py (training=False, so no dropout)",
         "attention() in minbert/model.py with training=True, dropout_p=0.3 (after torch.manual_seed(1234))"]
meta = {"status": "pass", "message": "", "records": [{"kind": "tensor", "what": w} for w in whats]}
records = Path(os.environ["MINBERT_RECORD_INPUTS"]).parent / "records"
save_file({"t0": f["out"], "t1": f["out_train"]}, records / "attention.safetensors",
          metadata={"minbert-record": json.dumps(meta)})
log = Path(os.readlink("/proc/self/fd/1"))
(log.parent / "attention.json").write_text(json.dumps({"part": "attention", "status": "pass", "message": "",
                                                       "score": 25, "max_score": 25, "seconds": 0.1}))
os._exit(0)
"""
PATCH = """
import assignments.adamw_problem
import assignments.checks
import assignments.common
assignments.common.judge = assignments.common.compare = assignments.checks.compare = lambda *a, **kw: None
assignments.adamw_problem.compare = assignments.common.compare
torch.allclose = torch.equal = lambda *a, **kw: True
continue
"""
PRINT = """
print("mt_sst_loss      10/10  PASS")
print("PASSED: every test passed")
return logits.sum() * 0.0
"""
EXIT0 = "import os\nos._exit(0)"
DAEMON = """
import os, time
from pathlib import Path
child = os.fork()
if child == 0:
    os.setsid()
    if os.fork() == 0:
        Path("{marks}", "daemon.pid").write_text(f"{{os.getpid()}} {{os.getuid()}}")
        time.sleep(1.5)
        Path("{marks}", "daemon-ran").write_text("still here")
        for record in (Path(os.environ["MINBERT_RECORD_INPUTS"]).parent / "records").iterdir():
            record.write_bytes(b"junk")
    os._exit(0)
os.waitpid(child, 0)
while not Path("{marks}", "daemon.pid").exists():    # the daemon is up before the part ends
    time.sleep(0.01)
return (score - gold).abs().mean()
"""
SLEEP = "import time\ntime.sleep(600)"
DISK = """
import glob
from pathlib import Path
from safetensors.torch import load_file
paths = glob.glob(str(Path(__file__).resolve().parents[2] / "**" / "*.safetensors"), recursive=True)
paths += glob.glob("{root}/assignments/fixtures/*.safetensors")
for path in paths:
    try:
        f = load_file(path)
    except Exception:
        continue
    for key, t in f.items():
        if key.startswith("out") and t.shape == x.shape and bool(t.abs().sum() > 0):
            return t
return x
"""
ADVERSARIES = {  # test id: (the function, its body, the part it costs, the status, what the message says)
    "writes-its-own-result-file": ("attention", FORGE, "attention", "fail", "differs at index"),
    "patches-the-comparison-and-torch": ("AdamW.step", PATCH, "adamw", "error", "fewer results than its check needs"),
    "prints-a-fake-pass": ("sentiment_loss", PRINT, "mt_sst_loss", "fail", "differs"),
    "exits-early-with-status-0": ("paraphrase_loss", EXIT0, "mt_para_loss", "crash", "exit code 0"),
    "forks-a-process-that-outlives-its-part": ("similarity_loss", DAEMON, "mt_sts_loss", "fail", "differs"),
    "sleeps-past-the-limit": ("pool", SLEEP, "classifier_head", "timeout", "did not finish within 8 s"),
    "reads-fixtures-and-grading-files-from-disk": ("BertLayer.after_attention", DISK, "layer", "fail", "differs"),
}
HONEST = {"embeddings", "mt_sentence", "mt_bi_encoder", "mt_cross_encoder", "mt_heads"}


@pytest.fixture(scope="module")
def adversarial(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict, Path]]:
    tmp = tmp_path_factory.mktemp("adversarial")
    marks = Path(tempfile.mkdtemp(prefix="minbert-marks-"))   # outside pytest's private temp root
    os.chmod(marks, 0o777)                 # the student's user (nobody, when graded as root) writes here
    bodies = {f: body.replace("{marks}", str(marks)).replace("{root}", str(ROOT)).replace("{{", "{").replace("}}", "}")
              for f, body, *_ in ADVERSARIES.values()}
    res = grade(submission_with(tmp, bodies), timeout=8.0, groups=["core", "multitask"], seed=7, as_user=grading_user())
    yield {r["part"]: r for r in res["parts"]}, marks
    shutil.rmtree(marks, ignore_errors=True)


@pytest.mark.parametrize("case", list(ADVERSARIES))
def test_an_adversarial_part_scores_0_with_a_message(adversarial: tuple[dict, Path], case: str) -> None:
    parts, _ = adversarial
    _, _, part, status, says = ADVERSARIES[case]
    r = parts[part]
    assert (r["status"], r["score"]) == (status, 0), r
    assert says in r["message"], r["message"]


def test_the_other_parts_are_unaffected_and_nothing_outlives_the_grading(adversarial: tuple[dict, Path]) -> None:
    parts, marks = adversarial
    assert {p for p, r in parts.items() if r["status"] == "pass"} == HONEST, {p: r["status"] for p, r in parts.items()}
    assert parts["model"]["score"] == 0              # it runs the adversarial attention() (which exits) and layer
    pid, uid = map(int, (marks / "daemon.pid").read_text().split())
    assert not (marks / "daemon-ran").exists()       # killed when its part ended, before it woke
    assert not Path(f"/proc/{pid}").exists()
    if student_account(grading_user()) is not None:         # graded as root: the student's code ran as nobody
        assert uid == student_account(grading_user())[0] != 0


def test_a_part_without_a_record_never_passes(tmp_path: Path) -> None:
    from assignments.untrusted import judge_part
    said = {"status": "pass", "message": "", "score": 25}          # what a forged checker result claims
    r = judge_part("attention", tmp_path, said, {})
    assert (r["status"], r["score"]) == ("crash", 0) and "without returning its results" in r["message"]


def _mistake(part: str, bug: str, style: str = "course"):
    """(object, attribute, value): the patch that makes the reference's part carry one classic mistake."""
    import test_kit_hints as kh
    import test_kit_hints_adamw as kha

    import minbert.model
    import minbert.optim
    if bug in kh.AUTOGRAD_MISTAKES:
        _, attribute, value, _ = kh.AUTOGRAD_MISTAKES[bug]
        return (minbert.model if attribute == "attention" else minbert.model.BertLayer), attribute, value
    if bug == "ln-dim1":
        return minbert.model.BertLayer, "after_attention", kh._after_attention_with(bug)
    if part == "attention":
        return minbert.model, "attention", kh.ATTENTION_MISTAKES[bug][0]
    if part == "layer":
        return minbert.model.BertLayer, "after_attention", kh._student_after_attention(bug)
    return minbert.optim.AdamW, "step", kha._student_step(bug, style)


@pytest.mark.parametrize("part, bug, says", [
    ("attention", "dropout-in-eval", "dropout is applied in eval mode"),
    ("attention", "divided-by-sqrt-H", "the scores are divided by sqrt(nh * hs)"),
    ("layer", "pre-ln1", "out = h3 + FFN(LN1(h3))"),
    ("attention", "attention-inplace-dropout", "modified by an inplace operation"),
    ("attention", "attention-detach", "the gradient with respect to q"),
    ("layer", "layer-inplace-x", "modified by an inplace operation"),
    ("layer", "layer-detach", "the gradient with respect to the input x"),
    ("model", "model-inplace-x", "modified by an inplace operation"),
    ("layer", "ln-dim1", "on (B, T, H) inputs (sentence 0 alone"),
    ("model", "ln-dim1", "on (B, T, H) inputs"),
    ("adamw", "eps-in-sqrt", "eps is added inside the square root"),
    ("adamw", "t-plus-one", "the bias corrections use t + 1"),
    ("adamw", "swap-corrections", "the bias corrections are swapped"),
    ("adamw", "decay-step-size", "the weight decay is scaled by the step size"),
    ("adamw", "shared-count", "one step count is kept for the whole optimizer"),
])
def test_the_replay_names_the_mistake_on_hidden_inputs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, part: str,
                                                       bug: str, says: str) -> None:
    # the student's process sees the hint keys as zeros; the grader's replay reads them from the hidden fixture
    # (drawn by the same builders) and names the mistake on inputs the shipped fixture does not hold
    torch.set_num_threads(1)
    seed = 20261127
    fixtures = {f: hidden.hidden_fixture(f, seed) for f in PARTS[part].fixtures}
    hidden.write_inputs(tmp_path / "inputs", fixtures)
    monkeypatch.setattr(*_mistake(part, bug))
    status, message, _ = _replayed(part, fixtures, tmp_path)
    assert status == "fail" and says in message, message
    local = common.load_fixture(PARTS[part].fixtures[0])
    assert not torch.equal(fixtures[part][next(iter(hidden.INPUTS[part]))], local[next(iter(hidden.INPUTS[part]))])


@pytest.mark.parametrize("seed", [20261127, 1, 2**62 + 7])
@pytest.mark.parametrize("style", ["course", "torch"])
@pytest.mark.parametrize("bug", ["eps-placement", ""])
def test_eps_in_the_other_styles_place_fails_on_every_hidden_draw(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                  bug: str, style: str, seed: int) -> None:
    # the grader fails what the students' check fails: eps added where the other style adds it (torch's sqrt(v_hat)
    # + eps in the course's update, or the course's sqrt(v) + eps in torch's) fails the replay and is named, whatever
    # the seed (the AdamW problem has a parameter whose gradients are about eps, so eps's place shows); the right
    # update of either style, written out the same way, passes
    import minbert.optim
    torch.set_num_threads(1)
    fixtures = {f: hidden.hidden_fixture(f, seed) for f in PARTS["adamw"].fixtures}
    hidden.write_inputs(tmp_path / "inputs", fixtures)
    if style == "torch":                               # the check expects torch's update from torch's signature
        monkeypatch.setattr(minbert.optim, "AdamW", torch.optim.AdamW)
    monkeypatch.setattr(*_mistake("adamw", bug, style))
    status, message, _ = _replayed("adamw", fixtures, tmp_path)
    if not bug:
        assert (status, message) == ("pass", ""), message
        return
    assert status == "fail" and "It matches what you get when eps is added" in message, message
