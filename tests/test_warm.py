"""tests/warm.py: run() answers as subprocess.run does, for the commands the tests run, run both ways here."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from warm import run

PROBE = """
import os, sys
print(sys.argv, os.getcwd(), os.environ.get("PROBE"), sorted(os.environ))
print([p for p in sys.path if "probe" in p or p in ("", os.getcwd())][:3], sys.modules["__main__"].__name__)
import shadow; print(shadow.WHERE)
print("to stderr", file=sys.stderr)
"""


@pytest.fixture
def probe_dirs(tmp_path: Path) -> tuple[Path, Path]:
    """A cwd and a PYTHONPATH folder, each with a module `shadow` (the one found first tells the path's order), a
    package with a __main__ in the latter and a script in the former."""
    cwd, lib = tmp_path / "probe-cwd", tmp_path / "probe-lib"
    for folder in (cwd, lib):
        folder.mkdir()
        (folder / "shadow.py").write_text(f"WHERE = {folder.name!r}\n")
    (lib / "pkg").mkdir()
    (lib / "pkg" / "__init__.py").write_text("")
    (lib / "pkg" / "__main__.py").write_text(PROBE)
    (cwd / "script.py").write_text(PROBE)
    (cwd / "fails.py").write_text("def f():\n    raise ValueError('in a script')\n\nf()\n")
    (lib / "shadow_fails.py").write_text("import sys\nprint(__name__, __file__ == sys.argv[0], globals().keys())\n"
                                        "raise KeyError('in -m')\n")
    return cwd, lib


KILL = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
CASES = {  # name: (arguments, environment added to the probe's)
    "-c": (["-c", PROBE, "a", "b"], {}),
    "-m package": (["-m", "pkg", "x"], {}),
    "script": (["script.py", "--flag"], {}),
    "-W and -c": (["-W", "ignore::RuntimeWarning", "-c",
                   "import warnings; warnings.warn('w', RuntimeWarning); print(1)"], {}),
    "exit 3": (["-c", "import sys; print('out'); sys.exit(3)"], {}),
    "exit with a message": (["-c", "raise SystemExit('stopped here')"], {}),
    "an exception": (["-c", "print('before'); 1 / 0"], {}),
    "an exception in -m": (["-m", "shadow_fails"], {}),
    "an exception in a script": (["fails.py"], {}),
    "an exception through its own excepthook": (
        ["-c", "import sys; sys.excepthook = lambda t, e, tb: print('hook:', t.__name__, e); 1 / 0"], {}),
    "an uncaught KeyboardInterrupt": (["-c", "raise KeyboardInterrupt"], {}),
    "killed": (["-c", "import os, signal; print('x', flush=True); os.kill(os.getpid(), signal.SIGKILL)"], {}),
    "killed with unflushed output": (["-c", f"print('lost'); import sys; print('kept', file=sys.stderr); {KILL}"], {}),
    "killed, -u": (["-u", "-c", f"print('kept'); {KILL}"], {}),
    "killed, PYTHONUNBUFFERED": (["-c", f"print('kept'); {KILL}"], {"PYTHONUNBUFFERED": "1"}),
    "a child's exit": (["-c", "import os; pid = os.fork()\nif pid == 0: os._exit(0)\nos.waitpid(pid, 0); print('ok')"],
                       {}),
    "carriage returns": (["-c", "import sys; sys.stdout.write('a\\rb\\r\\nc'); sys.stderr.write('10%\\r20%\\r')"], {}),
    "LC_ALL set: no coercion": (["-c", "import os; print(os.environ.get('LC_CTYPE'))"], {"LC_ALL": "C"}),
    "the C locale: coerced": (["-c", "import os, sys; print(os.environ.get('LC_CTYPE'), sys.stdout.encoding)"],
                              {"LANG": "C"}),
    "open descriptors": (["-c", "import os; print(sorted(os.listdir('/proc/self/fd')))"], {}),
    "PYTHONWARNINGS, then -W": (["-W", "default::UserWarning", "-c", ("import sys, warnings; print(sys.warnoptions); "
                                 "warnings.warn('u'); warnings.warn('d', DeprecationWarning)")],
                                {"PYTHONWARNINGS": "error::DeprecationWarning"}),
    "PYTHONDONTWRITEBYTECODE": (["-c", "import sys; print(sys.dont_write_bytecode)"], {"PYTHONDONTWRITEBYTECODE": "1"}),
    "a sitecustomize on PYTHONPATH": (["-c", "print('after')"], {"SITE": "1"}),
}


@pytest.fixture(autouse=True)
def warm_even_if_cold_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests compare warm with cold: MINBERT_COLD_TESTS would compare cold with cold."""
    monkeypatch.delenv("MINBERT_COLD_TESTS", raising=False)


@pytest.mark.parametrize("case", CASES)
def test_run_answers_as_a_cold_python(case: str, probe_dirs: tuple[Path, Path], tmp_path: Path) -> None:
    """The same exit code, stdout and stderr (a traceback's text included) as a cold `python ARGS`."""
    cwd, lib = probe_dirs
    args, extra = CASES[case]
    env = {"PROBE": "yes", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(lib), "OMP_NUM_THREADS": "1", **extra}
    if env.pop("SITE", None):
        site = tmp_path / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text("print('sitecustomize ran')\n")
        env["PYTHONPATH"] = f"{site}{os.pathsep}{lib}"
    argv = [sys.executable, *args]
    cold = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)
    warm = run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert (warm.returncode, warm.stdout, warm.stderr) == (cold.returncode, cold.stdout, cold.stderr)
    failed = {"exit 3": 3, "exit with a message": 1, "an uncaught KeyboardInterrupt": -signal.SIGINT,
              "PYTHONWARNINGS, then -W": 1}
    code = -signal.SIGKILL if case.startswith("killed") else 1 if "exception" in case else failed.get(case, 0)
    assert cold.returncode == code
    said = {"killed with unflushed output": ("", "kept\n"), "carriage returns": ("a\nb\nc", "10%\n20%\n"),
            "a sitecustomize on PYTHONPATH": ("sitecustomize ran\nafter\n", "")}
    assert (cold.stdout, cold.stderr) == said.get(case, (cold.stdout, cold.stderr))   # the case shows what it says


