"""A run extended on resume (--resume DIR --epochs N, with a warm-up and decay schedule or gradual unfreezing laid out
again over the new steps) is replayed exactly by its run.json alone (--config DIR/run.json --run-dir NEW): the same
weights and history; extended twice, or from a --save-every checkpoint within an epoch, too. A run never extended,
or extended without a schedule, keeps run.json's record empty; an older run.json without it still replays and
resumes; a resume given another record than its checkpoint's is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import ROOT
from test_recipe import RecordingSGD, quiet_fit, random_batches
from test_recipe import classifier as tiny_classifier
from test_save_every import multitask_argv
from test_typed_runs import classifier_argv, deebert_argv, simcse_argv

from tasks import classifier, multitask
from tasks.core import train
from tasks.core.checkpoints import KILL_AT_STEP, load_checkpoint
from tasks.core.errors import ResumeError
from tasks.core.loop import Interrupted

pytestmark = pytest.mark.usefixtures("one_thread")

STEPS = 5             # optimiser steps per epoch: 40 training rows, batches of 8


def start(tiny_dir: Path, tmp_path: Path, run: Path, *extra: str) -> None:
    """A one-epoch classifier run in `run`."""
    argv = [*classifier_argv(tiny_dir, tmp_path), "--epochs", "1", "--run-dir", str(run), *extra]
    classifier.run(classifier.parse_settings(argv))


def resume(run: Path, *extra: str) -> None:
    classifier.run(classifier.parse_settings(["--resume", str(run), *extra]))


def replay(run: Path, again: Path) -> None:
    """A new run from `run`'s run.json alone."""
    classifier.run(classifier.parse_settings(["--config", str(run / "run.json"), "--run-dir", str(again)]))


def same_run(a: Path, b: Path) -> None:
    """The two runs ended with the same weights, best state, steps and history (but seconds)."""
    one, two = load_checkpoint(a / "checkpoint.pt"), load_checkpoint(b / "checkpoint.pt")
    assert one["optimizer_steps"] == two["optimizer_steps"]
    for key in ("model", "best_state"):
        for name in one[key]:
            assert torch.equal(one[key][name], two[key][name]), (key, name)

    def figures(history: list[dict]) -> list[dict]:
        return [{k: v for k, v in h.items() if not k.endswith("_seconds")} for h in history]
    assert figures(one["history"]) == figures(two["history"])
    assert (a / "predictions" / "sst-dev-output.csv").read_text() == (b / "predictions" / "sst-dev-output.csv").read_text()


def stopped_at(step: int, call, monkeypatch) -> None:
    """`call()` stopped as a kill would stop it at optimiser step `step` (after that step's checkpoint, if any)."""
    def stop(variable: str, count: int) -> None:
        if variable == KILL_AT_STEP and count == step:
            raise Interrupted(f"stopped at step {step}")
    with monkeypatch.context() as patch:
        patch.setattr(train, "maybe_kill", stop)
        with pytest.raises(Interrupted):
            call()


def recorded(run: Path) -> list[str] | None:
    return json.loads((run / "run.json").read_text())["settings"]["recipe"].get("earlier_epochs")


@pytest.mark.parametrize("schedule", [("--warmup-ratio", "0.2"), ("--warmup-ratio", "none", "--gradual-unfreezing", "0.5")],
                         ids=["warmup-decay", "gradual-unfreezing"])
def test_an_extended_run_replays_from_its_run_json(schedule, tiny_dir, tmp_path):
    a, b = tmp_path / "A", tmp_path / "B"
    start(tiny_dir, tmp_path, a, *schedule)
    resume(a, "--epochs", "2")                      # laid out again over 2 epochs after step 5
    assert recorded(a) == [f"{STEPS}:1"]
    replay(a, b)
    same_run(a, b)
    assert recorded(b) == [f"{STEPS}:1"]


def test_an_extended_run_differs_from_an_uninterrupted_one(tiny_dir, tmp_path):
    """The replay is not trivially exact: a run of 2 epochs from the start lays its schedule out otherwise."""
    a, whole = tmp_path / "A", tmp_path / "whole"
    start(tiny_dir, tmp_path, a, "--warmup-ratio", "0.2")
    resume(a, "--epochs", "2")
    start(tiny_dir, tmp_path, whole, "--warmup-ratio", "0.2", "--epochs", "2")
    one, two = load_checkpoint(a / "checkpoint.pt")["model"], load_checkpoint(whole / "checkpoint.pt")["model"]
    assert any(not torch.equal(one[k], two[k]) for k in one)


