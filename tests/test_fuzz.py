"""Property-based tests (hypothesis): every generated input to a reader, the scorer, the loaders and the tokenizer
gives a result or the project's own error (DataError, CheckpointError, ResumeError), never another exception."""

from __future__ import annotations

import io
import json
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import minbert
from minbert.checkpoint import CheckpointError, read_config, read_weights
from tasks.core.checkpoints import load_checkpoint
from tasks.core.data import TASKS, DataError, Records
from tasks.core.errors import ResumeError
from tasks.core.evaluation import LEADERBOARD, Report, read_predictions

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                        HealthCheck.too_slow])
HEADERS = {"sst": "\tid\tsentence\tsentiment", "cfimdb": "\tid\tsentence\tsentiment",
           "para": "\tid\tsentence1\tsentence2\tis_duplicate", "sts": "\tid\tsentence1\tsentence2\tsimilarity"}
NASTY = [b"\xef\xbb\xbf", b"\r\n", b"\r", b"\x00", b"\xff\xfe", b"\xc3", b"\xed\xa0\x80", b'"', b'""', b"\t",
         b"x" * 200_000, b"nan", b"inf", b"-1", b"1e400", "é\u2028\U0001F600".encode()]


def _workdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="minbert-fuzz-"))


@st.composite
def task_file(draw: st.DrawFn) -> tuple[str, bytes]:
    """A task name and the bytes of a file that is mostly in its format, with nasty pieces spliced in."""
    task = draw(st.sampled_from(sorted(TASKS)))
    header = draw(st.sampled_from([HEADERS[task], HEADERS[task].replace("\tid", "\tident"), "", "\tid"]))
    cell = st.one_of(st.text(max_size=12), st.sampled_from(["0", "1", "2.5", "4", "7", "", "x"]),
                     st.sampled_from(NASTY).map(lambda b: b.decode("latin-1")))
    rows = draw(st.lists(st.lists(cell, min_size=0, max_size=6).map("\t".join), max_size=8))
    text = "\n".join([header] + rows)
    data = text.encode("utf-8", errors="surrogatepass")
    splices = draw(st.lists(st.tuples(st.integers(0, max(len(data), 1)), st.sampled_from(NASTY)), max_size=3))
    for at, piece in splices:
        data = data[:at] + piece + data[at:]
    return task, draw(st.sampled_from([data, data.replace(b"\n", b"\r\n"), b"\xef\xbb\xbf" + data]))


@FUZZ
@given(task_file(), st.booleans())
def test_the_four_readers_give_records_or_a_data_error(case: tuple[str, bytes], strict: bool) -> None:
    task, data = case
    path = _workdir() / f"{task}.csv"
    path.write_bytes(data)
    try:
        records = TASKS[task].read(path, strict=strict)
    except DataError as e:
        assert str(e).startswith(str(path)), e               # every message names the file
        return
    assert isinstance(records, Records)
    assert all(s.line >= 2 and s.path == str(path) for s in records.skipped)
    assert len({r.id for r in records}) == len(records)       # no duplicate id is ever loaded
    assert all("\x00" not in r.id for r in records)
    records.summary()


@FUZZ
@given(st.sampled_from(["sst", "para", "sts"]), st.lists(st.one_of(
    st.binary(max_size=40), st.sampled_from(NASTY),
    st.tuples(st.text(max_size=8), st.sampled_from([" , ", "\t", ","]),
              st.one_of(st.text(max_size=6), st.floats(allow_nan=True).map(str), st.integers(-3, 7).map(str)))
    .map(lambda t: "".join(t).encode("utf-8", errors="surrogatepass"))), max_size=10))
def test_the_scorers_prediction_reader_reports_every_bad_line(task: str, lines: list[bytes]) -> None:
    path = _workdir() / f"{task}-dev-output.csv"
    path.write_bytes(b"\n".join(lines))
    report = Report(task, str(path), "gold")
    values = read_predictions(path, task, report)
    assert all(e.startswith(f"{path}:") for e in report.errors)
    for v in values.values():   # what is kept parses as the task's values
        assert LEADERBOARD[task].parse(str(v))[1] is None


