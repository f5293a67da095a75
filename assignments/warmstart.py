"""`python -m MODULE ARGS` forked from a warm interpreter instead of started cold: torch is imported once, not per run.

A fresh `python -m assignments.check` spends about 2 s importing torch before it checks anything, and the grader
starts one per submission and tree (two for every group: grading the reference took 12.35 s cold, 9.15 s warm;
INSTRUCTORS.md's Times).
Helper starts an interpreter that imports torch and nothing else (this file run by runpy.run_path from `python -c`, in
/, with no PYTHONPATH: no minbert, no tree's code, no data) and forks a child for each request, which then does what
the cold command would: its folder, its user and groups (dropped after its files are opened, as subprocess does), a
new session, the environment (with PEP 538's LC_CTYPE), PYTHONDONTWRITEBYTECODE, PYTHONWARNINGS, sys.path (the folder,
or the script's, then PYTHONPATH, then the standard paths), sys.argv, `-m`, `-c` or a script run as a fresh __main__,
stdin from /dev/null, stdout block-buffered and stderr line-buffered into files (unbuffered with -u), the intra-op
threads from OMP_NUM_THREADS, torch's, Python's and numpy's generators seeded afresh, and the exit code (SystemExit,
sys.excepthook's traceback and 1, minus the signal that killed it, SIGINT's for an uncaught KeyboardInterrupt). What
differs from a cold start: torch is imported before the child sets its environment (it reads none of the variables the
commands set; numpy's BLAS threads are sized from the helper's environment, which has no OMP_NUM_THREADS), children
share the helper's hash seed, and stdout and stderr are UTF-8 whatever the locale. The helper holds nothing of the
grader: a child's memory is what a cold interpreter that imported torch has. It is the child's only parent, so it
alone enforces a run's time limit and kills its process group (while the child is unreaped: its pid cannot have been
reused), and after each run it kills and reaps every child of its own (a process can make itself one with clone's
CLONE_PARENT, out of the child's group). It runs in a session of its own (the caller's Ctrl-C is the caller's);
SIGTERM kills its running child's group and ends it. MINBERT_COLD_START=1, or a system without os.fork and os.waitid
(macOS before Python 3.13), starts every run cold.

This file imports only the standard library at its top: the helper runs it as a file, outside its package.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

COLD_ENV = "MINBERT_COLD_START"   # set (to anything but 0): every run is a cold `python`
HELPER_NAME = "__warm_helper__"   # this file's __name__ when the helper runs it
KEPT_ENV = ("PATH", "LANG", "LANGUAGE", "TZ", "PYTHONCOERCECLOCALE", "PYTHONWARNINGS")   # and LC_*: all else is dropped


def student_env(**own: str) -> dict[str, str]:
    """The environment the submission's code gets (and the helper it forks from starts with, which a child's
    /proc/self/environ shows): the locale, PATH and the time zone of this one, and `own`; nothing else (not $PWD nor
    $OLDPWD, which would name the reference's folder, nor the seed's variable)."""
    kept = {k: v for k, v in os.environ.items() if k in KEPT_ENV or k.startswith("LC_")}
    return kept | own


def child(req: dict, torch, default_threads: int, base_path: list[str]) -> None:
    """In the forked child: become the cold `python` that `req` describes and run its command; never returns."""
    import builtins
    import importlib
    import io
    import runpy
    import tempfile
    import types
    import warnings
    code, started = 1, False
    try:
        for fd, (path, flags) in enumerate(((os.devnull, os.O_RDONLY), (req["stdout"], os.O_WRONLY | os.O_APPEND),
                                            (req["stderr"], os.O_WRONLY | os.O_APPEND))):
            opened = os.open(path, flags)
            os.dup2(opened, fd)
            os.close(opened)
        os.chdir(req["cwd"])
        if req.get("new_session"):
            os.setsid()
        if req.get("user") is not None:                # as subprocess's user=, group=, extra_groups=[] do
            os.setgroups([])
            os.setgid(req["group"])
            os.setuid(req["user"])
        os.environ.clear()
        os.environ.update(req["env"])
        ctype = os.environ.get("LC_CTYPE") or os.environ.get("LANG") or "C"
        if ("LC_ALL" not in os.environ and ctype in ("C", "POSIX")
                and os.environ.get("PYTHONCOERCECLOCALE") != "0"):  # PEP 538: a cold start in the C locale
            os.environ["LC_CTYPE"] = "C.UTF-8"       # sets it for its children (not when LC_ALL is set)
        sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
        tempfile.tempdir = None                      # TMPDIR read afresh
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
        threads = req["env"].get("OMP_NUM_THREADS", "")
        torch.set_num_threads(int(threads) if threads.isdigit() and int(threads) > 0 else default_threads)
        torch.seed()                                 # a cold start's generators start from seeds of their own
        if "random" in sys.modules:                  # (torch imports random)
            sys.modules["random"].seed()
        if "numpy.random" in sys.modules:          # (torch imports numpy, not numpy.random: nothing to reseed then)
            sys.modules["numpy.random"].seed()
        pythonpath = [p for p in req["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        kind, target, args = req["kind"], req["target"], req["args"]
        first = {"m": os.getcwd(), "c": "", "script": os.path.dirname(os.path.abspath(target))}[kind]
        sys.path[:] = [first, *pythonpath, *base_path]
        sys.path_importer_cache.clear()
        importlib.invalidate_caches()
        options = [o for o in os.environ.get("PYTHONWARNINGS", "").split(",") if o.strip()] + req["warnings"]
        sys.warnoptions[:] = options                 # as a cold start reads them: PYTHONWARNINGS, then -W
        for option in options:
            warnings._setoption(option)
        main = types.ModuleType("__main__")          # a fresh __main__, as a cold start has
        main.__annotations__ = {}
        main.__builtins__ = builtins
        sys.modules["__main__"] = main
        started = True
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
                exec(compile(target if kind == "c" else source, "<string>" if kind == "c" else main.__file__,  # noqa: S102
                             "exec"), main.__dict__)           # what `python -c CODE` and `python SCRIPT` do
            code = 0
        except SystemExit as stop:
            if stop.code is None or isinstance(stop.code, int):
                code = stop.code or 0
            else:
                print(stop.code, file=sys.stderr)
        except BaseException as e:  # noqa: BLE001 - a cold start's: the traceback from the command's first frame
            e = e.with_traceback(e.__traceback__.tb_next)
            sys.excepthook(type(e), e, e.__traceback__)
            if isinstance(e, KeyboardInterrupt):     # a cold start dies of SIGINT then
                code = -signal.SIGINT
        threading._shutdown()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        if code == -signal.SIGINT:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
    except BaseException:  # noqa: BLE001 - the set-up failed (a folder, a file, the user), or ending did: said
        import traceback
        when = "after the command ended" if started else "before the command ran"
        code = 120 if started else 1                 # 120: a cold start whose ending fails (a flush, say)
        os.write(2, f"the warm start failed {when}:\n{traceback.format_exc()}".encode())
    finally:
        os._exit(code)


def _children() -> list[int]:
    """The pids whose parent is this process (Linux's /proc; none elsewhere): isolation.children(), which this file
    cannot import (the helper imports nothing of the project, whose modules a child must find in its own tree)."""
    me, found = str(os.getpid()), []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                after = f.read().decode("ascii", "replace").rsplit(")", 1)[1].split()   # state, ppid, ...
        except (OSError, IndexError, ValueError):
            continue
        if entry.isdigit() and len(after) > 1 and after[1] == me:
            found.append(int(entry))
    return found


GIVE_UP = 10.0        # seconds a killed process may take to be reaped before the helper gives up (a tracer holds it)


def _kill(pid: int, group: bool = False) -> None:
    try:
        os.killpg(pid, signal.SIGKILL) if group else os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _reap_all() -> bool:
    """Kill and reap every child of the helper: what a run left as its sibling (clone's CLONE_PARENT makes the
    helper a process's parent), whose own children then go to the caller's reaper. Every one is signalled before
    any is waited for; False if some are still there after GIVE_UP seconds (cloning faster than they die, or held
    by a tracer)."""
    deadline = time.monotonic() + GIVE_UP
    while time.monotonic() < deadline:
        left = _children()
        if not left:
            return True
        for pid in left:
            _kill(pid)
        for pid in left:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        time.sleep(0.005)
    return not _children()


def _wait(pid: int, timeout: float | None) -> bool:
    """Wait, without reaping, until the child has ended (True) or timeout seconds have passed (False)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is None:
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def serve(answers_fd: int) -> None:
    """The helper's loop: a request a line on stdin; forks, answers {"pid"}, then {"status", "timed_out"} once the
    child has ended. The helper, its only parent, kills it when its "timeout" passes, then (with "kill_group") its
    process group, each while the child is unreaped and its pid still its own; then every other child of the helper.
    Where it cannot (a killed child or a sibling not gone within GIVE_UP seconds) it exits without answering: what is
    left goes to the caller's reaper, and the caller gives the helper up. SIGTERM (Helper.kill) kills the running
    child's group and every child of the helper, and ends it."""
    import torch
    default_threads = torch.get_num_threads()      # what a cold start without OMP_NUM_THREADS gets
    base_path = sys.path[1:]                       # sys.path less the helper's own '' (it has no PYTHONPATH)
    answers = os.fdopen(answers_fd, "w", buffering=1)
    running: list[int] = []

    def stop(*_) -> None:
        for pid in running:
            _kill(pid, group=True)
        for pid in _children():
            _kill(pid)
        os._exit(1)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the caller's Ctrl-C is the caller's to handle
    term = {signal.SIGTERM}
    for line in sys.stdin:
        req = json.loads(line)
        signal.pthread_sigmask(signal.SIG_BLOCK, term)     # no SIGTERM between the fork and `running` knowing it
        pid = os.fork()
        if pid == 0:
            answers.close()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, term)
            child(req, torch, default_threads, base_path)
        running.append(pid)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, term)
        answers.write(json.dumps({"pid": pid}) + "\n")
        timed_out = not _wait(pid, req.get("timeout"))
        if timed_out:
            _kill(pid, group=bool(req.get("new_session")))
            if not _wait(pid, GIVE_UP):
                stop()
        if req.get("kill_group"):
            _kill(pid, group=True)
        signal.pthread_sigmask(signal.SIG_BLOCK, term)     # no SIGTERM for a pid once reaped
        _, status = os.waitpid(pid, 0)
        running.clear()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, term)
        if not _reap_all():
            stop()
        answers.write(json.dumps({"status": os.waitstatus_to_exitcode(status), "timed_out": timed_out}) + "\n")


