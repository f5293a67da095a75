"""What --help says: each default it states is the real one (read from the dataclass or the constant, not a
literal), every option has a line, choices are listed once, and a word outside the choices is refused (exit 2)."""

from __future__ import annotations

import argparse
import re

import pytest

from assignments import bundle, grade
from assignments.checks import PARTS
from minbert.multitask import MultitaskConfig
from tasks import ensemble, score
from tasks import predict as predict_cli
from tasks.core.distributed import DEVICE_HELP
from tasks.multitask import build_parser as multitask_parser


def help_of(parser: argparse.ArgumentParser, flag: str) -> str:
    """The help text of `flag`, on one line."""
    action = next(a for a in parser._actions if flag in a.option_strings or a.dest == flag)
    return " ".join((action.help or "").split())


def test_sts_head_bias_help_gives_the_default_and_says_where_2_5_comes_from():
    text = help_of(multitask_parser(), "--sts-head-bias")
    said = re.fullmatch(r"(.*) \(default: ([^)]*)\)", text)
    assert said and float(said.group(2)) == MultitaskConfig.similarity_bias, text
    assert "2.5" not in said.group(1) or "main-job.json" in said.group(1), said.group(1)


def test_predict_device_has_the_training_commands_help():
    assert help_of(predict_cli.build_parser(), "--device") == f"{DEVICE_HELP} (default: auto)"


def test_the_graders_timeout_help_states_its_default():
    parser = argparse.ArgumentParser()
    bundle.checks_arguments(parser)
    for text in (help_of(grade.build_parser(), "--timeout"), help_of(parser, "--timeout")):
        assert f"(default: {grade.DEFAULT_TIMEOUT:g})" in text, text


def test_grade_help_lists_the_parts_once():
    text = grade.build_parser().format_help()
    assert all(len(re.findall(rf"\b{name}\b", text)) == 1 for name in PARTS), text
    assert max(len(line) for line in text.splitlines()) < 200
    assert grade.build_parser().parse_args(["--parts", *list(PARTS)[:2]]).parts == list(PARTS)[:2]


def test_grade_refuses_a_part_that_does_not_exist(capsys):
    with pytest.raises(SystemExit) as stop:
        grade.build_parser().parse_args(["--parts", "no-such-part"])
    assert stop.value.code == 2 and "no-such-part" in capsys.readouterr().err


def test_ensemble_help_says_a_run_directory_is_accepted():
    assert "run directory" in help_of(ensemble.build_parser(), "runs")


def test_score_refuses_a_split_outside_dev_train_test(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        score.main([str(tmp_path), "--split", "foo"])
    assert stop.value.code == 2 and "invalid choice: 'foo'" in capsys.readouterr().err
