"""Prediction files in the course's format, the scorer (tasks.score) and the submission zip (tasks.submit)."""

from __future__ import annotations

import json
import math
import zipfile

import numpy as np
import pytest
import torch
from conftest import DATA

from tasks import score, submit
from tasks.core.evaluation import (
    LEADERBOARD,
    Report,
    accuracy,
    check_predictions,
    gold_records,
    in_order,
    overall_score,
    pearson,
    predict_batches,
    prediction_path,
    read_predictions,
    write_predictions,
)


def write_gold(pred_dir, task, split, corrupt=None):
    """Write the gold labels (or, for test files, zeros) of a task's split as a prediction file."""
    gold = gold_records(DATA, task, split)
    ids = [e.id for e in gold]
    values = [e.label if e.label is not None else 0 for e in gold]
    return write_predictions(prediction_path(pred_dir, task, split), task, ids, values), gold


def test_the_files_have_the_course_format_exactly(tmp_path):
    path = write_predictions(tmp_path / "sst-dev-output.csv", "sst", ["a1", "b2"], [3, 0])
    assert path.read_text() == "id \t Predicted_Sentiment \nb2 , 0 \n".replace("b2 , 0", "a1 , 3 \nb2 , 0")
    sts = write_predictions(tmp_path / "sts-dev-output.csv", "sts", ["a1"], [2.75])
    assert sts.read_text() == "id \t Predicted_Similiary \na1 , 2.75 \n"
    para = write_predictions(tmp_path / "para-dev-output.csv", "para", ["a1"], [1])
    assert para.read_text() == "id \t Predicted_Is_Paraphrase \na1 , 1.0 \n"


def test_metrics():
    assert accuracy([1, 2, 3, 4], [1, 2, 0, 4]) == 0.75
    assert pearson([1.0, 2.0, 3.0], [2.0, 4.0, 6.5]) == pytest.approx(0.997949, abs=1e-6)
    assert pearson([1.0, 2.0, 3.0], [3.0, 2.0, 1.0]) == pytest.approx(-1.0)
    assert overall_score(0.5, 0.8, 0.6) == pytest.approx((0.5 + 0.8 + 0.8) / 3)
    with pytest.raises(ValueError):
        accuracy([1], [1, 2])


def test_pearson_is_scale_free_and_never_leaves_minus_one_to_one():
    """A leaderboard upload scaled to 1e-162 made the norms underflow (r = 7.85 on the board, above a perfect upload's
    1) and one scaled to 1e307 overflowed (r = nan, ranked first): r is the same at any scale, within [-1, 1]; an
    ordinary pair gives the same bits as the plain formula."""
    gen = torch.Generator().manual_seed(0)
    gold = (torch.rand(1500, generator=gen, dtype=torch.float64) * 5).tolist()
    guess = [g + float(e) for g, e in zip(gold, torch.randn(1500, generator=gen, dtype=torch.float64) * 2)]
    r = pearson(guess, gold)
    x, y = torch.tensor(guess, dtype=torch.float64), torch.tensor(gold, dtype=torch.float64)
    x, y = x - x.mean(), y - y.mean()
    assert r == (x @ y).item() / (x.norm() * y.norm()).item()             # ordinary values: the plain formula's bits
    assert r == pytest.approx(float(np.corrcoef(guess, gold)[0, 1]), abs=1e-12)   # and numpy's, computed apart
    for scale in (1.45e-162, 1e-300, 4e-320, 1e300, 1e307):
        assert pearson([v * scale for v in guess], gold) == pytest.approx(r, abs=1e-6 if scale > 1e-310 else 1e-3)
        assert -1.0 <= pearson([v * scale for v in gold], gold) <= 1.0
    assert pearson([v * 1e-320 for v in gold], gold) == pytest.approx(1.0, abs=1e-3)   # subnormal: coarse, still <= 1
    assert pearson([7.0] * 5, [1.0, 2.0, 3.0, 4.0, 5.0]) == 0.0
    for bad in (math.nan, math.inf):
        with pytest.raises(ValueError, match="not finite"):
            pearson([1.0, bad, 3.0], [1.0, 2.0, 3.0])


