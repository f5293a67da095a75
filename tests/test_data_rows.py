"""The readers on a student's own files: unpaired quote marks, another task's label column, empty lines, a
comma-separated file, and `~` in a file's path."""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

import pytest
from conftest import DATA, ROOT

from assignments.make import handout_text
from tasks import multitask
from tasks.core.data import TASKS, DataError, read_pairs, read_sentences
from tasks.core.errors import existing_file

SST_HEADER = "\tid\tsentence\tsentiment\n"


def test_an_unpaired_quote_mark_skips_the_lines_it_runs_over_and_says_so(tmp_path):
    path = tmp_path / "q2.csv"
    path.write_text(SST_HEADER + "0\tid0\tplain one\t1\n1\tid1\t\"Best movie ever\t4\n2\tid2\tnothing special\t2\n"
                    "3\tid3\tshe called it \"a mess\"\t0\n4\tid4\tlast one\t3\n")
    records = read_sentences(path)
    assert [r.id for r in records] == ["id0", "id4"]
    assert [str(s) for s in records.skipped] == [
        f"{path}:3-5: a quote mark opened on line 3 runs to line 5 (an unpaired \"?)"]
    assert records.summary().splitlines()[0] == (
        f"{path}: 2 examples loaded, 3 rows skipped (3 lines run together by an unpaired quote mark):")
    with pytest.raises(DataError, match=r"q2.csv:3-5: a quote mark opened on line 3"):
        read_sentences(path, strict=True)


def test_a_quote_mark_never_closed_reports_the_rest_of_the_file(tmp_path):
    path = tmp_path / "q.csv"
    path.write_text(SST_HEADER + "0\tid0\tplain one\t1\n1\tid1\t\"Best movie ever\t4\n2\tid2\tnothing\t2\n"
                    "3\tid3\tok\t0\n")
    records = read_sentences(path)
    assert [r.id for r in records] == ["id0"]
    assert [str(s) for s in records.skipped] == [
        f"{path}:3-5: a quote mark opened on line 3 runs to line 5 (an unpaired \"?)"]
    assert "1 examples loaded, 3 rows skipped" in records.summary()


def test_an_empty_line_an_unpaired_quote_mark_runs_over_is_not_counted_as_a_row(tmp_path):
    """The rows lost to a run-on are its non-empty lines (empty lines are never rows); the span is still given."""
    path = tmp_path / "cf-quotes.csv"
    path.write_text(SST_HEADER + "0\ta\tq1 good\t1\n1\tb\t\"q2 opens\t0\n2\tc\tq3\t1\n\n3\td\tq4\t0\n")
    records = read_sentences(path, num_classes=2)
    assert [r.id for r in records] == ["a"]
    assert records.summary().splitlines() == [
        f"{path}: 1 examples loaded, 3 rows skipped (3 lines run together by an unpaired quote mark):",
        f"  {path}:3-6: a quote mark opened on line 3 runs to line 6 (an unpaired \"?)"]


