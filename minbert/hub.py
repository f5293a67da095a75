"""Download a checkpoint from the Hugging Face Hub through huggingface_hub: only the files minbert reads.

huggingface_hub comes with `tokenizers`. It writes the usual cache layout
(cache/models--org--name/snapshots/{commit}/, files linked to blobs/, refs/main naming the commit), so
that transformers and minbert share downloads; it reads HF_TOKEN (private and gated models) and
retries and resumes interrupted downloads. HF_ENDPOINT (a mirror) and the cache directory are passed
in on every call, since huggingface_hub reads its own environment variables once, when first imported.
"""

from __future__ import annotations

import os
from pathlib import Path

REQUIRED = ("config.json",)
OPTIONAL = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
WEIGHTS = ("model.safetensors", "pytorch_model.bin")  # the first one the repository has


def endpoint() -> str:
    """The Hub's address: HF_ENDPOINT, or https://huggingface.co."""
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def download(name: str, cache: Path, revision: str = "main") -> Path:
    """The snapshot directory of `name` in `cache`, after fetching config, tokenizer files and one weights file.

    Weights: model.safetensors when the repository has it, else pytorch_model.bin (never the TensorFlow,
    Flax or ONNX copies many repositories also hold). Raises OSError with a readable reason.
    """
    from huggingface_hub import snapshot_download, utils  # utils: the errors, in old versions and new

    where = f"{endpoint()}/{name}"

    def fetch(patterns: list[str]) -> Path:
        return Path(snapshot_download(name, revision=revision, cache_dir=str(cache), endpoint=endpoint(),
                                      allow_patterns=patterns))
    try:
        snapshot = fetch([*REQUIRED, *OPTIONAL, WEIGHTS[0]])
        if not (snapshot / WEIGHTS[0]).is_file():
            snapshot = fetch([WEIGHTS[1]])
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
    if not any((snapshot / f).is_file() for f in WEIGHTS):
        raise OSError(f"{where} has neither of {', '.join(WEIGHTS)}")
    return snapshot
