"""`python ARGS` for the tests, forked from a warm interpreter instead of started cold: run() is subprocess.run.

A fresh `python -m tasks.X` spends about 2-3 s of its first seconds importing torch, and the tests start over a
hundred. run() asks the grader's warm interpreter (assignments/warmstart.py; untrusted.warm_helper's, the one the
grader's checker forks from too: one per pytest process, torch imported and nothing else) to fork a child that does what `python ARGS` does, outputs captured in files; its docstring says
what a child does as a cold start would and what differs. So any tree's code runs in it, a student tree's included.
A PYTHONPATH with a sitecustomize.py (site runs it before the command), a cwd that is not a folder, other interpreter
flags, pipes or stdin input go to subprocess.run unchanged, as does every command with MINBERT_COLD_TESTS=1 (which
starts the grader's checker cold too); tests whose point is a fresh process (what a command imports, `python -m`
itself) call subprocess themselves.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from assignments.untrusted import warm_helper
from assignments.warmstart import Helper

_KNOWN = {"args", "cwd", "env", "capture_output", "text", "timeout", "check", "encoding", "start_new_session"}


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
    cold = parsed is None or set(kw) - _KNOWN or os.environ.get("MINBERT_COLD_TESTS") or _cold_only(env, cwd)
    helper = None if cold else warm_helper()     # the grader's, this process's one (None: MINBERT_COLD_START)
    if helper is None:
        check = kw.pop("check", False)
        return subprocess.run(args, check=check, **kw)
    with _one_at_a_time:
        return _run_warm(helper, args, parsed, env, str(Path(cwd).resolve()), kw)


def _text(data: bytes, encoding: str | None) -> str:
    """As subprocess.run's text=True reads a pipe: decoded, with universal newlines (\r\n and \r become \n)."""
    return io.TextIOWrapper(io.BytesIO(data), encoding=encoding or "utf-8", newline=None).read()


def _run_warm(helper: Helper, args: list[str], parsed: tuple, env: dict[str, str], cwd: str,
              kw: dict) -> subprocess.CompletedProcess:
    kind, target, rest, warnings, unbuffered = parsed
    timeout = kw.get("timeout")
    with tempfile.TemporaryDirectory(prefix="warm-") as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        out.touch(), err.touch()
        request = {"kind": kind, "target": target, "args": rest, "warnings": warnings, "unbuffered": unbuffered,
                   "env": env, "cwd": cwd, "stdout": str(out), "stderr": str(err),
                   "new_session": bool(kw.get("start_new_session"))}
        _, code = helper.run(request, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(args, timeout, out.read_bytes(), err.read_bytes())
        stdout, stderr = out.read_bytes(), err.read_bytes()
    if kw.get("text") or kw.get("encoding") is not None:
        stdout, stderr = _text(stdout, kw.get("encoding")), _text(stderr, kw.get("encoding"))
    done = subprocess.CompletedProcess(args, code, stdout if kw.get("capture_output") else None,
                                       stderr if kw.get("capture_output") else None)
    if kw.get("check"):
        done.check_returncode()
    return done