def test_a_run_extended_twice_replays_and_resumes_without_being_refused(tiny_dir, tmp_path):
    a, b = tmp_path / "A", tmp_path / "B"
    start(tiny_dir, tmp_path, a, "--gradual-unfreezing", "0.6")
    resume(a, "--epochs", "2")
    resume(a, "--epochs", "3")                      # its run.json has the record: not a setting that differs
    assert recorded(a) == [f"{STEPS}:1", f"{2 * STEPS}:2"]
    resume(a)                                       # finished: the same epochs add nothing
    assert recorded(a) == [f"{STEPS}:1", f"{2 * STEPS}:2"]
    replay(a, b)
    same_run(a, b)


def test_an_extension_from_a_step_checkpoint_within_an_epoch_replays(tiny_dir, tmp_path, monkeypatch):
    """--save-every 2, the run stopped at step 3 of epoch 1 and resumed from step 2 for 2 epochs: laid out again at
    step 2."""
    a, b = tmp_path / "A", tmp_path / "B"

    stopped_at(3, lambda: start(tiny_dir, tmp_path, a, "--warmup-ratio", "0.2", "--save-every", "2"), monkeypatch)
    assert load_checkpoint(a / "checkpoint.pt")["optimizer_steps"] == 2
    resume(a, "--epochs", "2")
    assert recorded(a) == ["2:1"]
    replay(a, b)
    same_run(a, b)


def test_without_a_schedule_an_extended_run_records_nothing_and_replays(tiny_dir, tmp_path):
    """Nothing is laid out over the steps: the extended run is the uninterrupted 2-epoch run, run.json says 2."""
    a, b = tmp_path / "A", tmp_path / "B"
    start(tiny_dir, tmp_path, a, "--warmup-ratio", "none")
    resume(a, "--epochs", "2")
    assert recorded(a) is None
    replay(a, b)
    same_run(a, b)


def test_a_run_never_extended_records_nothing_and_an_older_run_json_without_it_replays_and_resumes(tiny_dir, tmp_path):
    a, b = tmp_path / "A", tmp_path / "B"
    start(tiny_dir, tmp_path, a, "--warmup-ratio", "0.2")
    assert recorded(a) is None
    record = json.loads((a / "run.json").read_text())
    del record["settings"]["recipe"]["earlier_epochs"]                  # as a run.json written before the record
    (a / "run.json").write_text(json.dumps(record, indent=1) + "\n")
    replay(a, b)
    same_run(a, b)
    resume(a, "--epochs", "2")
    assert recorded(a) == [f"{STEPS}:1"]


def test_the_record_round_trips_through_print_config_and_a_resume_given_another_is_refused(tiny_dir, tmp_path,
                                                                                             capsys):
    a = tmp_path / "A"
    start(tiny_dir, tmp_path, a, "--warmup-ratio", "0.2")
    resume(a, "--epochs", "2")
    capsys.readouterr()
    with pytest.raises(SystemExit):
        classifier.main(["--config", str(a / "run.json"), "--run-dir", str(tmp_path / "B"), "--print-config"])
    printed = tmp_path / "printed.json"
    printed.write_text(capsys.readouterr().out)
    assert json.loads(printed.read_text())["recipe"]["earlier_epochs"] == [f"{STEPS}:1"]
    assert classifier.parse_settings(["--config", str(printed)]).recipe.earlier_epochs == [f"{STEPS}:1"]
    with pytest.raises(ResumeError, match=r"--earlier-epochs 3:1 is not what .*checkpoint.pt recorded \(5:1\)"):
        resume(a, "--earlier-epochs", "3:1", "--epochs", "3")


# ------------------------------------------------------------------ the multitask command

def multitask_run(argv: list[str]) -> None:
    multitask.run(multitask.parse_settings(argv))


def test_an_extended_multitask_run_replays_from_its_run_json(tiny_dir, multitask_files, tmp_path):
    a, b = tmp_path / "A", tmp_path / "B"
    multitask_run([*multitask_argv(tiny_dir, multitask_files), "--epochs", "1", "--run-dir", str(a), "--warmup-ratio",
                   "0.2"])
    multitask_run(["--resume", str(a), "--epochs", "2"])
    assert recorded(a) == [f"{load_checkpoint(a / 'checkpoint.pt')['optimizer_steps'] // 2}:1"]
    multitask_run(["--config", str(a / "run.json"), "--run-dir", str(b)])
    one, two = load_checkpoint(a / "checkpoint.pt"), load_checkpoint(b / "checkpoint.pt")
    for name in one["model"]:
        assert torch.equal(one["model"][name], two["model"][name]), name


