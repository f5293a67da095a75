"""A graded file submitted as a symbolic link (assignments/staging.py): never followed, and said to be a link, not
"not in the submission", on the console and in each part's output that grades it."""

from __future__ import annotations

from pathlib import Path

from conftest import grading_user

from assignments.grade import grade
from assignments.make import ROOT
from assignments.staging import find_links, stage


def linked_submission(tmp_path: Path) -> Path:
    """optim.py a link to the reference's; tasks/ a linked folder; model.py a real file (the stub's bytes)."""
    sub = tmp_path / "sub"
    (sub / "minbert").mkdir(parents=True)
    (sub / "minbert" / "optim.py").symlink_to(ROOT / "minbert" / "optim.py")
    (sub / "tasks").symlink_to(ROOT / "tasks", target_is_directory=True)
    (sub / "minbert" / "model.py").write_text("x = 1\n")
    return sub


def test_the_link_on_a_graded_files_path_is_found_and_named(tmp_path: Path) -> None:
    sub = linked_submission(tmp_path)
    assert find_links(sub, Path("minbert/optim.py")) == [sub / "minbert" / "optim.py"]
    assert find_links(sub, Path("tasks/classifier.py")) == [sub / "tasks"]      # a linked folder on its path
    assert find_links(sub, Path("minbert/model.py")) == [] == find_links(sub, Path("minbert/pooling.py"))
    staged = stage(sub, tmp_path / "staged", ["minbert/optim.py", "tasks/classifier.py", "minbert/pooling.py"])
    assert ("minbert/optim.py: minbert/optim.py is a symbolic link, which the grader does not follow; upload the file "
            "itself (graded as the unfilled stub)") in staged.notes
    assert ("tasks/classifier.py: tasks is a symbolic link, which the grader does not follow; upload the file itself "
            "(graded as the unfilled stub)") in staged.notes
    assert "minbert/pooling.py: not in the submission; graded as the unfilled stub" in staged.notes
    assert staged.linked == {"minbert/optim.py": "minbert/optim.py", "tasks/classifier.py": "tasks"}
    assert staged.missing == {"minbert/optim.py", "tasks/classifier.py", "minbert/pooling.py"}
    assert (tmp_path / "staged" / "minbert" / "optim.py").read_text() != (ROOT / "minbert" / "optim.py").read_text()


def test_a_parts_output_says_its_file_is_a_link(tmp_path: Path) -> None:
    res = grade(linked_submission(tmp_path), parts=["adamw"], as_user=grading_user())
    assert res["score"] == 0
    said = res["tests"][0]["output"]
    assert said.startswith("not started: minbert/optim.py is a symbolic link in the submission (minbert/optim.py), "
                           "which the grader does not follow; upload the file itself. This part ran the unfilled "
                           "stub"), said
    assert "not in the submission" not in said
    assert "minbert/optim.py is a symbolic link, which the grader does not follow" in res["output"]
