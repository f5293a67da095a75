"""notebooks/minbert.ipynb runs top to bottom (nbclient, the venv's own kernel): on the tiny random BERT, a few rows
of each data file and the CPU, with everything it writes under tmp_path. Any failing cell fails the test. Then, in a
fresh kernel as after a Colab disconnect, the cells and the line section 5 says to run continue the same run, and
sections 6 and 7 run after it. The commands both notebooks print are ones a shell splits back into the arguments run
(assignments/tree_files' too); run() stops a cell with one line, and the stop button reaches its command."""

from __future__ import annotations

import ast
import json
import os
import queue
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat  # test dependencies (requirements-test.txt, installed by make test): never skipped
import pytest
from conftest import ROOT
from nbclient import NotebookClient

NOTEBOOK = ROOT / "notebooks" / "minbert.ipynb"
TREE_NOTEBOOK = ROOT / "assignments" / "tree_files" / "minbert.ipynb"


def cell(nb: nbformat.NotebookNode, cell_id: str) -> nbformat.NotebookNode:
    found = [c for c in nb.cells if c.get("id") == cell_id]
    assert found, f"no cell with id {cell_id!r}"
    return found[0]


def text(c: nbformat.NotebookNode) -> str:
    """A code cell's printed output and error, as one string."""
    parts = [o.get("text", "") for o in c.outputs if o.output_type == "stream"]
    parts += [f"{o.ename}: {o.evalue}" for o in c.outputs if o.output_type == "error"]
    return "".join(parts)