def test_a_perfect_prediction_set_scores_one_and_round_trips(tmp_path):
    for task in ("sst", "para", "sts"):
        path, gold = write_gold(tmp_path, task, "dev")
        report = Report(task, str(path), str(gold.path))
        values = read_predictions(path, task, report)
        assert report.errors == [] and report.warnings == []
        assert values == {e.id: e.label for e in gold}          # ids and values survive the file
    result = score.score_directory(tmp_path, DATA, "dev")
    assert {t: r.score for t, r in result["reports"].items()} == {"sst": 1.0, "para": 1.0, "sts": pytest.approx(1.0)}
    assert result["overall"] == pytest.approx(1.0)
    assert result["problems"] == []


def test_a_corrupted_file_gets_a_precise_complaint(tmp_path):
    path, gold = write_gold(tmp_path, "sst", "dev")
    lines = path.read_text().splitlines(keepends=True)
    first, second, third = gold[0].id, gold[1].id, gold[2].id
    lines[2] = lines[1]                                          # line 3 repeats line 2's id; gold[1] now missing
    lines[3] = f"{third} , 7 \n"                                 # line 4: out of range
    lines[4] = f"{gold[3].id} , positive \n"                     # line 5: unparsable
    lines.append("ffffffffffffffffffffffff0 , 1 \n")              # unknown id
    path.write_text("".join(lines))
    report = check_predictions(path, "sst", gold)
    n = len(lines)
    assert report.errors == [
        f"{path}:3: duplicate id {first} (first on line 2)",
        f"{path}:4: id {third}: value '7' out of range: expected an integer 0..4",
        f"{path}:5: id {gold[3].id}: unparsable value 'positive'",
        f"1 unknown ids not in {gold.path}: ffffffffffffffffffffffff0",
        f"3 missing ids of {gold.path} have no prediction: {second}, {third}, {gold[3].id}",
    ]
    assert report.score is None and n == 1103
    result = score.score_directory(tmp_path, DATA, "dev")
    assert "invalid (5 errors)" in score.format_table(result, "dev")
    assert result["overall"] is None


def test_the_reader_tolerates_whitespace_tabs_and_a_missing_header(tmp_path):
    path = tmp_path / "sts-dev-output.csv"
    path.write_text("id,Predicted_Similarity\n  abc\t3.5\n\ndef ,  1 \n")
    report = Report("sts", str(path), "gold")
    assert read_predictions(path, "sts", report) == {"abc": 3.5, "def": 1.0}
    assert report.errors == []
    assert "the grader expects 'id \\t Predicted_Similiary'" in report.warnings[0]
    path.write_text("abc , 3.5\ndef , nan\n")
    report = Report("sts", str(path), "gold")
    assert read_predictions(path, "sts", report) == {"abc": 3.5}
    assert report.errors == [f"{path}:2: id def: non-finite value 'nan'"]
    assert "no header line" in report.warnings[0]


