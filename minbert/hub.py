"""Download a checkpoint from the Hugging Face Hub through huggingface_hub: only the files minbert reads.

The weights are one file, model.safetensors, else the shards model.safetensors.index.json lists, else
pytorch_model.bin, else the shards pytorch_model.bin.index.json lists (transformers' max_shard_size): never the
TensorFlow, Flax or ONNX copies, nor the shards of a format not chosen.

huggingface_hub comes with `tokenizers`. It writes the usual cache layout
(cache/models--org--name/snapshots/{commit}/, files linked to blobs/, refs/main naming the commit), so
that transformers and minbert share downloads; it reads HF_TOKEN (private and gated models) and
retries and resumes interrupted downloads. HF_ENDPOINT (a mirror) and the cache directory are passed
in on every call, since huggingface_hub reads its own environment variables once, when first imported.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

from .checkpoint import INDEX_FILES, WEIGHT_FILES, shard_names

REQUIRED = ("config.json",)
OPTIONAL = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
WEIGHTS = WEIGHT_FILES
INDEXES = INDEX_FILES  # a sharded checkpoint's list of its files
PREFERRED = (WEIGHTS[0], INDEXES[0], WEIGHTS[1], INDEXES[1])  # the weights downloaded: the first the repository has


def endpoint() -> str:
    """The Hub's address: HF_ENDPOINT, or https://huggingface.co."""
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def download(name: str, cache: Path, revision: str = "main") -> Path:
    """The snapshot directory of `name` in `cache`, after fetching config, tokenizer files and one checkpoint's weights.

    Weights: model.safetensors, else model.safetensors.index.json and its shards, else pytorch_model.bin, else
    pytorch_model.bin.index.json and its shards (never the TensorFlow, Flax or ONNX copies many repositories also
    hold). Raises OSError with a readable reason.
    """
    from huggingface_hub import snapshot_download, utils  # utils: the errors, in old versions and new

    where = f"{endpoint()}/{name}"

    def fetch(patterns: list[str]) -> Path:
        return Path(snapshot_download(name, revision=revision, cache_dir=str(cache), endpoint=endpoint(),
                                      allow_patterns=patterns))
    shards: list[str] = []
    try:
        snapshot = fetch([*REQUIRED, *OPTIONAL, WEIGHTS[0], INDEXES[0]])  # the index with the file: one round trip
        if not any((snapshot / f).is_file() for f in (WEIGHTS[0], INDEXES[0])):
            snapshot = fetch([WEIGHTS[1], INDEXES[1]])
        index = next((f for f in PREFERRED if (snapshot / f).is_file()), None)
        if index in INDEXES:                          # only now are its shards known
            shards = shard_files(snapshot / index, where)
            snapshot = fetch([glob.escape(f) for f in shards])
    except utils.GatedRepoError:
        raise OSError(f"{where} is a gated model: accept its conditions on its Hub page, then set HF_TOKEN to a "
                      "token of that account") from None
    except utils.RepositoryNotFoundError:
        raise OSError(f"{where}: no such model, or a private or gated one (set HF_TOKEN to a token that may "
                      "read it)") from None
    except utils.RevisionNotFoundError:
        raise OSError(f"{where}: no revision {revision!r}") from None
    except utils.LocalEntryNotFoundError as e:  # no connection, and nothing cached
        cause = e.__cause__ or e
        raise OSError(f"cannot reach {endpoint()} ({type(cause).__name__}: {cause})") from None
    except utils.HfHubHTTPError as e:
        raise OSError(f"{where}: {str(e).splitlines()[0]}") from None
    missing = [f for f in REQUIRED if not (snapshot / f).is_file()]
    if missing:
        raise OSError(f"{where} has no {', '.join(missing)}: not a Hugging Face transformers checkpoint")
    if index is None:
        raise OSError(f"{where} has none of {', '.join(PREFERRED)}")
    lost = [f for f in shards if not (snapshot / f).is_file()]
    if lost:
        raise OSError(f"{where}: {index} lists {', '.join(lost)}, which the repository does not hold")
    return snapshot


def shard_files(index: Path, where: str) -> list[str]:
    """The shard files a downloaded .index.json's weight_map lists, each a plain file name; OSError if it is no index."""
    try:
        files = shard_names(index)
    except ValueError as e:
        raise OSError(f"{where}: {index.name} is {e}") from None
    odd = [f for f in files if not isinstance(f, str) or Path(f).name != f]
    if not files:
        raise OSError(f"{where}: {index.name} lists no shards")
    if odd:
        raise OSError(f"{where}: {index.name} lists {odd[0]!r}, which is not a file name beside it")
    return files
