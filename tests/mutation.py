"""Mutation testing of one module with mutmut, against only the tests that cover it (a dev tool, not in the test run).

    python tests/mutation.py minbert/model.py [--max-children 2]      (or: make mutate MODULE=minbert/model.py)

mutmut reads its settings from the pyproject.toml of the directory it runs in, so each module gets its own scratch
copy of the tree under build/mutate/NAME/ with a [tool.mutmut] section naming the module and its tests; mutmut's
own results stay there (`cd build/mutate/NAME && mutmut results`, `mutmut show MUTANT`). The module -> tests table
below is the fast selection; tests/MUTATION.md records each run's killed / survived / equivalent counts.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# the module -> the tests that cover it (fast ones only: each surviving mutant reruns them)
TESTS = {
    "minbert/model.py": ["tests/test_model.py", "tests/test_mutants.py", "tests/test_pals.py"],
    "minbert/optim.py": ["tests/test_optim.py", "tests/test_mutants_optim.py"],
    "minbert/smart.py": ["tests/test_smart.py", "tests/test_catches.py", "tests/test_mutants_smart.py"],
    "minbert/deebert.py": ["tests/test_deebert.py", "tests/test_deebert_cli.py", "tests/test_mutants_deebert.py"],
    "minbert/files.py": ["tests/test_files.py", "tests/test_full_disk.py"],
    "tasks/core/run_files.py": ["tests/test_run_folders.py", "tests/test_run_copies.py", "tests/test_settings_resume.py", "tests/test_export_runs.py",
                                "tests/test_predict_guards.py", "tests/test_ensemble_cli.py", "tests/test_run_guards.py",
                                "tests/test_attention.py", "tests/test_output_paths.py",
                                "tests/test_mutants_run_files.py", "tests/test_mutants_run_copies.py"],
    "tasks/core/evaluation.py": ["tests/test_tasks_scoring.py", "tests/test_catches.py", "tests/test_mutants.py",
                                 "tests/test_ensemble_cli.py"],
    "assignments/standing.py": ["tests/test_leaderboard.py", "tests/test_leaderboard_abuse.py",
                                "tests/test_leaderboard_due.py", "tests/test_leaderboard_entries.py",
                                "tests/test_mutants_standing.py"],
    "assignments/uploads.py": ["tests/test_leaderboard.py", "tests/test_leaderboard_abuse.py",
                               "tests/test_leaderboard_entries.py", "tests/test_mutants_standing.py",
                               "tests/test_mutants_uploads.py"],
}
# tests that build a student tree or a bundle need git, and a copy under build/ is not a checkout of its own
# (test_leaderboard_part1.py's fixture builds a bundle: left out of standing.py's selection for that reason); a
# message naming a settings class's file reads mutants/tests/... in mutmut's copy; a test that runs a command in a
# subprocess fails under mutmut's stats run (the subprocess's trampolines look for mutmut's settings in its own folder:
# test_typed_runs.py, whose runs are killed in subprocesses, is left out of run_files.py's selection for that reason)
DESELECTED = ["tests/test_leaderboard.py::test_a_student_tree_carries_no_gold_no_salt_and_no_leaderboard_code",
              "tests/test_settings_resume.py::test_a_section_gains_a_setting_and_a_run_written_without_it_resumes",
              "tests/test_run_guards.py::test_python_m_classifier_resume_names_the_command_of_another_commands_run",
              "tests/test_export_runs.py::test_out_naming_an_existing_file_is_one_line_of_error_and_exit_2"]
COPIED = ("minbert", "tasks", "tests", "data", "assignments", "requirements.txt")


def scratch_tree(module: str, tests: list[str]) -> Path:
    """build/mutate/NAME: a copy of the tree with a pyproject.toml whose [tool.mutmut] names the module and tests."""
    where = ROOT / "build" / "mutate" / Path(module).stem
    where.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        src, dst = ROOT / name, where / name
        if dst.is_dir():
            shutil.rmtree(dst)
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(src, dst)
    text = (ROOT / "pyproject.toml").read_text()
    text = re.sub(r"\n\[tool\.mutmut\].*?(?=\n\[|\Z)", "", text, flags=re.DOTALL)
    quoted = ", ".join(f'"{t}"' for t in tests)
    args = ", ".join(f'"{a}"' for a in ["-q", "-x", "-p", "no:cacheprovider", *(f"--deselect={t}" for t in DESELECTED)])
    text += ("\n[tool.mutmut]\n"
             'source_paths = ["minbert", "tasks", "assignments"]\n'
             f'only_mutate = ["{module}"]\n'
             f"pytest_add_cli_args_test_selection = [{quoted}]\n"
             f"pytest_add_cli_args = [{args}]\n"
             'also_copy = ["data", "requirements.txt"]\n'
             "use_git_change_detection = false\n"
             'process_isolation = "forkserver"\n')  # torch's thread pools do not survive a plain fork
    (where / "pyproject.toml").write_text(text)
    return where


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("module", choices=sorted(TESTS), help="the module to mutate")
    p.add_argument("--max-children", type=int, default=2, help="mutants tested at once (default 2)")
    p.add_argument("--fresh", action="store_true", help="forget earlier results for this module")
    args = p.parse_args(argv)
    where = scratch_tree(args.module, TESTS[args.module])
    if args.fresh:
        shutil.rmtree(where / "mutants", ignore_errors=True)
    env = os.environ | {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    mutmut = [sys.executable, "-m", "mutmut"]
    code = subprocess.call([*mutmut, "run", "--max-children", str(args.max_children)], cwd=where, env=env)
    subprocess.call([*mutmut, "results", "--all", "true"], cwd=where, env=env)
    return code


if __name__ == "__main__":
    sys.exit(main())