def test_a_tab_between_quote_marks_on_one_line_is_reported(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(SST_HEADER + "0\tid0\t\"he said\tyes\"\t1\n1\tid1\tfine\t2\n")
    records = read_sentences(path)
    assert [r.id for r in records] == ["id1"]
    assert [str(s) for s in records.skipped] == [f"{path}:2: a tab inside a quoted cell (an unpaired \"?)"]


def test_a_quoted_cell_with_commas_and_a_newline_still_loads(tmp_path):
    path = tmp_path / "ok.csv"
    path.write_bytes(b"\xef\xbb\xbf\tid\tsentence1\tsentence2\tis_duplicate\r\n"
                     b"0\ta\t\"one, two\r\nthree\"\tfour\t1.0\r\n1\tb\tfive\tsix\t0\r\n")
    records = read_pairs(path)
    assert [(r.id, r.sentence1, r.label, r.line) for r in records] == [("a", "one, two\r\nthree", 1, 2),
                                                                       ("b", "five", 0, 4)]
    assert not records.skipped


@pytest.mark.parametrize("task,other,found,expected", [
    ("sts", "quora-dev.csv", "is_duplicate", "similarity"),
    ("para", "sts-dev.csv", "similarity", "is_duplicate")])
def test_another_tasks_label_column_is_refused(tmp_path, task, other, found, expected):
    path = tmp_path / other
    path.write_text("".join((DATA / other).read_text(encoding="utf-8").splitlines(keepends=True)[:6]))
    with pytest.raises(DataError, match=rf"^{path}:1: its label column is '{found}', \w+'s; the \w+ files label each "
                                        rf"row in '{expected}' \(a file of another task\?\)$"):
        TASKS[task].read(path)


def test_unlabelled_test_files_still_load(tmp_path):
    for task in TASKS:
        assert not TASKS[task].read(TASKS[task].path(DATA, "test")).labelled
    path = tmp_path / "extra.csv"
    path.write_text("\tid\tsentence1\tsentence2\tsource\n0\ta\tx\ty\tweb\n")
    records = TASKS["para"].read(path)
    assert not records.labelled and [r.id for r in records] == ["a"]


def test_a_training_file_whose_label_column_has_another_name_says_which_it_needs(tmp_path, tiny_dir, tokenizer,
                                                                                 multitask_files):
    sst = tmp_path / "sst-label.csv"
    sst.write_text(Path(multitask_files["sst"][0]).read_text(encoding="utf-8").replace("\tsentiment\n", "\tlabel\n", 1))
    settings = multitask.parse_settings(["--model", str(tiny_dir), "--sst-train", str(sst),
                                         "--sst-dev", multitask_files["sst"][1], "--no-predictions"])
    with pytest.raises(DataError, match="^" + rf"{sst}:1: no 'sentiment' column \(header \['', 'id', "
                       r"'sentence', 'label'\]\); the sst training and dev files label each row in a column named "
                       r"'sentiment'$"):
        multitask.load_files(settings, ["sst"], tokenizer)


@pytest.mark.parametrize("end", ["\n", "\r\n"])
def test_empty_lines_are_not_skipped_rows(tmp_path, end):
    path = tmp_path / "blank.csv"
    path.write_text(end.join(["\tid\tsentence\tsentiment", "0\ta\tgood\t4", "", "1\tb\tbad\t0", "", ""]),
                    newline="")
    records = read_sentences(path)
    assert [r.id for r in records] == ["a", "b"] and not records.skipped
    assert records.summary() == f"{path}: 2 examples loaded, none skipped, 2 empty lines ignored"


def test_the_count_of_a_reason_that_starts_with_a_number_reads_well(tmp_path):
    path = tmp_path / "cols.csv"
    path.write_text(SST_HEADER + "0\ta\tgood\n1\tb\tfine\t2\n")
    assert "1 rows skipped (1 with the wrong number of columns)" in read_sentences(path).summary()


@pytest.mark.parametrize("sep", [",", ";"])
def test_a_comma_separated_file_is_said_not_to_be_tab_separated(tmp_path, sep):
    path = tmp_path / "p3.csv"
    path.write_text(sep.join(["id", "sentence1", "sentence2", "is_duplicate"]) + "\n" + sep.join("abc0") + "\n")
    with pytest.raises(DataError, match="^" + rf"{path}:1: the file is not tab-separated .*; save it as TSV "
                                              r"\(pandas: to_csv\(path, sep='\\t'\)\)$"):
        read_pairs(path)


def test_a_tilde_in_a_file_flag_or_the_data_dir_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "mine.csv").write_text(SST_HEADER + "0\ta\tgood\t4\n")
    assert existing_file("~/mine.csv") == str(tmp_path / "mine.csv")
    with pytest.raises(argparse.ArgumentTypeError, match="~/absent.csv: no such file"):
        existing_file("~/absent.csv")
    from tasks import classifier, deebert, simcse
    for parse, flag in ((multitask.parse_settings, "--sst-train"), (classifier.parse_settings, "--train-file"),
                        (simcse.parse_settings, "--sst-train"), (deebert.parse_settings, "--train-file")):
        settings = parse([f"{flag}=~/mine.csv", "--data-dir=~/data"])
        assert settings.files.data_dir == str(tmp_path / "data"), parse
        assert str(tmp_path / "mine.csv") in settings.files.__dict__.values(), parse
    config = tmp_path / "c.json"
    config.write_text('{"files": {"sst_train": "~/mine.csv", "data_dir": "~/d"}}')
    settings = multitask.parse_settings(["--config=~/c.json"])
    assert (settings.files.sst_train, settings.files.data_dir) == (str(tmp_path / "mine.csv"), str(tmp_path / "d"))


