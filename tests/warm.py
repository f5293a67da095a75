"""`python ARGS` for the tests, forked from a warm interpreter instead of started cold: run() is subprocess.run.

A fresh `python -m tasks.X` spends about 3 s of its first seconds importing torch, and the tests start over a hundred.
run() asks a helper interpreter, one per pytest process, that has imported torch and nothing else (no minbert, no
tree's code, no computation: torch's thread pools do not exist yet when it forks; numpy's BLAS, which torch imports,
starts its own, sized from the helper's environment) to fork a child that then does what `python ARGS` does: the cwd,
the environment (with PEP 538's LC_CTYPE), sys.path (the cwd, or the script's folder, then PYTHONPATH, then the
standard paths), sys.argv, `-m`, `-c` or a script run as a fresh __main__, stdin from /dev/null, stdout
block-buffered and stderr line-buffered into files (-u: unbuffered), the intra-op threads from OMP_NUM_THREADS,
torch's and numpy's generators seeded afresh, the exit code (SystemExit, sys.excepthook's traceback and 1, minus the
signal that killed it, SIGINT's for an uncaught KeyboardInterrupt). So any tree's code runs in it, a student tree's
included. What differs from a cold start: torch is imported before the child sets its environment (torch reads none
of the variables the tests set), and the child shares the helper's hash seed. A PYTHONPATH with a sitecustomize.py
(site runs it before the command), a cwd that is not a folder, other interpreter flags, pipes or stdin input go to
subprocess.run unchanged, as does every command with MINBERT_COLD_TESTS=1; tests whose point is a fresh process (what
a command imports, `python -m` itself) call subprocess themselves.
"""

from __future__ import annotations

import atexit
import io
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
    import atexit, builtins, importlib, io, runpy, signal, threading, types, warnings
    code = 1
    try:
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        ctype = os.environ.get("LC_CTYPE") or os.environ.get("LANG") or "C"
        if ("LC_ALL" not in os.environ and ctype in ("C", "POSIX")
                and os.environ.get("PYTHONCOERCECLOCALE") != "0"):  # PEP 538: a cold start in the C locale
            os.environ["LC_CTYPE"] = "C.UTF-8"       # sets it for its children (not when LC_ALL is set)
        if req["new_session"]:
            os.setsid()
        for fd, (path, flags) in enumerate(((os.devnull, os.O_RDONLY), (req["stdout"], os.O_WRONLY),
                                            (req["stderr"], os.O_WRONLY))):
            opened = os.open(path, flags)
            os.dup2(opened, fd)
            os.close(opened)
        unbuffered = req["unbuffered"] or bool(os.environ.get("PYTHONUNBUFFERED"))
        def stream(fd, mode, **kw):                  # a cold start's: stdout block-buffered into a file, unless -u
            raw = io.FileIO(fd, mode, closefd=False)
            return io.TextIOWrapper(raw if unbuffered and mode == "w" else io.BufferedWriter(raw) if mode == "w"
                                    else io.BufferedReader(raw), encoding="utf-8", write_through=unbuffered, **kw)
        sys.stdin = stream(0, "r")
        sys.stdout = stream(1, "w")
        sys.stderr = stream(2, "w", line_buffering=True, errors="backslashreplace")
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
            e = e.with_traceback(e.__traceback__.tb_next)
            sys.excepthook(type(e), e, e.__traceback__)
            if isinstance(e, KeyboardInterrupt):       # a cold start dies of SIGINT then
                code = -signal.SIGINT
        threading._shutdown()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        if code == -signal.SIGINT:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
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
        self.answers, self.pending = read, b""
        atexit.register(self.close)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        os.close(self.answers)

    def kill(self) -> None:
        """Give up on this helper (its answers are out of step): the next run() starts another."""
        self.proc.kill()
        self.proc.wait()

    def answer(self, deadline: float | None) -> dict:
        """The helper's next line; its own buffer, so that select() sees only what is still in the pipe."""
        while b"\n" not in self.pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self.answers], [], [], left)[0]:
                raise TimeoutError
            data = os.read(self.answers, 65536)
            if not data:
                raise RuntimeError(f"the tests' warm interpreter ended (exit {self.proc.wait()})")
            self.pending += data
        line, self.pending = self.pending.split(b"\n", 1)
        return json.loads(line)


_helper: _Helper | None = None
_one_at_a_time = threading.Lock()            # the helper answers one request at a time


