"""The host-side health helper (`wait-healthy.py`, run as root) against a real local HTTP server that
requires the model's API key: it reads the key from the 0600 env file exactly as vllmctl wrote it."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from vllmctl.ops.env_reader import READ_ENV
from vllmctl.ops.service_start import POLL
from vllmctl.render.quoting import env_file_line

KEY = 'k"e\\y$HOME`id` %s'  # every character the env file escapes


@pytest.fixture
def keyed_server() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/v1/") and self.headers.get("Authorization") != f"Bearer {KEY}":
                self.send_response(401)
                self.end_headers()
                return
            body = json.dumps({"data": [{"id": "m"}]}).encode() if self.path == "/v1/models" else b"{}"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _poll(tmp_path: Path, base: str, env_text: str) -> subprocess.CompletedProcess[str]:
    env_file = tmp_path / "m.env"
    env_file.write_text(env_text)
    helper = tmp_path / "wait-healthy.py"
    helper.write_text(POLL)
    argv = ["python3", str(helper), base, "m", "4", "vllmctl-m-0.service", str(env_file), "5"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def test_the_helper_sends_the_key_it_reads_from_the_env_file(keyed_server: str, tmp_path: Path) -> None:
    text = f"# managed\n{env_file_line('HF_HOME', '/x')}\n{env_file_line('VLLM_API_KEY', KEY)}\n"
    result = _poll(tmp_path, keyed_server, text)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "vllmctl-m-0.service: ready after" in result.stdout


def test_without_the_key_the_server_refuses_it(keyed_server: str, tmp_path: Path) -> None:
    # the server is honest: the success above is the key's doing
    result = _poll(tmp_path, keyed_server, "# managed\n")
    assert result.returncode == 1 and "401" in result.stderr


@pytest.mark.parametrize("value", ["", "plain", KEY, "é ✓", "a=b", "#x", "'q'", "\\", '"', '\\\\\\"'])
def test_the_embedded_reader_inverts_env_file_line(value: str, tmp_path: Path) -> None:
    path = tmp_path / "m.env"
    path.write_text(f"# c\n{env_file_line('A', value)}\n{env_file_line('B', 'b')}\n")
    scope: dict[str, object] = {}
    exec(READ_ENV, scope)
    assert scope["read_env"](str(path)) == {"A": value, "B": "b"}  # type: ignore[operator]
