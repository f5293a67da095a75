"""The grader's warm start (assignments/warmstart.py): the checker forked from an interpreter that imported torch alone
grades as a cold `python -m assignments.check` does, runs as the student's user, and leaves nothing behind.

(tests/test_warm.py compares the same helper with a cold python on many commands, through the tests' warm.run.)
"""

from __future__ import annotations

import os
import pwd
import signal
import sys
import time
from pathlib import Path

import pytest
from conftest import grading_user
from test_assignments import submission_with

from assignments import untrusted
from assignments.grade import grade
from assignments.warmstart import COLD_ENV, Helper

ROOT_ONLY = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="changing user needs root")


def request(code: str, out: Path, cwd: Path, env: dict[str, str] | None = None, **more) -> dict:
    """A `python -c code` request, stdout and stderr into out."""
    out.touch()
    return {"kind": "c", "target": code, "args": [], "warnings": [], "unbuffered": False,
            "env": {"PATH": os.environ.get("PATH", "")} if env is None else env, "cwd": str(cwd),
            "stdout": str(out), "stderr": str(out), "new_session": True, **more}


_shared: list[Helper] = []


@pytest.fixture
def helper():
    """One helper for the module's tests, started again if a test left it dead."""
    if not _shared or not _shared[0].alive:
        _shared[:] = [Helper()]
    return _shared[0]


def teardown_module() -> None:
    for h in _shared:
        h.kill()


def gone(pid: int, within: float = 10.0) -> bool:
    """Not running (gone, or a zombie waiting for its reaper) within `within` seconds: a killed process takes a
    moment to exit."""
    deadline = time.monotonic() + within
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def comparable(res: dict) -> list[tuple]:
    return [(r["part"], r["status"], r["score"], r["message"]) for r in res["parts"]]


def test_the_grader_grades_alike_warm_and_cold(tmp_path, monkeypatch):
    """A submission whose parts exit, raise SystemExit and fail a comparison: the same statuses and messages from a
    checker forked warm as from a cold one; the helper survives the grading's sweep of leftover processes."""
    sub = submission_with(tmp_path, {"attention": "import os\nos._exit(3)",
                                     "BertLayer.after_attention": "import sys\nsys.exit(0)"})
    monkeypatch.delenv(COLD_ENV, raising=False)
    parts = ["attention", "embeddings", "layer"]
    warm = grade(sub, parts=parts, seed=11, as_user=grading_user())
    helper = untrusted._helper
    assert helper is not None and helper.alive, "the grading killed its own warm interpreter"
    again = grade(sub, parts=parts, seed=11, as_user=grading_user())
    assert untrusted._helper is helper and helper.alive           # one interpreter for every submission
    monkeypatch.setenv(COLD_ENV, "1")
    assert untrusted.warm_helper() is None
    cold = grade(sub, parts=parts, seed=11, as_user=grading_user())
    statuses = {r["part"]: r["status"] for r in cold["parts"]}
    assert statuses == {"attention": "crash", "embeddings": "pass", "layer": "error"}, cold["parts"]
    assert comparable(warm) == comparable(again) == comparable(cold)
    assert "exit code 3" in {r["part"]: r for r in warm["parts"]}["attention"]["message"]


def test_the_helper_holds_nothing_of_the_grader(helper, tmp_path, monkeypatch):
    """Its environment has no grading seed and no PYTHONPATH; a child has imported no project module, has the
    environment it was given (PEP 538's LC_CTYPE added in the C locale) and the cold start's sys.path."""
    monkeypatch.setenv("MINBERT_GRADING_SEED", "12345")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    fresh = Helper()
    try:
        environ = Path(f"/proc/{fresh.proc.pid}/environ").read_bytes().split(b"\0")
        assert not any(v.startswith((b"MINBERT_GRADING_SEED=", b"PYTHONPATH=")) for v in environ)
    finally:
        fresh.kill()
    code = ("import os, sys; print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('assignments', 'minbert', 'tasks'))); print(sorted(os.environ.items())); print(sys.path[:2])")
    out = tmp_path / "out"
    env = {"PATH": "/usr/bin", "PYTHONPATH": "/nowhere", "LANG": "C"}
    _, status = helper.run(request(code, out, tmp_path, env), 60)
    modules, environ, path = out.read_text().splitlines()
    assert status == 0 and modules == "[]"
    assert environ == str(sorted({**env, "LC_CTYPE": "C.UTF-8"}.items()))
    assert path == str(["", "/nowhere"])


def test_kill_group_ends_what_the_child_left_in_its_group(helper, tmp_path):
    """A child that starts a process in its group and exits: with kill_group the helper kills the group before it
    reaps the child (its pid is still the group's), so nothing it left runs on."""
    code = ("import subprocess, sys; p = subprocess.Popen(['sleep', '300']); print(p.pid, flush=True)")
    out = tmp_path / "out"
    _, status = helper.run(request(code, out, tmp_path, kill_group=True), 60)
    left = int(out.read_text().split()[0])
    assert status == 0
    assert gone(left), "the child's sleep outlived it"


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting for its reaper)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_a_run_past_its_time_is_killed_with_its_group_and_the_helper_answers_on(helper, tmp_path):
    """The helper, the child's only parent, kills it and its group when its time is up (no pid the caller could
    find reused), and answers the next request."""
    out = tmp_path / "out"
    code = "import subprocess, time; print(subprocess.Popen(['sleep', '300']).pid, flush=True); time.sleep(300)"
    t0 = time.monotonic()
    _, status = helper.run(request(code, out, tmp_path, kill_group=True), 2.0)
    assert status is None and time.monotonic() - t0 < 30
    assert gone(int(out.read_text().split()[0])), "what the child started outlived its time limit"
    _, status = helper.run(request("raise SystemExit(4)", tmp_path / "next", tmp_path), 60)
    assert status == 4


