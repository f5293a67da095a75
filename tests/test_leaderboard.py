"""The leaderboard autograder (assignments/leaderboard.py, standing.py, uploads.py) on synthetic gold: the real
test-student ids with random labels. The split, scoring, validation, upload layouts, the due-date phases, the daily
limit and secrecy; the bundle, the scoreboard and the lock are in test_leaderboard_bundle.py."""

from __future__ import annotations

import copy
import dataclasses
import json
import random
import re
import shutil
import stat
import zipfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import DATA
from leaderboard_fixtures import (
    SALT,
    TASK_NAMES,
    assert_no_secret,
    assert_results_format,
    dev_labels,
    figure_texts,
    metadata,
    partial,
    visible_text,
    write_gold,
    write_upload,
)

from assignments import leaderboard, uploads
from assignments.boards import MULTITASK
from assignments.leaderboard import Settings, grade
from assignments.standing import GoldError, is_private, load_dev, load_gold, split_gold, split_ids
from tasks.core.data import TASKS
from tasks.submit import make_submission

NOW = datetime(2030, 5, 1, 12, 0, tzinfo=UTC)
FUTURE, PAST = "2030-06-01T23:00:00-07:00", "2030-04-01T23:00:00-07:00"
ON_TIME = "2030-03-20T10:00:00-07:00"            # an upload made before PAST, graded after it (NOW)


@pytest.fixture(scope="module")
def lb(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The gold on disk, its labels, its split, the dev gold, and a perfect upload's values."""
    base = tmp_path_factory.mktemp("lb")
    labels = write_gold(base / "gold")
    tests = split_gold(load_gold(base / "gold", DATA), SALT, 0.5)
    return {"base": base, "gold_dir": base / "gold", "labels": labels, "tests": tests, "dev": load_dev(DATA),
            "dev_labels": dev_labels()}


DEFAULT = Settings()


def _grade(lb: dict, folder: Path, meta: dict | None = None, settings: Settings = DEFAULT, now: datetime = NOW) -> dict:
    results = grade(folder, lb["tests"], settings, lb["dev"], meta, now=now)
    assert_results_format(results)
    return results


def _perfect(lb: dict, folder: Path) -> Path:
    return write_upload(folder, lb["labels"], lb["dev_labels"])


def test_the_split_is_salted_deterministic_disjoint_covering_and_order_free(lb):
    ids = [e.id for e in TASKS["para"].read(TASKS["para"].path(DATA, "test"))]
    public, private = split_ids(ids, SALT, 0.5)
    assert split_ids(ids, SALT, 0.5) == (public, private)                        # deterministic
    assert set(public) | set(private) == set(ids) and not set(public) & set(private) and len(ids) == 2000
    shuffled = random.Random(3).sample(ids, len(ids))
    again = split_ids(shuffled, SALT, 0.5)
    assert (set(again[0]), set(again[1])) == (set(public), set(private))        # independent of row order
    assert all(is_private(i, SALT, 0.5) for i in private) and not any(is_private(i, SALT, 0.5) for i in public)
    other = split_ids(ids, SALT + "x", 0.5)[1]
    assert 0.4 < len(set(other) & set(private)) / len(private) < 0.6            # another salt: another split
    assert 0.45 < len(private) / len(ids) < 0.55
    assert 0.16 < len(split_ids(ids, SALT, 0.2)[1]) / len(ids) < 0.24
    assert set(split_ids(ids, SALT, 0.2)[1]) < set(private)                      # one threshold on one hash
    for task in TASK_NAMES:                                                      # the module's split, per task
        assert set(lb["tests"].public[task]) | set(lb["tests"].private[task]) == set(lb["labels"][task])


def test_a_perfect_upload_scores_one_everywhere_and_earns_its_points(lb, tmp_path):
    results = _grade(lb, _perfect(lb, tmp_path / "up"), settings=Settings(points=2.5))
    assert results["score"] == 2.5
    assert [e["name"] for e in results["leaderboard"]] == [name for name, _ in MULTITASK.columns]
    assert all(e["value"] == pytest.approx(1.0) and e["order"] == "desc" for e in results["leaderboard"])
    upload, dev, public = results["tests"]                    # no due date passed: no private figure at all
    assert (upload["score"], upload["max_score"], upload["status"]) == (2.5, 2.5, "passed")
    final = _grade(lb, _perfect(lb, tmp_path / "up2"), metadata(ON_TIME, PAST))
    private = final["tests"][-1]
    assert private["name"].startswith("Test set, private part")
    for test in (dev, public, private):
        assert "overall 1.0000 (SST accuracy 1.0000, Quora accuracy 1.0000, STS Pearson r 1.0000)" in test["output"]
    assert all(t.get("visibility", "visible") == "visible" for t in (*results["tests"], *final["tests"]))
    extra = results["extra_data"]
    assert set(extra) >= {"python", "torch", "numpy", "tokenizers", "safetensors", "reference_commit"}


def test_a_malformed_upload_scores_zero_with_every_problem_by_file_and_line(lb, tmp_path):
    folder = _perfect(lb, tmp_path / "up")
    sst = folder / "sst-test-output.csv"
    lines = sst.read_text().splitlines()
    lines[2] = lines[2].split(" , ")[0] + " , 7"                                  # line 3: out of range
    sst.write_text("\n".join(lines) + "\n")
    para = folder / "para-test-output.csv"
    lines = para.read_text().splitlines()
    missing = lines.pop(5).split(" , ")[0]                                        # an id left out
    para.write_text("\n".join(lines) + "\n")
    sts = folder / "sts-dev-output.csv"
    sts.write_text(sts.read_text() + sts.read_text().splitlines()[3] + "\n")     # line 4 again at the end
    results = _grade(lb, folder)
    assert results["score"] == 0 and "leaderboard" not in results
    out = results["output"]
    assert re.search(r"sst-test-output\.csv:3: id \w+: value '7' out of range", out)
    assert re.search(r"sts-dev-output\.csv:\d+: duplicate id \w+ \(first on line 4\)", out)
    assert f"para-test-output.csv: 1 missing ids of quora-test-student.csv have no prediction: {missing}" in out
    assert results["tests"][0]["status"] == "failed" and results["tests"][0]["score"] == 0
    assert_no_secret(visible_text(results), lb["gold_dir"], lb["labels"])
    (folder / "sts-test-output.csv").unlink()
    assert "sts-test-output.csv: not in the upload" in _grade(lb, folder)["output"]
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "preds.tar.gz").write_bytes(b"\x1f\x8b")
    assert "no prediction file in the upload (it holds: preds.tar.gz); upload the six files" in _grade(lb, empty)["output"]
    with zipfile.ZipFile(empty / "preds.zip", "w") as z:
        z.writestr("notes/readme.txt", "hello")
    assert "preds.zip holds no prediction file (it holds: notes/readme.txt)" in _grade(lb, empty)["output"]