def test_an_annealed_multitask_run_refuses_other_epochs_on_resume(tiny_dir, multitask_files, tmp_path):
    """--schedule annealed draws epoch e's tasks at alpha(e, epochs) (epoch 2 of 2 at 0.2, of 3 at 0.6): a run
    extended from 2 to 3 epochs would be neither, and no run.json could replay it, so the resume is refused."""
    a = tmp_path / "A"
    multitask_run([*multitask_argv(tiny_dir, multitask_files), "--epochs", "2", "--run-dir", str(a), "--warmup-ratio",
                   "none", "--schedule", "annealed"])
    with pytest.raises(ResumeError, match=r"cannot resume .*checkpoint.pt for 3 epochs: it was started for 2, and "
                                          r"--schedule annealed draws each epoch's tasks by the number of epochs, so no "
                                          r"run.json could replay it; resume it with --epochs 2, or start a new run with "
                                          r"--epochs 3"):
        multitask_run(["--resume", str(a), "--epochs", "3"])
    page = " ".join((ROOT / "docs" / "runs.md").read_text(encoding="utf-8").split())     # the line docs/runs.md quotes
    assert ("for 3 epochs: it was started for 2, and --schedule annealed draws each epoch's tasks by the number of "
            "epochs, so no run.json could replay it; resume it with --epochs 2, or start a new run with --epochs 3") in page


def test_a_deebert_run_with_a_schedule_refuses_other_epochs_on_resume(tiny_dir, tmp_path):
    """Its two stages share one recipe, so one record in run.json could not say which stage's schedule moved."""
    from tasks import deebert
    a = tmp_path / "A"
    argv = [*deebert_argv(tiny_dir, tmp_path), "--epochs", "1", "--ramp-epochs", "1", "--run-dir", str(a)]
    deebert.run(deebert.parse_settings(argv))
    with pytest.raises(ResumeError, match=r"cannot resume .*stage1.pt for 2 epochs: it was started for 1, and its "
                                          r"schedule would be laid out again, which DeeBERT's run.json cannot replay"):
        deebert.run(deebert.parse_settings(["--resume", str(a), "--epochs", "2"]))


def test_an_extended_simcse_run_replays_from_its_run_json(tiny_dir, tmp_path):
    """SimCSE's loop counts rounds of --eval-every steps: --epochs 1 then 2 lays the schedule out again over the new
    number of rounds, which run.json records in rounds."""
    from tasks import simcse
    a, b = tmp_path / "A", tmp_path / "B"
    simcse.run(simcse.parse_settings([*simcse_argv(tiny_dir, tmp_path), "--epochs", "1", "--run-dir", str(a)]))
    rounds = load_checkpoint(a / "checkpoint.pt")["epoch"]
    simcse.run(simcse.parse_settings(["--resume", str(a), "--epochs", "2"]))
    assert recorded(a) == [f"{2 * rounds}:{rounds}"]                 # 2 steps a round
    simcse.run(simcse.parse_settings(["--config", str(a / "run.json"), "--run-dir", str(b)]))
    one, two = load_checkpoint(a / "checkpoint.pt"), load_checkpoint(b / "checkpoint.pt")
    for part in ("model", "best_state"):
        for name in one[part]:
            assert torch.equal(one[part][name], two[part][name]), (part, name)


# ------------------------------------------------------------------ a resume killed on the way, and fewer epochs

def test_a_plain_resume_after_a_kill_in_an_extension_goes_on_with_the_extended_epochs_and_replays(tiny_dir, tmp_path,
                                                                                                  monkeypatch):
    """--resume A --epochs 3 stopped at step 12 (its epoch 2 checkpointed at step 10): --resume A alone finishes the
    3 epochs the checkpoint planned, and run.json replays that run."""
    a, b = tmp_path / "A", tmp_path / "B"
    start(tiny_dir, tmp_path, a, "--warmup-ratio", "0.2")

    stopped_at(12, lambda: resume(a, "--epochs", "3"), monkeypatch)
    assert json.loads((a / "run.json").read_text())["settings"]["training"]["epochs"] == 3   # written once accepted
    resume(a)
    state = load_checkpoint(a / "checkpoint.pt")
    assert (state["optimizer_steps"], len(state["history"])) == (3 * STEPS, 3)
    assert recorded(a) == [f"{STEPS}:1"]
    record = json.loads((a / "run.json").read_text())
    assert len(record["resumed"]) == 2                              # one line per resume, the killed one's included
    replay(a, b)
    same_run(a, b)


def test_a_resume_to_fewer_epochs_than_are_done_is_refused(tiny_dir, tmp_path):
    a = tmp_path / "A"
    start(tiny_dir, tmp_path, a, "--warmup-ratio", "0.2")
    resume(a, "--epochs", "3")
    with pytest.raises(ResumeError, match=r"cannot resume .*checkpoint.pt for 2 epochs: 3 epochs are done; resume it "
                                          r"with --epochs 3 or more, or start a new run with --epochs 2"):
        resume(a, "--epochs", "2")
    assert load_checkpoint(a / "checkpoint.pt")["optimizer_steps"] == 3 * STEPS
    page = " ".join((ROOT / "docs" / "runs.md").read_text(encoding="utf-8").split())     # the line docs/runs.md quotes
    assert ("`cannot resume runs/r1/checkpoint.pt for 2 epochs: 3 epochs are done; resume it with --epochs 3 or more, "
            "or start a new run with --epochs 2`") in page


