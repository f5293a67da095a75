"""`python ARGS` for the tests, forked from a warm interpreter instead of started cold: run() is subprocess.run.

A fresh `python -m tasks.X` spends about 3 s of its first seconds importing torch, and the tests start over a hundred.
run() asks a helper interpreter, one per pytest process, that has imported torch and nothing else (no minbert, no
tree's code, no computation: no thread pool exists yet when it forks) to fork a child that then does what `python
ARGS` does: the cwd, the environment, sys.path (the cwd, or the script's folder, then PYTHONPATH, then the standard
paths), sys.argv, `-m`, `-c` or a script run as __main__, stdin from /dev/null, stdout and stderr into files, the
intra-op threads from OMP_NUM_THREADS, torch's generator seeded afresh, the exit code (SystemExit, a traceback's 1, or minus the signal that killed it).
So any tree's code runs in it, a student tree's included. What differs from a cold start: torch is imported before
the child sets its environment (torch reads none of the variables the tests set), and the child shares the helper's
hash seed. Tests whose point is a fresh process (what a command imports, `python -m` itself) use subprocess.
Arguments run() does not know (other interpreter flags, pipes, stdin input) go to subprocess.run unchanged.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# The helper: reads one request a line on stdin, forks, answers {"pid"} then {"status"} when the child has ended.
_HELPER = r'''
import json, os, sys
import torch
DEFAULT_THREADS = torch.get_num_threads()        # what a cold start without OMP_NUM_THREADS gets
BASE = sys.path[1:]                              # sys.path less the helper's own '' (it has no PYTHONPATH)
answers = os.fdopen(int(sys.argv[1]), "w", buffering=1)


def child(req):
    import builtins, importlib, io, runpy, signal, threading, traceback, types, warnings, atexit
    code = 1
    try:
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        ctype = os.environ.get("LC_ALL") or os.environ.get("LC_CTYPE") or os.environ.get("LANG") or "C"
        if ctype in ("C", "POSIX") and os.environ.get("PYTHONCOERCECLOCALE") != "0":
            os.environ["LC_CTYPE"] = "C.UTF-8"       # PEP 538: a cold start in the C locale sets it for its children
        if req["new_session"]:
            os.setsid()
        for fd, (path, flags) in enumerate(((os.devnull, os.O_RDONLY), (req["stdout"], os.O_WRONLY),
                                            (req["stderr"], os.O_WRONLY))):
            os.dup2(os.open(path, flags), fd)
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", write_through=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", write_through=True,
                                      errors="backslashreplace")
        for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGALRM):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        torch.set_num_threads(int(req["env"].get("OMP_NUM_THREADS") or DEFAULT_THREADS))
        torch.seed()                                 # a cold start's generators start from seeds of their own
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        pythonpath = [p for p in req["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        kind, target, args = req["kind"], req["target"], req["args"]
        first = {"m": os.getcwd(), "c": "", "script": os.path.dirname(os.path.abspath(target))}[kind]
        sys.path[:] = [first, *pythonpath, *BASE]
        sys.path_importer_cache.clear()
        importlib.invalidate_caches()
        sys.warnoptions[:] = req["warnings"]
        for option in req["warnings"]:
            warnings._setoption(option)
        main = types.ModuleType("__main__")      # a fresh __main__, as a cold start has
        main.__annotations__ = {}
        main.__builtins__ = builtins
        sys.modules["__main__"] = main
        try:
            if kind == "m":                          # what `python -m` calls, so a traceback shows the same frames
                sys.argv = ["-m", *args]
                runpy._run_module_as_main(target)
            else:
                sys.argv = ["-c" if kind == "c" else target, *args]
                if kind == "script":
                    main.__file__ = os.path.abspath(target)
                    with open(target, "rb") as f:
                        source = f.read()
                exec(compile(target if kind == "c" else source, "<string>" if kind == "c" else main.__file__, "exec"),
                     main.__dict__)
            code = 0
        except SystemExit as stop:
            if stop.code is None or isinstance(stop.code, int):
                code = stop.code or 0
            else:
                print(stop.code, file=sys.stderr)
        except BaseException as e:                   # the traceback from the command's first frame, not child()'s
            traceback.print_exception(type(e), e, e.__traceback__.tb_next)
        threading._shutdown()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        answers.close()
        child(req)
    answers.write(json.dumps({"pid": pid}) + "\n")
    _, status = os.waitpid(pid, 0)
    answers.write(json.dumps({"status": os.waitstatus_to_exitcode(status)}) + "\n")
'''

_KNOWN = {"args", "cwd", "env", "capture_output", "text", "timeout", "check", "encoding", "start_new_session"}


class _Helper:
    """The warm interpreter of this pytest process: started at the first run(), ended with the process."""

    def __init__(self) -> None:
        read, write = os.pipe()
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OMP_NUM_THREADS")}
        self.proc = subprocess.Popen([sys.executable, "-c", _HELPER, str(write)], stdin=subprocess.PIPE, text=True,
                                     cwd="/", env=env, pass_fds=(write,))
        os.close(write)
        self.answers = os.fdopen(read, "r")
        atexit.register(self.close)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)

    def answer(self, deadline: float | None) -> dict:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not select.select([self.answers], [], [], left)[0]:
            raise TimeoutError
        line = self.answers.readline()
        if not line:
            raise RuntimeError(f"the tests' warm interpreter ended (exit {self.proc.wait()})")
        return json.loads(line)


_helper: _Helper | None = None
_one_at_a_time = threading.Lock()            # the helper answers one request at a time


def _parse(argv: list[str]) -> tuple[str, str, list[str], list[str]] | None:
    """(kind, module, code or script, its arguments, -W options) of `python ARGS`, or None for what run() leaves."""
    i, warnings = 1, []
    while i < len(argv):
        a = argv[i]
        if a == "-u":
            i += 1
        elif a == "-W" and i + 1 < len(argv):
            warnings.append(argv[i + 1])
            i += 2
        elif a in ("-m", "-c") and i + 1 < len(argv):
            return a[1], argv[i + 1], argv[i + 2:], warnings
        elif a.startswith("-"):
            return None
        else:
            return "script", a, argv[i + 1:], warnings
    return None


def run(args: list[str], **kw) -> subprocess.CompletedProcess:
    """subprocess.run(args, **kw) for `[sys.executable, ...]`, forked from the warm interpreter (module docstring)."""
    parsed = _parse([str(a) for a in args]) if args and str(args[0]) == sys.executable else None
    if parsed is None or set(kw) - _KNOWN or os.environ.get("MINBERT_COLD_TESTS"):
        check = kw.pop("check", False)
        return subprocess.run(args, check=check, **kw)
    with _one_at_a_time:
        return _run_warm(args, parsed, kw)


def _run_warm(args: list[str], parsed: tuple, kw: dict) -> subprocess.CompletedProcess:
    global _helper
    kind, target, rest, warnings = parsed
    if _helper is None or _helper.proc.poll() is not None:
        _helper = _Helper()
    text = kw.get("text") or kw.get("encoding") is not None
    timeout = kw.get("timeout")
    env = {str(k): str(v) for k, v in (os.environ if kw.get("env") is None else kw["env"]).items()}
    with tempfile.TemporaryDirectory(prefix="warm-") as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        out.touch(), err.touch()
        request = {"kind": kind, "target": target, "args": rest, "warnings": warnings, "env": env,
                   "cwd": str(Path(kw.get("cwd") or os.getcwd()).resolve()), "stdout": str(out), "stderr": str(err),
                   "new_session": bool(kw.get("start_new_session"))}
        _helper.proc.stdin.write(json.dumps(request) + "\n")
        _helper.proc.stdin.flush()
        pid = _helper.answer(None)["pid"]
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            code = _helper.answer(deadline)["status"]
        except TimeoutError:
            try:
                os.killpg(pid, signal.SIGKILL) if kw.get("start_new_session") else os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _helper.answer(None)
            raise subprocess.TimeoutExpired(args, timeout, out.read_bytes(), err.read_bytes()) from None
        stdout, stderr = out.read_bytes(), err.read_bytes()
    if text:
        stdout, stderr = stdout.decode(kw.get("encoding") or "utf-8"), stderr.decode(kw.get("encoding") or "utf-8")
    done = subprocess.CompletedProcess(args, code, stdout if kw.get("capture_output") else None,
                                       stderr if kw.get("capture_output") else None)
    if kw.get("check"):
        done.check_returncode()
    return done