def _parse(argv: list[str]) -> tuple[str, str, list[str], list[str], bool] | None:
    """(kind, module, code or script, its arguments, -W options, -u) of `python ARGS`, or None for what run()
    leaves to subprocess."""
    i, warnings, unbuffered = 1, [], False
    while i < len(argv):
        a = argv[i]
        if a == "-u":
            unbuffered = True
            i += 1
        elif a == "-W" and i + 1 < len(argv):
            warnings.append(argv[i + 1])
            i += 2
        elif a in ("-m", "-c") and i + 1 < len(argv):
            return a[1], argv[i + 1], argv[i + 2:], warnings, unbuffered
        elif a.startswith("-"):
            return None
        else:
            return "script", a, argv[i + 1:], warnings, unbuffered
    return None


def _cold_only(env: dict[str, str], cwd: str) -> bool:
    """What a fork cannot do as a cold start does: site's hooks on PYTHONPATH (a sitecustomize.py runs at start-up,
    before the command), or a cwd that is not a folder (subprocess.run raises)."""
    hooks = ("sitecustomize.py", "usercustomize.py")
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return not Path(cwd).is_dir() or any((Path(cwd, p) / h).exists() for p in paths for h in hooks)


def run(args: list[str], **kw) -> subprocess.CompletedProcess:
    """subprocess.run(args, **kw) for `[sys.executable, ...]`, forked from the warm interpreter (module docstring)."""
    parsed = _parse([str(a) for a in args]) if args and str(args[0]) == sys.executable else None
    env = {str(k): str(v) for k, v in (os.environ if kw.get("env") is None else kw["env"]).items()}
    cwd = str(kw.get("cwd") or os.getcwd())
    if parsed is None or set(kw) - _KNOWN or os.environ.get("MINBERT_COLD_TESTS") or _cold_only(env, cwd):
        check = kw.pop("check", False)
        return subprocess.run(args, check=check, **kw)
    with _one_at_a_time:
        return _run_warm(args, parsed, env, str(Path(cwd).resolve()), kw)


def _text(data: bytes, encoding: str | None) -> str:
    """As subprocess.run's text=True reads a pipe: decoded, with universal newlines (\r\n and \r become \n)."""
    return io.TextIOWrapper(io.BytesIO(data), encoding=encoding or "utf-8", newline=None).read()


def _run_warm(args: list[str], parsed: tuple, env: dict[str, str], cwd: str, kw: dict) -> subprocess.CompletedProcess:
    global _helper
    kind, target, rest, warnings, unbuffered = parsed
    if _helper is None or _helper.proc.poll() is not None:
        _helper = _Helper()
    helper, timeout, group = _helper, kw.get("timeout"), bool(kw.get("start_new_session"))
    with tempfile.TemporaryDirectory(prefix="warm-") as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        out.touch(), err.touch()
        request = {"kind": kind, "target": target, "args": rest, "warnings": warnings, "unbuffered": unbuffered,
                   "env": env, "cwd": cwd, "stdout": str(out), "stderr": str(err), "new_session": group}
        helper.proc.stdin.write(json.dumps(request) + "\n")
        helper.proc.stdin.flush()
        pid = None
        try:
            pid = helper.answer(None)["pid"]
            deadline = None if timeout is None else time.monotonic() + timeout
            code = helper.answer(deadline)["status"]
        except BaseException as stop:                   # a timeout, Ctrl-C, a helper gone: no child left behind
            if pid is not None:
                try:
                    os.killpg(pid, signal.SIGKILL) if group else os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            try:
                helper.answer(time.monotonic() + 30)        # its status: the answers stay in step
            except BaseException:  # noqa: BLE001 - whatever went wrong, this helper is given up
                helper.kill()
            if isinstance(stop, TimeoutError):
                raise subprocess.TimeoutExpired(args, timeout, out.read_bytes(), err.read_bytes()) from None
            raise
        stdout, stderr = out.read_bytes(), err.read_bytes()
    if kw.get("text") or kw.get("encoding") is not None:
        stdout, stderr = _text(stdout, kw.get("encoding")), _text(stderr, kw.get("encoding"))
    done = subprocess.CompletedProcess(args, code, stdout if kw.get("capture_output") else None,
                                       stderr if kw.get("capture_output") else None)
    if kw.get("check"):
        done.check_returncode()
    return done
