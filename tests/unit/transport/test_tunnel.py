"""Controller-side HTTP through SSH port forwards: the direct/tunnel decision (auto, always, never; a jump
host, a ProxyCommand or neither), and the run's registry on real sockets: one listener per (host, port),
reused, streaming and concurrent requests through it, all closed at the end, also when the run fails."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from executor_builders import host, loaded, parsed

from vllmctl.errors import TransportError
from vllmctl.inventory.model import Host
from vllmctl.transport import resolve_target, tunnel
from vllmctl.transport.tunnel import HttpTunnels, http_route

CONFIG = (
    "Host gpu-behind\n  HostName 10.9.0.7\n  ProxyJump bastion\nHost gpu-proxied\n  ProxyCommand nc %h %p\n"
)


@pytest.mark.parametrize(
    ("address", "mode", "route"),
    [
        ("10.0.0.1", "auto", "direct"),
        ("gpu-behind", "auto", "tunnel"),
        ("gpu-proxied", "auto", "tunnel"),
        ("10.0.0.1", "always", "tunnel"),
        ("gpu-behind", "never", "direct"),
        ("gpu-proxied", "never", "direct"),
    ],
)
def test_auto_tunnels_exactly_when_ssh_needs_a_jump_host_or_proxycommand(
    address: str, mode: str, route: str
) -> None:
    target = resolve_target(loaded(address, set()), parsed(CONFIG))
    assert http_route(mode, target) == route


def test_an_inventory_jump_host_counts_as_one_too() -> None:
    target = resolve_target(loaded("10.0.0.5", {"jump_host"}, jump_host="ops@bastion"), parsed(""))
    assert http_route("auto", target) == "tunnel"


class StandIn(BaseHTTPRequestHandler):
    """A stand-in engine: /health, and /v1/completions streamed as server-sent events."""

    def log_message(self, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for index in range(5):
            self.wfile.write(f'data: {{"index": {index}}}\n\n'.encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")


class LocalChannels:
    """Stands for a host's SSH transport: `open_channel("direct-tcpip", ("127.0.0.1", port))` opens a real
    TCP connection to the stand-in engine serving that port."""

    def __init__(self, ports: dict[int, int]) -> None:
        self.ports = ports
        self.opened: list[tuple[str, int]] = []

    def open_channel(self, kind: str, dest: tuple[str, int], peer: tuple[str, int]) -> socket.socket:
        assert kind == "direct-tcpip" and dest[0] == "127.0.0.1" and peer[0] == "127.0.0.1"
        self.opened.append(dest)
        return socket.create_connection(("127.0.0.1", self.ports[dest[1]]))


@pytest.fixture
def engine() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def no_ssh_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(tunnel, "shared_ssh_config", lambda: parsed(""))


def tunnel_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("tunnel ")]


def test_a_direct_host_gets_its_address_and_no_forward(no_ssh_config: None) -> None:
    tunnels = HttpTunnels(connect=lambda h: pytest.fail("a direct host needs no SSH for HTTP"))
    assert tunnels.base_url(host("a", "10.0.0.1"), 8000) == "http://10.0.0.1:8000"
    assert tunnels.forwards() == {}


def test_a_forward_is_opened_once_per_host_and_port_carries_streams_and_concurrency_and_closes(
    engine: int, no_ssh_config: None
) -> None:
    channels = LocalChannels({8000: engine, 8001: engine})
    tunnels = HttpTunnels(connect=lambda h: channels)
    behind = host("b", "10.0.0.2", tunnel_http="always")
    try:
        url = tunnels.base_url(behind, 8000)
        assert url.startswith("http://127.0.0.1:") and tunnels.base_url(behind, 8000) == url
        assert tunnels.base_url(behind, 8001) != url
        assert sorted(tunnels.forwards()) == [("b", 8000), ("b", 8001)]
        assert httpx.get(f"{url}/health", timeout=5).text == "ok"
        with httpx.stream("POST", f"{url}/v1/completions", json={"stream": True}, timeout=5) as streamed:
            events = [line for line in streamed.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "data: [DONE]" and len(events) == 6

        def one(_: int) -> str:
            return httpx.get(f"{url}/health", timeout=10).text

        with ThreadPoolExecutor(max_workers=16) as pool:
            assert list(pool.map(one, range(64))) == ["ok"] * 64
        assert channels.opened.count(("127.0.0.1", 8000)) == 66  # one channel per HTTP connection
    finally:
        tunnels.close()
    assert tunnels.forwards() == {} and tunnel_threads() == []
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/health", timeout=5)


def test_a_failing_run_closes_its_forwards_too(engine: int, no_ssh_config: None) -> None:
    channels = LocalChannels({8000: engine})
    monkey = HttpTunnels(connect=lambda h: channels)
    url = ""
    with pytest.raises(RuntimeError), pytest.MonkeyPatch.context() as patch:
        patch.setattr(tunnel, "_RUN", monkey)
        with tunnel.tunnels_closed():
            url = tunnel.base_url(host("b", "10.0.0.2", tunnel_http="always"), 8000)
            assert httpx.get(f"{url}/health", timeout=5).text == "ok"
            raise RuntimeError("the run failed")
    assert monkey.forwards() == {} and tunnel_threads() == []
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/health", timeout=5)


def test_an_open_connection_is_cut_when_the_run_ends(engine: int, no_ssh_config: None) -> None:
    channels = LocalChannels({8000: engine})
    tunnels = HttpTunnels(connect=lambda h: channels)
    url = tunnels.base_url(host("b", "10.0.0.2", tunnel_http="always"), 8000)
    held = socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])))
    held.sendall(b"GET /health HTTP/1.1\r\n")  # the request is not complete: the engine keeps waiting
    deadline = time.monotonic() + 5
    while not channels.opened and time.monotonic() < deadline:
        time.sleep(0.01)
    assert channels.opened == [("127.0.0.1", 8000)]
    tunnels.close()
    held.settimeout(5)
    # closed with the request's bytes still unread, the end resets instead: cut all the same
    with contextlib.suppress(ConnectionResetError):
        assert held.recv(4096) == b""
    held.close()
    assert tunnel_threads() == []


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port whose SYNs go unanswered, as behind a firewall that drops: a listener with a full backlog."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port))
    try:
        yield port
    finally:
        filler.close()
        listener.close()


def test_never_on_a_jump_host_path_names_the_unreachable_port_and_the_setting(
    monkeypatch: pytest.MonkeyPatch, silent_port: int
) -> None:
    monkeypatch.setattr(tunnel, "shared_ssh_config", lambda: parsed(CONFIG))
    monkeypatch.setattr(tunnel, "http_address", lambda h: "127.0.0.1")
    monkeypatch.setattr(tunnel, "PROBE_TIMEOUT_S", 0.5)
    tunnels = HttpTunnels(connect=lambda h: pytest.fail("never does not tunnel"))
    with pytest.raises(TransportError) as failed:
        tunnels.base_url(host("gpu", "gpu-behind", tunnel_http="never"), silent_port)
    assert f"port {silent_port} at 127.0.0.1 is unreachable" in failed.value.message
    assert "ssh.tunnel_http is never" in failed.value.message
    assert "ssh.tunnel_http: auto" in failed.value.hint


def test_never_on_a_jump_host_path_accepts_a_routable_port_that_refuses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Refused: the host answers, only the engine is not listening yet (the gate's health wait says so)."""
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    monkeypatch.setattr(tunnel, "shared_ssh_config", lambda: parsed(CONFIG))
    monkeypatch.setattr(tunnel, "http_address", lambda h: "127.0.0.1")
    tunnels = HttpTunnels(connect=lambda h: pytest.fail("never does not tunnel"))
    assert (
        tunnels.base_url(host("gpu", "gpu-behind", tunnel_http="never"), port) == f"http://127.0.0.1:{port}"
    )


