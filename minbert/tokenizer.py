"""WordPiece tokenisation (Wu et al., 2016; Devlin et al., 2019, sec. 3) through the `tokenizers` library."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer as _HFTokenizer
from tokenizers.implementations import BertWordPieceTokenizer
from tokenizers.normalizers import BertNormalizer

from .files import replacing, write_text


class Batch(dict):
    """input_ids, attention_mask and token_type_ids, each (B, T); `model(**batch)` works."""

    def to(self, device: str | torch.device) -> Batch:
        """The same batch with every (B, T) tensor on device."""
        return Batch({k: v.to(device) for k, v in self.items()})

    def __getattr__(self, name: str) -> torch.Tensor:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def _json_object(path: Path) -> dict:
    """The settings in a JSON file ({} when there is none); a CheckpointError naming the file when it is malformed."""
    from .checkpoint import CheckpointError
    if not path.is_file():
        return {}
    try:
        d = json.loads(path.read_bytes().decode("utf-8-sig"))
    except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise CheckpointError(f"{path}: not valid JSON ({e}); fix the file or fetch the checkpoint again") from None
    limits = {k: d.get(k) for k in ("model_max_length", "max_position_embeddings")} if isinstance(d, dict) else {}
    if not isinstance(d, dict) or any(v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)))
                                      for v in limits.values()):
        raise CheckpointError(f"{path}: expected a JSON object with numeric model_max_length and "
                              "max_position_embeddings; fix the file or fetch the checkpoint again")
    return d


def _describe(value: object) -> str:
    """A value's type and start for an error message: 'None', 'int 3'."""
    return "None" if value is None else f"{type(value).__name__} {value!r:.40}"


def _texts(name: str, texts: object) -> list[str]:
    """texts as a list of strings; a TypeError naming the first item that is not a string."""
    try:
        texts = list(texts)
    except TypeError:
        raise TypeError(f"{name} is {_describe(texts)}, not a string or a list of strings") from None
    if not all(isinstance(t, str) for t in texts):
        i = next(i for i, t in enumerate(texts) if not isinstance(t, str))
        raise TypeError(f"{name}[{i}] is {_describe(texts[i])}, not a string")
    return texts


def _check_max_length(max_length: object) -> int:
    """max_length itself; a ValueError unless it is an integer with room for [CLS] and [SEP]."""
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 2:
        raise ValueError(f"max_length must be an integer >= 2 ([CLS] and [SEP] take 2), not {max_length!r}")
    return max_length