def _zip_dir(folder: Path, out: Path, prefix: str = "") -> Path:
    with zipfile.ZipFile(out, "w") as z:
        for path in sorted(folder.iterdir()):
            z.write(path, arcname=f"{prefix}{path.name}")
    return out


def test_flat_files_submits_zip_and_nested_folders_give_the_same_result(lb, tmp_path):
    flat = write_upload(tmp_path / "flat", partial(lb["labels"]), lb["dev_labels"])
    made, problems = make_submission(flat, DATA, tmp_path / "submission.zip")
    assert problems == []
    as_zip = tmp_path / "zipped"                                         # an upload that Gradescope left as a zip
    as_zip.mkdir()
    shutil.copy(made, as_zip / "submission.zip")
    unpacked = tmp_path / "unpacked"                                     # the same zip, unpacked by Gradescope
    zipfile.ZipFile(made).extractall(unpacked)
    nested = tmp_path / "nested"
    shutil.copytree(flat, nested / "my-project" / "predictions")
    (nested / "__MACOSX").mkdir()
    zipped_folder = tmp_path / "folder-zip"
    zipped_folder.mkdir()
    _zip_dir(flat, zipped_folder / "upload.zip", prefix="minbert/predictions/")
    results = [_grade(lb, p) for p in (flat, made, as_zip, unpacked, nested, zipped_folder)]
    reference = results[0]
    assert reference["score"] == 1 and reference["leaderboard"][1]["value"] < 0.5      # SST is random
    for other in results[1:]:
        assert other["leaderboard"] == reference["leaderboard"] and other["score"] == reference["score"]
        assert [t["output"].splitlines()[0] for t in other["tests"][1:]] == \
               [t["output"].splitlines()[0] for t in reference["tests"][1:]]
    assert "predictions/sst-test-output.csv" in results[3]["tests"][0]["output"]
    assert "read the prediction files from submission.zip" in results[2]["output"]


