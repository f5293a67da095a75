"""The error boundary: bad inputs to a CLI end with one `error: ...` line naming the file and the fix, exit status
2 (a bad flag value, from argparse) or 1 (a bad file or checkpoint), and no traceback; a bug keeps its traceback.
The cases are the table of docs/errors.md."""

from __future__ import annotations

import json
import re

import pytest
import torch
from conftest import DATA, TEST_DEVICE
from safetensors.torch import load_file, save_file

from tasks import classifier, score
from tasks.core.errors import run_cli

pytestmark = pytest.mark.usefixtures("one_thread")


def piece(tmp_path, name, stop, start=0):
    lines = (DATA / name).read_text(encoding="utf-8").splitlines(keepends=True)
    path = tmp_path / f"{start}-{name}"
    path.write_text(lines[0] + "".join(lines[1 + start:1 + stop]), encoding="utf-8")
    return str(path)


@pytest.fixture
def base(tmp_path, tiny_dir):
    """A classifier run that works: tiny model, slices of SST."""
    return ["--model", str(tiny_dir), "--device", TEST_DEVICE, "--batch-size", "8", "--epochs", "1", "--no-progress",
            "--train-file", piece(tmp_path, "ids-sst-train.csv", 16),
            "--dev-file", piece(tmp_path, "ids-sst-dev.csv", 8),
            "--test-file", piece(tmp_path, "ids-sst-dev.csv", 12, 8), "--predictions-dir", str(tmp_path / "p"),
            "--checkpoint", str(tmp_path / "run.pt")]


def with_flag(argv: list[str], flag: str, value: str) -> list[str]:
    argv = list(argv)
    if flag in argv:
        argv[argv.index(flag) + 1] = value
        return argv
    return argv + [flag, value]


def cli(argv: list[str], capsys) -> tuple[int, str]:
    """The exit status and stderr of `python -m tasks.classifier ARGV`, run in this process."""
    try:
        code = run_cli(lambda: classifier.main(argv))
    except SystemExit as e:   # argparse
        code = e.code
    return code, capsys.readouterr().err


