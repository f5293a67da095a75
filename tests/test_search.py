"""python -m tasks.search: an Optuna study over the classifier's settings on the tiny model: trials are run directories,
the reports and best.json after each, a second call and two workers at once share the study, a weak trial is pruned
at its first epoch, a killed worker's trial goes on from its checkpoint, and a bad space file names the key."""

from __future__ import annotations

import csv
import json
import os
import re
import runpy
import shutil
import signal
import sys
import time
import traceback
from pathlib import Path

import pytest
import warm
from conftest import DATA, ROOT, TEST_DEVICE

from tasks import classifier, search
from tasks.core.checkpoints import KILL_AT_STEP
from tasks.core.errors import ConfigurationError, run_cli
from tasks.core.runs import read_run_json
from tasks.core.settings import dump
from tasks.search.space import Param, load_space
from tasks.search.study import trial_settings

optuna = pytest.importorskip("optuna")
pytestmark = pytest.mark.usefixtures("one_thread")
GOOD, TERRIBLE = 3e-3, 1e-9          # the tiny model on its own 32 training rows: dev 0.66 and 0.19 after epoch 1


def piece(tmp_path: Path, name: str, stop: int) -> str:
    lines = (DATA / name).read_text(encoding="utf-8").splitlines(keepends=True)
    path = tmp_path / f"{stop}-{name}"
    path.write_text(lines[0] + "".join(lines[1:1 + stop]), encoding="utf-8")
    return str(path)


def space_file(tmp_path: Path, tiny_dir: Path, epochs: int = 2, **extra) -> Path:
    """A classifier space on the tiny model: dev is the training slice itself, so a good lr shows at once."""
    train = piece(tmp_path, "ids-sst-train.csv", 32)
    space = {"command": "classifier",
             "fixed": {"training.model": str(tiny_dir), "training.epochs": epochs, "training.batch_size": 8,
                       "files.train_file": train, "files.dev_file": train,
                       "files.test_file": piece(tmp_path, "ids-sst-dev.csv", 8), "run.device": TEST_DEVICE,
                       "run.progress": False, "run.eval_batch_size": 32},
             "params": {"training.lr": {"low": 1e-9, "high": 3e-2, "log": True},
                        "recipe.warmup_ratio": {"low": 0.0, "high": 0.3}}} | extra
    path = tmp_path / "tiny-space.json"
    path.write_text(json.dumps(space))
    return path


def study_of(study_dir: Path, name: str = "tiny-space") -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{study_dir / 'study.db'}")


def test_a_search_writes_run_directories_reports_and_a_best_json_that_reproduces_its_trial(tiny_dir, tmp_path):
    study_dir = tmp_path / "study"
    space = space_file(tmp_path, tiny_dir)
    out = search.run(search.parse_settings(["--space", str(space), "--study-dir", str(study_dir), "--trials", "3",
                                            "--seed", "0", "--startup-trials", "2", "--pruner", "none"]))
    trials = study_of(study_dir).trials
    assert [t.number for t in trials] == [0, 1, 2] and all(t.state.name == "COMPLETE" for t in trials)
    for t in trials:                                       # each trial is a whole run directory of its own
        run_dir = Path(t.user_attrs["run_dir"])
        assert run_dir == study_dir / f"trial-{t.number:04d}"
        record = read_run_json(run_dir)
        assert record["command"] == "classifier" and record["settings"]["training"]["lr"] == t.params["training.lr"]
        history = [json.loads(line) for line in (run_dir / "checkpoint.curves.jsonl").read_text().splitlines()]
        dev = [h["dev_accuracy"] for h in history if h["kind"] == "epoch"]
        assert t.value == max(dev) == record["result"]["dev_accuracy"]            # the run's best dev score
        assert sorted(t.intermediate_values) == [1, 2] and list(t.intermediate_values.values()) == dev
    for name in ("best.json", "trials.csv", "trials.md", "history.png", "importances.png"):
        assert (study_dir / name).stat().st_size > 0, name
    rows = list(csv.DictReader((study_dir / "trials.csv").open()))
    assert [r["number"] for r in rows] == ["0", "1", "2"] and {r["state"] for r in rows} == {"COMPLETE"}
    assert {"training.lr", "recipe.warmup_ratio", "epochs", "seconds", "run_dir"} <= set(rows[0])
    best = max(trials, key=lambda t: t.value)
    assert out["best"]["number"] == best.number

    # best.json is the best trial's run.json settings with run_dir cleared; --config best.json runs it again
    written = json.loads((study_dir / "best.json").read_text())
    stored = read_run_json(best.user_attrs["run_dir"])["settings"]
    assert written == stored | {"run": stored["run"] | {"run_dir": None}}
    again = tmp_path / "again"
    settings = classifier.parse_settings(["--config", str(study_dir / "best.json"), "--run-dir", str(again)])
    assert dump(settings) == stored | {"run": stored["run"] | {"run_dir": str(again)}}
    assert classifier.run(settings)["dev_accuracy"] == best.value