def _member(z: zipfile.ZipFile, name: str, data: bytes, mode: int = 0o100644) -> None:
    info = zipfile.ZipInfo(name)
    info.external_attr = mode << 16
    z.writestr(info, data)


@pytest.mark.parametrize("case", ["traversal", "absolute", "symlink", "too-big", "not-a-zip", "two-zips"])
def test_unsafe_or_unreadable_zips_are_refused_with_a_reason_and_nothing_written_outside(lb, tmp_path, case,
                                                                                         monkeypatch):
    folder = tmp_path / "up"
    folder.mkdir()
    good = _perfect(lb, tmp_path / "good")
    archive = folder / "upload.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for path in sorted(good.iterdir()):
            z.write(path, arcname=f"predictions/{path.name}")
        if case == "traversal":
            _member(z, "../../evil.txt", b"x")
        elif case == "absolute":
            _member(z, "/tmp/evil.txt", b"x")
        elif case == "symlink":
            _member(z, "predictions/link", b"/etc/passwd", stat.S_IFLNK | 0o777)
    if case == "too-big":
        monkeypatch.setattr(uploads, "MAX_BYTES", 10_000)
    if case == "not-a-zip":
        archive.write_bytes(b"PK\x03\x04 but not a zip at all")
    if case == "two-zips":
        shutil.copy(archive, folder / "other.zip")
    results = _grade(lb, folder)
    assert results["score"] == 0 and "leaderboard" not in results
    expected = {"traversal": "points outside the archive", "absolute": "points outside the archive",
                "symlink": "is a symbolic link", "too-big": "MiB uncompressed", "not-a-zip": "not a readable zip",
                "two-zips": "several zip files"}[case]
    assert expected in results["output"]
    assert not (tmp_path / "evil.txt").exists() and not Path("/tmp/evil.txt").exists()


def _private_figures(results_after: dict) -> list[str]:
    return [text for e in results_after["leaderboard"] for text in figure_texts(e["value"])]


def test_private_figures_stay_hidden_until_the_due_date_then_lead_the_board(lb, tmp_path):
    folder = write_upload(tmp_path / "up", partial(lb["labels"]), lb["dev_labels"])
    before = _grade(lb, folder, metadata("2030-04-20T10:00:00-07:00", FUTURE))
    after = _grade(lb, folder, metadata(ON_TIME, PAST))
    late = _grade(lb, folder, metadata(ON_TIME, PAST, late=FUTURE))
    private, public = after["leaderboard"], before["leaderboard"]
    assert private[1]["value"] != public[1]["value"] and private[0]["value"] != public[0]["value"]
    assert f"{private[1]['value']:.4f}" != f"{public[1]['value']:.4f}"
    shown = visible_text(before)
    for text in _private_figures(after)[:6]:                   # overall and SST, the figures that differ
        assert text not in shown, text
    assert late["leaderboard"] == public                        # a late due date ahead: still the public part
    everything = json.dumps(before)                             # not even a hidden test holds a private figure
    for text in _private_figures(after)[:6]:
        assert text not in everything, text
    assert [t["name"] for t in after["tests"]][-1] == "Test set, private part (the final standing)"
    assert "final standing" in after["output"] and f"{private[0]['value']:.4f}" in after["output"]
    assert after["extra_data"]["phase"] == "final" and before["extra_data"]["phase"] == "public"
    assert _grade(lb, folder)["leaderboard"] == public          # no metadata: no due date, the public part


def _previous(hours_before: float, created: datetime, results: dict | None = None, error: bool = False) -> dict:
    entry = {"submission_time": (created - timedelta(hours=hours_before)).isoformat(), "score": 1.0,
             "autograder_error": error}
    if results is not None:
        entry["results"] = results
    return entry


