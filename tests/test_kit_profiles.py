"""Each profile's student tree (part1, default-project, full): what it holds, that it imports on its own, that the
reference laid over it scores full marks, that it shows no solution, and that its handout is its own."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import warm
from conftest import grading_user

from assignments import make
from assignments.leaks import leaks, solution_statements
from assignments.make import BEGIN, ROOT, generate
from assignments.profiles import PROFILES

GROUPS = {"part1": ["core"], "default-project": ["core", "multitask"],
          "full": ["core", "multitask", "deebert", "smart", "pals", "simcse"]}
ENV = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}

IMPORT_ALL = """
import importlib, pathlib, sys
sys.path.insert(0, ".")
bad = []
for p in sorted(pathlib.Path(".").rglob("*.py")):
    if p.parts[0] not in ("minbert", "tasks", "assignments") or p.name == "__main__.py":
        continue
    mod = ".".join(p.with_suffix("").parts).removesuffix(".__init__")
    try:
        module = importlib.import_module(mod)
        assert pathlib.Path(module.__file__).resolve().is_relative_to(pathlib.Path.cwd().resolve()), module.__file__
    except BaseException as e:
        bad.append(f"{mod}: {type(e).__name__}: {e}")
print("\\n".join(bad))
"""


def _run(tree: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """python ARGS in the tree, with nothing of the reference on the path (the tree's root is the cwd)."""
    return warm.run([sys.executable, *args], cwd=tree, env={**ENV, "PYTHONPATH": str(tree)},
                    capture_output=True, text=True, check=False, timeout=timeout)


def _lay_reference(tree: Path, dest: Path, profile: str) -> Path:
    """A copy of the tree with the reference's text in every file the generator stubbed (not the skeletons)."""
    shutil.copytree(tree, dest)
    for rel in make.stubbed_files():
        if (dest / rel).exists() and rel.as_posix() not in PROFILES[profile].skeletons:
            shutil.copyfile(ROOT / rel, dest / rel)
    return dest


def test_the_profiles_are_part1_default_project_and_full() -> None:
    assert list(PROFILES) == list(GROUPS) and make.DEFAULT_PROFILE == "full"
    assert {n: list(p.groups) for n, p in PROFILES.items()} == GROUPS


@pytest.mark.parametrize("profile", list(GROUPS))
def test_every_module_of_the_tree_imports_from_the_tree(trees: dict[str, Path], profile: str) -> None:
    proc = _run(trees[profile], "-c", IMPORT_ALL)
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr


@pytest.mark.parametrize("profile", list(GROUPS))
def test_the_tree_holds_its_profile_s_groups_files_and_name(trees: dict[str, Path], profile: str) -> None:
    tree = trees[profile]
    proc = _run(tree, "-c", "import json; from assignments.common import GROUPS; from assignments.checks import PARTS;"
                            "print(json.dumps([list(GROUPS), sorted({p.group for p in PARTS.values()})]))")
    groups, part_groups = json.loads(proc.stdout)
    assert groups == GROUPS[profile] and part_groups == sorted(GROUPS[profile]), proc.stderr
    assert f'PROFILE = "{profile}"\n' in (tree / "tasks/core/tree.py").read_text()
    assert 'PROFILE = "reference"\n' in (ROOT / "tasks/core/tree.py").read_text()
    checks = {p.name for p in (tree / "assignments").glob("checks_*.py")}
    assert checks == {f"checks_{g}.py" for g in GROUPS[profile] if g != "core"}
    fixtures = {p.name.split(".")[0] for p in (tree / "assignments" / "fixtures").iterdir()}
    assert ("multitask" in fixtures) == (profile != "part1") and ("smart" in fixtures) == (profile == "full")
    code = {p.relative_to(tree).as_posix() for p in tree.rglob("*.py")}
    has = {m: m in code for m in ("minbert/multitask.py", "minbert/smart.py", "minbert/deebert.py",
                                  "minbert/simcse.py", "tasks/simcse/__init__.py", "tasks/search/__init__.py",
                                  "tasks/ensemble.py", "tasks/multitask/__init__.py", "tasks/classifier.py")}
    assert has == {"part1": dict.fromkeys(has, False) | {"tasks/classifier.py": True},
                   "default-project": dict.fromkeys(has, False) | {"tasks/classifier.py": True,
                                                                  "minbert/multitask.py": True,
                                                                  "minbert/smart.py": True,
                                                                  "tasks/multitask/__init__.py": True},
                   "full": dict.fromkeys(has, True)}[profile]
    configs = sorted(p.relative_to(tree).as_posix() for p in (tree / "tasks").rglob("*.json"))
    assert configs == {"part1": [], "default-project": ["tasks/multitask/main-job.json"],
                       "full": sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "tasks").rglob("*.json"))}[profile]
    readme = (tree / "README.md").read_text()
    assert f"`{profile}` profile" in readme and "assignments/README.md" in readme and "(the default)" not in readme
    ignored = (tree / ".gitignore").read_text().split()
    assert {"runs/", "predictions/", ".venv/", "__pycache__/", "*.zip"} <= set(ignored)
    shipped = {p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file()}
    # the extension path's page, with its worked example, goes to the trees whose students build extensions
    assert {p for p in shipped if p.startswith("docs/")} == (set() if profile == "part1" else {"docs/extensions.md"})
    assert ("minbert/rdrop.py" in shipped) == (profile != "part1")
    assert not {"assignments/make.py", "assignments/grade.py", "assignments/profiles.py", "assignments/leaks.py",
                "assignments/INSTRUCTORS.md"} & shipped


