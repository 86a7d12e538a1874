"""A stand-in for the Hugging Face Hub (NOT the hub): the few endpoints huggingface_hub's `model_info`,
`list_repo_tree` and `snapshot_download` call, serving one repo from a local folder over real HTTP, with
each file's git blob id and, for weights, an LFS sha256, as the hub gives them. It counts every request,
so a test can tell how many times each file's bytes left it."""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

LFS_SUFFIXES = (".safetensors", ".bin")


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class HubRepo:
    repo: str
    folder: Path
    commit: str = "c0ffee" + "0" * 34
    files: dict[str, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.files = {
            str(p.relative_to(self.folder)): p.read_bytes()
            for p in sorted(self.folder.rglob("*"))
            if p.is_file()
        }

    def entry(self, path: str) -> dict[str, Any]:
        data = self.files[path]
        found: dict[str, Any] = {"type": "file", "oid": git_blob_id(data), "size": len(data), "path": path}
        if path.endswith(LFS_SUFFIXES):
            found["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
        return found


class HubStandIn:
    """`with HubStandIn(repo, host) as hub:` serves on http://host:port until the block ends."""

    def __init__(self, repo: HubRepo, host: str = "127.0.0.1") -> None:
        self.repo, self.requests = repo, Counter[tuple[str, str]]()
        self.log: list[tuple[str, str, str]] = []  # (client address, method, what), in order
        self.lock = threading.Lock()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet: the counts are what tests read
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
        return f"http://{host}:{port}"

    def __enter__(self) -> HubStandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def file_downloads(self, path: str) -> int:
        """GETs of one file's bytes (huggingface_hub asks HEAD first, then GETs what it lacks)."""
        return self.requests[("GET", f"resolve/{path}")]

    def count(self, method: str, what: str, client: str = "") -> None:
        with self.lock:
            self.requests[(method, what)] += 1
            self.log.append((client, method, what))

    def answer(self, handler: BaseHTTPRequestHandler, body: bool) -> None:
        repo, path = self.repo, unquote(urlparse(handler.path).path)
        api = f"/api/models/{repo.repo}/"
        if path.startswith(api + "revision/"):
            info = {"id": repo.repo, "modelId": repo.repo, "sha": repo.commit, "private": False}
            info["siblings"] = [{"rfilename": name} for name in repo.files]
            self.count("GET", "info", handler.client_address[0])
            return self.json(handler, info, body)
        if path.startswith(api + "tree/"):
            self.count("GET", "tree", handler.client_address[0])
            return self.json(handler, [repo.entry(name) for name in repo.files], body)
        prefix = f"/{repo.repo}/resolve/"
        if path.startswith(prefix):
            name = path[len(prefix) :].split("/", 1)[-1]
            if name in repo.files:
                self.count(handler.command, f"resolve/{name}", handler.client_address[0])
                return self.file(handler, name, body)
        handler.send_response(404)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    def json(self, handler: BaseHTTPRequestHandler, doc: Any, body: bool) -> None:
        data = json.dumps(doc).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if body:
            handler.wfile.write(data)

    def file(self, handler: BaseHTTPRequestHandler, name: str, body: bool) -> None:
        data, entry = self.repo.files[name], self.repo.entry(name)
        start = 0
        wanted = handler.headers.get("Range", "")
        if wanted.startswith("bytes=") and wanted.endswith("-"):
            start = int(wanted[6:-1])
        handler.send_response(206 if start else 200)
        handler.send_header("X-Repo-Commit", self.repo.commit)
        handler.send_header("ETag", f'"{entry["oid"]}"')
        if "lfs" in entry:
            handler.send_header("X-Linked-Etag", f'"{entry["lfs"]["oid"]}"')
            handler.send_header("X-Linked-Size", str(len(data)))
        handler.send_header("Content-Length", str(len(data) - start))
        handler.end_headers()
        if body:
            handler.wfile.write(data[start:])