def test_a_simcse_run_of_one_round_shorter_than_eval_every_refuses_other_epochs_on_resume(tiny_dir, tmp_path):
    """24 examples in batches of 8, --eval-every 4: one epoch is one round of 3 steps, two are two rounds of 4, so an
    extension would change the rounds' length, which run.json cannot replay."""
    from tasks import simcse
    a = tmp_path / "A"
    simcse.run(simcse.parse_settings([*simcse_argv(tiny_dir, tmp_path), "--epochs", "1", "--eval-every", "4",
                                      "--run-dir", str(a)]))
    with pytest.raises(ResumeError, match=r"cannot resume .*A for --epochs 2: its rounds are 3 optimiser steps, and "
                                          r"with --epochs 2 they would be 4 \(a round is --eval-every 4 steps, or the "
                                          r"whole run's if fewer\), which no run.json could replay; resume it with "
                                          r"--epochs 1, or start a new run with --epochs 2"):
        simcse.run(simcse.parse_settings(["--resume", str(a), "--epochs", "2"]))
    assert load_checkpoint(a / "checkpoint.pt")["optimizer_steps"] == 3


def test_a_resume_to_exactly_the_epochs_done_says_nothing_is_left_and_replays(tiny_dir, tmp_path, monkeypatch,
                                                                               capsys):
    """Extended to 3 epochs, stopped at step 12 (2 epochs done), resumed with --epochs 2: no step is left, and the
    note says so (it said the schedule was laid out again from step 11 on); the record still holds the 3-epoch plan
    its steps 6-10 trained under, so the replay is this run."""
    a, b = tmp_path / "A", tmp_path / "B"
    start(tiny_dir, tmp_path, a, "--warmup-ratio", "0.2")

    stopped_at(12, lambda: resume(a, "--epochs", "3"), monkeypatch)
    capsys.readouterr()
    resume(a, "--epochs", "2")
    out = capsys.readouterr().out
    assert ("note: the run was planned for 3 epochs and ends at 2, which are done: no step is left to train; run.json "
            "records the plan its steps trained under (--earlier-epochs), so that --config RUN/run.json replays this "
            "run") in " ".join(out.split()), out
    assert "laid out again" not in out and recorded(a) == ["5:1", "10:3"]
    replay(a, b)
    same_run(a, b)



def test_an_extended_schedule_by_hand_and_its_replay_from_the_record(tiny_config, tmp_path):
    """5 batches, 2 per step: 3 steps an epoch. A 1-epoch run (ratio 0.3 -> ceil(0.9) = 1 warm-up step of 3) resumed
    for 2 epochs after step 3 lays the schedule out again over 6 steps (ceil(1.8) = 2 warm-up steps): steps 3-5 at
    (6-s)/(6-2). The record it leaves, earlier_epochs ["3:1"], replays the whole run from scratch: steps 0-2 at
    LinearSchedule(1, 3) ((s+1)/1, then (3-s)/(3-1)), steps 3-5 as the extension. By hand, not from the loop."""
    first = [1.0 * 0.1, 2 / 2 * 0.1, 1 / 2 * 0.1]                # s = 0: (0+1)/1; s = 1, 2: (3-s)/(3-1)
    then = [3 / 4 * 0.1, 2 / 4 * 0.1, 1 / 4 * 0.1]               # s = 3, 4, 5: (6-s)/(6-2)
    batches = random_batches([4] * 5)
    model = tiny_classifier(tiny_config)
    opt = RecordingSGD(model.parameters(), lr=0.1)
    quiet_fit(model, opt, lambda e: batches, epochs=1, warmup_ratio=0.3, grad_accum=2, checkpoint=tmp_path / "a.pt")
    assert opt.lrs == pytest.approx(first, rel=1e-15)
    model = tiny_classifier(tiny_config)
    opt = RecordingSGD(model.parameters(), lr=0.1)
    extended = quiet_fit(model, opt, lambda e: batches, epochs=2, warmup_ratio=0.3, grad_accum=2,
                         checkpoint=tmp_path / "a.pt", resume=tmp_path / "a.pt")
    assert opt.lrs == pytest.approx(then, rel=1e-15) and extended.earlier_epochs == ["3:1"]
    model = tiny_classifier(tiny_config)
    opt = RecordingSGD(model.parameters(), lr=0.1)
    quiet_fit(model, opt, lambda e: batches, epochs=2, warmup_ratio=0.3, grad_accum=2, earlier_epochs=["3:1"],
              checkpoint=tmp_path / "b.pt")
    assert opt.lrs == pytest.approx(first + then, rel=1e-15)
