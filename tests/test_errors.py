"""The error boundary: bad inputs to a CLI end with one `error: ...` line naming the file and the fix, exit status
2 (a bad flag value, from argparse) or 1 (a bad file or checkpoint), and no traceback; a bug keeps its traceback.

The cases are the table of docs/errors.md, read from the page: each row (by its first column) has exactly one case
in CASES, which runs `python -m tasks.classifier` in this process, and the row's exit status and message must be what
the command gives: the last line on stderr, its paths shortened (this test's tmp_path/ cut off), `...` in the page's
message standing for any text, and a message in parentheses after it, (or `...`), accepted instead."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
import torch
from conftest import DATA, ROOT, TEST_DEVICE
from safetensors.torch import load_file, save_file

from tasks import classifier, score
from tasks.core.errors import run_cli

pytestmark = pytest.mark.usefixtures("one_thread")

PAGE = ROOT / "docs" / "errors.md"
HEADER = "| input | exit | message (the last line on stderr) |"
CELL = re.compile(r"`(?P<message>[^`]+)`(?:\s+\(or `(?P<alternative>[^`]+)`[^`]*\))?")


def page_rows() -> dict[str, tuple[int, list[str]]]:
    """docs/errors.md's table of bad inputs: {input: (exit status, [message, alternative message])}."""
    lines = PAGE.read_text(encoding="utf-8").splitlines()
    assert HEADER in lines, f"{PAGE}: no table headed {HEADER}"
    rows: dict[str, tuple[int, list[str]]] = {}
    for line in lines[lines.index(HEADER) + 2:]:
        if not line.startswith("|"):
            break
        what, status, cell = (c.strip() for c in line.strip().strip("|").split(" | "))
        found = CELL.fullmatch(cell)
        assert found, f"{PAGE}: row {what!r}: not `message` or `message` (or `alternative`): {cell}"
        assert what not in rows, f"{PAGE}: row {what!r} twice"
        message, alternative = found.group("message", "alternative")
        if alternative and not alternative.startswith("error: "):   # in place of the first (...) of the message
            part = re.search(r"\([^)]*\)", message)
            assert part, f"{PAGE}: row {what!r}: an alternative (or `...`) but no (...) in the message"
            alternative = f"{message[:part.start()]}({alternative}){message[part.end():]}"
        rows[what] = (int(status), [message] + ([alternative] if alternative else []))
    assert rows, f"{PAGE}: the table under {HEADER} has no rows"
    return rows


def matches(line: str, message: str) -> bool:
    """Whether a line is the page's message, each `...` in it standing for any text."""
    return re.fullmatch(".*".join(map(re.escape, message.split("..."))), line) is not None


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