def damaged_model(tiny_dir, tmp_path, what: str):
    target = tmp_path / f"model-{what}"
    target.mkdir()
    for f in tiny_dir.iterdir():
        (target / f.name).write_bytes(f.read_bytes())
    if what == "config-json":
        (target / "config.json").write_text('{"hidden_size": 32,, }')
    elif what == "config-type":
        config = json.loads((target / "config.json").read_text())
        (target / "config.json").write_text(json.dumps(config | {"num_attention_heads": "4"}))
    elif what == "truncated":
        data = (target / "model.safetensors").read_bytes()
        (target / "model.safetensors").write_bytes(data[:len(data) // 2])
    elif what == "nan":
        tensors = load_file(target / "model.safetensors")
        tensors["encoder.layer.0.attention.self.query.weight"][0, 0] = torch.nan
        save_file(tensors, target / "model.safetensors", metadata={"format": "pt"})
    return str(target)


CASES = [  # (name, how the argv changes, exit status, what stderr's last line must say)
    ("random bytes as a task file",
     lambda a, t, d: with_flag(a, "--train-file", bytes_file(t, bytes(range(128, 256)))), 1,
     r"rand\.csv:1: the header has bytes that are not UTF-8 text \(save the file as UTF-8\)"),
    ("an empty task file", lambda a, t, d: with_flag(a, "--dev-file", bytes_file(t, b"")), 1,
     r"rand\.csv:1: the file is empty; expected a header with id and sentence"),
    ("a header without the columns", lambda a, t, d: with_flag(a, "--dev-file", bytes_file(t, b"a\tb\n1\t2\n")), 1,
     r"rand\.csv:1: the header \['a', 'b'\] has no id or sentence column"),
    ("a missing file", lambda a, t, d: with_flag(a, "--train-file", str(t / "absent.csv")), 2,
     r"argument --train-file: .*absent\.csv: no such file"),
    ("--batch-size 0", lambda a, t, d: with_flag(a, "--batch-size", "0"), 2,
     r"argument --batch-size: must be a positive integer, not 0"),
    ("--lr nan", lambda a, t, d: with_flag(a, "--lr", "nan"), 2, r"argument --lr: must be a finite number, not nan"),
    ("--dropout 1.5", lambda a, t, d: with_flag(a, "--dropout", "1.5"), 2, r"argument --dropout: must be in \[0, 1\)"),
    ("--resume a missing file", lambda a, t, d: with_flag(a, "--resume", str(t / "nope.pt")), 2,
     r"argument --resume: .*nope\.pt: no such file"),
    ("--resume a truncated checkpoint", lambda a, t, d: with_flag(a, "--resume", bytes_file(t, b"PK\x03\x04abc")), 1,
     r"rand\.csv: cannot read the training checkpoint \(.*\); it is truncated or damaged"),
    ("config.json malformed", lambda a, t, d: with_flag(a, "--model", damaged_model(d, t, "config-json")), 1,
     r"config\.json: not valid JSON \(Expecting property name .*\); fix the file or fetch the checkpoint again"),
    ("config.json with a wrong type", lambda a, t, d: with_flag(a, "--model", damaged_model(d, t, "config-type")), 1,
     r"config\.json: num_attention_heads must be an integer, not '4'; fix config\.json or fetch"),
    ("a truncated model.safetensors", lambda a, t, d: with_flag(a, "--model", damaged_model(d, t, "truncated")), 1,
     r"model\.safetensors: cannot read the safetensors file \(.*\); it may be truncated or corrupted"),
    ("NaN in the weights", lambda a, t, d: with_flag(a, "--model", damaged_model(d, t, "nan")), 1,
     r"model\.safetensors: tensor encoder\.layer\.0\.attention\.self\.query\.weight holds NaN or infinite values"),
    ("--precision fp16 on a CPU", lambda a, t, d: with_flag(with_flag(a, "--device", "cpu"), "--precision", "fp16"), 1,
     r"--precision fp16 on cpu \(.*\): fp16 trains on CUDA and MPS, .*: use --precision"),
]


def bytes_file(tmp_path, data: bytes) -> str:
    path = tmp_path / "rand.csv"
    path.write_bytes(data)
    return str(path)


@pytest.mark.parametrize("name,change,status,says", CASES, ids=[c[0] for c in CASES])
def test_a_bad_input_is_one_error_line_without_a_traceback(name, change, status, says, base, tmp_path, tiny_dir,
                                                           capsys):
    code, err = cli(change(base, tmp_path, tiny_dir), capsys)
    assert code == status, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(("error: ", "python -m tasks.classifier: error: ")), err
    assert re.search(says, err.strip().splitlines()[-1]), err


def test_resume_with_other_settings_and_bad_rows_are_reported(base, tmp_path, capsys):
    assert cli(base, capsys)[0] == 0
    code, err = cli(with_flag(base, "--lr", "0.5") + ["--resume", str(tmp_path / "run.pt")], capsys)
    assert code == 1 and "Traceback" not in err
    assert err.splitlines()[-1].startswith(f"error: {tmp_path / 'run.pt'}: cannot resume a different run; settings "
                                           "differ: training.lr: checkpoint 3e-05, now 0.5")
    rows = (b"\tid\tsentence\tsentiment\n0\ta\tgood\t4\n1\ta\tbad\t0\n2\tb\r\n3\tc\xfft\t2\n4\td\x00\t1\n5\te\tok\t3\n")
    code, err = cli(with_flag(base, "--train-file", bytes_file(tmp_path, rows)), capsys)
    assert code == 0, err
    assert "rand.csv: 2 examples loaded, 4 rows skipped" in err
    for line, why in ((3, "duplicate id a (first on line 2)"), (4, "2 columns, the header has 4"),
                      (5, "bytes that are not UTF-8 text"), (6, "a NUL byte")):
        assert f"rand.csv:{line}: {why}" in err, err


def test_a_bug_keeps_its_traceback(monkeypatch):
    monkeypatch.setattr(classifier, "run", lambda args: {}["no such key"])
    with pytest.raises(KeyError):
        run_cli(lambda: classifier.main([]))


def test_the_scorer_reports_a_binary_prediction_file_by_line(tmp_path, capsys):
    (tmp_path / "sst-dev-output.csv").write_bytes(b"id \t Predicted_Sentiment \n\xff\xfe , 3\nabc , 9\n")
    code = run_cli(lambda: score.main([str(tmp_path), "--data-dir", str(DATA)]))
    out = capsys.readouterr().out
    assert code == 1
    assert f"{tmp_path / 'sst-dev-output.csv'}:2: bytes that are not UTF-8 text, or a NUL byte" in out
    assert f"{tmp_path / 'sst-dev-output.csv'}:3: id abc: value '9' out of range" in out


def test_a_very_long_line_is_skipped_and_reported_by_line(tmp_path):
    from tasks.core.data import read_sentences
    path = tmp_path / "long.csv"
    path.write_bytes(b"\xef\xbb\xbf\tid\tsentence\tsentiment\r\n0\ta\tgood\t4\r\n1\tb\t" + b"x" * 200_000
                     + b"\t3\r\n2\tc\tfine\t1\r\n")   # with a BOM and CRLF line ends
    records = read_sentences(path)
    assert [(r.id, r.sentence, r.label, r.line) for r in records] == [("a", "good", 4, 2), ("c", "fine", 1, 4)]
    assert [(s.line, s.reason.split(" (")[0]) for s in records.skipped] == [(3, "cannot split the row into cells")]
