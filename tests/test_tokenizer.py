"""minbert's Tokenizer against Hugging Face BertTokenizer's ids (fixtures written by tests/fixtures/make_fixtures.py)."""

from __future__ import annotations

import json
import shutil
from functools import cache
from pathlib import Path

import pytest
import torch

import minbert

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REFERENCE = json.loads((FIXTURES / "minilm_reference.json").read_text())
MODEL_INPUTS, TOKENIZER_INPUTS = REFERENCE["model_inputs"], REFERENCE["tokenizer_inputs"]


@cache
def tokenizer_with_limit(max_length: int) -> minbert.Tokenizer:
    return minbert.Tokenizer.from_pretrained("minilm", max_length=max_length)


def case_id(case: dict) -> str:
    return f"{case['first'][:20]!r}{'+pair' if case['second'] is not None else ''}@{case.get('max_length', 'fx')}"


def check_one(tok: minbert.Tokenizer, case: dict) -> None:
    batch = tok(case["first"], case["second"])
    assert batch.input_ids.shape == (1, len(case["input_ids"]))
    assert batch.input_ids[0].tolist() == case["input_ids"]
    assert batch.token_type_ids[0].tolist() == case["token_type_ids"]
    assert batch.attention_mask[0].tolist() == case["attention_mask"]
    assert tok.encode(case["first"], case["second"]) == case["input_ids"]


@pytest.mark.parametrize("case", MODEL_INPUTS, ids=case_id)
def test_model_inputs_match_hugging_face(case: dict) -> None:
    check_one(tokenizer_with_limit(REFERENCE["meta"]["max_length"]), case)


@pytest.mark.parametrize("case", TOKENIZER_INPUTS, ids=case_id)
def test_odd_and_long_inputs_match_hugging_face(case: dict) -> None:
    check_one(tokenizer_with_limit(case["max_length"]), case)


def test_fixture_has_truncating_inputs() -> None:
    """The fixtures cover a > 512-token text truncated at the real limit, alone and in pairs."""
    long = [c for c in TOKENIZER_INPUTS if c["max_length"] == 512 and len(c["input_ids"]) == 512]
    assert len(long) >= 3 and any(c["second"] is not None for c in long)
    assert len(minbert.Tokenizer.from_pretrained("minilm").encode(long[0]["first"])) == 512


def pad(rows: list[list[int]], value: int = 0) -> list[list[int]]:
    T = max(map(len, rows))
    return [r + [value] * (T - len(r)) for r in rows]


@pytest.mark.parametrize("pairs", [False, True])
def test_dynamic_padding_matches_hugging_face(pairs: bool) -> None:
    """A batch is padded on the right to its longest member, with [PAD] = 0, mask 0 and segment 0."""
    cases = [c for c in MODEL_INPUTS if (c["second"] is not None) == pairs]
    tok = tokenizer_with_limit(REFERENCE["meta"]["max_length"])
    batch = tok([c["first"] for c in cases], [c["second"] for c in cases] if pairs else None)
    lengths = [len(c["input_ids"]) for c in cases]
    assert batch.input_ids.shape == (len(cases), max(lengths)) and min(lengths) < max(lengths)
    assert batch.input_ids.tolist() == pad([c["input_ids"] for c in cases], tok.pad_token_id)
    assert batch.attention_mask.tolist() == pad([c["attention_mask"] for c in cases])
    assert batch.token_type_ids.tolist() == pad([c["token_type_ids"] for c in cases])
    assert all(v.dtype == torch.long for v in batch.values())


def test_longest_first_truncation() -> None:
    """With a pair over the limit, tokens come off the longer side until both fit (then alternately)."""
    tok = tokenizer_with_limit(12)
    first, second = "one two three four five six seven eight nine ten", "alpha beta"
    ids = tok.encode(first, second)
    assert len(ids) == 12
    sep = [i for i, t in enumerate(ids) if t == tok.sep_token_id]
    assert len(sep) == 2
    assert tok.decode(ids[sep[0] + 1:sep[1]]) == "alpha beta"          # the short side is untouched
    assert tok.decode(ids[1:sep[0]]) == "one two three four five six seven"


