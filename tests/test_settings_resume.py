"""Typed settings on classes of their own: flags and config files generated from dataclasses, and the one resume rule
(what a resumed run may change, the value a setting had before it existed, the flat names of old checkpoints)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import torch

from tasks.core.checkpoints import load_checkpoint
from tasks.core.errors import ConfigurationError, ResumeError
from tasks.core.recipe import Recipe
from tasks.core.resume import resume_config, resume_differences
from tasks.core.runs import RunOptions, parse_run, run_paths, write_run_json
from tasks.core.settings import load, parse, section, setting
from tasks.core.train import FitOptions, Work, fit

pytestmark = pytest.mark.usefixtures("one_thread")


# ------------------------------------------------------------------ the generator, on a settings class of its own

@dataclass
class Inner:
    """A section."""

    rate: float | None = setting(0.5, parse=float, help="a rate")
    names: str = setting("a", item=lambda s: s if s in ("a", "b", "c") else int("x"), help="some of a, b, c")


@dataclass
class Toy:
    """A command's settings."""

    size: int = setting(3, parse=int, help="a size")
    fast: bool = setting(False, help="go fast")
    shuffle: bool = setting(True, help="keep the order")
    where: str = setting("out", on_resume="free", help="where it writes")
    inner: Inner = section(Inner)


def test_flags_are_generated_with_their_spellings_defaults_and_checks(capsys):
    assert parse(Toy, [], "toy") == Toy()
    got = parse(Toy, ["--size", "5", "--fast", "--no-shuffle", "--rate", "none", "--names", "a", "b,c"], "toy")
    assert got == Toy(5, True, False, "out", Inner(None, "a,b,c"))
    for bad in (["--size", "x"], ["--names", "a,z"], ["--fast=yes"]):
        with pytest.raises(SystemExit):
            parse(Toy, bad, "toy")
    with pytest.raises(SystemExit):
        parse(Toy, ["--help"], "toy")
    text = " ".join(capsys.readouterr().out.split())
    assert "a size (default: 3)" in text and "a rate (default: 0.5; none switches it off)" in text


def test_a_config_file_is_checked_as_the_flags_are_and_flags_override_it(tmp_path, capsys):
    with pytest.raises(SystemExit):
        parse(Toy, ["--size", "4", "--print-config"], "toy")
    printed = json.loads(capsys.readouterr().out)
    assert printed == {"size": 4, "fast": False, "shuffle": True, "where": "out", "inner": {"rate": 0.5, "names": "a"}}
    path = tmp_path / "toy.json"
    path.write_text(json.dumps(printed))
    assert parse(Toy, ["--config", str(path)], "toy") == load(Toy, printed) == Toy(size=4)
    assert parse(Toy, ["--config", str(path), "--size", "9"], "toy").size == 9        # a flag beats the file
    for data, message in (({"sizes": 1}, "unknown setting 'sizes'"), ({"size": "x"}, "setting 'size'"),
                          ({"inner": {"names": "a,z"}}, "setting 'inner.names'"), ({"fast": 1}, "true or false"),
                          ({"size": None}, "may not be null"), ({"inner": 3}, "must be a JSON object")):
        path.write_text(json.dumps(data))
        with pytest.raises(ConfigurationError, match=message) as e:
            parse(Toy, ["--config", str(path)], "toy")
        assert str(path) in str(e.value)
    path.write_text('{"size": 3,\n "fast": tru}')
    with pytest.raises(ConfigurationError, match=rf"{path}:2:\d+: not valid JSON"):
        parse(Toy, ["--config", str(path)], "toy")


def test_what_a_resumed_run_may_change_is_a_property_of_the_field():
    stored = dict(resume_config(Toy()))
    assert "where" not in stored                                                          # on_resume="free"
    assert resume_differences(stored, resume_config(Toy(where="elsewhere"))) == []
    assert resume_differences(stored, resume_config(Toy(size=4, inner=Inner(rate=0.1)))) == [
        "inner.rate: checkpoint 0.5, now 0.1", "size: checkpoint 3, now 4"]
    assert resume_differences(stored | {"where": "there"}, resume_config(Toy())) == []    # stored once, free now


@dataclass
class ToyMoot:
    """A setting that has no effect at another's value (moot_when)."""

    decay: float = setting(0.0, parse=float, help="a decay")
    spare: bool = setting(False, before=True, moot_when=("decay", 0.0), help="what the decay spares, moot at 0")