def test_paramikos_refused_channel_lines_are_kept_out_of_the_output() -> None:
    """The health wait polls a port the engine does not listen on yet: each refused channel is expected."""
    import logging

    logger = logging.getLogger("paramiko.transport")
    refused = logger.makeRecord(
        logger.name, logging.ERROR, "t.py", 1, "Secsh channel %d open FAILED: %s", (3, "Connect failed"), None
    )
    other = logger.makeRecord(logger.name, logging.ERROR, "t.py", 1, "Oops, unhandled type %d", (9,), None)
    assert not logger.filter(refused) and logger.filter(other)


class SlowChannel:
    """A channel whose every read waits `delay` seconds: the latency an SSH hop adds, made measurable."""

    def __init__(self, sock: socket.socket, delay: float) -> None:
        self.sock, self.delay = sock, delay

    def fileno(self) -> int:
        return self.sock.fileno()

    def recv(self, size: int) -> bytes:
        time.sleep(self.delay)
        return self.sock.recv(size)

    def sendall(self, data: bytes) -> None:
        self.sock.sendall(data)

    def close(self) -> None:
        self.sock.close()


def test_the_tunnels_added_latency_is_measured_against_the_same_requests_on_the_host(
    engine: int, no_ssh_config: None
) -> None:
    import subprocess

    class Slow(LocalChannels):
        def open_channel(self, kind: str, dest: tuple[str, int], peer: tuple[str, int]) -> Any:
            return SlowChannel(super().open_channel(kind, dest, peer), 0.03)

    def on_host(
        h: Host, argv: list[str]
    ) -> str | None:  # the timing script, run for real, right by the engine
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        return done.stdout if done.returncode == 0 else None

    behind = host("b", "10.0.0.2", tunnel_http="always")
    tunnels = HttpTunnels(connect=lambda h: Slow({engine: engine}), run_on_host=on_host)
    try:
        added = tunnels.overhead_ms(behind, engine)
        assert added is not None and 25 <= added <= 300  # the 30 ms the channel adds, not the engine's time
    finally:
        tunnels.close()
    unmeasured = HttpTunnels(connect=lambda h: LocalChannels({engine: engine}), run_on_host=lambda h, a: None)
    try:
        assert unmeasured.overhead_ms(behind, engine) is None  # never a figure made up
    finally:
        unmeasured.close()