def test_from_tokenizer_json(tmp_path: Path, minilm_dir: Path) -> None:
    """A checkpoint with only tokenizer.json (no vocab.txt) gives the same ids; so does our own save. Without a
    tokenizer_config.json, the limit is the truncation stored in tokenizer.json (MiniLM's says 128)."""
    shutil.copy(minilm_dir / "tokenizer.json", tmp_path / "tokenizer.json")
    shutil.copy(minilm_dir / "config.json", tmp_path / "config.json")
    assert minbert.Tokenizer.from_pretrained(str(tmp_path)).max_length == 128
    stored = json.loads((minilm_dir / "tokenizer.json").read_text())
    (tmp_path / "tokenizer.json").write_text(json.dumps(stored | {"truncation": None}))   # none stored: 512
    from_json = minbert.Tokenizer.from_pretrained(str(tmp_path))
    for case in TOKENIZER_INPUTS:
        if case["max_length"] == 512:
            check_one(from_json, case)
    saved = tmp_path / "saved"
    tokenizer_with_limit(9).save_pretrained(saved)
    reloaded = minbert.Tokenizer.from_pretrained(str(saved), max_length=9)
    for case in TOKENIZER_INPUTS:
        if case["max_length"] == 9:
            check_one(reloaded, case)


def test_batch_helpers_and_errors(tokenizer: minbert.Tokenizer) -> None:
    batch = tokenizer(["a b", "c"])
    assert batch.to("cpu").input_ids.tolist() == batch["input_ids"].tolist()
    assert tokenizer.vocab_size == 30522 and tokenizer.pad_token_id == 0
    assert tokenizer.tokenize("Hello, World!") == ["hello", ",", "world", "!"]
    with pytest.raises(ValueError, match="2 first sentences but 1 second"):
        tokenizer(["a", "b"], ["c"])
    with pytest.raises(ValueError, match="empty"):
        tokenizer([])
    with pytest.raises(AttributeError):
        _ = batch.labels


def test_one_string_as_second_for_a_list_of_firsts_is_refused(tokenizer: minbert.Tokenizer) -> None:
    """tok(["a man", "a dog"], "hi") is refused in one line (it used to pair each sentence with one letter of "hi")."""
    with pytest.raises(ValueError, match=r"^second is one string but first is a list of 2 sentences: pass a list of 2"):
        tokenizer(["a man", "a dog"], "hi")
    with pytest.raises(ValueError, match="first is a list of 3 sentences"):
        tokenizer(("a", "b", "c"), "hello")
    assert tokenizer("a man", "hi").input_ids.tolist() == tokenizer(["a man"], ["hi"]).input_ids.tolist()


@pytest.mark.parametrize(("first", "second", "message"), [
    (["a", None], None, r"first\[1\] is None, not a string"),
    ([3], None, r"first\[0\] is int 3, not a string"),
    (["a", "b"], ["c", 7.5], r"second\[1\] is float 7.5, not a string"),
    (None, None, r"first is None, not a string or a list of strings"),
    ("a", 5, r"second is int 5, not a string or a list of strings"),
])
def test_items_that_are_not_strings_are_named_by_position(tokenizer: minbert.Tokenizer, first, second,
                                                          message: str) -> None:
    with pytest.raises(TypeError, match=f"^{message}$"):
        tokenizer(first, second)


@pytest.mark.parametrize("max_length", [0, 1, -5, 2.5, True])
def test_max_length_below_the_special_tokens_is_refused(max_length) -> None:
    """[CLS] and [SEP] take 2 positions: a smaller max_length used to be ignored (0 meant unset; 1 gave 5 ids)."""
    with pytest.raises(ValueError, match=rf"^max_length must be an integer >= 2 .*not {max_length!r}$"):
        minbert.Tokenizer.from_pretrained("minilm", max_length=max_length)