def test_a_moot_setting_is_named_on_resume_only_when_its_own_value_changed():
    stored = dict(resume_config(ToyMoot()))                                               # decay 0: spare is moot
    assert resume_differences(stored, resume_config(ToyMoot(spare=True))) == []           # moot both times
    assert resume_differences(stored, resume_config(ToyMoot(decay=0.1))) == ["decay: checkpoint 0.0, now 0.1"]
    assert resume_differences(stored, resume_config(ToyMoot(decay=0.1, spare=True))) == [
        "decay: checkpoint 0.0, now 0.1", "spare: checkpoint False, now True"]
    older = {"decay": 0.1}                                                   # before `spare`: it ran as True
    assert resume_differences(older, resume_config(ToyMoot(decay=0.1))) == ["spare: checkpoint True, now False"]
    assert resume_differences({"decay": 0.0}, resume_config(ToyMoot())) == []


# a later version of Toy: its section gains a setting (with the value runs had before it, not today's default), and a
# field gains an older spelling of a value
@dataclass
class InnerLater(Inner):
    """A section, one setting more."""

    gain: float = setting(2.0, parse=float, before=1.0, help="a gain, 1 before it existed")
    kind: str = setting("new", choices=("new", "plain"), before="plain", legacy={"old": "plain"},
                        help="a kind, plain before it existed, once spelt old")


@dataclass
class ToyRun:
    """A command with a run directory."""

    size: int = setting(3, parse=int, help="a size")
    inner: Inner = section(Inner)
    run: RunOptions = section(RunOptions)


@dataclass
class ToyRunLater(ToyRun):
    """The same command, a version later."""

    inner: InnerLater = section(InnerLater)


@dataclass
class ToyRunNoBefore(ToyRun):
    """The same command, a version later, its new setting declared without `before`."""

    inner: InnerLater = section(InnerLater)
    extra: int = setting(0, parse=int, help="a setting without before")


def toy_fit(settings, checkpoint: Path, epochs: int, resume: Path | None = None):
    """Two epochs of a 2x2 linear model on fixed batches, the settings' resume_config stored in the checkpoint."""
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 2)
    batches = [{"x": torch.randn(4, 2), "y": torch.randn(4, 2)} for _ in range(3)]
    return fit(Work(model, torch.optim.SGD(model.parameters(), lr=0.1), lambda epoch: batches,
                    lambda m, b: ((m(b["x"]) - b["y"]) ** 2).mean(), lambda m: {"zero": 0.0}, "zero"),
               Recipe(warmup_ratio=None),
               FitOptions(epochs, torch.device("cpu"), checkpoint=checkpoint, resume=resume,
                          config=resume_config(settings) | {"command": "toy"}, progress=False, log=lambda s: None))


def test_a_section_gains_a_setting_and_a_run_written_without_it_resumes(tmp_path):
    """The generic rule, on a test-local command: a run written by ToyRun (its run.json and checkpoint) resumes under
    ToyRunLater, whose section gained `gain` (before=1.0, default 2.0): --resume DIR continues with 1.0, refuses 2.0;
    a newer spelling of a value compares as today's; a new setting without `before` is refused, saying where to declare it."""
    directory = tmp_path / "run"
    first = parse_run(ToyRun, ["--run-dir", str(directory)], "toy", None)
    paths = run_paths(first.run, "toy")
    write_run_json(paths, "toy", first, argv=[])
    toy_fit(first, paths.checkpoint, epochs=1)
    assert "inner.gain" not in load_checkpoint(paths.checkpoint)["config"]

    later = parse_run(ToyRunLater, ["--resume", str(directory)], "toy", None)
    assert later.inner.gain == 1.0 and ToyRunLater().inner.gain == 2.0         # as it ran, not today's default
    assert later.inner.kind == "plain"
    result = toy_fit(later, paths.checkpoint, epochs=2, resume=paths.checkpoint)
    assert [r["epoch"] for r in result.history] == [1, 2]                          # it resumed and went on
    state = load_checkpoint(paths.checkpoint)
    assert state["config"]["inner.gain"] == 1.0 and state["epoch"] == 2

    changed = parse_run(ToyRunLater, ["--resume", str(directory), "--gain", "2"], "toy", None)
    with pytest.raises(ResumeError, match=r"inner.gain: checkpoint 1.0, now 2.0"):
        toy_fit(changed, paths.checkpoint, epochs=3, resume=paths.checkpoint)
    stored = {k: v for k, v in state["config"].items() if k != "command"} | {"inner.kind": "old"}   # older spelling
    assert resume_differences(stored, resume_config(later)) == []
    assert resume_differences(stored, resume_config(replace(later, inner=replace(later.inner, kind="new")))) == [
        "inner.kind: checkpoint 'plain', now 'new'"]
    assert parse_run(ToyRunLater, ["--kind", "old"], "toy", None).inner.kind == "plain"
    no_before = parse_run(ToyRunNoBefore, ["--resume", str(directory)], "toy", None)
    with pytest.raises(ResumeError, match=r"extra: the run predates this setting \(now 0\): declare before=VALUE, .* "
                                          r"\(class ToyRunNoBefore in tests/test_settings_resume.py\)"):
        toy_fit(no_before, paths.checkpoint, epochs=3, resume=paths.checkpoint)