def test_fast_commands_one_after_another_stay_in_step() -> None:
    """Many commands that end at once (both of the helper's answers in the pipe together): each gets its own."""
    for i in range(25):
        done = run([sys.executable, "-c", f"raise SystemExit({i % 7})"], timeout=60, capture_output=True)
        assert done.returncode == i % 7


def test_threads_timeout_check_and_bytes(tmp_path: Path) -> None:
    """OMP_NUM_THREADS sets torch's threads (absent: a cold start's default); a timeout kills and raises as
    subprocess.run does; check=True raises CalledProcessError; without text the output is bytes."""
    code = "import torch; print(torch.get_num_threads())"
    for env in ({"OMP_NUM_THREADS": "1"}, {}):
        cold = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout == cold.stdout
    with pytest.raises(subprocess.TimeoutExpired):
        run([sys.executable, "-c", "import time; time.sleep(60)"], timeout=1, capture_output=True)
    with pytest.raises(subprocess.CalledProcessError):
        run([sys.executable, "-c", "raise SystemExit(2)"], check=True, capture_output=True)
    done = run([sys.executable, "-c", "print('b')"], capture_output=True)
    assert done.stdout == b"b\n" and done.returncode == 0
    assert run([sys.executable, "-c", "print(1)"]).stdout is None         # not captured: as subprocess.run


def test_each_command_starts_from_the_helper_not_from_the_last_command(probe_dirs: tuple[Path, Path]) -> None:
    """What one command imported or changed is gone in the next: each is forked from the helper, which runs none."""
    cwd, _ = probe_dirs
    run([sys.executable, "-c", "import shadow, torch; torch.set_num_threads(1); torch.manual_seed(5)"], cwd=cwd)
    probe = [sys.executable, "-c", ("import random, sys, torch; print('shadow' in sys.modules, torch.initial_seed(), "
             "random.random())")]
    said = [run(probe, cwd=cwd, env={}, capture_output=True, text=True).stdout.split() for _ in range(2)]
    assert [s[0] for s in said] == ["False", "False"]
    assert said[0][1] != said[1][1] and "5" not in (said[0][1], said[1][1])   # a seed of its own, as a cold start
    assert said[0][2] != said[1][2]                                             # Python's random's too