def a_file(tmp_path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def truncated(path, data: bytes) -> str:
    """`data` (a file torch.save wrote) cut in half, written to `path`."""
    path.write_bytes(data[:len(data) // 2])
    return str(path)


def saved(obj) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def damaged_model(tiny_dir, tmp_path, what: str) -> str:
    """A copy of the tiny model directory, as tmp_path/model, with one thing wrong."""
    target = tmp_path / "model"
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
    elif what == "truncated-bin":
        tensors = load_file(target / "model.safetensors")
        (target / "model.safetensors").unlink()
        truncated(target / "pytorch_model.bin", saved(tensors))
    elif what == "nan":
        tensors = load_file(target / "model.safetensors")
        tensors["encoder.layer.0.attention.self.query.weight"][0, 0] = torch.nan
        save_file(tensors, target / "model.safetensors", metadata={"format": "pt"})
    elif what == "tokenizer-json":
        (target / "tokenizer_config.json").write_text('{"do_lower_case": true,, }')
    return str(target)


def trained_then(argv: list[str], flag: str, value: str) -> list[str]:
    """After a run of `argv` that works (it writes run.pt), `argv` with `flag value`."""
    assert run_cli(lambda: classifier.main(argv)) == 0
    return with_flag(argv, flag, value)


def trained_then_changed(argv: list[str]) -> list[str]:
    """After a run of `argv` that works (it writes run.pt), its training file cut to half its rows, and --resume."""
    assert run_cli(lambda: classifier.main(argv)) == 0
    train = Path(argv[argv.index("--train-file") + 1])
    lines = train.read_text(encoding="utf-8").splitlines(keepends=True)
    train.write_text("".join(lines[:len(lines) // 2]), encoding="utf-8")
    return with_flag(argv, "--resume", str(Path(argv[argv.index("--checkpoint") + 1])))


CASES = {  # docs/errors.md's row (its first column): how the working argv changes (argv, tmp_path, tiny_dir)
    "a task file of random bytes":
        lambda a, t, d: with_flag(a, "--train-file", a_file(t, "train.csv", bytes(range(128, 256)))),
    "an empty task file": lambda a, t, d: with_flag(a, "--dev-file", a_file(t, "dev.csv", b"")),
    "a header without the needed columns":
        lambda a, t, d: with_flag(a, "--dev-file", a_file(t, "dev.csv", b"a\tb\n1\t2\n")),
    "a comma-separated task file (Excel's or pandas' `to_csv()` CSV)":
        lambda a, t, d: with_flag(a, "--train-file", a_file(t, "train.csv", b",id,sentence,sentiment\n0,a,b,1\n")),
    "a training file whose label column has another name": lambda a, t, d: with_flag(
        a, "--train-file", a_file(t, "train.csv", b"\tid\tsentence\tlabel\n0\ta\tgood\t4\n")),
    "a missing file (`--train-file`, `--resume`, ...)":
        lambda a, t, d: with_flag(a, "--train-file", str(t / "absent.csv")),
    "`--batch-size 0`": lambda a, t, d: with_flag(a, "--batch-size", "0"),
    "`--lr nan`": lambda a, t, d: with_flag(a, "--lr", "nan"),
    "`--dropout 1.5`": lambda a, t, d: with_flag(a, "--dropout", "1.5"),
    "`--max-length 2`": lambda a, t, d: with_flag(a, "--max-length", "2"),
    "`--resume` a truncated checkpoint": lambda a, t, d: with_flag(
        a, "--resume", truncated(t / "run.pt", saved({"model": {"w": torch.zeros(64, 64)}, "epoch": 1}))),
    "`--resume` a file that is not a training checkpoint": lambda a, t, d: with_flag(
        a, "--resume", a_file(t, "model.bin", saved(load_file(d / "model.safetensors")))),
    "`--resume` with other settings": lambda a, t, d: with_flag(trained_then(a, "--lr", "0.5"), "--resume",
                                                                str(t / "run.pt")),
    "`--resume` after a task file changed": lambda a, t, d: trained_then_changed(a),
    "a malformed config.json": lambda a, t, d: with_flag(a, "--model", damaged_model(d, t, "config-json")),
    "config.json with a wrong type": lambda a, t, d: with_flag(a, "--model", damaged_model(d, t, "config-type")),
    "a truncated model.safetensors": lambda a, t, d: with_flag(a, "--model", damaged_model(d, t, "truncated")),
    "a truncated or damaged pytorch_model.bin":
        lambda a, t, d: with_flag(a, "--model", damaged_model(d, t, "truncated-bin")),
    "NaN or inf in the weights": lambda a, t, d: with_flag(a, "--model", damaged_model(d, t, "nan")),
    "a malformed tokenizer_config.json or vocab file":
        lambda a, t, d: with_flag(a, "--model", damaged_model(d, t, "tokenizer-json")),
    "`--precision fp16` on a CPU": lambda a, t, d: with_flag(with_flag(a, "--device", "cpu"), "--precision", "fp16"),
    "`--device cuda` without CUDA": lambda a, t, d: with_flag(a, "--device", "cuda"),
    "`--cuda-graphs` on a CPU": lambda a, t, d: [*with_flag(a, "--device", "cpu"), "--cuda-graphs"],
}
SKIP_WHEN = {"`--device cuda` without CUDA": (torch.cuda.is_available(), "this machine has CUDA")}  # row: (skip, why)
ROWS = page_rows()


def test_each_row_of_the_page_has_one_case():
    assert [r for r in ROWS if r not in CASES] == [], f"rows of {PAGE} without a case in CASES"
    assert [c for c in CASES if c not in ROWS] == [], f"cases without a row in {PAGE} (its first column)"


@pytest.mark.parametrize("row", list(ROWS))
def test_a_bad_input_gives_the_pages_exit_status_and_message(row, base, tmp_path, tiny_dir, capsys):
    if row not in CASES:
        pytest.fail(f"{PAGE}: row {row!r} has no case in CASES")
    skip, why = SKIP_WHEN.get(row, (False, ""))
    if skip:
        pytest.skip(why)
    status, messages = ROWS[row]
    code, err = cli(CASES[row](base, tmp_path, tiny_dir), capsys)
    assert "Traceback" not in err, err
    last = err.strip().splitlines()[-1].replace(f"{tmp_path}/", "")
    assert (code, any(matches(last, m) for m in messages)) == (status, True), (
        f"{PAGE}, row {row!r}:\n  the page: exit {status}, {' or '.join(messages)}\n  the code: exit {code}, {last}")


def test_a_missing_resume_file_is_refused_like_a_missing_train_file(base, tmp_path, capsys):
    """The page's missing-file row, for --resume (which takes a file or a directory: `no such file or directory`)."""
    status, (message,) = ROWS["a missing file (`--train-file`, `--resume`, ...)"]
    code, err = cli(with_flag(base, "--resume", str(tmp_path / "absent.pt")), capsys)
    expected = message.replace("--train-file", "--resume").replace("absent.csv", "absent.pt")
    assert code == status and err.strip().splitlines()[-1].replace(f"{tmp_path}/", "").startswith(expected), err


def test_bad_rows_are_skipped_and_reported(base, tmp_path, capsys):
    rows = (b"\tid\tsentence\tsentiment\n0\ta\tgood\t4\n1\ta\tbad\t0\n2\tb\r\n3\tc\xfft\t2\n4\td\x00\t1\n5\te\tok\t3\n")
    code, err = cli(with_flag(base, "--train-file", a_file(tmp_path, "rand.csv", rows)), capsys)
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
