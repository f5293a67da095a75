"""Each part of a check in a process of its own: a time limit, a memory limit, and nothing left running after it.

python -m assignments.check --timeout S forks one process per part from a warm parent (torch imported once); a
part that loops, exits, crashes or leaves a process behind costs that part alone. The grader adds --record: the
part's process then returns what each compare() got, as data (assignments/record.py), for the grader to judge.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from pathlib import Path


def _tail(path: Path, limit: int = 2000) -> str:
    data = path.read_bytes() if path.exists() else b""
    text = data[-limit:].decode("utf-8", errors="replace")
    return ("..." + text) if len(data) > limit else text


MEMORY_LIMIT = 4 << 30  # bytes of address space a part may add to what the checker had mapped when it forked
MEMORY_ENV = "MINBERT_PART_MEMORY"  # overrides MEMORY_LIMIT: bytes, or 6G, 512M; 0 turns it off (CUDA maps far more)
MEMORY_FLOOR = 256 << 20            # less and a part fails to import torch: the student would be blamed for the setting
MEMORY_CEILING = 1 << 50            # 1 PiB: more is no limit (0 says so), and setrlimit cannot take 1e30
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}


def part_memory(environ: dict[str, str] | os._Environ = os.environ) -> int:
    """The address space a part may add (bytes; 0: no limit): $MINBERT_PART_MEMORY, else MEMORY_LIMIT; ValueError
    naming the variable for a value that is not bytes (or K, M, G, T of them) or is too small to import torch."""
    text = environ.get(MEMORY_ENV)
    if text is None:
        return MEMORY_LIMIT
    number, unit = text.strip().upper().rstrip("IB"), ""
    if number and number[-1] in _UNITS:
        number, unit = number[:-1], number[-1]
    try:
        value = int(float(number) * _UNITS[unit])
    except (ValueError, OverflowError):               # not a number; inf, 1e400
        value = -1
    if value == 0:
        return 0
    if not MEMORY_FLOOR <= value <= MEMORY_CEILING:
        raise ValueError(f"{MEMORY_ENV}={text!r}: the address space each graded part may add, in bytes or with K, M, G "
                         f"(e.g. 6G), at least {MEMORY_FLOOR >> 20}M (a part imports torch) and at most "
                         f"{MEMORY_CEILING >> 50}P; 0 turns the limit off")
    return value


def _limit_memory() -> None:
    """Cap this process's address space (RLIMIT_AS): a part that allocates without bound gets a MemoryError."""
    import resource
    with open("/proc/self/statm") as f:    # Linux; elsewhere the time limit alone bounds a part
        mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    extra = part_memory()
    if extra <= 0:
        return
    limit = mapped + extra
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))


def usable_cpus(cgroup_fs: Path = Path("/sys/fs/cgroup"), self_cgroup: Path = Path("/proc/self/cgroup")) -> int:
    """The CPUs this process may use: its affinity mask, capped by the CPU quota of its cgroup and those above it
    (cgroup v2's cpu.max, v1's cpu.cfs_quota_us over cpu.cfs_period_us; ceil(quota / period)); os.cpu_count() is
    the host's, in a container too."""
    count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        lines = [line.split(":", 2) for line in self_cgroup.read_text().splitlines() if line.count(":") >= 2]
    except OSError:
        return max(1, count)                     # not Linux: the affinity mask alone
    for _, controllers, own in lines:
        if controllers == "":                                      # v2: one hierarchy, cpu.max
            top, files = cgroup_fs, ("cpu.max",)
        elif "cpu" in controllers.split(","):                      # v1: the cpu controller's own hierarchy
            top, files = cgroup_fs / controllers, ("cpu.cfs_quota_us", "cpu.cfs_period_us")
        else:
            continue
        folder = top / own.lstrip("/")
        for d in (folder, *folder.parents):
            try:
                quota, period = " ".join((d / f).read_text() for f in files).split()[:2]
                if quota not in ("max", "-1"):
                    count = min(count, math.ceil(int(quota) / int(period)))
            except (OSError, ValueError, ZeroDivisionError):   # no file here (a root has none), or not two numbers
                pass
            if d == top or top not in d.parents:
                break
    return max(1, count)


def _exit_reason(status: int) -> str:
    """What ended a child, in words: its exit code, or the signal that killed it (SIGSEGV: a segfault)."""
    code = os.waitstatus_to_exitcode(status)
    if code >= 0:
        return f"exit code {code} (sys.exit or os._exit in your code?)"
    name = signal.Signals(-code).name
    hint = {"SIGSEGV": "a segmentation fault", "SIGKILL": "killed, perhaps for memory", "SIGABRT": "an abort"}
    return f"signal {name} ({hint.get(name, 'a hard crash')})"


