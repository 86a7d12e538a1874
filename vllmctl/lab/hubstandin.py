"""The lab's stand-in for the Hugging Face Hub (NOT the hub): the few endpoints huggingface_hub's
`model_info`, `list_repo_tree` and `snapshot_download` call, serving one repo from a local folder over real
HTTP with each file's git blob id and, for weights, an LFS sha256, as the hub gives them. Requests counted."""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

LFS_SUFFIXES = (".safetensors", ".bin")
CHUNK = 1 << 20


def _digests(path: Path) -> tuple[str, str]:
    """(git blob id, sha256) of a file, read once in chunks."""
    git, sha = hashlib.sha1(b"blob %d\0" % path.stat().st_size), hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            git.update(chunk)
            sha.update(chunk)
    return git.hexdigest(), sha.hexdigest()


class HubRepo:
    """One repo at one commit: every file under `folder`, weights (`LFS_SUFFIXES`) as LFS files."""

    def __init__(self, repo: str, folder: Path, commit: str = "c0ffee" + "0" * 34) -> None:
        self.repo, self.folder, self.commit = repo, folder, commit
        self.paths = {str(p.relative_to(folder)): p for p in sorted(folder.rglob("*")) if p.is_file()}
        self.entries = {name: self._entry(name, path) for name, path in self.paths.items()}

    def _entry(self, name: str, path: Path) -> dict[str, Any]:
        blob_id, sha256 = _digests(path)
        size = path.stat().st_size
        found: dict[str, Any] = {"type": "file", "oid": blob_id, "size": size, "path": name, "sha256": sha256}
        if name.endswith(LFS_SUFFIXES):
            found["lfs"] = {"oid": sha256, "size": size, "pointerSize": 134}
        return found

    def sha256(self, name: str) -> str:
        return str(self.entries[name]["sha256"])

    def tree(self) -> list[dict[str, Any]]:
        return [{k: v for k, v in e.items() if k != "sha256"} for e in self.entries.values()]


class HubStandIn:
    """`with HubStandIn(repo, host) as hub:` serves on `hub.url` until the block ends."""

    def __init__(self, repo: HubRepo, host: str = "127.0.0.1") -> None:
        self.repo, self.requests = repo, Counter[tuple[str, str]]()
        self.log: list[tuple[str, str, str]] = []  # (client address, method, what), in order
        self.lock = threading.Lock()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet: the counts are what callers read
                pass

            def do_HEAD(self) -> None:
                stand_in.answer(self, body=False)

            def do_GET(self) -> None:
                stand_in.answer(self, body=True)

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> HubStandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def file_downloads(self, name: str) -> int:
        """GETs of one file's bytes (huggingface_hub asks HEAD first, then GETs what it lacks)."""
        return self.requests[("GET", f"resolve/{name}")]

    def count(self, handler: BaseHTTPRequestHandler, what: str) -> None:
        with self.lock:
            self.requests[(handler.command, what)] += 1
            self.log.append((handler.client_address[0], handler.command, what))

    def answer(self, handler: BaseHTTPRequestHandler, body: bool) -> None:
        repo, path = self.repo, unquote(urlparse(handler.path).path)
        api = f"/api/models/{repo.repo}/"
        if path.startswith(api + "revision/"):
            self.count(handler, "info")
            siblings = [{"rfilename": name} for name in repo.paths]
            info = {"id": repo.repo, "modelId": repo.repo, "sha": repo.commit, "siblings": siblings}
            return self._json(handler, info, body)
        if path.startswith(api + "tree/"):
            self.count(handler, "tree")
            return self._json(handler, repo.tree(), body)
        prefix = f"/{repo.repo}/resolve/"
        name = path[len(prefix) :].split("/", 1)[-1] if path.startswith(prefix) else ""
        if name in repo.paths:
            self.count(handler, f"resolve/{name}")
            return self._file(handler, name, body)
        handler.send_response(404)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    def _json(self, handler: BaseHTTPRequestHandler, doc: Any, body: bool) -> None:
        data = json.dumps(doc).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if body:
            handler.wfile.write(data)

    def _file(self, handler: BaseHTTPRequestHandler, name: str, body: bool) -> None:
        entry, path = self.repo.entries[name], self.repo.paths[name]
        wanted = handler.headers.get("Range", "")
        start = int(wanted[6:-1]) if wanted.startswith("bytes=") and wanted.endswith("-") else 0
        handler.send_response(206 if start else 200)
        handler.send_header("X-Repo-Commit", self.repo.commit)
        handler.send_header("ETag", f'"{entry["oid"]}"')
        if "lfs" in entry:
            handler.send_header("X-Linked-Etag", f'"{entry["lfs"]["oid"]}"')
            handler.send_header("X-Linked-Size", str(entry["size"]))
        handler.send_header("Content-Length", str(entry["size"] - start))
        handler.end_headers()
        if body:
            with path.open("rb") as handle:
                handle.seek(start)
                shutil.copyfileobj(handle, handler.wfile, CHUNK)
