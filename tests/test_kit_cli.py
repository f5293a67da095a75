"""The course's starter flags parse to minbert's own settings; training an unfinished tree names the part to write."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import warm

from assignments.make import ROOT, generate
from tasks import classifier, multitask
from tasks.core.errors import ConfigurationError, run_cli
from tasks.core.runs import run_paths, write_run_json
from tasks.core.starter_flags import STARTER_ALIASES, table_markdown, translate


@pytest.mark.parametrize("cli, starter, ours", [
    (classifier, ("--use_gpu --option finetune --batch_size 8 --hidden_dropout_prob 0.3 --lr 1e-5 --epochs 10 "
                  "--seed 1 --train a.csv --dev b.csv --test c.csv --dev_out out/sst-dev-output.csv "
                  "--test_out out/sst-test-output.csv"),
     ("--device cuda --fine-tune-mode full-model --batch-size 8 --dropout 0.3 --lr 1e-5 --epochs 10 --seed 1 "
      "--train-file a.csv --dev-file b.csv --test-file c.csv --predictions-dir out")),
    (classifier, "--task cfimdb --option=pretrain --dev_out=p/cfimdb-dev-output.csv",
     "--task cfimdb --fine-tune-mode last-linear-layer --predictions-dir p"),
    (multitask, ("--use_gpu --option pretrain --batch_size 16 --hidden_dropout_prob 0.2 --sst_train s.csv "
                 "--para_dev q.csv --sts_test t.csv --sst_dev_out predictions/sst-dev-output.csv "
                 "--sst_test_out predictions/sst-test-output.csv --para_dev_out predictions/para-dev-output.csv "
                 "--para_test_out predictions/para-test-output.csv --sts_dev_out predictions/sts-dev-output.csv "
                 "--sts_test_out predictions/sts-test-output.csv"),
     ("--device cuda --fine-tune-mode last-linear-layer --batch-size 16 --dropout 0.2 --sst-train s.csv "
      "--para-dev q.csv --sts-test t.csv --predictions-dir predictions")),
], ids=["classifier", "classifier-inline-values", "multitask"])
def test_starter_flags_parse_to_the_same_settings(cli: object, starter: str, ours: str, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)                        # the data-file flags must name files that exist
    for f in ("a.csv", "b.csv", "c.csv", "s.csv", "q.csv", "t.csv"):
        (tmp_path / f).write_text("id\tsentence\tsentiment\n")
    name = cli.__name__.rsplit(".", 1)[1]
    got = cli.parse_settings(starter.split())          # parse_settings translates the starter's spellings
    want = cli.parse_settings(ours.split())
    assert translate(starter.split(), name) != starter.split()
    assert got == want
    assert got != cli.parse_settings([])                           # the flags did change something


def test_starter_out_path_must_name_the_file_minbert_writes() -> None:
    with pytest.raises(ConfigurationError, match="sst-dev-output.csv"):
        translate(["--sst_dev_out", "predictions/dev.csv"], "multitask")
    with pytest.raises(ConfigurationError, match="one folder"):
        translate(["--sst_dev_out", "a/sst-dev-output.csv", "--sts_dev_out", "b/sts-dev-output.csv"], "multitask")
    assert translate(["--train", "x"], "multitask") == ["--train", "x"]      # not a multitask alias: left alone


def test_classifier_out_path_names_the_file_of_the_task_from_config(tmp_path, capsys) -> None:
    config = tmp_path / "cf.json"
    config.write_text('{"task": "cfimdb"}')
    got = classifier.parse_settings(["--config", str(config), "--dev_out", "pp/cfimdb-dev-output.csv"])
    assert got.task == "cfimdb" and got.run.predictions_dir == "pp"
    with pytest.raises(ConfigurationError, match="writes the cfimdb test predictions to --predictions-dir/cfimdb-test"):
        classifier.parse_settings(["--config", str(config), "--test_out", "pp/sst-test-output.csv", "--print-config"])
    assert capsys.readouterr().out == ""                                   # refused before any config is printed
    with pytest.raises(ConfigurationError, match="writes the sst dev predictions"):     # a flag beats the file
        classifier.parse_settings(["--config", str(config), "--task", "sst", "--dev_out", "pp/cfimdb-dev-output.csv"])
    run = classifier.parse_settings(["--task", "cfimdb", "--run-dir", str(tmp_path / "r")])
    write_run_json(run_paths(run.run, "classifier"), "classifier", run)                 # a cfimdb run, resumed
    resumed = classifier.parse_settings(["--resume", str(tmp_path / "r"), "--dev_out", "pp/cfimdb-dev-output.csv"])
    assert resumed.task == "cfimdb" and resumed.run.predictions_dir == "pp"


def test_alias_table_lists_every_alias_once() -> None:
    text = table_markdown()
    assert len({a.starter for a in STARTER_ALIASES}) == len(STARTER_ALIASES)
    for a in STARTER_ALIASES:
        assert f"| `{a.starter}` |" in text
    from assignments.make import handout_text
    handout = (ROOT / "assignments" / "README.md").read_text()
    for profile, table in (("part1", table_markdown(("classifier",))), ("default-project", table_markdown()),
                           ("full", table_markdown())):     # a tree without tasks.multitask: the classifier's aliases
        text = handout_text(handout, profile)
        assert table in text, f"{profile}: the handout's alias table is stale: paste starter_flags.table_markdown()"
        if profile == "part1":
            assert "multitask" not in text.split("The course's starter code spells")[1].split("## How it is graded")[0]


def train_classifier_in(tree: Path, *flags: str) -> subprocess.CompletedProcess:
    """python -m tasks.classifier FLAGS run in a student tree, on its own code only (PYTHONPATH is the tree)."""
    return warm.run([sys.executable, "-m", "tasks.classifier", *flags, "--threads", "1", "--no-progress"],
                    cwd=tree, capture_output=True, text=True, check=False, timeout=300,
                    env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})


def assert_names_the_part(proc: subprocess.CompletedProcess, function: str, file: str, check: str = "core") -> None:
    """The run stopped with one line naming the unwritten function (a method as Class.name, a function as name()),
    its file and the check to run (`python -m assignments.check CHECK`), and no traceback."""
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {function if '.' in function else function + '()'} in {file}:"), proc.stderr
    assert f"python -m assignments.check {check} " in last and "Traceback" not in proc.stderr


def test_training_an_unfinished_tree_names_the_part_and_the_check(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    generate(tree, data=False)
    rows = "\tid\tsentence\tsentiment\n" + "".join(f"{i}\tid{i}\t a fine film .\t{i % 5}\n" for i in range(4))
    (tmp_path / "tiny.csv").write_text(rows)
    tiny = str(tmp_path / "tiny.csv")
    proc = train_classifier_in(tree, "--train", tiny, "--dev", tiny, "--test", tiny, "--epochs", "1",
                               "--checkpoint", str(tmp_path / "c.pt"), "--predictions-dir", str(tmp_path / "p"))
    assert_names_the_part(proc, "BertEmbeddings.forward", "minbert/model.py")
    # the handout's example of this line, its file and line number included, is the line a fresh tree prints
    handout = " ".join((tree / "assignments" / "README.md").read_text().split())
    example = handout.split("run stops with the function to write and the check to run, e.g. `")[1].split("`")[0]
    start, end = example.split(" ... ")
    last = " ".join(proc.stderr.strip().splitlines()[-1].split())
    assert last.startswith(start) and end in last, (example, last)


def _compiled_in(rel: str, source: str) -> dict:
    """The functions of `source` compiled as if they were lines of ROOT/rel (a stub in minbert/ is such a function)."""
    found: dict = {}
    exec(compile(source, str(ROOT / rel), "exec"), found)          # noqa: S102 (the test's own source)
    return found


def test_run_cli_names_a_stub_of_any_command_and_keeps_any_other_not_implemented_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    """run_cli, every command's wrapper: a bare NotImplementedError raised by a function of minbert/ or tasks/ is the
    one line (exit 1, no traceback), the extension's name reading right whatever it is; one with a message, or one
    a library raised (even when minbert's code called it), keeps its traceback."""
    stub = _compiled_in("minbert/deebert.py", "def early_exit():\n    raise NotImplementedError\n")["early_exit"]
    assert run_cli(stub) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: early_exit() in minbert/deebert.py:2 is not written yet") and err.count("\n") == 1
    assert "python -m assignments.check deebert  and run this again" in err
    loss = _compiled_in("minbert/sentence_losses.py", "def loss():\n    raise NotImplementedError\n")["loss"]
    assert run_cli(loss) == 1                     # an extension with no checks here: the student builds it
    assert ("it is part of the sentence-embedding objectives, an extension for you to build. Write it, or run "
            "without its flag.") in capsys.readouterr().err

    def library() -> None:
        raise NotImplementedError
    said = _compiled_in("minbert/deebert.py", "def early_exit():\n    raise NotImplementedError('on this device')\n")
    calls = _compiled_in("minbert/deebert.py", "def calls(f):\n    f()\n")["calls"]
    for main in (said["early_exit"], library, lambda: calls(library)):
        with pytest.raises(NotImplementedError):
            run_cli(main)
    assert capsys.readouterr().err == ""


def _predict_all(pred_dir: Path, split: str) -> None:
    from tasks.core.evaluation import gold_records, prediction_path, write_predictions
    for task, value in (("sst", 2), ("para", 1), ("sts", 2.5)):
        ids = [e.id for e in gold_records(ROOT / "data", task, split)]
        write_predictions(prediction_path(pred_dir, task, split), task, ids, [value] * len(ids))


def test_score_says_test_files_have_no_labels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tasks import score
    _predict_all(tmp_path, "test")
    assert score.main([str(tmp_path), "--data-dir", str(ROOT / "data"), "--split", "test"]) == 0
    overall = capsys.readouterr().out.strip().splitlines()[-1]
    assert "no gold labels" in overall and "needs all three" not in overall, overall
    (tmp_path / "sts-test-output.csv").unlink()
    score.main([str(tmp_path), "--data-dir", str(ROOT / "data"), "--split", "test"])
    assert "needs all three" in capsys.readouterr().out.strip().splitlines()[-1]


def test_submission_zip_is_readable_as_any_new_file(tmp_path: Path) -> None:
    import os

    from tasks.submit import make_submission
    for split in ("dev", "test"):
        _predict_all(tmp_path / "p", split)
    old = os.umask(0o022)
    try:
        out, problems = make_submission(tmp_path / "p", ROOT / "data", tmp_path / "submission.zip")
    finally:
        os.umask(old)
    assert not problems and out is not None
    assert oct(out.stat().st_mode & 0o777) == oct(0o644)


@pytest.mark.parametrize("argv", [["--help"], ["--write"]])
def test_make_fixtures_writes_nothing_when_given_arguments(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from assignments import make_fixtures

    def no_write(name: str, tensors: dict) -> None:
        raise AssertionError(f"{argv}: wrote the fixture {name}")
    monkeypatch.setattr(make_fixtures, "_save", no_write)
    with pytest.raises(SystemExit) as stop:
        make_fixtures.main(argv)
    assert stop.value.code == (0 if argv == ["--help"] else 2)


def test_make_fixtures_keeps_a_file_that_differs_by_float_rounding_only(tmp_path: Path, monkeypatch, capsys) -> None:
    """Run again on another CPU, the reference's sums round differently (5e-6): the committed file is kept, so that a
    TA following the guide gets no git diff; a real change, another key or an integer's change is written."""
    import torch
    from safetensors.torch import load_file

    from assignments import make_fixtures
    monkeypatch.setattr(make_fixtures, "FIXTURES", tmp_path)
    x, ids = torch.linspace(-3, 3, 12).reshape(3, 4), torch.tensor([1, 2, 3])
    make_fixtures._save("f", {"x": x, "ids": ids})
    first = (tmp_path / "f.safetensors").read_bytes()
    make_fixtures._save("f", {"x": x + 5e-6, "ids": ids})
    assert (tmp_path / "f.safetensors").read_bytes() == first
    assert capsys.readouterr().out.splitlines()[-1] == (f"kept {tmp_path / 'f'}.safetensors: the same up to float "
                                                        "rounding (5e-06 at most)")
    make_fixtures._save("f", {"x": x, "ids": ids})
    assert capsys.readouterr().out.endswith("f.safetensors: unchanged\n")
    for changed in ({"x": x + 1e-3, "ids": ids}, {"x": x, "ids": ids + 1}, {"x": x, "ids": ids, "y": x},
                    {"x": x.double(), "ids": ids}, {"x": x[:2], "ids": ids}):
        make_fixtures._save("f", changed)
        stored = load_file(str(tmp_path / "f.safetensors"))
        assert set(stored) == set(changed) and all(torch.equal(stored[k], v) for k, v in changed.items())
        assert capsys.readouterr().out.startswith("wrote ")
        make_fixtures._save("f", {"x": x, "ids": ids})


def test_make_fixtures_keeps_the_committed_tensors_of_a_file_that_gains_keys(tmp_path: Path, monkeypatch,
                                                                             capsys) -> None:
    """A check that gains an expected value (a gradient) rewrites its fixture; every tensor it held stays byte for
    byte where the new value is the same up to float rounding (this CPU's sums), and a real change is written."""
    import torch
    from safetensors.torch import load_file

    from assignments import make_fixtures
    monkeypatch.setattr(make_fixtures, "FIXTURES", tmp_path)
    x, ids = torch.linspace(-3, 3, 12).reshape(3, 4), torch.tensor([1, 2, 3])
    make_fixtures._save("f", {"x": x, "ids": ids, "z": x})
    make_fixtures._save("f", {"x": x + 5e-6, "ids": ids, "z": x + 1e-3, "grad": 2 * x})
    stored = load_file(str(tmp_path / "f.safetensors"))
    assert torch.equal(stored["x"], x) and torch.equal(stored["ids"], ids)        # the committed ones, kept
    assert torch.equal(stored["z"], x + 1e-3) and torch.equal(stored["grad"], 2 * x)
    assert capsys.readouterr().out.splitlines()[-1].endswith(
        "(4 tensors, 2 of them the committed ones, the same up to float rounding)")