def test_the_tree_files_go_to_the_root_with_the_course_url(trees: dict[str, Path], tmp_path: Path) -> None:
    extra = ROOT / "assignments" / make.TREE_FILES
    if not extra.is_dir():
        pytest.skip("assignments/tree_files/ is not there")
    for name, tree in trees.items():
        for path in (p for p in extra.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            assert (tree / path.relative_to(extra)).is_file(), (name, path)
    notebook = (trees["full"] / "minbert.ipynb").read_text()
    assert "https://example.org/course/minbert.git" in notebook and make.COURSE_URL not in notebook
    generate(tmp_path / "t", data=False, profile="part1")
    assert make.NO_COURSE_URL in (tmp_path / "t" / "minbert.ipynb").read_text()


@pytest.mark.parametrize("url", ["C:\\courses\\minbert", 'https://example.org/it"s/min\'bert.git'])
def test_any_course_url_leaves_a_valid_notebook_holding_it(url: str, tmp_path: Path) -> None:
    """A URL with a backslash or a quote (a Windows path, a typo) is written into the set-up cell as a Python literal
    of itself: the notebook stays valid JSON, and COURSE_URL is the URL given."""
    import nbformat
    generate(tmp_path / "t", data=False, profile="part1", course_url=url)
    nb = nbformat.read(tmp_path / "t" / "minbert.ipynb", as_version=4)
    nbformat.validate(nb)
    assigned = [node for c in nb.cells if c.cell_type == "code" for node in ast.walk(ast.parse(c.source))
                if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "COURSE_URL"]
    assert len(assigned) == 1 and ast.literal_eval(assigned[0].value) == url


def test_each_trees_notebook_names_its_own_leaderboard(trees: dict[str, Path]) -> None:
    """The notebook's section 4 says what the overall score is in that tree: SST alone in part 1 (its leaderboard),
    part 2's three tasks where part 2 is shipped; its markdown keeps no profile marker."""
    import nbformat
    for name, tree in trees.items():
        nb = nbformat.read(tree / "minbert.ipynb", as_version=4)
        nbformat.validate(nb)
        md = "".join(c.source for c in nb.cells if c.cell_type == "markdown")
        assert make.HANDOUT_MARK not in md and make.HANDOUT_END not in md, name
        score = next(c.source for c in nb.cells if c.get("id") == "score-md")
        if "multitask" in PROFILES[name].groups:
            assert "part 2's three tasks" in score, (name, score)
        else:
            assert "part 2" not in md and "SST" in score, (name, score)


@pytest.mark.parametrize("profile", list(GROUPS))
def test_the_reference_laid_over_the_tree_scores_full_marks(trees: dict[str, Path], tmp_path: Path,
                                                            profile: str) -> None:
    tree = _lay_reference(trees[profile], tmp_path / "tree", profile)
    proc = _run(tree, "-m", "assignments.check", *GROUPS[profile], timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    totals = [line for line in proc.stdout.splitlines() if "parts pass" in line]
    assert len(totals) == len(GROUPS[profile]) and all(t.split("; ")[1].split()[0].split("/")[0] ==
                                                        t.split("; ")[1].split()[0].split("/")[1] for t in totals), totals


@pytest.mark.parametrize("profile", list(GROUPS))
def test_the_tree_carries_no_solution_statement(trees: dict[str, Path], profile: str) -> None:
    found = leaks(trees[profile], solution_statements())
    assert not found, "\n".join(found)


def test_the_leak_scan_sees_a_statement_in_any_text_file(trees: dict[str, Path], tmp_path: Path) -> None:
    tree = shutil.copytree(trees["part1"], tmp_path / "tree")
    statements = solution_statements()
    line = next(s for s in statements if s.startswith("returnself.head"))            # the classifier head's
    (tree / "notes.md").write_text("some notes\n    return  self.head(self.dropout(h))   # mine\n")
    assert [f.split(":")[0] for f in leaks(tree, statements)] == ["notes.md"], line
    (tree / "notes.md").unlink()
    (tree / "nb.ipynb").write_text(json.dumps({"cells": [{"cell_type": "code", "source": [
        "x = 1\n", "return self.head(self.dropout(h))\n"]}]}))
    assert leaks(tree, statements)


def test_default_project_stops_an_extension_flag_with_the_not_written_line(tmp_path: Path) -> None:
    tree = tmp_path / "dp"
    generate(tree, profile="default-project")
    assert (tree / "data" / "quora-train.csv").is_file() and (tree / "data" / "sts-train.csv").is_file()
    proc = _run(tree, "-m", "tasks.multitask", "--smart", "--tasks", "sst", "--max-train-examples", "8", "--epochs",
                "1", "--run-dir", str(tmp_path / "run"), "--threads", "1", "--no-progress", timeout=300)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: Smart.__init__ in minbert/smart.py:") and "is not written yet" in last, proc.stderr
    assert "it is part of SMART, an extension for you to build" in last and "Traceback" not in proc.stderr


@pytest.fixture(scope="module")
def part1_with_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A part1 tree with the data it ships (the trees fixture's have none)."""
    tree = tmp_path_factory.mktemp("part1data") / "p1"
    generate(tree, profile="part1")
    return tree


def test_part1_ships_sst_and_cfimdb_data_alone(part1_with_data: Path) -> None:
    names = sorted(p.name for p in (part1_with_data / "data").iterdir())
    assert names == ["README.md"] + sorted(f"ids-{t}-{s}.csv" for t in ("cfimdb", "sst")
                                           for s in ("dev", "test-student", "train"))


def test_tasks_score_in_a_part1_tree_reports_sst_alone(part1_with_data: Path, tmp_path: Path) -> None:
    """A part1 tree has SST's data alone and its leaderboard ranks SST alone (assignments/boards.py): tasks.score
    shows the SST row, an overall that is the SST board's (SST accuracy), and asks for the SST file only, the set
    tasks.submit zips there (both read the data directory's files)."""
    from tasks.core.data import TASKS
    from tasks.core.evaluation import write_predictions
    tree = shutil.copytree(part1_with_data, tmp_path / "p1")
    empty = _run(tree, "-m", "tasks.score", str(tmp_path), "--data-dir", "data")
    assert empty.returncode == 1 and "no prediction files (sst-dev-output.csv)" in empty.stdout, empty.stdout
    gold = TASKS["sst"].read(TASKS["sst"].path(tree / "data", "dev"))
    ids = [e.id for e in gold]
    labels = [int(e.label) for e in gold]
    wrong = dict.fromkeys(ids[: len(ids) // 4], True)             # a quarter wrong: accuracy 1 - 1/4 (rounded)
    write_predictions(tree / "predictions" / "sst-dev-output.csv", "sst", ids,
                      [(y + 1) % 5 if i in wrong else y for i, y in zip(ids, labels)])
    proc = _run(tree, "-m", "tasks.score", "predictions")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    accuracy = 1 - len(wrong) / len(ids)
    rows = [line.split() for line in proc.stdout.splitlines()[2:]]
    assert rows == [["SST", "accuracy", "sst-dev-output.csv", f"{len(ids)}/{len(ids)}", f"{accuracy:.4f}"],
                    ["overall", "(dev)", f"{accuracy:.4f}"]], proc.stdout
    assert "Quora" not in proc.stdout and "STS" not in proc.stdout and "absent" not in proc.stdout
    submit = _run(tree, "-m", "tasks.submit")          # the same set: dev here, test missing
    assert "predictions/sst-test-output.csv: missing" in submit.stdout + submit.stderr, submit.stdout + submit.stderr
    assert "para" not in submit.stdout + submit.stderr and "sts-" not in submit.stdout + submit.stderr


def test_a_part1_tree_says_bitfit_s_modes_are_not_part_of_its_assignment(part1_with_data: Path,
                                                                         tmp_path: Path) -> None:
    """A part1 tree carries BitFit's modules skeletonised so that the classifier's flags parse, but its handout sets
    no BitFit: a BitFit mode stops with that said and the modes to use, not "an extension for you to build"."""
    proc = _run(part1_with_data, "-m", "tasks.classifier", "--task", "sst", "--fine-tune-mode", "bitfit", "--epochs",
                "1", "--max-train-examples", "8", "--run-dir", str(tmp_path / "run"), "--threads", "1",
                "--no-progress", timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: freeze() in minbert/bitfit.py:") and "is not written yet" in last, last
    assert "an extension for you to build" not in last, last
    assert "BitFit, which is not part of this assignment" in last, last
    assert "--fine-tune-mode full-model or last-linear-layer" in last, last


def test_make_help_explains_the_profiles(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        make.main(["--help"])
    out = capsys.readouterr().out
    assert all(name in out for name in PROFILES) and "--course-url" in out


def test_the_grader_grades_a_profile_s_groups_alone() -> None:
    from assignments.grade import grade
    res = grade(ROOT, groups=["core", "multitask"], profile="default-project", as_user=grading_user())
    assert res["score"] == 200 and [t["group"] for t in res["groups"]] == ["core", "multitask"], res["parts"]
    with pytest.raises(ValueError, match="not in the default-project profile: smart"):
        grade(ROOT, groups=["smart"], profile="default-project", as_user=grading_user())


def test_a_part_2_check_reaching_an_unwritten_pool_names_pool(trees: dict[str, Path], tmp_path: Path) -> None:
    tree = shutil.copytree(trees["default-project"], tmp_path / "tree")
    shutil.copyfile(ROOT / "minbert/multitask.py", tree / "minbert/multitask.py")     # part 2 written, pool() not
    assert BEGIN not in (tree / "minbert/pooling.py").read_text()
    proc = _run(tree, "-m", "assignments.check", "mt_sentence")
    assert "pool() in minbert/pooling.py (part 1, classifier_head) is not written yet" in proc.stdout, proc.stdout


def test_the_leaderboard_commands_name_the_tasks_of_minbert_multitask() -> None:
    from minbert.multitask import TASK_NAMES
    from tasks import score, submit
    assert score.TASK_NAMES == submit.TASK_NAMES == TASK_NAMES


def test_the_commands_help_calls_files_a_tree_lacks_the_reference_repositorys(trees: dict[str, Path]) -> None:
    """A student reads --help in a tree that holds no benchmarks/ and only some of docs/: a file of those the help
    names is either in every tree that has the command or introduced as the reference repository's."""
    import importlib
    for command in ("classifier", "multitask", "simcse", "deebert", "search", "predict", "export", "attention"):
        module = importlib.import_module(f"tasks.{command}")
        builder = getattr(module, "build_parser", None)
        text = " ".join((builder().format_help() if builder else module.__doc__ or "").split())
        holders = [t for t in trees.values() if (t / "tasks" / command).exists() or (t / "tasks" / f"{command}.py").exists()]
        for m in re.finditer(r"(?<![\w/])((?:benchmarks|docs)/[\w/.-]+\w)", text):
            if not all((t / m.group(1)).exists() for t in holders):
                assert "reference repository's" in text[max(0, m.start() - 40):m.start()], (command, m.group(1))