def test_a_checkpoint_from_before_typed_settings_is_read_by_its_flat_names():
    """Plain flag names map to the one field of that name; what it did not record is not asked, except a setting
    with `before`, which counts as that."""
    old = {"size": 3, "rate": 0.5, "where": "x"}
    now = resume_config(ToyRunLater())
    assert resume_differences(old, now | {"command": "toy"}) == ["inner.gain: checkpoint 1.0, now 2.0",
                                                                  "inner.kind: checkpoint 'plain', now 'new'"]
    as_it_ran = InnerLater(gain=1.0, kind="plain")
    assert resume_differences(old, resume_config(ToyRunLater(inner=as_it_ran))) == []
    assert resume_differences(old, resume_config(ToyRunLater(size=4, inner=as_it_ran))) == [
        "size: checkpoint 3, now 4"]




def test_a_hand_written_json_file_refuses_a_key_given_twice_and_text_that_is_not_utf8(tmp_path):
    from tasks.core.runs import read_run_json
    path = tmp_path / "toy.json"
    path.write_text('{"size": 3,\n "inner": {"rate": 0.1,\n  "names": "a",\n  "rate": null}}')
    with pytest.raises(ConfigurationError, match=rf"^{path}:4: key 'inner.rate' given twice"):
        parse(Toy, ["--config", str(path)], "toy")
    path.write_text('{"size": 3, "inner": {"rate": 0.1}, "size": 4}')
    with pytest.raises(ConfigurationError, match=rf"^{path}:1: key 'size' given twice"):
        parse(Toy, ["--config", str(path)], "toy")
    path.write_bytes(b'{"size": 3,\n "where": "caf\xe9"}')        # saved as Latin-1 (cp1252)
    with pytest.raises(ConfigurationError, match=rf"^{path}: not UTF-8 text \(byte 0xe9 on line 2\); save it as UTF-8$"):
        parse(Toy, ["--config", str(path)], "toy")
    path.write_bytes(b'\xef\xbb\xbf{"size": 5, "where": "caf\xc3\xa9"}')   # a UTF-8 BOM, as Windows editors write
    assert parse(Toy, ["--config", str(path)], "toy") == Toy(size=5, where="café")
    run = tmp_path / "run"                             # a run.json is read by the same reader
    run.mkdir()
    (run / "run.json").write_text('{"command": "toy",\n "settings": {"size": 3,\n  "size": 4}}')
    with pytest.raises(ConfigurationError, match=rf"^{run / 'run.json'}:3: key 'settings.size' given twice"):
        read_run_json(run)
    (run / "run.json").write_text('{"command": "toy", "items": [{"a": 1}, {"a": 2, "a": 3}]}')
    with pytest.raises(ConfigurationError, match=r":1: key 'items\[1\].a' given twice"):
        read_run_json(run)


@dataclass
class Choices:
    """Optional settings with choices and lists, as deebert's sweep has them."""

    mode: str | None = setting(None, choices=("x", "y"), help="a mode")
    cuts: list[float] | None = setting(None, item=float, help="cut points")
    counts: list[int] | None = setting(None, item=int, help="counts")
    path: str | None = setting(None, help="a path")


def test_a_config_file_refuses_a_number_given_as_a_string_and_keeps_strings(tmp_path):
    """A JSON string for a numeric setting is the wrong type ("3" is not 3), as a float for an int is; a path or a
    choice stays a string."""
    path = tmp_path / "toy.json"
    for data, message in (({"size": "3"}, r"setting 'size': must be a number, not '3'"),
                          ({"inner": {"rate": "1e-3"}}, r"setting 'inner.rate': must be a number, not '1e-3'")):
        path.write_text(json.dumps(data))
        with pytest.raises(ConfigurationError, match=rf"^{path}: {message}$"):
            parse(Toy, ["--config", str(path)], "toy")
    path.write_text(json.dumps({"cuts": [0.5, "1"]}))
    with pytest.raises(ConfigurationError, match=rf"^{path}: setting 'cuts': must be a number, not '1'$"):
        parse(Choices, ["--config", str(path)], "toy")
    path.write_text(json.dumps({"size": 4, "where": "3", "inner": {"rate": 1, "names": "a,b"}}))
    assert parse(Toy, ["--config", str(path)], "toy") == Toy(size=4, where="3", inner=Inner(1.0, "a,b"))
    path.write_text(json.dumps({"mode": "x", "cuts": [0.5, 1], "counts": [2], "path": "12"}))
    assert parse(Choices, ["--config", str(path)], "toy") == Choices("x", [0.5, 1.0], [2], "12")