def test_score_cli_prints_a_table_and_json(tmp_path, capsys):
    for task in ("sst", "para", "sts"):
        write_gold(tmp_path, task, "dev")
    assert score.main([str(tmp_path), "--data-dir", str(DATA)]) == 0
    table = capsys.readouterr().out
    assert "SST accuracy" in table and "Quora accuracy" in table and "STS Pearson r" in table
    assert "overall" in table and "1.0000" in table
    assert score.main([str(tmp_path), "--data-dir", str(DATA), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["overall"] == pytest.approx(1.0)
    assert payload["tasks"]["sst"]["score"] == 1.0 and payload["tasks"]["sst"]["column"] == "Predicted_Sentiment"
    (tmp_path / "sts-dev-output.csv").unlink()
    assert score.main([str(tmp_path), "--data-dir", str(DATA), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["overall"] is None
    assert score.main([str(tmp_path), "--data-dir", str(DATA)]) == 0      # the three tasks' data: every row shown
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    assert rows[2] == ["STS", "Pearson", "r", "(absent)", "-", "-"]
    assert rows[3] == ["overall", "(dev)", "n/a", "(needs", "all", "three", "files)"]
    (tmp_path / "empty").mkdir()
    assert score.main([str(tmp_path / "empty"), "--data-dir", str(DATA)]) == 1
    assert "no prediction files (sst-dev-output.csv, para-dev-output.csv, sts-dev-output.csv)" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="2"):           # a directory that does not exist: refused by argparse
        score.main([str(tmp_path / "absent"), "--data-dir", str(DATA)])


def test_score_without_the_gold_files_says_so_in_one_line_and_marks_the_files_not_checked(tmp_path, monkeypatch,
                                                                                           capsys):
    """No data/ where it runs (tasks.predict --out new/ outside the repo's root): one error line naming the missing
    gold path and --data-dir (docs/errors.md's form); the present files are 'not checked', not '(absent)'."""
    import shutil

    from tasks.core.data import TASKS
    new = tmp_path / "new"
    for task in ("sst", "para", "sts"):
        write_gold(new, task, "dev")
    monkeypatch.chdir(tmp_path)
    assert score.main(["new"]) == 1
    lines = capsys.readouterr().out.splitlines()
    golds = [TASKS[t].path("data", "dev") for t in ("sst", "para", "sts")]
    said = (f"error: {golds[0]}: no such gold file (nor {golds[1]}, {golds[2]}), so new/sst-dev-output.csv, "
            f"new/para-dev-output.csv, new/sts-dev-output.csv are not checked; give --data-dir DIR, the folder holding "
            f"{golds[0].name}, {golds[1].name}, {golds[2].name}")
    assert [line for line in lines if line.startswith(("error", "warning"))] == [said]
    rows = [line.split() for line in lines[lines.index("") + 3:]]
    assert rows == [["SST", "accuracy", "sst-dev-output.csv", "-", "not", "checked"],
                    ["Quora", "accuracy", "para-dev-output.csv", "-", "not", "checked"],
                    ["STS", "Pearson", "r", "sts-dev-output.csv", "-", "not", "checked"],
                    ["overall", "(dev)", "n/a", "(files", "not", "checked)"]]
    partial = tmp_path / "partial"                                 # one gold file missing: that one, the rest scored
    partial.mkdir()
    for task in ("sst", "para"):
        shutil.copy(TASKS[task].path(DATA, "dev"), TASKS[task].path(partial, "dev"))
    assert score.main(["new", "--data-dir", "partial"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (f"error: {TASKS['sts'].path('partial', 'dev')}: no such gold file, so new/sts-dev-output.csv "
                        f"is not checked; give --data-dir DIR, the folder holding {TASKS['sts'].path('.', 'dev').name}")
    assert lines[1] == "" and "1.0000" in lines[4] and lines[6].split()[-4:] == ["sts-dev-output.csv", "-", "not",
                                                                                  "checked"]
    assert lines[7].split() == ["overall", "(dev)", "n/a", "(files", "not", "checked)"]    # not SST and Quora's alone


def test_test_split_files_are_checked_for_ids_without_a_score(tmp_path):
    path, gold = write_gold(tmp_path, "sts", "test")
    report = check_predictions(path, "sts", gold)
    assert report.ok and report.score is None and report.n_predictions == 1725


def test_submit_refuses_an_incomplete_set_and_zips_a_complete_one(tmp_path, capsys):
    pred = tmp_path / "predictions"
    assert submit.expected_files(DATA) == [("sst", "dev"), ("sst", "test"), ("para", "dev"), ("para", "test"),
                                           ("sts", "dev"), ("sts", "test")]
    for task, split in submit.expected_files(DATA)[:-1]:
        write_gold(pred, task, split)
    out = tmp_path / "submission.zip"
    assert submit.main(["--pred-dir", str(pred), "--data-dir", str(DATA), "--out", str(out)]) == 1
    assert "sts-test-output.csv: missing" in capsys.readouterr().err and not out.exists()
    write_gold(pred, "sts", "test")
    assert submit.main(["--pred-dir", str(pred), "--data-dir", str(DATA), "--out", str(out)]) == 0
    with zipfile.ZipFile(out) as z:
        assert sorted(z.namelist()) == sorted(f"predictions/{t}-{s}-output.csv" for t, s in submit.expected_files(DATA))
    bad = pred / "sst-test-output.csv"
    bad.write_text(bad.read_text() + "ffffffffffffffffffffffff0 , 1 \n")
    assert submit.main(["--pred-dir", str(pred), "--data-dir", str(DATA), "--out", str(tmp_path / "b.zip")]) == 1
    assert "1 unknown ids" in capsys.readouterr().err


def test_leaderboard_columns_are_spelled_as_the_grader_spells_them():
    assert {t: b.column for t, b in LEADERBOARD.items() if t != "cfimdb"} == {
        "sst": "Predicted_Sentiment", "para": "Predicted_Is_Paraphrase", "sts": "Predicted_Similiary"}
    assert math.isnan(LEADERBOARD["para"].parse("2")[0])


class Probe(torch.nn.Module):
    """Records the mode, the gradient switch and the autocast it runs under; a batch with a negative value fails."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(1))
        self.seen = []

    def forward(self, x):
        self.seen.append((self.training, torch.is_grad_enabled(), torch.is_autocast_enabled("cpu")))
        if (x < 0).any():
            raise ValueError("a bad batch")
        return x * self.w


def test_the_prediction_loop_runs_in_eval_mode_without_gradients_and_restores_the_mode():
    cpu, model = torch.device("cpu"), Probe().train()
    batches = [{"x": torch.tensor([1.0, 2.0]), "ids": ["a", "b"]}, {"x": torch.tensor([3.0]), "ids": ["c"]}]
    out = predict_batches(model, batches, lambda m, b: m(b["x"]).tolist(), cpu, "bf16")
    assert out == [[1.0, 2.0], [3.0]] and model.training
    assert model.seen == [(False, False, True)] * 2                          # eval, no gradients, bf16 autocast
    assert in_order(["c", "a", "b"], [b["ids"] for b in batches], out) == [3.0, 1.0, 2.0]   # back in file order
    model.seen.clear()
    with torch.autocast("cpu", dtype=torch.bfloat16):                       # precision None: the caller's autocast
        predict_batches(model, batches[:1], lambda m, b: m(b["x"]), cpu)
    predict_batches(model, batches[:1], lambda m, b: m(b["x"]), cpu)
    assert model.seen == [(False, False, True), (False, False, False)]
    for mode in (True, False):                                              # an error leaves the mode as it was
        model.train(mode)
        with pytest.raises(ValueError, match="bad batch"):
            predict_batches(model, [{"x": torch.tensor([-1.0])}], lambda m, b: m(b["x"]), cpu)
        assert model.training == mode and torch.is_grad_enabled()


def gold_dir(tmp_path, name, lines):
    """A data directory whose SST dev gold is the header and `lines` of the real one (each a list of its cells)."""
    real = (DATA / "ids-sst-dev.csv").read_text(encoding="utf-8").splitlines(keepends=True)
    (tmp_path / name).mkdir()
    gold = tmp_path / name / "ids-sst-dev.csv"
    gold.write_text(real[0] + "".join(lines(real[1:])), encoding="utf-8")
    return gold, [row.split("\t")[1] for row in real[1:6]]


def test_a_malformed_gold_row_is_reported_by_the_gold_files_line(tmp_path, capsys):
    """A bad row of the gold file is an error naming GOLD:LINE, said to be the gold file's; the score is withheld."""
    def broken(rows):
        cells = rows[1].rstrip("\n").split("\t")
        return [rows[0], "\t".join(cells[:-1] + ["x"]) + "\n", *rows[2:5]]
    gold, ids = gold_dir(tmp_path, "g", broken)
    pred = write_predictions(tmp_path / "p" / "sst-dev-output.csv", "sst", ids[:5], [3, 2, 1, 0, 4])
    report = check_predictions(pred, "sst", gold_records(tmp_path / "g", "sst", "dev"))
    assert report.errors[0].startswith(f"{gold}:3: ") and "the gold file" in report.errors[0], report.errors
    assert report.score is None
    assert score.main([str(tmp_path / "p"), "--data-dir", str(tmp_path / "g")]) == 1
    assert f"error: {gold}:3: " in capsys.readouterr().out
    assert submit.make_submission(tmp_path / "p", tmp_path / "g", tmp_path / "s.zip")[1][0].startswith(f"{gold}:3: ")


@pytest.mark.parametrize("task, kept", [("sst", 0), ("sts", 1)])
def test_a_gold_file_with_too_few_labelled_rows_is_a_report_error(tmp_path, capsys, task, kept):
    """No labelled rows (or one, for Pearson r): an error naming the gold file, not a traceback."""
    from tasks.core.data import TASKS
    (tmp_path / "g").mkdir()
    gold = TASKS[task].path(tmp_path / "g", "dev")
    real = TASKS[task].path(DATA, "dev").read_text(encoding="utf-8").splitlines(keepends=True)
    gold.write_text("".join(real[:1 + kept]), encoding="utf-8")
    ids = [e.id for e in gold_records(tmp_path / "g", task, "dev")]
    write_predictions(prediction_path(tmp_path / "p", task, "dev"), task, ids, [1] * kept)
    assert score.main([str(tmp_path / "p"), "--data-dir", str(tmp_path / "g")]) == 1
    out = capsys.readouterr().out
    assert f"error: {gold}: " in out and "labelled rows" in out, out


def test_gold_rows_are_named_beside_the_prediction_file_counted_past_twenty_and_one_row_scores(tmp_path):
    """The gold-row errors (mutation testing): each says the prediction file is not at fault, past 20 the rest are
    one counted line, the unknown-ids error says the gold's bad rows were skipped, and one labelled SST row scores."""
    def broken(rows):                                    # the first 23 rows' labels made bad
        out = [rows[0]]
        for row in rows[1:24]:
            cells = row.rstrip("\n").split("\t")
            out.append("\t".join(cells[:-1] + ["x"]) + "\n")
        return out + rows[24:30]
    gold, _ = gold_dir(tmp_path, "g", broken)
    every = [line.split("\t")[1].strip() for line in gold.read_text().splitlines()[1:]]
    pred = write_predictions(tmp_path / "p" / "sst-dev-output.csv", "sst", every, [1] * len(every))
    report = check_predictions(pred, "sst", gold_records(tmp_path / "g", "sst", "dev"))
    assert all(f"not of {pred}" in e for e in report.errors[:20]), report.errors[:2]
    assert report.errors[20] == f"{gold}: 3 more bad rows of the gold file not listed"
    assert "(its 23 bad row(s) above skipped)" in report.errors[-1]
    exactly = check_predictions(pred, "sst", _twenty_bad(gold_records(tmp_path / "g", "sst", "dev")))
    assert not [e for e in exactly.errors if "more bad rows" in e] and len(
        [e for e in exactly.errors if "a bad row of the gold file" in e]) == 20       # 20 listed, none counted
    one = tmp_path / "one"
    one.mkdir()
    (one / "ids-sst-dev.csv").write_text("".join(gold.read_text().splitlines(keepends=True)[:1] +
                                                 gold.read_text().splitlines(keepends=True)[25:26]))
    kept = gold.read_text().splitlines()[25].split("\t")[1].strip()
    single = write_predictions(tmp_path / "q" / "sst-dev-output.csv", "sst", [kept], [1])
    assert check_predictions(single, "sst", gold_records(one, "sst", "dev")).errors == []


def _twenty_bad(gold):
    """gold with exactly MAX_LINE_ERRORS (20) of its skipped rows: all listed, no counted line."""
    gold.skipped = gold.skipped[:20]
    return gold
