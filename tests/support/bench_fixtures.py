"""Real local HTTP servers for the bench and health tests: a scripted OpenAI-style streaming server, and a
health endpoint that answers 503 a set number of times before 200."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from vllmctl.lab.local_engine import LocalServer


@dataclass
class Script:
    """How the fake server behaves; tests change it between requests."""

    health_failures: int = 0  # answer 503 to this many GET /health first
    models: list[str] = field(default_factory=lambda: ["tiny"])
    delay_s: float = 0.0  # pause before each token event
    bodies: list[dict[str, Any]] = field(default_factory=list)  # every completion body received
    health_calls: int = 0
    api_key: str | None = None  # like vLLM's --api-key: every /v1 request needs `Bearer <key>`
    refused: int = 0  # /v1 requests answered 401
    in_flight: int = 0
    most_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    counted = False  # this request is in the server's in-flight count

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _json(self, status: int, payload: Any) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _refused(self) -> bool:
        script = self.server.script
        if script.api_key is None or not self.path.startswith("/v1/"):
            return False
        if self.headers.get("Authorization") == f"Bearer {script.api_key}":
            return False
        script.refused += 1
        self._json(401, {"error": "Unauthorized"})
        return True

    def do_GET(self) -> None:
        script = self.server.script
        if self._refused():
            return
        if self.path == "/health":
            script.health_calls += 1
            status = 503 if script.health_calls <= script.health_failures else 200
            self._json(status, {})
        elif self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in script.models]})
        else:
            self._json(404, {"error": "not found"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self._refused():
            return
        self.server.script.bodies.append(body)
        model = body["model"]
        if model == "bad-request":
            self._json(400, {"error": {"message": "max_tokens is too large", "code": 400}})
            return
        script = self.server.script
        with script.lock:
            script.in_flight += 1
            script.most_in_flight = max(script.most_in_flight, script.in_flight)
            self.counted = True
        try:
            self._stream(body)
        finally:
            self._leave()

    def _leave(self) -> None:
        """Counted out before the last byte goes: once the client has [DONE] it may send its next request
        before this thread runs again, and that must not count as one more in flight."""
        script = self.server.script
        with script.lock:
            if self.counted:
                script.in_flight -= 1
                self.counted = False

    def _stream(self, body: dict[str, Any]) -> None:
        model = body["model"]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        tokens = int(body["max_tokens"])
        for index in range(tokens):
            if model == "midstream-error" and index == 2:
                self._event({"error": {"message": "engine died", "code": 500}})
                return
            time.sleep(self.server.script.delay_s)
            self._event(
                {"id": "cmpl-1", "choices": [{"index": 0, "text": f" t{index}", "finish_reason": None}]}
            )
        prompt_tokens = len(str(body["prompt"]).split()) + 1
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": tokens,
            "total_tokens": prompt_tokens + tokens,
        }
        self._event({"id": "cmpl-1", "choices": [], "usage": usage})
        self._leave()
        self.wfile.write(b"data: [DONE]\n\n")

    def _event(self, payload: Any) -> None:
        self.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
        self.wfile.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    script: Script


@dataclass
class FakeServer:
    base_url: str
    script: Script


@pytest.fixture
def fake_server() -> Iterator[FakeServer]:
    """An OpenAI-compatible streaming server on 127.0.0.1 (HTTP/1.0: one connection per request)."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.script = Script()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield FakeServer(f"http://127.0.0.1:{server.server_address[1]}", server.script)
    finally:
        server.shutdown()
        server.server_close()


class FakeClock:
    """Time that moves only when the code under test sleeps, or by `tick` on every reading."""

    def __init__(self, tick: float = 0.0) -> None:
        self.now = 0.0
        self.tick = tick
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        self.now += self.tick
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def make_clock() -> type[FakeClock]:
    return FakeClock


@dataclass(frozen=True)
class VllmServer:
    base_url: str
    model_id: str
    model_dir: str


@pytest.fixture(scope="session")
def vllm_server(local_vllm: LocalServer) -> VllmServer:
    """Real vLLM (CPU build) serving the tiny model on 127.0.0.1, the one shared with tests/lab_model."""
    return VllmServer(local_vllm.base_url, local_vllm.model_id, local_vllm.model_id)