def execute(nb: nbformat.NotebookNode, tmp_path: Path, monkeypatch, cwd: Path = NOTEBOOK.parent,
            allow_errors: bool = False) -> None:
    """Run nb in a new kernel of this interpreter (the venv's), whatever kernels the user has installed: a spec of
    our own, found first through JUPYTER_PATH; the notebook's directory (cwd) is its working directory, as Jupyter
    starts it. Raises CellExecutionError, naming the cell, if any cell fails (unless allow_errors)."""
    spec = tmp_path / "jupyter" / "kernels" / "minbert-test"
    if not spec.is_dir():
        spec.mkdir(parents=True)
        (spec / "kernel.json").write_text(json.dumps({
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "minbert (tests)", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    NotebookClient(nb, kernel_name="minbert-test", timeout=120, startup_timeout=60, allow_errors=allow_errors,
                   resources={"metadata": {"path": str(cwd)}}).execute()


def resume_code(nb: nbformat.NotebookNode) -> str:
    """The code section 5's text says to run after a disconnect: its fenced python block (or inline code) with
    --resume."""
    md = cell(nb, "train-md").source
    blocks = re.findall(r"```python\n(.*?)```", md, re.DOTALL) or re.findall(r"`([^`\n]*run\([^`\n]*)`", md)
    code = [b for b in blocks if "--resume" in b]
    assert len(code) == 1, f"section 5 should give one resume instruction: {code}"
    return code[0]


def printed_commands(nb: nbformat.NotebookNode) -> list[str]:
    return [line for c in nb.cells if c.cell_type == "code" for line in text(c).splitlines()
            if line.startswith("$ python")]


def test_notebook_is_committed_without_outputs():
    """Outputs would make every diff unreadable and carry one machine's paths; Colab and the test start clean."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in nb.cells if c.cell_type == "code")


def test_settings_say_what_the_checker_checks():
    """With no argument assignments.check checks the first group not complete yet; `all` checks every group."""
    settings = cell(nbformat.read(NOTEBOOK, as_version=4), "settings").source
    assert "checks every part" not in settings
    assert '["all"] checks every group' in settings and "[] the first group not complete yet" in settings


def test_notebook_runs_top_to_bottom_and_resumes_in_a_fresh_kernel(tmp_path, tiny_dir, monkeypatch):
    out = tmp_path / "notebook"
    monkeypatch.setenv("MINBERT_NOTEBOOK_MODEL", str(tiny_dir))
    monkeypatch.setenv("MINBERT_NOTEBOOK_TRAIN", "24")
    monkeypatch.setenv("MINBERT_NOTEBOOK_ROWS", "32")
    monkeypatch.setenv("MINBERT_NOTEBOOK_DEVICE", "cpu")
    monkeypatch.setenv("MINBERT_NOTEBOOK_OUT", str(out))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")           # the kernel and its commands: tiny tensors, a busy machine

    nb = nbformat.read(NOTEBOOK, as_version=4)
    execute(nb, tmp_path, monkeypatch)

    assert f"Python {sys.executable}\n" in text(cell(nb, "common-setup"))
    assert "part 1 (minBERT): 6/6 parts pass; 100/100 points" in text(cell(nb, "check"))
    assert "cosine" in text(cell(nb, "first-use"))
    assert "out  = gLN2 * norm(h5 + h3) + bLN2" in text(cell(nb, "one-layer"))   # the cell asserts its own sum
    runs = list(out.glob("run-*"))
    assert len(runs) == 1
    run = runs[0]
    for name in ("run.json", "checkpoint.pt", "checkpoint.curves.jsonl", "checkpoint.curves.png"):
        assert (run / name).is_file(), name
    assert len(list((run / "predictions").glob("*-output.csv"))) == 6
    assert (out / "submission.zip").is_file()
    assert any(o.output_type == "display_data" and "image/png" in o.data for o in cell(nb, "curves").outputs)
    assert (out / "attention.png").is_file()
    assert any(o.output_type == "display_data" and "image/png" in o.data for o in cell(nb, "attention").outputs)

    # every printed command is one line a shell splits back into the arguments given (the sentence is one)
    commands = printed_commands(nb)
    assert len(commands) == 5, commands
    attention = next(shlex.split(c) for c in commands if "tasks.attention" in c)
    assert attention[attention.index("--text") + 1] == "The cat sat on the mat because it was tired."

    # after a disconnect: a fresh kernel, the cells section 5 names, then its resume line as written
    again = nbformat.v4.new_notebook(metadata=nb.metadata)
    for cell_id in ("settings", "colab-setup", "local-setup", "common-setup", "data"):
        again.cells.append(nbformat.v4.new_code_cell(cell(nb, cell_id).source))
    again.cells.append(nbformat.v4.new_code_cell(resume_code(nb) + "\nprint('RUN_DIR =', RUN_DIR)"))
    for cell_id in ("predict", "curves"):                  # "and go on from section 6"
        again.cells.append(nbformat.v4.new_code_cell(cell(nb, cell_id).source))
    (out / "submission.zip").unlink()
    execute(again, tmp_path, monkeypatch)
    resumed = text(again.cells[-3])
    assert f"--resume {run}" in resumed and f"RUN_DIR = {run}\n" in resumed, resumed
    assert re.search(r"resumed .* 1 epochs? done", resumed), resumed
    assert list(out.glob("run-*")) == [run]
    assert (out / "submission.zip").is_file(), text(again.cells[-2])
    assert any(o.output_type == "display_data" and "image/png" in o.data for o in again.cells[-1].outputs)


def run_source(notebook: Path, cell_ids: str | tuple[str, ...]) -> str:
    """The notebook's run() with the imports and classes of its cells (their other lines left out)."""
    nb = nbformat.read(notebook, as_version=4)
    keep = []
    for cell_id in (cell_ids,) if isinstance(cell_ids, str) else cell_ids:
        keep += [n for n in ast.parse(cell(nb, cell_id).source).body
                 if isinstance(n, ast.Import | ast.ImportFrom | ast.ClassDef)
                 or (isinstance(n, ast.FunctionDef) and n.name == "run")]
    return "import os, subprocess, sys\n" + ast.unparse(ast.Module(keep, type_ignores=[]))


def run_function(notebook: Path, cell_id: str):
    """The notebook's run() alone (run_source), defined in this process."""
    namespace: dict = {}
    exec(run_source(notebook, cell_id), namespace)  # noqa: S102 (the notebook's own)
    return namespace["run"]


@pytest.mark.parametrize(("notebook", "cell_id", "prefix"), [(NOTEBOOK, "common-setup", ()),
                                                             (TREE_NOTEBOOK, ("setup", "run"), ("-m",))])
def test_printed_command_is_the_one_run(notebook, cell_id, prefix, tmp_path, monkeypatch, capfd):
    """run() prints `$ python ...` quoted as a shell reads it: pasted in a terminal, the line gives the command the
    same arguments (spaces, quotes, a path with a space) as the notebook did."""
    (tmp_path / "echo_args.py").write_text("import json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    args = ("The cat sat on the mat.", "it's", "--out", tmp_path / "a dir" / "x.png", 3, "$HOME", "a;b")
    run_function(notebook, cell_id)(*prefix, "echo_args", *args)
    printed, got = capfd.readouterr().out.splitlines()[:2]
    assert printed.startswith("$ python -m echo_args ")
    assert shlex.split(printed)[1:] == ["python", "-m", "echo_args", *json.loads(got)]
    assert json.loads(got) == [str(a) for a in args]


BAR = """import os, sys
print("TQDM_MININTERVAL", os.environ.get("TQDM_MININTERVAL"), flush=True)
for i in range(50):
    sys.stderr.write(f"\\rstep {i}")
    sys.stderr.flush()
sys.stderr.write("\\rdone\\n")
"""


@pytest.mark.parametrize(("notebook", "cell_id", "prefix"), [(NOTEBOOK, "common-setup", ()),
                                                             (TREE_NOTEBOOK, ("setup", "run"), ("-m",))])
def test_a_progress_bars_redraws_stay_on_its_line(notebook, cell_id, prefix, tmp_path, monkeypatch, capfd):
    """run() passes a redraw (`\\r`) on as one, which the notebook draws over the line before, as a terminal does: a
    bar redrawn 50 times is one line on screen, not 50 (universal newlines made each a line of its own). The command's
    bars redraw every second (TQDM_MININTERVAL 1; off a terminal tasks.core.progress would wait 30 s)."""
    (tmp_path / "bar.py").write_text(BAR)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.delenv("TQDM_MININTERVAL", raising=False)
    run_function(notebook, cell_id)(*prefix, "bar")
    out = capfd.readouterr().out
    screen = [line.rsplit("\r", 1)[-1] for line in out.split("\n")]      # what a notebook (or a terminal) shows
    assert screen[1:] == ["TQDM_MININTERVAL 1", "done", ""], out
    assert out.count("\r") == 51


# run() in a process of its own, as in a kernel: IPython's one-line rendering of an exception stands in for the cell's
# (each of several calls in turn, as cells one after another)
HARNESS = """import json, sys
namespace = {}
exec(sys.argv[1], namespace)
for args in json.loads(sys.argv[2]):
    try:
        value = namespace["run"](*args)
        print("RETURNED", repr(value), flush=True)
    except BaseException as e:
        render = getattr(e, "_render_traceback_", None)
        print("CELL STOPS:", render() if render else f"TRACEBACK {type(e).__name__}: {e}", flush=True)
"""


def alive_with(marker: str) -> list[str]:
    """The command lines of the live processes whose command line holds marker (a zombie has none)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline and "HARNESS" not in cmdline and proc.name.isdigit() and int(proc.name) != os.getpid():
            found.append(f"{proc.name}: {cmdline}")
    return found


def without_torch(source: str) -> str:
    """run_source's code without `import torch` where nothing else in it names torch: the cell imports it for the
    cells after it, and the harness would spend about 1.3 s of CPU a start on it."""
    tree = ast.parse(source)
    rest = [n for n in tree.body if not (isinstance(n, ast.Import) and [a.name for a in n.names] == ["torch"])]
    if any(isinstance(n, ast.Name) and n.id == "torch" for node in rest for n in ast.walk(node)):
        return source
    return ast.unparse(ast.Module(rest, type_ignores=[]))


def harness(notebook: Path, cell_id: str, calls: list[list[str]], tmp_path: Path) -> subprocess.Popen:
    """A process that defines the notebook's run() and calls it with each of calls' arguments in turn."""
    script = tmp_path / "harness.py"
    script.write_text(HARNESS)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    code = without_torch(run_source(notebook, cell_id))
    return subprocess.Popen([sys.executable, str(script), code, json.dumps(calls)], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)    # its own process group: the test's signals reach it alone


def read_until(process: subprocess.Popen, wanted: str, seconds: float) -> list[str]:
    """process's lines up to the first holding wanted (a thread reads, so that a silent process cannot hang the test)."""
    lines: queue.Queue = queue.Queue()

    def reader() -> None:
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=reader, daemon=True).start()
    got, deadline = [], time.monotonic() + seconds
    while True:
        line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        assert line is not None, "".join(got)
        got.append(line)
        if wanted in line:
            process._lines = lines      # the rest, for rest_of()
            return got


def rest_of(process: subprocess.Popen, seconds: float) -> list[str]:
    got = []
    while (line := process._lines.get(timeout=seconds)) is not None:
        got.append(line)
    return got


STOPPED = "CELL STOPS: ['interrupted: the command stopped (its last line above says how to go on)']\n"
KILLED = "CELL STOPS: ['interrupted twice: the command was killed (a run with a checkpoint goes on with --resume)']\n"


def interrupt_handling(notebook: Path, cell_id: str | tuple[str, ...]) -> str:
    """run()'s statements from its line queue to its wait, which handle the stop button (run_source's run)."""
    body = next(n for n in ast.parse(run_source(notebook, cell_id)).body
                if isinstance(n, ast.FunctionDef) and n.name == "run").body
    first = next(i for i, n in enumerate(body) if "queue.Queue()" in ast.unparse(n))
    last = next(i for i, n in enumerate(body) if isinstance(n, ast.Try))
    return ast.unparse(ast.Module(body[first:last + 1], type_ignores=[]))


def test_both_notebooks_handle_the_stop_button_with_the_same_code():
    """The tree's notebook handles an interrupt with the reference notebook's lines (their run() differ in how they
    build the command and word a failure), so the interrupt test's every case runs on the reference notebook and one
    on the tree's: change both notebooks together."""
    reference = interrupt_handling(NOTEBOOK, "common-setup")
    assert "KeyboardInterrupt" in reference and "process.kill()" in reference and "SIGINT" in reference
    assert interrupt_handling(TREE_NOTEBOOK, ("setup", "run")) == reference


@pytest.mark.parametrize(("notebook", "cell_id", "prefix", "to_group", "presses"), [
    *[(NOTEBOOK, "common-setup", (), to_group, presses) for to_group in (True, False) for presses in (1, 2)],
    (TREE_NOTEBOOK, ("setup", "run"), ("-m",), False, 1)],          # Colab's press, in the tree's notebook
    ids=["process-group-once", "process-group-twice", "kernel-only-once", "kernel-only-twice", "tree-kernel-only-once"])
def test_interrupting_run_shows_the_commands_restart_line_and_leaves_nothing_running(
        notebook, cell_id, prefix, to_group, presses, tmp_path, tiny_dir):
    """The stop button while run() trains: Jupyter's interrupt reaches the kernel's whole process group, Colab's (and
    others') the kernel alone. Either way the training command gets one Ctrl-C, its own last line (how to start the
    run again) is shown, it has exited when the cell stops, and the cell stops with one line, no traceback.

    Pressed twice (0.3 s apart), while run() waits for the command to stop: no traceback either, and no line of the
    command's is lost. In Jupyter the command had both presses itself and said how to go on; where the kernel alone
    has them the command is killed, and the cell says so."""
    run_dir = tmp_path / "interrupted-run"
    args = [*prefix, "tasks.classifier", "--model", str(tiny_dir), "--max-train-examples", "8000", "--epochs", "50",
            "--batch-size", "2", "--device", "cpu", "--run-dir", str(run_dir), "--predictions-dir",
            str(tmp_path / "predictions"), "--no-progress"]
    process = harness(notebook, cell_id, [args], tmp_path)
    try:
        before = read_until(process, "learning rate:", 120)        # training has started
        time.sleep(0.5)
        for press in range(presses):
            time.sleep(0.3 * press)
            (os.killpg if to_group else os.kill)(process.pid, signal.SIGINT)
        after = rest_of(process, 60)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    output = "".join(before + after)
    if presses == 2 and not to_group:
        assert after[-1] == KILLED and "interrupted (Ctrl-C)" not in output, output
    else:
        assert "interrupted (Ctrl-C)" in output and f"--run-dir {run_dir}" in output, output
        assert after[-1] in (STOPPED, KILLED) if presses == 2 else after[-1] == STOPPED, output
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output
    assert alive_with(str(run_dir)) == []


@pytest.mark.parametrize(("notebook", "cell_id", "prefix"), [(NOTEBOOK, "common-setup", ()),
                                                             (TREE_NOTEBOOK, ("setup", "run"), ("-m",))])
def test_a_failed_command_stops_the_cell_with_one_line_and_run_returns_nothing(notebook, cell_id, prefix, tmp_path):
    """A failing command: its own output, then one line of the notebook's (IPython's _render_traceback_), no
    traceback into run(); a command that succeeds gives run() nothing to return, so no Out[] line is shown. (Both
    calls in one process, one after the other as two cells.)"""
    process = harness(notebook, cell_id, [[*prefix, "tasks.classifier", "--epochs", "-1"],
                                          [*prefix, "tasks.classifier", "--help"]], tmp_path)
    both = process.communicate(timeout=240)[0]
    stop = both.index("CELL STOPS:") if "CELL STOPS:" in both else len(both)
    output, second = both[:both.find("\n", stop) + 1], both[both.find("\n", stop) + 1:]
    assert re.search(r"^CELL STOPS: \['python (-m )?tasks.classifier .*fail.*exit code \d.*'\]$", output, re.MULTILINE), both
    assert "TRACEBACK" not in output
    assert "CELL STOPS" not in second and second.endswith("RETURNED None\n"), both