CLONE_PARENT = 0x00008000
SYS_CLONE = {"x86_64": 56, "aarch64": 220}.get(os.uname().machine)


@pytest.mark.skipif(sys.platform != "linux" or SYS_CLONE is None, reason="clone(2) by number: Linux x86_64, aarch64")
def test_a_process_that_makes_itself_the_helpers_child_is_killed_with_the_run(helper, tmp_path):
    """clone(CLONE_PARENT) gives the new process the child's parent, the helper, and setsid() takes it out of the
    child's group: the helper kills and reaps every child of its own before it answers, so it does not outlive the
    run (to tamper with the next submission's)."""
    code = (f"import ctypes, os, time\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            f"pid = libc.syscall({SYS_CLONE}, {CLONE_PARENT} | 17, 0, 0, 0, 0)\n"      # 17: SIGCHLD
            "if pid == 0:\n    os.setsid()\n    time.sleep(300)\n    os._exit(0)\n"
            "t = time.monotonic()\n"
            "while os.getpgid(pid) == os.getpgid(0) and time.monotonic() < t + 30:\n    time.sleep(0.01)\n"
            "print(pid, os.getpgid(pid) != os.getpgid(0), flush=True)\n")   # out of the child's group first
    out = tmp_path / "out"
    _, status = helper.run(request(code, out, tmp_path, kill_group=True), 60)
    escaped, own_group = out.read_text().split()
    escaped = int(escaped)
    try:
        assert status == 0 and escaped > 0 and own_group == "True"
        assert gone(escaped) and not Path(f"/proc/{escaped}").exists(), "the helper's new child outlived the run"
    finally:
        try:
            os.kill(escaped, signal.SIGKILL)
        except ProcessLookupError:
            pass


@ROOT_ONLY
def test_a_child_runs_as_the_user_given_and_cannot_touch_root_s(helper, tmp_path):
    """As root: the child takes the user and group given and no supplementary groups (as subprocess's user=,
    group=, extra_groups=[] do), after opening its output; it cannot read a root-only file nor signal the helper."""
    nobody = pwd.getpwnam("nobody")
    secret = tmp_path / "secret"
    secret.mkdir(mode=0o700)
    (secret / "seed").write_text("42")
    code = (f"import os, signal\nprint(os.getuid(), os.getgid(), os.getgroups())\n"
            f"for act in (lambda: open({str(secret / 'seed')!r}).read(), lambda: os.kill({helper.proc.pid}, "
            f"signal.SIGKILL)):\n"
            "    try:\n        act(); print('allowed')\n    except PermissionError:\n        print('refused')\n")
    out = tmp_path / "out"
    _, status = helper.run(request(code, out, Path("/"), user=nobody.pw_uid, group=nobody.pw_gid), 60)
    ids, read, kill = out.read_text().splitlines()
    assert status == 0, out.read_text()
    assert ids == f"{nobody.pw_uid} {nobody.pw_gid} []"
    assert (read, kill) == ("refused", "refused") and helper.alive


def test_cold_start_is_asked_for_by_its_variable(monkeypatch):
    monkeypatch.setenv(COLD_ENV, "0")
    assert untrusted.warm_helper() is not None
    monkeypatch.setenv(COLD_ENV, "1")
    assert untrusted.warm_helper() is None


def test_an_interrupted_run_leaves_no_child_and_the_next_run_starts_a_new_helper(tmp_path, monkeypatch):
    """Ctrl-C while a run waits: the child is killed and this helper given up (its answers would be out of step);
    warm_helper() then starts another."""
    monkeypatch.delenv(COLD_ENV, raising=False)
    first = untrusted.warm_helper()
    assert first.run(request("pass", tmp_path / "ready", tmp_path), 60)[1] == 0   # started: torch imported
    out = tmp_path / "out"

    def interrupt(*_):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    try:
        with pytest.raises(KeyboardInterrupt):
            first.run(request("import os, time; print(os.getpid(), flush=True); time.sleep(300)", out, tmp_path,
                              kill_group=True), 120)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    child = int(out.read_text().split()[0])
    assert not first.alive and gone(child)
    second = untrusted.warm_helper()
    assert second is not first and second.alive
    _, status = second.run(request(f"import sys; sys.exit({sys.version_info.minor})", tmp_path / "o2", tmp_path), 60)
    assert status == sys.version_info.minor


def test_a_helper_that_fails_mid_run_is_given_up_and_the_checker_runs_cold(tmp_path, monkeypatch):
    """The helper dies after the checker wrote a record: the grader says so, clears what the first attempt wrote
    (a record left there would be judged) and grades cold, alike."""
    sub = submission_with(tmp_path, {"attention": "import os\nos._exit(3)"})
    monkeypatch.delenv(COLD_ENV, raising=False)
    real = Helper.run

    def dies(self, req, timeout):
        real(self, req, timeout)
        records = Path(req["cwd"]) / ".grading" / "records"
        (records / "attention.safetensors").write_bytes(b"a record the grader must not read")
        self.kill()
        raise RuntimeError("the warm interpreter ended (exit -15)")
    monkeypatch.setattr(Helper, "run", dies)
    broken = grade(sub, parts=["attention", "embeddings"], seed=11, as_user=grading_user())
    monkeypatch.setattr(Helper, "run", real)
    monkeypatch.setenv(COLD_ENV, "1")
    cold = grade(sub, parts=["attention", "embeddings"], seed=11, as_user=grading_user())
    assert comparable(broken) == comparable(cold)
    assert [r["status"] for r in cold["parts"]] == ["crash", "pass"]