JSON = st.recursive(st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=8)
FIELDS = ["hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size", "hidden_act",
          "layer_norm_eps", "vocab_size", "pad_token_id", "model_type", "position_embedding_type", "type_vocab_size"]


@FUZZ
@given(st.one_of(st.dictionaries(st.sampled_from(FIELDS), JSON, max_size=6).map(json.dumps), JSON.map(json.dumps),
                 st.binary(max_size=60).map(lambda b: b.decode("latin-1"))))
def test_the_config_reader_gives_a_config_or_a_checkpoint_error(text: str) -> None:
    directory = _workdir()
    (directory / "config.json").write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        config = read_config(directory)
    except CheckpointError as e:
        assert str(e).startswith(str(directory / "config.json")), e
        return
    assert config.hidden_size % config.num_attention_heads == 0 and config.num_hidden_layers >= 1


@pytest.fixture(scope="module")
def tiny_files() -> dict[str, bytes]:
    """A tiny BERT's model.safetensors and pytorch_model.bin, and a training checkpoint, as bytes."""
    config = minbert.BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                intermediate_size=16, max_position_embeddings=16)
    torch.manual_seed(0)
    model = minbert.BertModel(config)
    directory = _workdir()
    minbert.save_pretrained(model, directory)
    buffer, training = io.BytesIO(), io.BytesIO()
    torch.save(minbert.checkpoint.to_hf_state_dict(model), buffer)
    torch.save({"model": model.state_dict(), "optimizer": {}, "epoch": 1, "best_epoch": 1, "best_score": 0.5,
                "best_state": model.state_dict(), "history": [], "rng": {}}, training)
    return {"model.safetensors": (directory / "model.safetensors").read_bytes(), "pytorch_model.bin": buffer.getvalue(),
            "training.pt": training.getvalue()}


def _damaged(data: bytes, draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["truncate", "flip", "garbage", "nan"]))
    if kind == "truncate":
        return data[:draw(st.integers(0, len(data) - 1))]
    if kind == "flip":
        at = draw(st.integers(0, len(data) - 1))
        return data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1:]
    if kind == "nan":          # float32 NaN bit patterns written over the end, where the tensors' data lies
        return data[:-64] + b"\x00\x00\xc0\x7f" * 16 if len(data) > 200 else data
    return draw(st.binary(max_size=300))


@FUZZ
@given(st.data(), st.sampled_from(["model.safetensors", "pytorch_model.bin"]))
def test_the_weights_loader_gives_tensors_or_a_checkpoint_error(tiny_files, data, name: str) -> None:
    directory = _workdir()
    (directory / name).write_bytes(_damaged(tiny_files[name], data.draw))
    try:
        tensors = read_weights(directory)
    except CheckpointError as e:
        assert str(e).startswith(str(directory / name)), e
        return
    assert all(isinstance(v, torch.Tensor) and (not v.is_floating_point() or torch.isfinite(v).all())
               for v in tensors.values())


@FUZZ
@given(st.data())
def test_the_training_checkpoint_loader_gives_a_state_or_a_resume_error(tiny_files, data) -> None:
    path = _workdir() / "run.pt"
    path.write_bytes(_damaged(tiny_files["training.pt"], data.draw))
    try:
        state = load_checkpoint(path, required=("model", "epoch"))
    except ResumeError as e:
        assert str(e).startswith(str(path)), e
        return
    assert isinstance(state["epoch"], int)           # a damaged byte may leave another number: still a state


@FUZZ
@given(st.one_of(st.text(), st.text(min_size=3000, max_size=6000), st.just(""), st.just(" \t\n"),
                 st.characters(codec="utf-8").map(lambda c: c * 700)), st.one_of(st.none(), st.text(max_size=50)))
def test_the_tokenizer_takes_any_text(tokenizer, text: str, pair: str | None) -> None:
    batch = tokenizer([text], None if pair is None else [pair])
    n = batch.input_ids.shape[1]
    assert batch.input_ids.shape == batch.attention_mask.shape == (1, n) and 2 <= n <= tokenizer.max_length
    assert batch.input_ids[0, 0] == tokenizer.token_to_id("[CLS]")
    tokenizer.decode(tokenizer.encode(text))
