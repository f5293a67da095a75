"""A local stand-in for the Hugging Face Hub: the routes huggingface_hub's snapshot_download calls (tests only)."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import re
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar

import pytest
import torch

COMMIT = "feedface" * 5  # the Hub names a snapshot by its 40-digit commit


def sharded(state: dict[str, torch.Tensor], weights: str, parts: int = 2) -> dict[str, bytes]:
    """`state` as transformers' save_pretrained(max_shard_size=...) writes it: `weights`.index.json and its shards
    (model-00001-of-00002.safetensors, ... or pytorch_model-00001-of-00002.bin, ...), as a repository's files."""
    from safetensors.torch import save
    stem, suffix = weights.split(".")
    names = sorted(state)
    files, weight_map = {}, {}
    for i in range(parts):
        file = f"{stem}-{i + 1:05d}-of-{parts:05d}.{suffix}"
        part = {k: state[k].contiguous() for k in names[i::parts]}
        if suffix == "safetensors":
            files[file] = save(part, metadata={"format": "pt"})
        else:
            buffer = io.BytesIO()
            torch.save(part, buffer)
            files[file] = buffer.getvalue()
        weight_map.update(dict.fromkeys(part, file))
    files[f"{weights}.index.json"] = json.dumps({"metadata": {}, "weight_map": weight_map}).encode()
    return files


class FakeHub(http.server.BaseHTTPRequestHandler):
    """The routes huggingface_hub's snapshot_download calls, for the repositories in `repos` ({name: {file: bytes}}):

    GET  /api/models/{name}/revision/{rev}    the commit and the file list (repo_info)
    GET  /api/models/{name}/tree/{rev}        path, size and id of every file (list_repo_tree)
    HEAD /{name}/resolve/{rev}/{file}         the commit, ETag and size (the file's metadata)
    GET  /{name}/resolve/{rev}/{file}         the bytes
    An unknown repository answers 404 RepoNotFound, an unknown file 404 EntryNotFound, as the Hub does.
    """

    repos: ClassVar[dict[str, dict[str, bytes]]] = {}
    requests: ClassVar[list[str]] = []

    def route(self) -> tuple[int, dict[str, str], bytes]:
        path = urllib.parse.urlparse(self.path).path
        api = re.fullmatch(r"/api/models/((?:[^/]+/)?[^/]+)/(revision|tree)/[^/]+", path)  # org/ optional
        resolve = re.fullmatch(r"/((?:[^/]+/)?[^/]+)/resolve/[^/]+/(.+)", path)
        name = api.group(1) if api else resolve.group(1) if resolve else None
        if name not in self.repos:
            return 404, {"X-Error-Code": "RepoNotFound"}, b"{}"
        files = self.repos[name]
        if api and api.group(2) == "revision":
            info = {"id": name, "sha": COMMIT, "siblings": [{"rfilename": f} for f in files]}
            return 200, {"Content-Type": "application/json"}, json.dumps(info).encode()
        if api:
            tree = [{"type": "file", "path": f, "size": len(b), "oid": hashlib.sha1(b).hexdigest()} for f, b in files.items()]
            return 200, {"Content-Type": "application/json"}, json.dumps(tree).encode()
        body = files.get(resolve.group(2))
        if body is None:
            return 404, {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": COMMIT}, b""
        return 200, {"X-Repo-Commit": COMMIT, "ETag": f'"{hashlib.sha256(body).hexdigest()}"'}, body

    def answer(self, with_body: bool) -> None:
        self.requests.append(f"{self.command} {self.path}")
        status, headers, body = self.route()
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if with_body:
            self.wfile.write(body)

    def do_GET(self) -> None:
        self.answer(with_body=True)

    def do_HEAD(self) -> None:
        self.answer(with_body=False)

    def log_message(self, *args) -> None:
        pass



@contextmanager
def serve(monkeypatch: pytest.MonkeyPatch, cache: Path) -> Iterator[str]:
    """Run FakeHub on a free local port with HF_ENDPOINT pointing at it and `cache` as the Hub cache; yields the URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_port}"
    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    import huggingface_hub.constants  # it reads HF_HUB_OFFLINE once, at import: an earlier test may have set it
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    try:
        yield url
    finally:
        server.shutdown()
        server.server_close()
