"""tasks.predict against bad input, each refused in one line naming the file or the flag: a file flag of another kind
of run, --threshold on a run that is not DeeBERT, a damaged export directory or checkpoint, and its own flags' values
(a batch size below 1, a threshold that is nan or negative, an empty --splits)."""

from __future__ import annotations

import json

import pytest
import torch

from tasks import predict
from tasks.core.errors import run_cli


def run_dir(tmp_path, command: str) -> str:
    """A run directory of `command` with its run.json only (refusals come before its checkpoint is read)."""
    run = tmp_path / command
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"command": command, "settings": {}}))
    return str(run)


def refused(capsys, argv: list[str]) -> str:
    """The one error line of tasks.predict ARGV (exit 1)."""
    assert run_cli(lambda: predict.main(argv)) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


@pytest.mark.parametrize("command, flag, said", [
    ("classifier", "--sst-test", "--sst-test is for multitask runs; this is a classifier run: use --test-file"),
    ("deebert", "--para-dev", "--para-dev is for multitask runs; this is a deebert run: use --dev-file"),
    ("multitask", "--test-file", ("--test-file is for classifier and DeeBERT runs; this is a multitask run: use "
                                 "--sst-test, --para-test or --sts-test")),
])
def test_a_file_flag_of_another_kind_of_run_is_refused(tmp_path, capsys, command, flag, said):
    run = run_dir(tmp_path, command)
    assert said in refused(capsys, [run, flag, str(tmp_path / "new.csv"), "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flag, value", [("--threshold", "0.3"), ("--exit", "patience")])
def test_deeberts_flags_on_another_run_are_refused(tmp_path, capsys, flag, value):
    run = run_dir(tmp_path, "classifier")
    said = refused(capsys, [run, flag, value, "--out", str(tmp_path / "out")])
    assert f"{flag} is for DeeBERT runs; this is a classifier run" in said


def export_dir(tmp_path, settings: str | None, heads: bytes = b"") -> str:
    out = tmp_path / "ex"
    out.mkdir()
    if settings is not None:
        (out / "multitask.json").write_text(settings)
    (out / "heads.pt").write_bytes(heads)
    return str(out)


@pytest.mark.parametrize("settings, said", [
    ('{"kind": "multitask", "sett', "multitask.json:1:"),
    ("[1, 2]", "multitask.json: not an export's settings"),
    ('{"kind": "classfier", "settings": {}}', "multitask.json: kind 'classfier' is not one of classifier, multitask"),
    ('{"kind": "multitask", "settings": {}}', "heads.pt: cannot read the export's weights"),
])
def test_a_damaged_export_directory_is_one_line_naming_the_file(tmp_path, capsys, settings, said):
    ex = export_dir(tmp_path, settings, heads=b"PK\x03\x04 cut short")
    assert said in refused(capsys, [ex, "--out", str(tmp_path / "out")])


def test_a_damaged_checkpoint_is_not_told_to_start_again_without_resume(tmp_path, capsys):
    run = run_dir(tmp_path, "classifier")
    torch.save({"best_state": {}}, tmp_path / "whole.pt")
    (tmp_path / "classifier" / "checkpoint.pt").write_bytes((tmp_path / "whole.pt").read_bytes()[:40])
    said = refused(capsys, [run, "--out", str(tmp_path / "out")])
    assert "checkpoint.pt" in said and "truncated or damaged" in said and "--resume" not in said, said


@pytest.mark.parametrize("argv, said", [
    (["--eval-batch-size", "0"], "must be a positive integer"),
    (["--eval-batch-size", "-5"], "must be a positive integer"),
    (["--threshold", "nan"], "must be a finite number"),
    (["--threshold", "-1"], "must be 0 or more"),
    (["--splits", ""], "dev, test or dev,test"),
    (["--splits", ","], "dev, test or dev,test"),
])
def test_predicts_own_flags_are_checked_when_parsed(tmp_path, capsys, argv, said):
    with pytest.raises(SystemExit, match="2"):
        predict.request([str(tmp_path), *argv])
    assert said in capsys.readouterr().err
