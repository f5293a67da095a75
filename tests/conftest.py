"""Shared fixtures: the packaged offline MiniLM (loaded once per session) and a tiny random BERT; the user the
tests grade submissions as."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import warm

import minbert

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
DATA = ROOT / "data"
# The device the CLI tests train on: cpu here and in CI; MINBERT_TEST_DEVICE=cuda runs the same tests on a GPU.
TEST_DEVICE = os.environ.get("MINBERT_TEST_DEVICE", "cpu")

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The grader draws its hidden inputs from this seed when a test gives none, so that a failing grading reproduces
# (test_grading_hidden.py grades under other seeds on purpose); a process draws each fixture once for it.
os.environ.setdefault("MINBERT_GRADING_SEED", "20261126")
# MINBERT_COLD_TESTS=1 (tests/warm.py: every command cold) starts the grader's checker cold too (assignments/warmstart.py).
if os.environ.get("MINBERT_COLD_TESTS"):
    os.environ.setdefault("MINBERT_COLD_START", "1")
# Under pytest-xdist each worker gets its share of the cores (two workers with two threads each on two cores spend
# their time in OpenMP's hand-offs), and so do the processes the tests start (they inherit OMP_NUM_THREADS).
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
_THREADS = max(1, min(2, (os.cpu_count() or 1) // _WORKERS))
if _WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(_THREADS))
torch.set_num_threads(_THREADS)


@functools.cache
def grading_user() -> str:
    """The --as-user the tests grade with: as root, nobody where it can run this Python, else "none"."""
    import warnings

    from assignments.untrusted import CannotRun, student_account
    try:
        return "nobody" if student_account("auto") is not None else "none"
    except CannotRun:                    # nobody cannot run this Python (a venv it cannot read): as the grader's user
        return "none"
    except ValueError as e:              # nobody could read the reference: said, not silent
        warnings.warn(f"grading tests run the submissions' code as this user, not nobody: {e}", stacklevel=2)
        return "none"


@pytest.fixture(scope="session", autouse=True)
def session_runs_in_tmp(tmp_path_factory) -> Iterator[Path]:
    """The same for runs made by module- and session-scoped fixtures, which start before runs_in_tmp applies."""
    saved, runs = os.environ.get("MINBERT_RUNS"), tmp_path_factory.mktemp("session-runs")
    os.environ["MINBERT_RUNS"] = str(runs)
    yield runs
    if saved is None:
        os.environ.pop("MINBERT_RUNS", None)
    else:
        os.environ["MINBERT_RUNS"] = saved


@pytest.fixture(autouse=True)
def runs_in_tmp(tmp_path, monkeypatch) -> Path:
    """Run directories a test does not name go under its own tmp_path, never into the repository's runs/."""
    monkeypatch.setenv("MINBERT_RUNS", str(tmp_path / "runs"))
    return tmp_path / "runs"


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The packaged checkpoint's directory (config.json, vocab.txt, model.safetensors)."""
    return minbert.checkpoint.resolve("minilm")


@pytest.fixture(scope="session")
def minilm() -> minbert.BertModel:
    """The offline MiniLM in eval mode; tests must not modify it (copy.deepcopy it first)."""
    return minbert.load_pretrained("minilm")


@pytest.fixture(scope="session")
def tokenizer() -> minbert.Tokenizer:
    return minbert.Tokenizer.from_pretrained("minilm")


@pytest.fixture
def tiny_config() -> minbert.BertConfig:
    """A 2-layer, hidden-32 BERT with the real vocabulary size: fast enough for any unit test."""
    return minbert.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                              intermediate_size=64, max_position_embeddings=128)


@pytest.fixture
def tiny_dir(tmp_path, tiny_config, minilm_dir) -> Path:
    """The tiny random BERT saved as a checkpoint directory, with MiniLM's vocabulary (for CLI runs)."""
    torch.manual_seed(0)
    directory = tmp_path / "tiny"
    minbert.save_pretrained(minbert.BertModel(tiny_config), directory)
    (directory / "vocab.txt").write_bytes((minilm_dir / "vocab.txt").read_bytes())
    return directory