def test_the_join_command_of_data_readme_runs_as_written_and_a_bad_join_is_reported(tmp_path):
    """data/README.md's "Training on more data" block, as the default project's tree has it (docs/multitask.md shows
    the same line; tests/test_kit_data.py runs a part1 tree's), run by bash as written: the first file's header alone
    is kept and every line ends, even a file's last one without a line end (CRLF in the second); `cat` instead gives
    the reports the page names."""
    page = handout_text((ROOT / "data" / "README.md").read_text(encoding="utf-8"), "default-project", "data/README.md")
    block = re.search(r"## Training on more data\n.*?```bash\n(.*?)```", page, re.DOTALL)[1]
    assert block.strip() in (ROOT / "docs" / "multitask.md").read_text(encoding="utf-8")
    (tmp_path / "data").mkdir()
    course = (DATA / "quora-train.csv").read_text(encoding="utf-8").splitlines(keepends=True)[:6]
    (tmp_path / "data" / "quora-train.csv").write_text("".join(course).rstrip("\n"), encoding="utf-8")
    (tmp_path / "my-quora.csv").write_bytes(b"\tid\tsentence1\tsentence2\tis_duplicate\r\n"
                                            b"0\tmine-1\tA, b?\tC\t1\r\n1\tmine-2\t\"D\r\ne\"\tF\t0")
    subprocess.run(["bash", "-c", block], cwd=tmp_path, check=True)
    records = read_pairs(tmp_path / "quora-more.csv")
    assert (len(records), records.skipped) == (7, [])
    assert [(r.id, r.sentence1) for r in records[-2:]] == [("mine-1", "A, b?"), ("mine-2", "D\r\ne")]
    cat = tmp_path / "cat.csv"
    for first, said in (("".join(course).rstrip("\n"), "6: 9 columns, the header has 5"),   # no line end
                        ("".join(course), "7: the header line again (files joined?)")):
        cat.write_bytes(first.encode() + (tmp_path / "my-quora.csv").read_bytes())
        assert [str(s) for s in read_pairs(cat).skipped] == [f"{cat}:{said}"]


def test_the_error_pages_summary_is_what_the_reader_prints(tmp_path):
    """docs/errors.md's example of skipped rows, printed for the file it describes (an empty line at its end)."""
    page = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    shown = re.search(r"the first one as a `DataError`\):\n\n```\n(.*?)```", page, re.DOTALL)[1]
    path = tmp_path / "train.csv"
    path.write_bytes(SST_HEADER.encode() + b"0\ta\tgood\t4\n1\ta\tbad\t0\n2\tb\n3\tc\xfft\t2\n4\td\x00\t1\n"
                     b"5\te\t\"so good\t3\n6\tf\tfine\t1\n7\tg\tshe said \"no\"\t2\n8\th\tok\t3\n\n")
    assert read_sentences(path).summary().replace(str(path), "train.csv") + "\n" == shown


def test_the_part1_pages_join_reports_are_what_the_reader_prints(tmp_path):
    """The part1 copy of data/README.md quotes what the reader reports for a badly joined sst-more.csv (the course's
    8000 SST rows, then the student's from line 8002): each line is printed for the join it describes."""
    page = " ".join(handout_text((ROOT / "data" / "README.md").read_text(encoding="utf-8"), "part1",
                                 "data/README.md").split())
    course = (DATA / "ids-sst-train.csv").read_text(encoding="utf-8")
    mine = {"the header line again": SST_HEADER + "0\ta0\tgood\t4\n",
            "3 columns": "0\ta0\t4\n",
            "duplicate id": "".join(f"{i}\t{'a1' if i in (3, 8) else f'c{i}'}\trow {i}\t1\n" for i in range(9)),
            "a quote mark": "".join(f"{i}\tb{i}\trow {i}\t1\n" for i in range(9)) + "9\tq\t\"open\t1\n10\tr\tx\t1\n"
                            "11\ts\ty\t1\n"}
    for what, rows in mine.items():
        path = tmp_path / "sst-more.csv"
        path.write_text(course + rows, encoding="utf-8")
        reports = [str(s).replace(str(path), "sst-more.csv") for s in read_sentences(path).skipped]
        assert len(reports) == 1 and what in reports[0], (what, reports)
        assert f"`{reports[0]}`" in page, reports[0]