def available() -> bool:
    """Whether runs may be warm here: os.fork and os.waitid exist (Linux; macOS from Python 3.13) and
    MINBERT_COLD_START does not ask for cold starts."""
    return hasattr(os, "fork") and hasattr(os, "waitid") and os.environ.get(COLD_ENV, "0") in ("", "0")


START_WAIT = 300.0    # seconds the helper may take to answer a request's pid (it may still be importing torch)
STATUS_GRACE = 60.0   # seconds past a run's timeout before the helper itself is given up as stuck


class Helper:
    """A warm interpreter: started by the constructor (its import of torch runs beside the caller's work), asked
    one run at a time with run(), ended with close() or with the caller's process."""

    def __init__(self) -> None:
        read, write = os.pipe()
        env = student_env()
        start = f"import runpy, sys; runpy.run_path(sys.argv[1], run_name={HELPER_NAME!r})"   # this file, no package
        self.proc = subprocess.Popen([sys.executable, "-c", start, os.path.abspath(__file__), str(write)],
                                     stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd="/", env=env,
                                     pass_fds=(write,), start_new_session=True)
        os.close(write)
        self.answers, self.pending = read, b""
        self.lock = threading.Lock()               # one run at a time: the answers come in the requests' order
        atexit.register(self.close)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        """End the helper (its stdin closed: it finishes its loop), or kill it if it does not end."""
        if self.alive:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()
        self._close_answers()

    def kill(self) -> None:
        """Give up on this helper: SIGTERM (it kills its running child's group, still its own unreaped child, and
        exits), then SIGKILL if it has not ended."""
        if self.alive:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        self._close_answers()

    def _close_answers(self) -> None:
        if self.answers >= 0:
            os.close(self.answers)
            self.answers = -1

    def answer(self, deadline: float | None) -> dict:
        """The helper's next line; its own buffer, so that select() sees only what is still in the pipe."""
        while b"\n" not in self.pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            poll = select.poll()                         # (select() cannot watch a descriptor above 1023)
            poll.register(self.answers, select.POLLIN | select.POLLHUP)
            if not poll.poll(None if left is None else int(left * 1000)):
                raise TimeoutError("the warm interpreter did not answer in time")
            data = os.read(self.answers, 65536)
            if not data:
                raise RuntimeError(f"the warm interpreter ended (exit {self.proc.wait()})")
            self.pending += data
        line, self.pending = self.pending.split(b"\n", 1)
        return json.loads(line)

    def run(self, req: dict, timeout: float | None) -> tuple[int, int | None]:
        """Run one request (child()'s keys); (its pid, its exit code, or None when it ran past timeout seconds and
        the helper killed it: its process group with "new_session", else itself). Anything that stops the wait (an
        interrupt, the helper gone or stuck) gives this helper up, its running child killed, and is raised."""
        with self.lock:
            return self._run(req, timeout)

    def _run(self, req: dict, timeout: float | None) -> tuple[int, int | None]:
        try:
            self.proc.stdin.write(json.dumps({**req, "timeout": timeout}) + "\n")
            self.proc.stdin.flush()
            pid = self.answer(time.monotonic() + START_WAIT)["pid"]
            done = self.answer(None if timeout is None else time.monotonic() + timeout + STATUS_GRACE)
        except BaseException:
            self.kill()
            raise
        return pid, None if done["timed_out"] else done["status"]


if __name__ == HELPER_NAME:      # the helper itself: this file run by runpy.run_path, its answers' descriptor
    serve(int(sys.argv[2]))