@pytest.fixture
def tiny_dir_without_dropout(tmp_path, tiny_config, minilm_dir) -> Path:
    """tiny_dir with its dropout off (for comparing runs whose dropout masks would have different shapes)."""
    torch.manual_seed(0)
    directory = tmp_path / "tiny-no-dropout"
    config = dataclasses.replace(tiny_config, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    minbert.save_pretrained(minbert.BertModel(config), directory)
    (directory / "vocab.txt").write_bytes((minilm_dir / "vocab.txt").read_bytes())
    return directory


def kill_after(first: int = 1):
    """A watcher (tasks.core.train.watching) that raises Interrupted once epoch `first` is checkpointed."""
    from tasks.core.train import Interrupted

    def kill(epoch: int, record: dict, *_) -> None:
        if epoch == first:
            raise Interrupted(f"killed after epoch {first}")
    return kill


def killed_after_first_epoch(real_fit):
    """fit() that raises Interrupted once its first epoch (or round) is checkpointed: a run killed there."""
    from tasks.core.train import watching

    def fit(*args, **kwargs):
        with watching(kill_after(1)):
            return real_fit(*args, **kwargs)
    return fit


def fit_with(model, optimizer, batches, loss, evaluate, *, metric: str, post_step=None, terms=None, **keywords):
    """tasks.core.train.fit from keywords, as the tests write it: Recipe's loop fields (precision, warmup_ratio, ...)
    and earlier_epochs make the recipe, the rest (epochs, device, checkpoint, ...) the FitOptions."""
    from tasks.core.recipe import LOOP_FIELDS, Recipe
    from tasks.core.train import FitOptions, Work, fit
    recipe = Recipe(**{k: keywords.pop(k) for k in (*LOOP_FIELDS, "earlier_epochs") if k in keywords})
    return fit(Work(model, optimizer, batches, loss, evaluate, metric, post_step), recipe, FitOptions(**keywords),
               terms)


@pytest.fixture
def one_thread():
    """Tiny tensors gain nothing from a second intra-op thread, and on a busy machine its hand-offs cost seconds."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def multitask_files(tmp_path):
    """Small slices of the real files, per task (train, dev, test); the test slices keep their labels, so they are
    scored too."""
    def piece(name, start, stop):
        lines = (DATA / name).read_text(encoding="utf-8").splitlines(keepends=True)
        path = tmp_path / f"{start}-{name}"
        path.write_text(lines[0] + "".join(lines[1 + start:1 + stop]), encoding="utf-8")
        return str(path)
    return {"sst": (piece("ids-sst-train.csv", 0, 40), piece("ids-sst-dev.csv", 0, 24), piece("ids-sst-dev.csv", 24, 40)),
            "para": (piece("quora-train.csv", 0, 48), piece("quora-dev.csv", 0, 24), piece("quora-test-student.csv", 0, 20)),
            "sts": (piece("sts-train.csv", 0, 32), piece("sts-dev.csv", 0, 24), piece("sts-dev.csv", 24, 40))}


# Commands run the way `python -m tasks.NAME ARGS` runs them (runpy, as __main__), one after another in one
# interpreter (warm.run's, forked from one that has imported torch): one start instead of one per command. Tests that use it also run one command as a real
# `python -m`.
_EACH_AS_MAIN = """
import contextlib, io, json, runpy, sys
said, with_stderr = {}, sys.argv[2] == "stderr"
for name, args in json.loads(sys.argv[1]):
    module = "tasks." + name.split("#")[0]
    sys.argv, out, err = [module, *args], io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err if with_stderr else sys.stderr):
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = "returned without exiting"
    except SystemExit as stop:
        code = stop.code or 0
    said[name] = [code, out.getvalue()] + ([err.getvalue()] if with_stderr else [])
print(json.dumps(said))
"""


def each_as_main(commands: dict[str, list[str]], cwd: Path, env: dict[str, str],
                 stderr: bool = False) -> dict[str, tuple]:
    """{command: its arguments} run as `python -m tasks.NAME ARGS` in one interpreter: {command: (exit code, stdout)},
    or with stderr (exit code, stdout, stderr); a key NAME#LABEL runs tasks.NAME too (one command twice)."""
    proc = warm.run([sys.executable, "-W", "ignore::RuntimeWarning", "-c", _EACH_AS_MAIN,
                     json.dumps(list(commands.items())), "stderr" if stderr else "-"], cwd=cwd,
                    capture_output=True, text=True, timeout=300, check=False, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = json.loads(proc.stdout.splitlines()[-1])
    assert list(said) == list(commands), proc.stderr[-2000:]
    return {name: tuple(result) for name, result in said.items()}


@pytest.fixture(scope="session")
def trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A student tree of each profile (assignments.make, no data, a course URL), made once: tests that change one copy
    it first (test_kit_profiles.py, test_kit_handout.py)."""
    from assignments.make import generate
    from assignments.profiles import PROFILES
    base = tmp_path_factory.mktemp("profiles")
    out = {}
    for name in PROFILES:
        generate(base / name, data=False, profile=name, course_url="https://example.org/course/minbert.git")
        out[name] = base / name
    return out