class Tokenizer:
    """BERT's tokenizer: [CLS] a [SEP] (b [SEP]), truncated longest-first, padded to the longest in the batch."""

    def __init__(self, backend: _HFTokenizer, max_length: int = 512):
        _check_max_length(max_length)
        self.backend = backend
        self.max_length = max_length
        self.pad_token_id = self.token_to_id("[PAD]")
        self.cls_token_id = self.token_to_id("[CLS]")
        self.sep_token_id = self.token_to_id("[SEP]")
        self.mask_token_id = self.token_to_id("[MASK]")
        backend.enable_truncation(max_length, strategy="longest_first")
        backend.enable_padding(pad_id=self.pad_token_id, pad_token="[PAD]", pad_type_id=0)

    def token_to_id(self, token: str) -> int:
        """The id of a token such as [SEP]; ValueError if the vocabulary lacks it."""
        i = self.backend.token_to_id(token)
        if i is None:
            raise ValueError(f"the vocabulary has no {token} token")
        return i

    @classmethod
    def from_vocab(cls, vocab_file: str | Path, lowercase: bool = True, max_length: int = 512,
                   strip_accents: bool | None = None, handle_chinese_chars: bool = True) -> Tokenizer:
        """From a vocab.txt, with the BERT normaliser and pre-tokeniser (lowercase for uncased models)."""
        wp = BertWordPieceTokenizer(str(vocab_file), lowercase=lowercase, strip_accents=strip_accents,
                                    handle_chinese_chars=handle_chinese_chars, clean_text=True)
        return cls(wp._tokenizer, max_length)

    @classmethod
    def from_pretrained(cls, name_or_path: str = "minilm", max_length: int | None = None) -> Tokenizer:
        """From a checkpoint directory, the packaged alias 'minilm', or a Hub name (as load_pretrained)."""
        from .checkpoint import CheckpointError, resolve
        directory = resolve(name_or_path)
        settings = _json_object(directory / "tokenizer_config.json")
        if (directory / "tokenizer_config.json").is_file():
            limit = settings.get("model_max_length")
        else:                                   # tokenizer.json alone (an earlier save): the truncation stored in it
            stored = _json_object(directory / "tokenizer.json").get("truncation")
            limit = stored.get("max_length") if isinstance(stored, dict) else None
        limit = 512 if limit is None else limit
        limit = int(min(limit, _json_object(directory / "config.json").get("max_position_embeddings", 512)))
        if max_length is not None:
            limit = min(limit, _check_max_length(max_length))
        for name in ("vocab.txt", "tokenizer.json"):
            path = directory / name
            if not path.is_file():
                continue
            try:
                if name == "tokenizer.json":
                    return cls(_HFTokenizer.from_file(str(path)), limit)
                return cls.from_vocab(path, lowercase=settings.get("do_lower_case", True), max_length=limit,
                                      strip_accents=settings.get("strip_accents"),
                                      handle_chinese_chars=settings.get("tokenize_chinese_chars", True))
            except Exception as e:  # noqa: BLE001 - the Rust library raises a bare Exception for a damaged file
                raise CheckpointError(f"{path}: cannot read the tokenizer ({type(e).__name__}: {str(e)[:200]}); "
                                      "the file is damaged: fetch the checkpoint again") from None
        raise CheckpointError(f"{directory}: no vocab.txt or tokenizer.json (model.save_pretrained writes the weights "
                              "and config alone): write it with tok.save_pretrained(DIR), or copy the vocab.txt of "
                              "the checkpoint the model came from")

    def _check_pair(self) -> None:
        """A ValueError when max_length leaves no room for a pair's three special tokens."""
        if self.max_length < 3:
            raise ValueError(f"a sentence pair needs max_length >= 3 ([CLS] a [SEP] b [SEP]), not {self.max_length}")

    @property
    def vocab_size(self) -> int:
        """The number of tokens in the vocabulary."""
        return self.backend.get_vocab_size()

    def __call__(self, first: str | list[str], second: str | list[str] | None = None) -> Batch:
        """Tokenise sentences (or sentence pairs) into a padded Batch of (B, T) long tensors."""
        if isinstance(first, str):
            first, second = [first], [second] if isinstance(second, str) else second
        first = _texts("first", first)
        if isinstance(second, str):
            raise ValueError(f"second is one string but first is a list of {len(first)} sentences: pass a list of "
                             f"{len(first)} (repeat the string to pair it with each)")
        if second is not None:
            self._check_pair()
            second = _texts("second", second)
            if len(second) != len(first):
                raise ValueError(f"{len(first)} first sentences but {len(second)} second sentences")
        inputs = first if second is None else list(zip(first, second))
        if not inputs:
            raise ValueError("nothing to tokenise: the batch is empty")
        encodings = self.backend.encode_batch(inputs)
        return Batch(
            input_ids=torch.tensor([e.ids for e in encodings], dtype=torch.long),
            attention_mask=torch.tensor([e.attention_mask for e in encodings], dtype=torch.long),
            token_type_ids=torch.tensor([e.type_ids for e in encodings], dtype=torch.long),
        )

    def encode(self, text: str, pair: str | None = None) -> list[int]:
        """Token ids of one sentence or pair, with [CLS] and [SEP], truncated, unpadded."""
        if pair is not None:
            self._check_pair()
        return self.backend.encode(text, pair).ids

    def tokenize(self, text: str) -> list[str]:
        """A text's WordPiece tokens, without [CLS] and [SEP]."""
        return self.backend.encode(text, add_special_tokens=False).tokens

    def decode(self, ids: list[int] | torch.Tensor) -> str:
        """Token ids (a list or a (T,) tensor) -> text."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return self.backend.decode(ids)

    def transformers_settings(self) -> dict:
        """tokenizer_config.json for transformers' AutoTokenizer: max_length, the special tokens, and for BERT's own
        normaliser the class and casing (another normaliser: no class, so that transformers reads tokenizer.json as
        it is)."""
        settings: dict = {"model_max_length": self.max_length}
        normalizer = self.backend.normalizer
        if isinstance(normalizer, BertNormalizer):            # transformers rebuilds BERT's normaliser from these
            settings |= {"tokenizer_class": "BertTokenizerFast", "do_lower_case": normalizer.lowercase,
                         "strip_accents": normalizer.strip_accents,
                         "tokenize_chinese_chars": normalizer.handle_chinese_chars}
        specials = ("[UNK]", "[SEP]", "[PAD]", "[CLS]", "[MASK]")
        return settings | {f"{t[1:-1].lower()}_token": t for t in specials if self.backend.token_to_id(t) is not None}

    def save_pretrained(self, directory: str | Path) -> None:
        """Write tokenizer.json (self-contained) and tokenizer_config.json (max_length, casing) next to a saved
        model: minbert and transformers' AutoTokenizer reload it as it was."""
        with replacing(Path(directory) / "tokenizer.json", sync=True) as tmp:
            self.backend.save(str(tmp))
        write_text(Path(directory) / "tokenizer_config.json", json.dumps(self.transformers_settings(), indent=1) + "\n")
