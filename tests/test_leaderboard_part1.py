"""The part1 profile's leaderboard (assignments/boards.py's SST board): its bundle end to end on SST-only gold, its
refusals, the scoreboard on the bundle's settings, and the part1 handout's submit command against what it reads."""

from __future__ import annotations

import csv
import io
import json
import os
import shlex
import shutil
import sys
import zipfile

import pytest
import warm
from conftest import DATA, ROOT
from leaderboard_fixtures import (
    SALT,
    assert_no_secret,
    autograder_layout,
    dev_labels,
    partial,
    run_autograder,
    visible_text,
    write_gold,
    write_upload,
)

from assignments import bundle, scoreboard
from assignments.boards import BOARDS, SST
from assignments.leaderboard import Settings, grade
from assignments.make import generate
from assignments.standing import load_dev, load_gold, split_gold, split_ids
from tasks.core.data import TASKS
from tasks.core.evaluation import prediction_path, write_predictions
from tasks.submit import make_submission

PAST = "2020-01-01T00:00:00+00:00"
PART1 = Settings(profile="part1")


@pytest.fixture(scope="module")
def lb(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """SST's gold alone, the salt, the part1 bundle built from them, and SST's dev labels."""
    base = tmp_path_factory.mktemp("lb-part1")
    labels = write_gold(base / "gold", tasks=("sst",))
    (base / "salt").write_text(SALT + "\n")
    out = base / "leaderboard.zip"
    argv = ["leaderboard", str(out), "--profile", "part1", "--gold", str(base / "gold"), "--salt-file",
            str(base / "salt"), "--daily-limit", "3"]
    assert bundle.main(argv) == 0
    return {"gold_dir": base / "gold", "salt": base / "salt", "labels": labels, "bundle": out,
            "dev_labels": {"sst": dev_labels()["sst"]}, "dev": load_dev(DATA, SST),
            "tests": split_gold(load_gold(base / "gold", DATA, SST), SALT, 0.5, SST)}


def _accuracy(values: dict, gold: dict, ids: list[str]) -> float:
    return round(sum(values[i] == gold[i] for i in ids) / len(ids), 6)


def test_the_part1_bundle_ranks_sst_alone_public_then_private(lb, tmp_path):
    with zipfile.ZipFile(lb["bundle"]) as z:
        gold = [n for n in z.namelist() if n.startswith("leaderboard/gold/")]
        settings = json.loads(z.read("leaderboard/settings.json"))
    assert gold == ["leaderboard/gold/ids-sst-test.csv"]
    assert {k: v for k, v in settings.items() if not k.endswith("_sha256")} == {
        "daily_limit": 3, "private_fraction": 0.5, "points": 1.0, "profile": "part1"}
    assert set(settings["gold_sha256"]) == {"ids-sst-test.csv"}
    test = partial(lb["labels"])                                       # SST drawn at random: the parts differ
    upload = write_upload(tmp_path / "up", test, lb["dev_labels"])
    public, private = split_ids(list(lb["labels"]["sst"]), SALT, 0.5)
    figures = {part: _accuracy(test["sst"], lb["labels"]["sst"], ids) for part, ids in (("public", public),
                                                                                           ("private", private))}
    assert f"{figures['public']:.4f}" != f"{figures['private']:.4f}"

    status, before, stdout = run_autograder(autograder_layout(tmp_path, lb["bundle"], upload, "before"))
    assert status == 0 and before["score"] == 1.0
    assert before["leaderboard"] == [{"name": "Overall", "value": figures["public"], "order": "desc"},
                                     {"name": "SST accuracy", "value": figures["public"], "order": "desc"}]
    assert [t["name"] for t in before["tests"]] == ["Upload: the two prediction files, complete and valid",
                                                    "Dev set (public labels)", "Test set, public part"]
    assert "Dev set (public labels): overall 1.0000 (SST accuracy 1.0000)" in before["output"]
    assert f"Test set, public part: overall {figures['public']:.4f} (SST accuracy {figures['public']:.4f})" \
        in before["output"]
    assert f"{figures['private']:.4f}" not in json.dumps(before) and "Quora" not in visible_text(before)
    for text in (visible_text(before), stdout):
        assert_no_secret(text, lb["gold_dir"], lb["labels"])

    status, after, _ = run_autograder(autograder_layout(tmp_path, lb["bundle"], upload, "after", due=PAST,
                                                         created="2019-12-31T00:00:00+00:00"))      # on time
    assert status == 0 and [e["value"] for e in after["leaderboard"]] == [figures["private"]] * 2
    assert after["tests"][-1]["name"] == "Test set, private part (the final standing)"
    assert f"ids: SST {len(private)}" in after["tests"][-1]["output"]


def _other_tasks(folder):
    """Valid Quora and STS prediction files (a multitask run's) in folder."""
    for task, value in (("para", 0), ("sts", 2.5)):
        for split in ("dev", "test"):
            ids = [e.id for e in TASKS[task].read(TASKS[task].path(DATA, split))]
            write_predictions(prediction_path(folder, task, split), task, ids, [value] * len(ids))
    return folder


def test_the_part1_board_names_the_sst_files_an_upload_lacks_and_reads_a_multitask_zips_sst(lb, tmp_path):
    multitask = _other_tasks(tmp_path / "multitask")
    results = grade(multitask, lb["tests"], PART1, lb["dev"])
    assert results["score"] == 0 and "leaderboard" not in results
    assert ("no prediction file in the upload (it holds: para-dev-output.csv, para-test-output.csv, "
            "sts-dev-output.csv, sts-test-output.csv); upload the two files sst-{dev,test}-output.csv, or the zip "
            "that python -m tasks.submit writes") in results["output"]
    write_upload(multitask, {"sst": lb["labels"]["sst"]}, {})                       # the test file alone
    results = grade(multitask, lb["tests"], PART1, lb["dev"])
    assert results["score"] == 0
    assert results["tests"][0]["name"] == "Upload: the two prediction files, complete and valid"
    assert ("sst-dev-output.csv: not in the upload; upload the two files sst-{dev,test}-output.csv (python -m "
            "tasks.classifier --task sst --predictions-dir predictions writes them, python -m tasks.submit zips them)"
            ) in results["output"]
    write_upload(multitask, {}, lb["dev_labels"])                                   # a multitask student's six files
    made, problems = make_submission(multitask, DATA, tmp_path / "submission.zip")
    assert problems == [] and len(zipfile.ZipFile(made).namelist()) == 6
    results = grade(made, lb["tests"], PART1, lb["dev"])
    assert results["score"] == 1.0 and [e["value"] for e in results["leaderboard"]] == [1.0, 1.0]
    assert results["tests"][0]["output"] == ("Files read: submission.zip:predictions/sst-dev-output.csv, "
                                             "submission.zip:predictions/sst-test-output.csv")


def test_the_scoreboard_takes_the_bundles_board_and_the_builder_checks_the_sst_gold(lb, tmp_path, capsys):
    folder = tmp_path / "uploads"
    write_upload(folder / "alice", {"sst": lb["labels"]["sst"]}, lb["dev_labels"])
    write_upload(folder / "bob" / "predictions", partial(lb["labels"]), lb["dev_labels"])
    (shutil.copytree(folder / "alice", folder / "carol") / "sst-dev-output.csv").unlink()
    common = [str(folder), "--gold", str(lb["gold_dir"]), "--salt-file", str(lb["salt"]), "--data-dir", str(DATA)]
    boards = {}
    for name, flags in (("settings", ["--settings", str(lb["bundle"])]), ("profile", ["--profile", "part1"])):
        out = tmp_path / name
        assert scoreboard.main([*common, *flags, "--csv", f"{out}.csv", "--md", f"{out}.md"]) == 0
        boards[name] = (tmp_path / f"{name}.csv").read_text()
    assert boards["settings"] == boards["profile"]
    rows = list(csv.DictReader(io.StringIO(boards["settings"])))
    assert list(rows[0]) == ["rank", "submission", "public overall", "public SST", "private overall", "private SST",
                             "valid", "problems"]
    assert (rows[0]["rank"], rows[0]["submission"], rows[0]["private SST"]) == ("1", "alice", "1.0000")
    assert rows[1]["submission"] == "bob" and rows[1]["private overall"] == rows[1]["private SST"] != "1.0000"
    assert rows[2]["valid"] == "no" and rows[2]["problems"].startswith("sst-dev-output.csv: not in the upload")
    capsys.readouterr()
    assert scoreboard.main([*common, "--csv", str(tmp_path / "m.csv"), "--md", str(tmp_path / "m.md")]) == 2
    assert "quora-test.csv: no such file" in capsys.readouterr().err       # the multitask board needs its gold
    assert scoreboard.main([*common, "--settings", str(lb["bundle"]), "--profile", "full", "--csv",
                            str(tmp_path / "x.csv"), "--md", str(tmp_path / "x.md")]) == 2
    assert capsys.readouterr().err == (f"error: --profile full differs from part1 in {lb['bundle']}, the "
                                       "leaderboard's: leave --profile out to use the bundle's\n")
    assert not (tmp_path / "x.csv").exists()
    nowhere = tmp_path / "nosuch.zip"
    assert scoreboard.main([*common, "--settings", str(nowhere), "--csv", str(tmp_path / "x.csv"), "--md",
                            str(tmp_path / "x.md")]) == 2
    assert capsys.readouterr().err == (f"error: {nowhere}: cannot read the settings (No such file or directory): give "
                                       "the leaderboard bundle's zip, or the leaderboard/settings.json it holds\n")
    other = tmp_path / "other-salt"
    other.write_text("f" * 64 + "\n")
    assert scoreboard.main([*common[:4], str(other), *common[-2:], "--settings", str(lb["bundle"]), "--csv",
                            str(tmp_path / "x.csv"), "--md", str(tmp_path / "x.md")]) == 2
    assert capsys.readouterr().err == (f"error: --salt-file {other} is not the salt of {lb['bundle']}: another salt "
                                       "splits the test set otherwise than the leaderboard; give the bundle's\n")
    wrong = shutil.copytree(lb["gold_dir"], tmp_path / "wrong-gold")
    head, first, *rest = (wrong / "ids-sst-test.csv").read_text().splitlines(keepends=True)
    label = first.rstrip("\n").rsplit("\t", 1)
    (wrong / "ids-sst-test.csv").write_text("".join([head, f"{label[0]}\t{(int(label[1]) + 1) % 5}\n", *rest]))
    assert scoreboard.main([common[0], "--gold", str(wrong), *common[3:], "--settings", str(lb["bundle"]), "--csv",
                            str(tmp_path / "x.csv"), "--md", str(tmp_path / "x.md")]) == 2
    assert capsys.readouterr().err.startswith(f"error: {wrong / 'ids-sst-test.csv'} is not the gold of ")
    assert scoreboard.main([*common, "--profile", "part1", "--csv", str(tmp_path / "x.csv"), "--md",
                            str(tmp_path / "x.md")]) == 0
    assert "note: no --settings: the board is part1's with private fraction 0.5" in capsys.readouterr().err

    short = shutil.copytree(lb["gold_dir"], tmp_path / "short")
    lines = (short / "ids-sst-test.csv").read_text().splitlines(keepends=True)
    (short / "ids-sst-test.csv").write_text("".join(lines[:-1]))
    argv = ["leaderboard", str(tmp_path / "b.zip"), "--profile", "part1", "--gold", str(short), "--salt-file",
            str(lb["salt"])]
    assert bundle.main(argv) == 2 and not (tmp_path / "b.zip").exists()
    err = capsys.readouterr().err
    assert "ids-sst-test.csv: its ids are not those of" in err and "ids-sst-test-student.csv" in err


def test_the_part1_handouts_submit_command_zips_what_the_part1_board_reads(lb, tmp_path):
    tree = tmp_path / "tree"
    generate(tree, profile="part1")
    section = (tree / "assignments" / "README.md").read_text().split("## Training and the leaderboard", 1)[1]
    section = section.split("\n## ", 1)[0]
    assert "ranks SST alone" in section and all(f"`{name}`" in section for name in SST.files)
    line = next(x for x in section.splitlines() if x.startswith("python -m tasks.submit "))
    argv = shlex.split(line.split("#")[0])[3:]
    data, preds = tree / "data", tree / "predictions"
    dev = {e.id: e.label for e in TASKS["sst"].read(TASKS["sst"].path(data, "dev"))}
    write_upload(preds, {"sst": lb["labels"]["sst"]}, {"sst": dev})               # a tasks.classifier SST run's
    cfimdb = [e.id for e in TASKS["cfimdb"].read(TASKS["cfimdb"].path(data, "dev"))]
    write_predictions(prediction_path(preds, "cfimdb", "dev"), "cfimdb", cfimdb, [1] * len(cfimdb))
    proc = warm.run([sys.executable, "-m", "tasks.submit", *argv], cwd=tree, capture_output=True, text=True,
                    env={**os.environ, "PYTHONPATH": str(tree)}, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    made = tree / "submission.zip"
    assert sorted(zipfile.ZipFile(made).namelist()) == sorted(f"predictions/{name}" for name in SST.files)
    tests = split_gold(load_gold(lb["gold_dir"], data, SST), SALT, 0.5, SST)
    results = grade(made, tests, PART1, load_dev(data, SST))
    assert results["score"] == 1.0 and [e["value"] for e in results["leaderboard"]] == [1.0, 1.0]
    assert results["tests"][0]["output"] == ("Files read: submission.zip:predictions/sst-dev-output.csv, "
                                             "submission.zip:predictions/sst-test-output.csv")


def test_the_guide_says_which_profiles_have_which_leaderboard_and_shows_the_part1_command():
    guide = (ROOT / "assignments" / "INSTRUCTORS.md").read_text().split("## The leaderboard", 1)[1].split("\n## ", 1)[0]
    for profile, board in BOARDS.items():
        row = next(x for x in guide.splitlines() if x.startswith("| `") and f"`{profile}`" in x.split("|")[1])
        assert board.wanted in row.replace("`", "") and all(name in row for name, _ in board.columns), profile
    flat = " ".join(guide.replace("\\\n", " ").split())                          # continuation lines joined
    assert "python -m assignments.bundle leaderboard leaderboard.zip --profile part1 --gold" in flat
