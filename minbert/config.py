"""BertConfig: the hyper-parameters of a BERT encoder, read from a Hugging Face config.json."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

TYPES = {"int": ((int,), "an integer"), "float": ((int, float), "a number"), "str": ((str,), "a string"),
         "int | None": ((int, type(None)), "an integer or null")}


@dataclass
class BertConfig:
    """Sizes and rates of a BERT encoder (Devlin et al., 2019, sec. 3); defaults are bert-base."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int | None = 0      # None: no padding row (transformers saves and reloads null)
    initializer_range: float = 0.02
    # "sdpa": torch's fused scaled_dot_product_attention; "eager": minbert's written-out attention().
    attn_implementation: str = "sdpa"

    def __post_init__(self) -> None:
        for f in fields(self):  # the annotations are strings ("int"): `from __future__ import annotations`
            v = getattr(self, f.name)
            if f.type not in TYPES:                   # a new field's annotation needs its check written first
                raise TypeError(f"BertConfig field {f.name}: its type {f.type!r} has no entry in minbert/config.py's "
                                "TYPES (its check); add one")
            ok, word = TYPES[f.type]
            if isinstance(v, bool) or not isinstance(v, ok):
                raise ValueError(f"{f.name} must be {word}, not {v!r}")
            if f.type.startswith("int") and v is not None and v < (0 if f.name == "pad_token_id" else 1):
                raise ValueError(f"{f.name} must be {'0 or more' if f.name == 'pad_token_id' else 'positive'}, not {v}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not a multiple of "
                f"num_attention_heads {self.num_attention_heads}"
            )
        from .model import ACTIVATIONS  # here, not at the top: model.py imports this module
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"hidden_act {self.hidden_act!r} is not supported; minbert computes "
                             f"{', '.join(sorted(ACTIVATIONS))} as Hugging Face does")
        if self.attn_implementation not in ("sdpa", "eager"):
            raise ValueError(f"attn_implementation must be 'sdpa' or 'eager', not {self.attn_implementation!r}")

    @property
    def head_size(self) -> int:
        """hs, the per-head size: hidden_size / num_attention_heads."""
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_dict(cls, d: dict) -> BertConfig:
        """Keep the keys BertConfig knows; Hugging Face's other keys are ignored."""
        if not isinstance(d, dict):
            raise ValueError(f"expected a JSON object of settings, not a {type(d).__name__}")
        names = {f.name for f in fields(cls)}
        kept = {k: v for k, v in d.items() if k in names}   # their types and values: checked by __post_init__
        if "model_type" in d and d["model_type"] not in ("bert", "minbert"):
            raise ValueError(f"model_type {d['model_type']!r} is not a BERT model")
        if d.get("is_decoder") or d.get("add_cross_attention"):
            raise ValueError("is_decoder / add_cross_attention: a causal (decoder) BERT such as BertLMHeadModel; "
                             "minbert's encoder attends in both directions and would compute something else")
        if d.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"position_embedding_type {d['position_embedding_type']!r} is not supported")
        return cls(**kept)

    @classmethod
    def from_json(cls, path: str | Path) -> BertConfig:
        """Read a Hugging Face config.json; ValueError naming the file if it is not valid JSON."""
        path = Path(path)
        try:
            d = json.loads(path.read_bytes().decode("utf-8-sig"))
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
            raise ValueError(f"{path}: not valid JSON ({e}); fix the file or fetch the checkpoint again") from None
        return cls.from_dict(d)

    def to_hf_dict(self) -> dict:
        """The config.json that Hugging Face transformers' BertModel reads."""
        d = asdict(self)
        d.pop("attn_implementation")
        d.update(model_type="bert", architectures=["BertModel"], position_embedding_type="absolute")
        return d