def _child(name: str, result: Path, log: Path, record: Path | None = None) -> None:
    """In a forked process: run one part with its output going to log, write its result, and exit.

    With record (the grader's --record): the check runs on the inputs in RECORD_INPUTS and what each compare()
    was given goes to record; the verdict is the grader's, made elsewhere.
    """
    code = 70
    try:
        os.setsid()                                   # its own process group, so that a kill takes all of it
        if os.path.exists("/proc/self/statm"):
            _limit_memory()
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        from . import common
        from .check import run_part
        from .record import Recorder
        recorder = None if record is None else Recorder(Path(os.environ[RECORD_INPUTS]))
        common.SESSION = recorder
        r = run_part(name)
        if recorder is not None:
            recorder.save(record / f"{name}.safetensors", r["status"], r["message"])
        result.write_text(json.dumps(r))
        code = 0
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


RECORD_INPUTS = "MINBERT_RECORD_INPUTS"   # the directory of the hidden inputs, set by --inputs for the children


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux), so that sweep() finds a process a part
    left running even after it changed its session; False where the system has no such call."""
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0   # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False




def sweep(keep: frozenset[int] = frozenset(), give_up: float = 10.0) -> list[int]:
    """Kill and reap every child of this process but `keep`: what a submission left running (with become_subreaper,
    its orphans are this process's children). Each found is signalled before any is waited for, and none is waited
    for without a limit (a traced process is not reaped until its tracer is gone): after give_up seconds, what is
    still there is left. Returns the pids killed and reaped."""
    killed: list[int] = []
    deadline = time.monotonic() + give_up
    while time.monotonic() < deadline:
        found = [pid for pid in children() if pid not in keep]
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):   # gone, or not ours to kill
                pass
        for pid in found:
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    killed.append(pid)
            except ChildProcessError:
                pass
        time.sleep(0.005)
    return killed


def children() -> list[int]:
    """The pids whose parent is this process (from /proc; empty where there is none)."""
    me, out = os.getpid(), []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode("ascii", "replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()      # after "(comm)": state, ppid, ...
        if len(fields) > 1 and fields[1] == str(me):
            out.append(int(entry))
    return out


def _warm_up() -> None:
    """Import, once before forking, the libraries that every part would otherwise import on its own (not minbert)."""
    import safetensors.torch  # noqa: F401
    import tokenizers  # noqa: F401
    import torch

    from tasks.core.step import optimizers_without_dynamo
    optimizers_without_dynamo()                                # else the first optimizer imports torch._dynamo
    torch.optim.AdamW([torch.zeros(1, requires_grad=True)])


def run_isolated(names: list[str], timeout: float, jobs: int, workdir: Path,
                 record: Path | None = None) -> list[dict]:
    """Run each part in a process forked from this one (torch imported once), killed after timeout seconds.

    A part that loops forever, exits the interpreter or crashes ends as "timeout" or "crash" with the end
    of its output; the other parts are unaffected. Needs os.fork (Linux, macOS).
    """
    from .checks import PARTS  # imports torch here, before forking, so that each part starts warm
    if not hasattr(os, "fork"):
        raise SystemExit("running parts with a time limit needs os.fork (Linux or macOS)")
    _warm_up()
    become_subreaper()             # a part's orphans become this process's children, killed when the part ends
    pending, running, results = list(names), {}, {}
    while pending or running:
        while pending and len(running) < jobs:
            name = pending.pop(0)
            result, log = workdir / f"{name}.json", workdir / f"{name}.log"
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:
                _child(name, result, log, record)
            running[pid] = (name, time.monotonic(), result, log)
        time.sleep(0.02)
        for pid, (name, t0, result, log) in list(running.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            seconds = time.monotonic() - t0
            if not done and seconds < timeout:
                continue
            try:                     # what is left of the part: its process group, then any orphan it made
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                if not done:
                    os.kill(pid, signal.SIGKILL)
            if not done:
                os.waitpid(pid, 0)
            del running[pid]
            sweep(keep=frozenset(running))
            base = {"part": name, "score": 0, "max_score": PARTS[name].points, "seconds": round(seconds, 3),
                    "log": _tail(log)}
            if not done:
                results[name] = {**base, "status": "timeout", "message": (
                    f"did not finish within {timeout:g} s (an infinite loop, or far too slow?); "
                    "the other parts were checked on their own")}
            elif result.exists():
                results[name] = {**json.loads(result.read_text()), "log": base["log"]}
            else:
                results[name] = {**base, "status": "crash", "message": (
                    f"the process ended before reporting a result: {_exit_reason(status)}")}
    return [results[n] for n in names]