def test_an_empty_list_in_a_config_file_is_refused_as_the_flag_refuses_it(tmp_path):
    path = tmp_path / "toy.json"
    path.write_text(json.dumps({"cuts": []}))
    with pytest.raises(ConfigurationError, match=rf"^{path}: setting 'cuts': give at least one value"):
        parse(Choices, ["--config", str(path)], "toy")
    with pytest.raises(SystemExit):
        parse(Choices, ["--cuts", ""], "toy")


def test_an_action_in_a_config_file_is_refused_not_dropped(tmp_path):
    """`run.resume` is an action, not a setting: a file that gives it would start a fresh run; the file is refused,
    as a search space refuses it."""
    path = tmp_path / "toy.json"
    path.write_text(json.dumps({"size": 3, "run": {"resume": str(tmp_path)}}))
    with pytest.raises(ConfigurationError, match=rf"^{path}: 'run.resume' is an action, not a setting: give --resume "
                                                  r"DIR on the command line$"):
        parse(ToyRun, ["--config", str(path)], "toy")


def test_an_optional_setting_with_choices_or_a_list_takes_none_on_the_command_line(tmp_path, capsys):
    """As null in a file switches it off, so does `none` after its flag (`--pals none`, `--thresholds none`)."""
    path = tmp_path / "toy.json"
    path.write_text(json.dumps({"mode": "x", "cuts": [0.5], "counts": [2]}))
    flags = ["--mode", "none", "--cuts", "none", "--counts", "None"]
    assert parse(Choices, ["--config", str(path), *flags], "toy") == Choices()
    assert parse(Choices, ["--mode", "y", "--cuts", "0.5,1"], "toy") == Choices("y", [0.5, 1.0])
    for bad in (["--mode", "z"], ["--cuts", "none,1"], ["--mode"]):
        with pytest.raises(SystemExit):
            parse(Choices, bad, "toy")
    assert "invalid choice: 'z'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse(Choices, ["--help"], "toy")
    assert "--mode {x,y,none}" in capsys.readouterr().out


@dataclass
class Helps:
    """Help texts that mention the word default."""

    model: str = setting("small", help="a model: 'small' (the offline default) or a directory")
    preset: str = setting("b", choices=("a", "b"), help="a preset. Default: b, not a")
    space: str | None = setting(None, help="a file (required, no default)")


def test_help_shows_each_default_unless_the_text_states_it(capsys):
    with pytest.raises(SystemExit):
        parse(Helps, ["--help"], "toy")
    text = " ".join(capsys.readouterr().out.split())
    assert "(the offline default) or a directory (default: small)" in text
    assert "Default: b, not a" in text and "(default: b)" not in text and "no default) (default" not in text
    from tasks import classifier
    with pytest.raises(SystemExit):
        classifier.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for default in ("weights (default: minilm)", "(default: full-model)", "files live (default: data)",
                    "(tasks/core/step.py) (default: off)"):
        assert default in text, default


def test_a_switch_has_both_spellings_so_a_flag_beats_a_config_files_value(tmp_path, capsys):
    """`--fast`/`--no-fast` and `--no-shuffle`/`--shuffle`: today's spelling first in --help, the other one undoes a
    file's (or a resumed run's) value."""
    path = tmp_path / "toy.json"
    path.write_text(json.dumps({"fast": True, "shuffle": False}))
    assert parse(Toy, ["--config", str(path), "--no-fast", "--shuffle"], "toy") == Toy()
    assert parse(Toy, ["--config", str(path)], "toy") == Toy(fast=True, shuffle=False)
    assert parse(Toy, ["--fast", "--no-shuffle"], "toy") == Toy(fast=True, shuffle=False)
    assert parse(Toy, ["--fast", "--no-fast"], "toy").fast is False                     # the last one wins
    with pytest.raises(SystemExit):
        parse(Toy, ["--help"], "toy")
    text = " ".join(capsys.readouterr().out.split())
    assert "--fast, --no-fast go fast (--no-fast: the opposite)" in text
    assert "--no-shuffle, --shuffle keep the order (--shuffle: the opposite)" in text