def test_a_pair_needs_max_length_3(tokenizer: minbert.Tokenizer) -> None:
    """A pair takes [CLS] a [SEP] b [SEP]: max_length 2 used to give the whole pair untruncated."""
    tok = tokenizer_with_limit(2)
    assert tok(["one two three"]).input_ids.tolist() == [[tok.cls_token_id, tok.sep_token_id]]
    with pytest.raises(ValueError, match=r"^a sentence pair needs max_length >= 3 \(\[CLS\] a \[SEP\] b \[SEP\]\), not 2$"):
        tok(["one two three"], ["four five"])
    with pytest.raises(ValueError, match="a sentence pair needs max_length >= 3"):
        tok.encode("one two three", "four five")
    assert len(tokenizer_with_limit(3).encode("one two three", "four five")) == 3


ODD = ["", "  ", "Héllo WORLD ñandú", "東京タワー and 🙂 emoji", "[CLS] [MASK] text", "zero\u200bwidth ﬁ ligature",
       "word " * 600]


def test_save_pretrained_keeps_max_length_and_transformers_reads_it(tmp_path: Path, tokenizer: minbert.Tokenizer) -> None:
    """save_pretrained writes tokenizer_config.json too: minbert reloads the same max_length, and transformers'
    AutoTokenizer truncates at it (it used to see no limit and give 602 ids for 600 words) with the same ids."""
    transformers = pytest.importorskip("transformers")
    tok = tokenizer_with_limit(16)
    tok.save_pretrained(tmp_path)
    settings = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert settings["model_max_length"] == 16 and settings["do_lower_case"] is True
    reloaded = minbert.Tokenizer.from_pretrained(str(tmp_path))
    assert reloaded.max_length == 16
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    assert theirs.model_max_length == 16
    for text in ODD:
        ours = tok([text])
        assert reloaded([text]).input_ids.tolist() == ours.input_ids.tolist()
        assert theirs([text], truncation=True, return_tensors="pt")["input_ids"].tolist() == ours.input_ids.tolist()
    pair = theirs(ODD[-1], ODD[2], truncation=True)
    assert pair["input_ids"] == tok.encode(ODD[-1], ODD[2]) and len(pair["input_ids"]) == 16


def test_a_cased_tokenizer_saves_its_casing(tmp_path: Path, minilm_dir: Path) -> None:
    """tokenizer_config.json says do_lower_case false for a cased vocabulary, so transformers keeps the case too."""
    transformers = pytest.importorskip("transformers")
    cased = minbert.Tokenizer.from_vocab(minilm_dir / "vocab.txt", lowercase=False, max_length=32)
    cased.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["do_lower_case"] is False
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    for text in ODD:
        assert theirs(text, truncation=True)["input_ids"] == cased.encode(text)


def test_a_tokenizer_whose_normaliser_is_not_berts_is_saved_for_transformers_as_it_is(tmp_path: Path,
                                                                                      minilm_dir: Path) -> None:
    """A tokenizer.json with another normaliser (here cased, accents stripped) names no BERT class in
    tokenizer_config.json: transformers then reads tokenizer.json as saved, not a lower-casing BERT pipeline rebuilt
    from the class."""
    transformers = pytest.importorskip("transformers")
    from tokenizers.normalizers import NFD, Sequence, StripAccents
    tok = minbert.Tokenizer.from_pretrained(str(minilm_dir), max_length=32)
    tok.backend.normalizer = Sequence([NFD(), StripAccents()])
    tok.save_pretrained(tmp_path)
    assert "tokenizer_class" not in json.loads((tmp_path / "tokenizer_config.json").read_text())
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    for text in ("Hello World Café", *ODD):
        assert theirs(text, truncation=True)["input_ids"] == tok.encode(text)


def test_a_folder_without_tokenizer_config_truncates_where_tokenizer_json_says(tmp_path: Path) -> None:
    """A folder that an earlier save wrote (tokenizer.json alone) keeps the truncation stored in tokenizer.json."""
    tokenizer_with_limit(16).save_pretrained(tmp_path)
    (tmp_path / "tokenizer_config.json").unlink(missing_ok=True)
    assert minbert.Tokenizer.from_pretrained(str(tmp_path)).max_length == 16
    assert minbert.Tokenizer.from_pretrained(str(tmp_path), max_length=9).max_length == 9