def test_the_daily_limit_counts_24_hours_before_created_at_and_keeps_the_previous_result(lb, tmp_path):
    folder = _perfect(lb, tmp_path / "up")
    created = datetime(2030, 4, 20, 10, 0, tzinfo=UTC)
    settings = Settings(daily_limit=2)
    earlier = _grade(lb, write_upload(tmp_path / "old", partial(lb["labels"]), lb["dev_labels"]))

    def run(previous: list[dict], due: str = FUTURE) -> dict:
        return _grade(lb, folder, metadata(created.isoformat(), due, previous), settings)

    assert run([])["leaderboard"][0]["value"] == 1.0                                            # under
    assert run([_previous(30, created), _previous(5, created, earlier)])["leaderboard"][0]["value"] == 1.0   # at
    assert run([_previous(3, created), _previous(2, created, error=True), _previous(1, created, earlier)]
               )["score"] == 1.0                        # Gradescope's own failures do not count
    over = run([_previous(20, created), _previous(1, created, earlier)])                         # over
    assert over["leaderboard"] == earlier["leaderboard"] and over["score"] == earlier["score"]
    assert "Daily limit reached: 2 graded uploads in any 24 hours" in over["output"]
    assert "after 2030-04-21 09:00 UTC is graded" in over["output"]   # then only this upload is in the last 24 h
    assert "result of your previous upload" in over["output"] and earlier["output"] in over["output"]
    assert over["extra_data"]["rate_limited"] is True
    again = run([_previous(20, created), _previous(1, created, over)])                           # no pile of messages
    assert again["output"].count("Daily limit reached") == 1
    none = run([_previous(20, created), _previous(1, created)])
    assert none["score"] == 0 and "leaderboard" not in none and "no previous result" in none["output"]
    final = run([_previous(20, created), _previous(1, created, earlier)], due="2030-04-25T00:00:00Z")  # regraded
    assert final["leaderboard"][0]["value"] == 1.0 and "Daily limit" not in final["output"]
    assert leaderboard.rate_limit(metadata(created.isoformat(), FUTURE, [_previous(1, created)] * 9), 0) is None


def test_past_the_limit_a_result_graded_against_other_labels_or_another_split_is_not_kept(lb, tmp_path):
    """results.json records the answer key it was scored against; the staff change the gold (or the salt): an upload
    past the daily limit is graded rather than shown the result of labels no longer in force."""
    folder = _perfect(lb, tmp_path / "up")
    created = datetime(2030, 4, 20, 10, 0, tzinfo=UTC)
    earlier = _grade(lb, write_upload(tmp_path / "old", partial(lb["labels"]), lb["dev_labels"]))
    key = earlier["extra_data"]["answer_key"]
    assert key == lb["tests"].answer_key() and len(key) == 16
    for text in (visible_text(earlier), earlier["output"]):
        assert key not in text

    def run(kept: dict) -> dict:
        previous = [_previous(20, created), _previous(1, created, kept)]
        return _grade(lb, folder, metadata(created.isoformat(), FUTURE, previous), Settings(daily_limit=2))

    assert run(earlier)["leaderboard"] == earlier["leaderboard"]                  # the same key: kept
    legacy = copy.deepcopy(earlier)
    del legacy["extra_data"]["answer_key"]
    assert run(legacy)["leaderboard"] == earlier["leaderboard"]                   # graded before keys: kept
    stale = copy.deepcopy(earlier)
    stale["extra_data"]["answer_key"] = "0" * 16
    regraded = run(stale)
    assert regraded["leaderboard"][0]["value"] == 1.0 and regraded["score"] == 1.0
    assert regraded["output"].startswith(leaderboard.RESCORED) and "rate_limited" not in regraded["extra_data"]
    assert regraded["extra_data"]["answer_key"] == key

    gold = lb["tests"]                                    # what changes the key: a label, the split; not the order
    relabelled = copy.deepcopy(gold)
    first = relabelled.gold["sst"][0]
    relabelled.gold["sst"][0] = dataclasses.replace(first, label=(first.label + 1) % 5)
    moved = dataclasses.replace(gold, public={**gold.public, "sts": gold.public["sts"][1:]},
                                private={**gold.private, "sts": [gold.public["sts"][0], *gold.private["sts"]]})
    shuffled = dataclasses.replace(gold, public={t: ids[::-1] for t, ids in gold.public.items()})
    assert len({gold.answer_key(), relabelled.answer_key(), moved.answer_key()}) == 3
    assert shuffled.answer_key() == gold.answer_key()


