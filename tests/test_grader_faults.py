"""The grader survives a student part that allocates without bound or segfaults: that part fails with a reason; a file
that does not parse costs only the parts that grade it; as root, a user who cannot run its Python, or who can read
the reference or the seed, is refused; the submission's process gets no variable naming the reference."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import grading_user
from test_assignments import submission_with

from assignments import untrusted
from assignments.check import _describe_error
from assignments.checks import PARTS, parts_of
from assignments.grade import grade
from assignments.grade import main as grade_main
from assignments.make import ROOT, stubbed_files
from assignments.staging import parse_error


def test_memory_bomb_and_segfault_fail_their_own_part_only(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MINBERT_PART_MEMORY", str(1 << 30))   # 1 GiB above what the checker had mapped
    sub = submission_with(tmp_path, {
        "attention": "hog = []\nwhile True:\n    hog.append(bytearray(1 << 26))",   # 64 MiB at a time, forever
        "AdamW.step": "import ctypes\nctypes.string_at(0)",                           # reads address 0: SIGSEGV
    }, flat=True)
    res = grade(sub, timeout=20.0, parts=["attention", "adamw", "embeddings"], as_user=grading_user())
    parts = {r["part"]: r for r in res["parts"]}
    assert parts["attention"]["status"] == "error" and "MemoryError" in parts["attention"]["message"], parts
    assert parts["adamw"]["status"] == "crash" and "SIGSEGV" in parts["adamw"]["message"], parts["adamw"]
    assert parts["attention"]["seconds"] < 15     # stopped by the memory limit, not by the time limit
    passed = {"embeddings"}   # calls neither function: graded as usual
    assert {p for p, r in parts.items() if r["status"] == "pass"} == passed
    assert res["score"] == sum(PARTS[p].points for p in passed)


@pytest.mark.parametrize("broken", ["minbert/model.py", "minbert/optim.py"])
def test_a_file_that_does_not_parse_costs_only_the_parts_that_grade_it(tmp_path: Path, broken: str) -> None:
    """The reference's part-1 files, one of them broken: its parts score 0 unrun with the checker's message, and
    the others pass on its stub (every part's process imports minbert, whose __init__ imports model.py)."""
    sub = submission_with(tmp_path, {})
    text = (sub / broken).read_text() + "\ndef oops(:\n    pass\n"
    (sub / broken).write_text(text)
    line = text.count("\n") - 1
    message = f"{broken}:{line}: does not parse: invalid syntax"
    with pytest.raises(SyntaxError) as e:                  # what the checker says of it, importing it
        compile(text, str(ROOT / broken), "exec")
    assert _describe_error(e.value) == ("error", message)
    res = grade(sub, groups=["core"], as_user=grading_user())
    lost = {p for p in parts_of(["core"]) if broken in PARTS[p].files}
    assert lost == ({"attention", "embeddings", "layer", "model"} if broken.endswith("model.py") else {"adamw"})
    parts = {r["part"]: r for r in res["parts"]}
    assert {p for p, r in parts.items() if r["status"] == "pass"} == set(parts_of(["core"])) - lost, res["parts"]
    for p in lost:
        assert (parts[p]["status"], parts[p]["score"], parts[p]["message"]) == ("error", 0, message)
    assert res["score"] == 100 - sum(PARTS[p].points for p in lost)
    assert f"{message} (from {broken}); the parts that grade it score 0, the other parts ran with the unfilled " \
           "stub in its place" in res["output"]


def test_parse_error_compiles_without_running_and_survives_odd_input(tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    assert parse_error(f"open({str(ran)!r}, 'w').write('x')\n".encode(), "minbert/optim.py") is None
    assert not ran.exists()                                                  # compiled, never run
    assert parse_error(b"x = 1\x00\n", "m.py").startswith("m.py: does not parse: ")           # null bytes
    assert "null bytes" in parse_error(b"x = 1\x00\n", "m.py")
    assert parse_error(b"\xff\xfe = 1\n", "m.py").startswith("m.py:1: does not parse: ")      # not UTF-8
    assert parse_error(b"# coding: nope\nx = 1\n", "m.py") == "m.py: does not parse: unknown encoding: nope"
    for deep in (b"-" * 100_000 + b"1", b"x" + b".a" * 1_000_000):         # the compiler's limits, not a crash
        assert parse_error(deep, "m.py").startswith("m.py"), deep[:10]
    assert "does not parse" in parse_error(b"x" + b".a" * 1_000_000, "m.py")


def test_as_root_a_user_who_cannot_run_this_python_is_refused_not_replaced_by_root(tmp_path: Path, monkeypatch,
                                                                                   capsys) -> None:
    monkeypatch.setattr(untrusted, "_can_run", lambda account: False)     # as nobody cannot here (a venv under /work)
    sub = submission_with(tmp_path, {})
    says = f"nobody cannot run {untrusted.sys.executable} and find torch: make the interpreter and its packages " \
           "readable to nobody, name a user who can with --as-user USER, or accept running the submission's " \
           "code as root with --as-user none"
    with monkeypatch.context() as m:
        m.setattr(os, "geteuid", lambda: 0)                                  # as root, wherever the tests run
        with pytest.raises(ValueError) as e:
            grade(sub, parts=["adamw"])                                      # --as-user auto, the default
        assert str(e.value) == says
        for argv in ([str(sub), "--parts", "adamw", "--out", str(tmp_path / "r.json")],
                     ["--batch", str(sub), "--csv", str(tmp_path / "g.csv")]):      # refused before any entry
            assert grade_main(argv) == 2
            assert capsys.readouterr().err == f"error: {says}\n"
        assert not (tmp_path / "r.json").exists() and not (tmp_path / "g.csv").exists()
    res = grade(sub, parts=["adamw"], as_user="none")                       # said: the code runs as root (as root)
    assert [(r["part"], r["status"]) for r in res["parts"]] == [("adamw", "pass")]
    assert untrusted.student_account("none") is None


def test_a_link_is_never_graded_and_a_huge_file_is_never_read(tmp_path: Path) -> None:
    """A link to the reference's own optim.py (or to its folder) would score the reference's points; a 60 MB
    model.py would take the grader's memory to compile. Neither is graded: the linked file is absent, the huge one
    costs its own parts, and the other parts run."""
    from assignments.staging import MAX_SOURCE, find_submitted
    linked = tmp_path / "linked"
    (linked / "minbert").mkdir(parents=True)
    (linked / "minbert" / "optim.py").symlink_to(ROOT / "minbert" / "optim.py")
    (linked / "optim.py").symlink_to(ROOT / "minbert" / "optim.py")
    (linked / "tasks").symlink_to(ROOT / "tasks", target_is_directory=True)
    (linked / "deeper").symlink_to(ROOT, target_is_directory=True)
    for rel in ("minbert/optim.py", "tasks/classifier.py", "minbert/model.py"):
        assert find_submitted(linked, Path(rel)) is None, rel
    res = grade(linked, parts=["adamw"], as_user=grading_user())
    assert res["score"] == 0 and ("minbert/optim.py is a symbolic link in the submission (minbert/optim.py), which "
                                  "the grader does not follow") in res["tests"][0]["output"]

    big = submission_with(tmp_path / "big", {})
    (big / "minbert" / "model.py").write_bytes(b"x = 1\n" * (MAX_SOURCE // 6 + 1))
    res = grade(big, parts=["attention", "adamw"], as_user=grading_user())
    parts = {r["part"]: r for r in res["parts"]}
    assert parts["adamw"]["status"] == "pass"
    assert parts["attention"]["status"] == "error" and parts["attention"]["message"] == (
        f"minbert/model.py: {MAX_SOURCE // 6 * 6 + 6:,} bytes, over the {MAX_SOURCE:,} a graded file may have: not read")
    guide = " ".join((ROOT / "assignments" / "INSTRUCTORS.md").read_text().split())
    assert f"so is a file over {MAX_SOURCE // 1024} KiB (not even read" in guide and "A link is never followed" in guide


def test_a_file_that_fails_when_imported_stops_every_part_that_imports_it(tmp_path: Path) -> None:
    """What the handout says: an import the grader cannot satisfy (a package it lacks) costs adamw too, naming the line."""
    sub = submission_with(tmp_path, {})
    model = sub / "minbert" / "model.py"
    model.write_text(model.read_text() + "import not_a_module_anywhere\n")
    line = len(model.read_text().splitlines())
    res = grade(sub, parts=["adamw", "embeddings"], as_user=grading_user())     # model.py is taken for embeddings
    for r in res["parts"]:
        assert r["status"] == "error" and r["message"] == (f"<module>() (minbert/model.py:{line}) raised "
                                                           "ModuleNotFoundError: No module named 'not_a_module_anywhere'")
    lock = (ROOT / "assignments" / "gradescope" / "requirements-grader.txt").read_text().lower()
    assert "\npandas==" not in lock and "\nmatplotlib==" in lock                # the handout's example, and a real one
    handout = " ".join((ROOT / "assignments" / "README.md").read_text().split())
    assert "A file that parses but fails when imported stops every part that imports it" in handout


@pytest.mark.parametrize("cold", [False, True], ids=["warm", "cold"])
def test_the_submissions_code_gets_no_variable_naming_the_reference(tmp_path: Path, monkeypatch, cold) -> None:
    """$PWD and $OLDPWD (the folder the grader runs in: the reference's) and the seed's variable never reach the
    submission's process, nor its /proc/self/environ (a forked child's shows the helper's start): its environment is
    the locale, PATH and the grader's own settings."""
    monkeypatch.setattr(untrusted, "_helper", None)              # a helper started with this test's environment
    monkeypatch.setenv("PWD", str(ROOT))
    monkeypatch.setenv("OLDPWD", str(ROOT))
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("MINBERT_COLD_START", "1" if cold else "0")
    probe = ('import os\nstart = open("/proc/self/environ", "rb").read().split(b"\\0")\n'
             'raise RuntimeError("ENV " + " ".join(sorted(os.environ)) + " START " + '
             '" ".join(sorted(v.split(b"=")[0].decode() for v in start if v)))')
    sub = submission_with(tmp_path, {"AdamW.step": probe})
    res = grade(sub, parts=["adamw"], as_user=grading_user())
    said = res["parts"][0]["message"]
    assert res["score"] == 0 and "ENV " in said and " START " in said, said
    names, start = (set(x.split()[:40]) for x in said.split("ENV ", 1)[1].split(" START ", 1))
    assert {"PWD", "OLDPWD", "MINBERT_GRADING_SEED"}.isdisjoint(names | start), (names, start)
    assert {"LANG", "PATH", "PYTHONPATH", "MINBERT_PART_MEMORY"} <= names    # the memory limit: the grader's
    if untrusted._helper is not None:
        untrusted._helper.close()
    assert untrusted.student_env(HOME="/h") == {k: v for k, v in os.environ.items()
                                                 if k in untrusted.KEPT_ENV or k.startswith("LC_")} | {"HOME": "/h"}


def _nobody() -> tuple[int, int]:
    import pwd
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("asks the system as another user: needs root")
    try:
        entry = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody")
    return entry.pw_uid, entry.pw_gid


def test_the_reference_code_a_submission_must_not_read_is_all_of_it_but_the_venv() -> None:
    """Not only the graded files: assignments/mistakes.py computes the right AdamW and attention (a submission that
    loaded it by path scored 20/20), the tests compute right answers too; the venv the submission runs stays open."""
    paths = set(untrusted.solution_paths())
    assert {ROOT / "assignments" / "mistakes.py", ROOT / "minbert" / "optim.py", ROOT / "tasks" / "classifier.py",
            ROOT / "tests" / "test_kit_hints_ext.py", ROOT / "notebooks" / "minbert.ipynb"} <= paths
    assert (ROOT / ".git").exists() <= ({ROOT / ".git" / "HEAD", ROOT / ".git" / "objects"} <= paths)
    venv = Path(untrusted.sys.prefix)
    assert not any(venv in p.parents for p in paths) and all(".venv" not in p.parts for p in paths)


def test_a_user_who_can_read_the_reference_or_the_seed_is_refused(tmp_path: Path, monkeypatch, capsys) -> None:
    """Run as a user who can read the reference's solutions (or the seed file), a submission could exec them: the
    grader refuses that user before grading, naming what it can read and the chmod that closes it."""
    import tempfile
    account = _nobody()
    shared = Path(tempfile.mkdtemp(dir="/tmp", prefix="minbert-readable-"))
    try:
        os.chmod(shared, 0o755)
        (shared / "ref").mkdir(mode=0o755)
        (shared / "closed").mkdir(mode=0o700)
        solution, closed, inside = shared / "ref" / "optim.py", shared / "ref" / "model.py", shared / "closed" / "x"
        for p in (solution, closed, inside):
            p.write_text("x\n")
        solution.chmod(0o644)
        closed.chmod(0o600)
        inside.chmod(0o644)
        assert untrusted.readable_to(account, [solution, closed, inside]) == [solution]   # the system's answer
        assert untrusted.readable_to(account, [shared / "ref", shared / "closed"]) == [shared / "ref"]   # enter

        monkeypatch.setattr(untrusted, "_can_run", lambda account: True)
        monkeypatch.setattr(untrusted, "solution_paths", lambda: [solution, closed])
        with pytest.raises(ValueError) as e:
            untrusted.student_account("auto")
        assert str(e.value) == (f"nobody can read {solution}: a submission run as nobody could run the reference's "
                                f"solutions or read the grading seed. Close them to nobody (chmod -R o= "
                                f"{solution}; it still needs to read the Python it runs), name a user who "
                                "cannot read them with --as-user USER, or accept running the submission's code as "
                                "root with --as-user none")
        solution.chmod(0o600)
        assert untrusted.student_account("auto") == account                          # closed: graded as nobody

        seed = shared / "ref" / "seed.txt"
        seed.write_text("12345\n")
        seed.chmod(0o644)
        sub = submission_with(tmp_path, {})
        assert grade_main([str(sub), "--seed-file", str(seed), "--parts", "adamw", "--out",
                           str(tmp_path / "r.json")]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: nobody can read {seed}: ") and f"chmod -R o= {seed};" in err, err
        assert not (tmp_path / "r.json").exists()
    finally:
        import shutil
        shutil.rmtree(shared)


def test_a_bad_part_memory_setting_stops_the_grader_not_every_part(tmp_path: Path, monkeypatch, capsys) -> None:
    """$MINBERT_PART_MEMORY is read in the grader's process (bytes, or K/M/G): a value that is no size, or too small
    to import torch, is one line and exit 2 before anything runs (it crashed every part, blaming the student)."""
    from assignments.isolation import MEMORY_LIMIT, part_memory
    assert part_memory({}) == MEMORY_LIMIT and part_memory({"MINBERT_PART_MEMORY": "0"}) == 0
    assert part_memory({"MINBERT_PART_MEMORY": "6G"}) == 6 << 30 == part_memory({"MINBERT_PART_MEMORY": str(6 << 30)})
    assert part_memory({"MINBERT_PART_MEMORY": "512M"}) == 512 << 20
    sub = submission_with(tmp_path, {})
    assert part_memory({"MINBERT_PART_MEMORY": "1P"}) == 1 << 50
    for bad in ("8", "lots", "inf", "1e400", "1e30", "2P"):     # inf and 1e30 passed: setrlimit then crashed each part
        monkeypatch.setenv("MINBERT_PART_MEMORY", bad)
        assert grade_main([str(sub), "--parts", "adamw", "--as-user", "none", "--out", str(tmp_path / "r.json")]) == 2
        assert capsys.readouterr().err == (f"error: MINBERT_PART_MEMORY={bad!r}: the address space each graded part "
                                           "may add, in bytes or with K, M, G (e.g. 6G), at least 256M (a part "
                                           "imports torch) and at most 1P; 0 turns the limit off\n")
        assert not (tmp_path / "r.json").exists()


# ---------------------------------------------------------------- what a submission of another kind scores

CALLS_MISTAKES_ATTENTION = """
from assignments.mistakes import attention_variant
eye = torch.eye(T).expand(B, nh, T, T)           # the values as one-hot rows: the probabilities come back
probs = torch.stack(attention_variant(q, k, eye, mask).split(T, dim=-1), 1)
return (F.dropout(probs, dropout_p, training) @ v).transpose(1, 2).reshape(B, T, nh * hs)
"""
CALLS_MISTAKES_ADAMW = """
from assignments.mistakes import AdamWSpec, _adamw_one
P, M, V, S = [p.detach().clone()], [m.clone()], [v.clone()], [state["step"]]
_adamw_one(P, M, V, S, 0, g, lr, wd, beta1, beta2, eps, AdamWSpec("course", correct_bias))
state["step"] = S[0]
m.copy_(M[0])
v.copy_(V[0])
p.copy_(P[0])
"""


def test_a_submission_that_calls_the_hints_equations_scores_0(tmp_path: Path) -> None:
    # the checks' mistakes.py computed the right attention and AdamW step with its defaults; it stays in the reference
    # now, so a submission written as calls to it finds nothing to import in the grader's tree
    res = grade(submission_with(tmp_path, {"attention": CALLS_MISTAKES_ATTENTION, "AdamW.step": CALLS_MISTAKES_ADAMW}),
                parts=["attention", "adamw"], as_user=grading_user())
    parts = {r["part"]: r for r in res["parts"]}
    assert {p: r["score"] for p, r in parts.items()} == {"attention": 0, "adamw": 0}, res["parts"]
    assert all("assignments.mistakes" in r["message"] for r in parts.values()), res["parts"]


def _without_shape_checks(text: str) -> str:
    """A file as a tree handed out before the shape checks had it: no import of minbert/shapes.py, no expect_shape,
    no expect_batch (BertModel.forward's check of its inputs)."""
    out, depth = [], 0
    for line in text.splitlines(keepends=True):
        if depth == 0 and line.lstrip().startswith(("from .shapes", "from minbert.shapes")):
            continue
        if depth == 0 and line.lstrip().startswith(("expect_shape(", "return expect_shape(", "expect_batch(")):
            depth = line.count("(") - line.count(")")
            if line.lstrip().startswith("return"):        # `return expect_shape(x, ...)`: return x
                out.append(line.split("expect_shape(")[0] + line.split("expect_shape(")[1].split(",")[0] + "\n")
            continue
        if depth > 0:
            depth += line.count("(") - line.count(")")
            continue
        out.append(line)
    return "".join(out)


def test_a_correct_submission_from_a_tree_handed_out_before_the_shape_checks_scores_full_marks(tmp_path: Path) -> None:
    """The given code imports ShapeError from minbert/shapes.py, a file students never submit: a correct model.py of
    an older tree (no such import) still scores every part of part 1 (it lost classifier_head to an ImportError when
    ShapeError lived in model.py)."""
    sub = tmp_path / "submission"
    for rel in stubbed_files():
        text = (ROOT / rel).read_text()
        if rel.name in ("model.py", "classifier.py"):
            old = _without_shape_checks(text)
            assert "expect_shape" not in old and "expect_batch" not in old, rel
            assert "from .shapes" not in old and "minbert.shapes" not in old, rel   # the word alone is prose
            text = old
        (sub / rel).parent.mkdir(parents=True, exist_ok=True)
        (sub / rel).write_text(text)
    res = grade(sub, groups=["core"], as_user=grading_user())
    assert res["score"] == sum(p.points for p in PARTS.values() if p.group == "core"), [
        (r["part"], r["status"], r["message"][:200]) for r in res["parts"] if r["status"] != "pass"]