def test_a_second_call_adds_trials_to_the_same_study(tiny_dir, tmp_path):
    argv = ["--space", str(space_file(tmp_path, tiny_dir, epochs=1)), "--study-dir", str(tmp_path / "s"),
            "--trials", "1", "--pruner", "none", "--seed", "0"]
    search.run(search.parse_settings(argv))
    search.run(search.parse_settings(argv[:-5] + ["2", "--pruner", "none", "--seed", "0"]))
    trials = study_of(tmp_path / "s").trials
    assert [t.number for t in trials] == [0, 1, 2] and all(t.state.name == "COMPLETE" for t in trials)
    # the same --seed again does not draw the first call's points again (the sampler's seed takes the study's size)
    assert trials[1].params != trials[0].params
    assert sorted(p.name for p in (tmp_path / "s").glob("trial-*")) == ["trial-0000", "trial-0001", "trial-0002"]


def test_ctrl_c_in_a_search_says_to_run_the_same_search_again(tiny_dir, tmp_path, capsys):
    """Ctrl-C in a trial's run: the line names the search command (the trial is queued again and resumes from its
    checkpoint), not tasks.classifier --resume of the trial's directory, which would finish it outside the study."""
    from tasks.core.loop import watching
    argv = ["--space", str(space_file(tmp_path, tiny_dir, epochs=2)), "--study-dir", str(tmp_path / "s"), "--trials",
            "1", "--pruner", "none", "--seed", "0"]

    def ctrl_c(epoch, *_):
        if epoch == 1:
            raise KeyboardInterrupt
    with watching(ctrl_c):
        assert run_cli(lambda: search.main(argv)) == 130
    assert capsys.readouterr().err.splitlines()[-1] == (
        "interrupted (Ctrl-C); the trial in flight is queued again (it resumes from its checkpoint): go on with the "
        f"same command, python -m tasks.search {' '.join(argv)}")
    assert run_cli(lambda: search.main(argv)) == 0                      # as said: the queued trial ends
    first, retry = study_of(tmp_path / "s").trials                       # the interrupted trial, then its retry
    assert (first.state.name, retry.state.name) == ("FAIL", "COMPLETE") and retry.params == first.params