def test_no_gold_label_salt_or_gold_path_reaches_what_students_see(lb, tmp_path, capsys):
    folder = write_upload(tmp_path / "up", partial(lb["labels"]), lb["dev_labels"])
    extra = folder / "sst-test-output.csv"
    extra.write_text(extra.read_text() + "notanid0000000000000000000 , 1\n")      # an unknown id
    salt = tmp_path / "salt"
    salt.write_text(SALT + "\n")
    argv = [str(folder), "--gold", str(lb["gold_dir"]), "--salt-file", str(salt), "--data-dir", str(DATA)]
    assert leaderboard.main([*argv, "--out", str(tmp_path / "r.json")]) == 0
    bad = json.loads((tmp_path / "r.json").read_text())
    assert "1 unknown ids not in ids-sst-test-student.csv: notanid" in bad["output"]
    extra.write_text("\n".join(extra.read_text().splitlines()[:-1]) + "\n")
    assert leaderboard.main([*argv, "--out", str(tmp_path / "g.json")]) == 0
    good = json.loads((tmp_path / "g.json").read_text())
    stdout = capsys.readouterr().out
    for text in (visible_text(bad), visible_text(good), stdout, json.dumps(good["extra_data"])):
        assert_no_secret(text, lb["gold_dir"], lb["labels"])
    rng = random.Random(5)                                  # a student's own guesses: 3 decimals, never a gold label
    guesses = {"sst": {i: rng.randrange(5) for i in lb["labels"]["sst"]},
               "para": {i: float(rng.randrange(2)) for i in lb["labels"]["para"]},
               "sts": {i: round(rng.uniform(0, 5), 3) for i in lb["labels"]["sts"]}}
    made, problems = make_submission(write_upload(tmp_path / "guesses", guesses, lb["dev_labels"]), DATA,
                                     tmp_path / "submission.zip")
    assert problems == []
    with zipfile.ZipFile(made) as z:
        assert sorted(z.namelist()) == sorted(f"predictions/{t}-{s}-output.csv" for t in TASK_NAMES
                                              for s in ("dev", "test"))
        assert_no_secret("\n".join(z.read(n).decode() for n in z.namelist()), lb["gold_dir"], lb["labels"])


def test_a_student_tree_carries_no_gold_no_salt_and_no_leaderboard_code(lb, tmp_path):
    from assignments.make import generate
    tree = tmp_path / "tree"
    generate(tree, profile="full")
    gold_bytes = {p.read_bytes() for p in lb["gold_dir"].iterdir()}
    for path in tree.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert data not in gold_bytes and SALT.encode() not in data, path
    names = {p.name for p in tree.rglob("*")}
    assert not names & {"ids-sst-test.csv", "quora-test.csv", "sts-test.csv", "leaderboard.py", "scoreboard.py",
                        "standing.py", "bundle.py", "REFERENCE_COMMIT", "salt"}
    for task in TASK_NAMES:                                         # the students' test files carry no labels
        assert not TASKS[task].read(TASKS[task].path(tree / "data", "test")).labelled


def test_an_unusable_gold_salt_or_setting_is_one_line_and_exit_2(lb, tmp_path, capsys):
    up = _perfect(lb, tmp_path / "up")
    salt = tmp_path / "salt"
    salt.write_text(SALT)
    unlabelled = shutil.copytree(lb["gold_dir"], tmp_path / "unlabelled")
    shutil.copy(DATA / "sts-test-student.csv", unlabelled / "sts-test.csv")
    short = tmp_path / "short"
    short.write_text("abc")
    cases = {str(tmp_path / "nowhere" / "ids-sst-test.csv"): ["--gold", str(tmp_path / "nowhere")],
             f"{unlabelled / 'sts-test.csv'}:1: no label column": ["--gold", str(unlabelled)],
             f"{short}: the salt has 3 characters": ["--salt-file", str(short)],
             "private_fraction must lie strictly between 0 and 1": ["--private-fraction", "1.0"],
             f"{tmp_path / 'absent'}: no such file or folder": ["--submission", str(tmp_path / "absent")]}
    for expected, change in cases.items():
        given = {"--submission": str(up), "--gold": str(lb["gold_dir"]), "--salt-file": str(salt),
                 "--out": str(tmp_path / "r.json"), **dict(zip(change[::2], change[1::2]))}
        argv = [given.pop("--submission"), *(x for kv in given.items() for x in kv)]
        assert leaderboard.main(argv) == 2, expected
        err = capsys.readouterr().err
        assert err.startswith("error: ") and expected in err and err.count("\n") == 1, err
    assert not (tmp_path / "r.json").exists()
    with pytest.raises(GoldError, match="ids are not those of"):
        _mismatched_ids(lb, tmp_path)


def _mismatched_ids(lb: dict, tmp_path: Path) -> None:
    """The gold checked against a data folder whose Quora test file lacks its last row."""
    data = tmp_path / "data"
    data.mkdir()
    lines = (DATA / "quora-test-student.csv").read_text().splitlines(keepends=True)
    (data / "quora-test-student.csv").write_text("".join(lines[:-1]))
    load_gold(lb["gold_dir"], data)
