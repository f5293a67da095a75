"""Download a checkpoint from the Hugging Face Hub into the usual cache layout, with the standard library only."""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path

REQUIRED = ("config.json",)
OPTIONAL = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
WEIGHTS = ("model.safetensors", "pytorch_model.bin")  # the first one the repository has


def _endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def _fetch(url: str, dest: Path, timeout: float = 30.0) -> str | None:
    """Stream url to dest (atomically); return the repository commit the Hub reports, if any."""
    from tqdm.auto import tqdm
    with urllib.request.urlopen(url, timeout=timeout) as response:
        total = int(response.headers.get("Content-Length") or 0)
        commit = response.headers.get("X-Repo-Commit")
        tmp = dest.with_name(dest.name + ".incomplete")
        with open(tmp, "wb") as f, tqdm(total=total, unit="B", unit_scale=True, desc=dest.name,
                                         disable=total < 1 << 20) as bar:
            while chunk := response.read(1 << 20):
                f.write(chunk)
                bar.update(len(chunk))
    os.replace(tmp, dest)
    return commit


def download(name: str, cache: Path, revision: str = "main") -> Path:
    """Fetch config, tokenizer files and weights of `name` into cache/models--{name}/snapshots/{commit}."""
    repo = cache / ("models--" + name.replace("/", "--"))
    staging = repo / "snapshots" / f".{revision}.partial"
    staging.mkdir(parents=True, exist_ok=True)
    base = f"{_endpoint()}/{name}/resolve/{revision}"
    commit = None
    for file in REQUIRED:
        try:
            commit = _fetch(f"{base}/{file}", staging / file) or commit
        except urllib.error.HTTPError as e:
            if e.code in (401, 403, 404):  # the Hub answers 401 for a repository that does not exist
                raise OSError(f"{base}/{file}: HTTP {e.code} {e.reason}: no such model, "
                              "or a private or gated one") from None
            raise
    for file in OPTIONAL:
        try:
            _fetch(f"{base}/{file}", staging / file)
        except urllib.error.HTTPError as e:
            if e.code != 404:
                raise
    for file in WEIGHTS:
        try:
            _fetch(f"{base}/{file}", staging / file)
            break
        except urllib.error.HTTPError as e:
            if e.code != 404:
                raise
    else:
        raise OSError(f"{name} has neither of {', '.join(WEIGHTS)} on the Hub")
    snapshot = repo / "snapshots" / (commit or revision)
    if snapshot.exists():
        import shutil
        shutil.rmtree(snapshot)
    os.replace(staging, snapshot)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / revision).write_text(commit or revision)
    return snapshot