def worker(argv: list[str], tmp_path: Path, output: Path) -> int:
    """`python -m tasks.search ARGV` in a process of its own, forked from this one (torch, Optuna and the project
    already imported: about 3 s of start-up less each), as warm.run's children run a command; its output in output.
    Returns its pid."""
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:                                              # the child: never back into pytest, whatever happens
        fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        sys.stdout = sys.stderr = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 (os._exit ends it)
        os.chdir(tmp_path)
        os.environ["OMP_NUM_THREADS"] = "1"
        sys.argv = ["tasks.search", *argv]
        try:
            runpy.run_module("tasks.search", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 0 if stop.code is None else 1
        except BaseException:                         # noqa: BLE001 (reported in the output, as a traceback)
            traceback.print_exc()
    finally:
        sys.stdout.flush()
        os._exit(code)


def wait_for(pid: int, seconds: float) -> int:
    """The forked worker's exit code, killed (-9) if it has not ended in seconds."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_two_workers_started_at_once_share_one_sqlite_study(tiny_dir, tmp_path):
    """Two worker processes start at once on one study: each takes trials from it until it holds --trials each."""
    argv = ["--space", str(space_file(tmp_path, tiny_dir, epochs=1)), "--study-dir", str(tmp_path / "s"),
            "--trials", "2", "--pruner", "none"]
    outputs = [tmp_path / f"worker-{i}.out" for i in range(2)]
    pids = [worker(argv, tmp_path, out) for out in outputs]
    codes = [wait_for(pid, 240) for pid in pids]
    assert codes == [0, 0], [out.read_text()[-2000:] for out in outputs]
    trials = study_of(tmp_path / "s").trials
    assert sorted(t.number for t in trials) == [0, 1, 2, 3]                     # none lost, none run twice
    assert all(t.state.name == "COMPLETE" for t in trials)
    run_dirs = [t.user_attrs["run_dir"] for t in trials]
    assert len(set(run_dirs)) == 4 and all((tmp_path / d / "run.json").is_file() for d in run_dirs)
    assert len({t.user_attrs["host"] for t in trials}) == 1
    rows = list(csv.DictReader((tmp_path / "s" / "trials.csv").open()))     # the last report written holds all four
    assert sorted(r["number"] for r in rows) == ["0", "1", "2", "3"]


def test_a_weak_trial_is_pruned_after_its_first_epoch_and_keeps_its_run_directory(tiny_dir, tmp_path):
    good, bad = {"training.lr": GOOD, "recipe.warmup_ratio": 0.0}, {"training.lr": TERRIBLE, "recipe.warmup_ratio": 0.0}
    space = space_file(tmp_path, tiny_dir, epochs=3, enqueue=[good, good, bad])
    search.run(search.parse_settings(["--space", str(space), "--study-dir", str(tmp_path / "s"), "--trials", "3",
                                      "--pruner", "median", "--startup-trials", "2"]))
    trials = study_of(tmp_path / "s").trials
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE", "PRUNED"]
    assert [t.params["training.lr"] for t in trials] == [GOOD, GOOD, TERRIBLE]
    pruned = trials[2]
    assert list(pruned.intermediate_values) == [1]
    assert pruned.intermediate_values[1] < trials[0].intermediate_values[1]
    run_dir = Path(pruned.user_attrs["run_dir"])
    lines = [json.loads(line) for line in (run_dir / "checkpoint.curves.jsonl").read_text().splitlines()]
    assert read_run_json(run_dir)["settings"]["training"]["epochs"] == 3
    assert [h["epoch"] for h in lines if h["kind"] == "epoch"] == [1]                 # fewer epochs than asked
    assert (run_dir / "checkpoint.pt").is_file() and "result" not in read_run_json(run_dir)
    assert "PRUNED" in (tmp_path / "s" / "trials.md").read_text()


def test_a_weak_trial_that_has_run_all_its_epochs_is_complete_not_pruned(tiny_dir, tmp_path):
    good, bad = {"training.lr": GOOD, "recipe.warmup_ratio": 0.0}, {"training.lr": TERRIBLE, "recipe.warmup_ratio": 0.0}
    space = space_file(tmp_path, tiny_dir, epochs=1, enqueue=[good, good, bad])   # epoch 1 is the last
    search.run(search.parse_settings(["--space", str(space), "--study-dir", str(tmp_path / "s"), "--trials", "3",
                                      "--pruner", "median", "--startup-trials", "2"]))
    trials = study_of(tmp_path / "s").trials
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE", "COMPLETE"]
    assert trials[2].value < trials[0].value                  # below the median: pruned at any earlier epoch
    assert "result" in read_run_json(trials[2].user_attrs["run_dir"])


def test_a_killed_workers_trial_is_retried_from_its_checkpoint(tiny_dir, tmp_path):
    space = space_file(tmp_path, tiny_dir, epochs=2, enqueue=[{"training.lr": GOOD, "recipe.warmup_ratio": 0.1}])
    argv = ["--space", str(space), "--study-dir", str(tmp_path / "s"), "--trials", "1", "--pruner", "none",
            "--heartbeat", "1"]
    first = warm.run([sys.executable, "-m", "tasks.search", *argv], cwd=tmp_path, capture_output=True, text=True,
                     timeout=240, env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
                                       KILL_AT_STEP: "6"})        # 4 steps an epoch: killed in epoch 2
    assert first.returncode == -9, (first.stdout + first.stderr)[-2000:]
    time.sleep(5)                                      # > 3 heartbeats (with a margin for a loaded machine): stale
    search.run(search.parse_settings(argv))
    killed, retried = study_of(tmp_path / "s").trials
    assert (killed.state.name, retried.state.name) == ("FAIL", "COMPLETE")
    assert retried.params == killed.params and retried.system_attrs["failed_trial"] == 0
    run_dir = tmp_path / "s" / "trial-0000"                                     # the same run directory, resumed
    assert retried.user_attrs["run_dir"] == str(run_dir) and not (tmp_path / "s" / "trial-0001").exists()
    record = read_run_json(run_dir)
    assert [line["argv"] for line in record["resumed"]] == [f"python -m tasks.classifier --resume {run_dir}"]
    assert sorted(retried.intermediate_values) == [1, 2]                        # epoch 1 seen from the checkpoint
    assert retried.value == record["result"]["dev_accuracy"]

    # a killed run that wrote no checkpoint starts again, with its settings, in the retried trial's own directory
    bare = tmp_path / "s" / "trial-0005"
    bare.mkdir()
    shutil.copy(run_dir / "run.json", bare)
    again = optuna.trial.FixedTrial(killed.params, number=7)
    again.set_user_attr("run_dir", str(bare))
    settings, argv = trial_settings(load_space(space), again, tmp_path / "s")
    assert argv == ["--config", str(tmp_path / "s" / "configs" / "trial-0007.json")]
    assert dump(settings) == record["settings"] | {"run": record["settings"]["run"] | {
        "run_dir": str(tmp_path / "s" / "trial-0007")}}


@pytest.mark.parametrize("change, message", [
    ({"params": {"training.learning_rate": {"low": 1e-5, "high": 1e-3}}},
     r"\(params\): unknown setting 'training.learning_rate'; known in training: batch_size, .*, lr, "),
    ({"params": {"training.lr": {"low": -1, "high": 1e-3}}}, r"'training.lr' low: setting 'training.lr': must be positive"),
    ({"params": {"training.lr": {"low": 1e-3, "high": 1e-5}}}, r"'training.lr': low 0.001 is above high 1e-05"),
    ({"params": {"training.batch_size": {"choices": [16, "big"]}}}, r"setting 'training.batch_size': must be a number, not 'big'"),
    ({"fixed": {"training.epochs": 0}}, r"\(fixed\): setting 'training.epochs': must be a positive integer"),
    ({"fixed": {"run.run_dir": "x"}}, r"'run.run_dir' is the search's to set"),
    ({"command": "train"}, r"command must be one of classifier, multitask, simcse, deebert"),
    ({"enqueue": [{"training.lr": 1e-4}, {"training.lr": 1}], "fixed": {"training.model": "absent-model"}},
     (r"\(enqueue, trial 2\): \{\"training.lr\": 1\} is outside the space's ranges: training.lr 1.0 \(float in "
     r"\[1e-05, 0.001\]\)$")),
    ({"params": {"training.batch_size": {"choices": [16, 32]}}, "enqueue": [{"training.batch_size": 8}],
      "fixed": {"training.model": "absent-model"}},      # (were the point queued, its trial would stop at once)
     r"\(enqueue, trial 1\): .* outside the space's ranges: training.batch_size 8 \(one of 16, 32\)$"),
])
def test_a_bad_space_file_is_one_error_naming_the_file_and_the_key(tmp_path, capsys, change, message):
    path = tmp_path / "bad-space.json"
    path.write_text(json.dumps({"command": "classifier", "params": {"training.lr": {"low": 1e-5, "high": 1e-3}}}
                               | change))
    assert run_cli(lambda: search.main(["--space", str(path), "--study-dir", str(tmp_path / "s")])) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}") and len(err.strip().splitlines()) == 1, err
    assert re.search(message, err), err
    assert not (tmp_path / "s" / "study.db").exists()


def test_a_space_file_with_a_key_given_twice_or_not_utf8_is_one_error_line(tmp_path, capsys):
    path = tmp_path / "twice-space.json"
    for text, message in (
            (('{"command": "classifier",\n "fixed": {"training.epochs": 1,\n           "training.epochs": 2},\n'
              ' "params": {"training.lr": {"low": 1e-5, "high": 1e-3}}}'), ":3: key 'fixed.training.epochs' given twice"),
            ('{"command": "classifier", "params": {"training.lr": {"low": 1e-5, "high": 1e-3, "low": 1e-4}}}',
             ":1: key 'params.training.lr.low' given twice"),
            ('{"command": "classifier", "fixed": {"run.device": "caf\xe9"}}', ": not UTF-8 text (byte 0xe9 on line 1)")):
        path.write_bytes(text.encode("latin-1"))
        assert run_cli(lambda: search.main(["--space", str(path), "--study-dir", str(tmp_path / "s"),
                                            "--trials", "0"])) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"error: {path}{message}") and len(err.strip().splitlines()) == 1, err
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"command": "classifier",
                                                  "params": {"training.lr": {"low": 1e-5, "high": 1e-3}}}).encode())
    assert load_space(path).params[0].path == "training.lr"                   # a UTF-8 BOM is read


def test_without_optuna_the_search_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)                            # import optuna raises ImportError
    path = tmp_path / "space.json"
    path.write_text(json.dumps({"command": "classifier", "params": {"training.lr": {"low": 1e-5, "high": 1e-3}}}))
    assert run_cli(lambda: search.main(["--space", str(path)])) == 1
    assert "pip install optuna" in capsys.readouterr().err


def test_the_committed_main_job_space_reads_and_its_first_trial_is_the_main_job_at_a_smaller_sample():
    space = load_space(ROOT / "tasks" / "search" / "main-job-space.json")
    assert space.command == "multitask" and len(space.params) == 7
    first = dump(space.settings(space.enqueue[0], "runs/x"))
    main_job = json.loads((ROOT / "tasks" / "multitask" / "main-job.json").read_text())
    for section, values in main_job.items():
        for key, value in values.items():
            if (section, key) not in {("training", "max_train_examples"), ("run", "run_dir"), ("run", "threads")}:
                assert first[section][key] == value, (section, key)
    assert first["training"]["max_train_examples"] == 2500


def test_finished_runs_are_recorded_as_complete_trials_once_and_only_if_they_are_points_of_the_space(tiny_dir, tmp_path,
                                                                                                   capsys):
    space_path = space_file(tmp_path, tiny_dir)
    space = load_space(space_path)
    made = tmp_path / "made-before"                    # a run of the space's command made outside the search
    classifier.run(space.settings({"training.lr": GOOD, "recipe.warmup_ratio": 0.1}, made))
    argv = ["--space", str(space_path), "--study-dir", str(tmp_path / "s"), "--trials", "0", "--record", str(made)]
    search.run(search.parse_settings(argv))
    search.run(search.parse_settings(argv))            # again: already in the study, not added twice
    (trial,) = study_of(tmp_path / "s").trials
    history = [json.loads(line) for line in (made / "checkpoint.curves.jsonl").read_text().splitlines()]
    dev = [h["dev_accuracy"] for h in history if h["kind"] == "epoch"]
    assert trial.state.name == "COMPLETE" and trial.params == {"training.lr": GOOD, "recipe.warmup_ratio": 0.1}
    assert trial.value == max(dev) == read_run_json(made)["result"]["dev_accuracy"]
    assert list(trial.intermediate_values.values()) == dev and trial.user_attrs["run_dir"] == str(made.resolve())
    assert json.loads((tmp_path / "s" / "best.json").read_text())["training"]["lr"] == GOOD

    # a later call samples beside it; TPE and the pruner see it as one of the study's trials
    search.run(search.parse_settings(argv[:5] + ["1", "--pruner", "none", "--seed", "0"]))
    assert [t.number for t in study_of(tmp_path / "s").trials] == [0, 1]

    other = tmp_path / "other-batch"                   # a fixed setting differs: not a point of the space
    classifier.run(space.settings({"training.lr": GOOD, "recipe.warmup_ratio": 0.1}, other))
    bad = json.loads((other / "run.json").read_text())
    bad["settings"]["training"]["batch_size"] = 4
    (other / "run.json").write_text(json.dumps(bad))
    assert run_cli(lambda: search.main(argv[:-1] + [str(other)])) == 1
    assert "not a point of this space (training.batch_size is 4, the space's 8)" in capsys.readouterr().err
    narrow = tmp_path / "narrow-space.json"            # the run's lr outside the space's range
    narrow.write_text(json.dumps(json.loads(space_path.read_text())
                                 | {"params": {"training.lr": {"low": 1e-6, "high": 1e-3, "log": True},
                                               "recipe.warmup_ratio": {"low": 0.0, "high": 0.3}}}))
    assert run_cli(lambda: search.main(["--space", str(narrow), "--study-dir", str(tmp_path / "n"), "--trials", "0",
                                        "--record", str(made)])) == 1
    assert "outside the space's ranges: training.lr 0.003 (float in [1e-06, 0.001] (log))" in capsys.readouterr().err


@pytest.mark.parametrize("space_name", ["main-job-space.json", "main-job-full-space.json"])
def test_the_main_job_run_is_a_point_of_the_full_budget_space_only(space_name, tmp_path):
    from tasks.search.record import read_recorded
    run_dir = tmp_path / "main-job-run"
    run_dir.mkdir()
    settings = json.loads((ROOT / "tasks" / "multitask" / "main-job.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({"command": "multitask", "settings": settings,
                                                  "result": {"dev_overall": 0.75}}))
    space = load_space(ROOT / "tasks" / "search" / space_name)
    if space_name == "main-job-space.json":
        with pytest.raises(ConfigurationError, match="training.max_train_examples is None, the space's 2500"):
            read_recorded(space, run_dir)
    else:
        params, value, epochs, _, metric, seconds = read_recorded(space, run_dir)
        assert params == {"training.lr": 5e-5, "recipe.layer_decay": 1.0, "recipe.head_lr_scale": 1.0,
                          "recipe.warmup_ratio": 0.1, "training.weight_decay": 0.0, "design.sts_head_bias": 2.5,
                          "training.batch_size": 16}
        assert (value, epochs, metric, seconds) == (0.75, {}, "overall", None)


def test_a_recorded_run_reads_its_whole_curves_lines_and_one_that_left_a_searched_setting_unset_is_one_line(tmp_path,
                                                                                                        capsys):
    from tasks.search.record import read_recorded
    run_dir = tmp_path / "main-job-run"
    run_dir.mkdir()
    settings = json.loads((ROOT / "tasks" / "multitask" / "main-job.json").read_text())
    record = {"command": "multitask", "settings": settings, "result": {"dev_overall": 0.75}}
    (run_dir / "run.json").write_text(json.dumps(record))
    epochs = [{"kind": "epoch", "epoch": e, "train_loss": 1.0, "dev_overall": v} for e, v in ((1, 0.7), (2, 0.75))]
    (run_dir / "checkpoint.curves.jsonl").write_text("".join(json.dumps(x) + "\n" for x in epochs)
                                                     + '{"kind": "step", "step": 9, "ep')    # a torn last append
    space_path = ROOT / "tasks" / "search" / "main-job-full-space.json"
    assert read_recorded(load_space(space_path), run_dir)[2] == {1: 0.7, 2: 0.75}
    assert "checkpoint.curves.jsonl:3: the last line is cut short" in capsys.readouterr().err
    record["settings"]["training"]["lr"] = None                     # the run took its fine-tune mode's own lr
    (run_dir / "run.json").write_text(json.dumps(record))
    assert run_cli(lambda: search.main(["--space", str(space_path), "--study-dir", str(tmp_path / "s"), "--trials", "0",
                                        "--record", str(run_dir)])) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: --record {run_dir}: the run left training.lr at its default "
                                               "(null) while the space samples it"), err


def test_a_value_holds_only_where_optuna_would_take_it():
    """Param.holds stands in for Optuna's containment check before a recorded trial is made: the same grid
    tolerance, so a hand-typed value just off the grid is refused in one line, not by Optuna's traceback."""
    optuna = pytest.importorskip("optuna")
    grid = Param("training.epochs", low=0, high=1000, step=1.0)
    dist = optuna.distributions.FloatDistribution(0, 1000, step=1.0)
    for value in (500.0, 500.000001, 500 + 5e-9, 0.0, 1000.0, 999.99999999):
        assert grid.holds(value) == dist._contains(dist.to_internal_repr(value)), value
