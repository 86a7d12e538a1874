"""Controller-side HTTP to a host: direct, or through a local port forwarded over SSH (a paramiko
`direct-tcpip` channel per accepted connection) when a jump host or ProxyCommand is on its SSH path or
`ssh.tunnel_http` says so; one listener per (host, port), reused by the run and closed when it ends."""

from __future__ import annotations

import atexit
import contextlib
import errno
import logging
import select
import socket
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal

from vllmctl.errors import TransportError
from vllmctl.inventory.model import Host
from vllmctl.render.quoting import http_url
from vllmctl.transport.target import SshTarget, http_address, resolve_target, shared_ssh_config

Route = Literal["direct", "tunnel"]
OVERHEAD_SAMPLES = 10
# run on the host: the median of kept-alive GET /health on its loopback, in ms (the tunnel's baseline)
ON_HOST_TIMING = """import http.client, statistics, sys, time
port, samples = int(sys.argv[1]), int(sys.argv[2])
connection, times = http.client.HTTPConnection("127.0.0.1", port, timeout=10), []
for index in range(samples + 1):
    started = time.perf_counter()
    connection.request("GET", "/health")
    connection.getresponse().read()
    if index:
        times.append(time.perf_counter() - started)
print(statistics.median(times) * 1000)
"""
ChannelOpener = Callable[[int, tuple[str, int]], Any]  # (remote port, local peer) -> an open paramiko Channel
UNROUTED = {errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ETIMEDOUT}
PROBE_TIMEOUT_S = 5.0


class _QuietRefusals(logging.Filter):
    """paramiko logs every refused channel open; the engine answering before it listens is expected (the
    health wait polls), and the client already sees the connection closed."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not (text.startswith("Secsh channel") and "open FAILED" in text)


logging.getLogger("paramiko.transport").addFilter(_QuietRefusals())


def http_route(mode: str, target: SshTarget) -> Route:
    """Pure: `always` and `never` are obeyed; `auto` tunnels when SSH itself needs a jump host or a
    ProxyCommand to reach the host (its engine ports are then most likely not routable either)."""
    if mode in ("always", "never"):
        return "tunnel" if mode == "always" else "direct"
    return "tunnel" if target.jumps or target.proxy_command else "direct"


class Forward:
    """127.0.0.1:<ephemeral> on the controller; each accepted connection bridged to its own channel."""

    def __init__(self, label: str, port: int, open_channel: ChannelOpener) -> None:
        self.label, self.port, self._open = label, port, open_channel
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self.local_port: int = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._open_ends: set[Any] = set()  # accepted sockets and channels, closed on `close`
        self._threads: list[threading.Thread] = []
        self._start(self._accept, f"tunnel {label}:{port}")

    def _start(self, target: Callable[..., None], name: str, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self._listener], [], [], 0.2)
            if not ready or self._stop.is_set():
                continue
            try:
                accepted, peer = self._listener.accept()
            except OSError:
                return
            self._start(self._bridge, f"tunnel {self.label}:{self.port} {peer[1]}", accepted, peer)

    def _bridge(self, accepted: socket.socket, peer: tuple[str, int]) -> None:
        ends: list[Any] = [accepted]
        try:
            with self._lock:
                self._open_ends.add(accepted)
            # a failed open (engine not listening yet, connection lost) closes the client's connection:
            # httpx then reports an HTTP error, which health waits and scrapes already handle
            ends.append(self._open(self.port, peer))
            with self._lock:
                self._open_ends.add(ends[1])
            _pump(accepted, ends[1], self._stop)
        except Exception:  # any failure of one connection ends that connection only
            pass
        finally:
            with self._lock:
                for end in ends:
                    self._open_ends.discard(end)
            for end in ends:
                with contextlib.suppress(Exception):
                    end.close()

    def stop(self) -> None:
        """No new connection; every open one cut (its thread then ends)."""
        self._stop.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            ends = list(self._open_ends)
        for end in ends:
            with contextlib.suppress(Exception):
                end.close()

    def close(self) -> None:
        self.stop()
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(timeout=5)


def _pump(accepted: socket.socket, channel: Any, stop: threading.Event) -> None:
    """Bytes both ways until either side closes (HTTP clients do not half-close) or the run ends."""
    while not stop.is_set():
        readable, _, _ = select.select([accepted, channel], [], [], 0.5)
        for source, sink in ((accepted, channel), (channel, accepted)):
            if source in readable:
                data = source.recv(65536)
                if not data:
                    return
                sink.sendall(data)


class HttpTunnels:
    """The run's registry: the base URL of (host, port), direct or through a Forward opened on first use.
    `connect` gives the open SSH transport (paramiko.Transport) of a host; the default opens one per host,
    closed with the forwards. `run_on_host` runs a command there (the tunnel's overhead baseline)."""

    def __init__(
        self,
        connect: Callable[[Host], Any] | None = None,
        run_on_host: Callable[[Host, list[str]], str | None] | None = None,
    ) -> None:
        self._connect = connect or self._ssh_connect
        self._run_on_host = run_on_host or self._ssh_run  # argv on the host -> its stdout, None on failure
        self._lock = threading.Lock()
        self._forwards: dict[tuple[str, int], Forward] = {}
        self._probed: set[tuple[str, int]] = set()
        self._transports: dict[str, Any] = {}  # host name -> SshTransport, when this registry opened it
        self._connecting: dict[str, threading.Lock] = {}

    def route(self, host: Host) -> Route:
        return http_route(host.ssh.tunnel_http, resolve_target(host, shared_ssh_config()))

    def base_url(self, host: Host, port: int) -> str:
        """`http://address:port`, or `http://127.0.0.1:<local>` forwarded to the host's 127.0.0.1:port."""
        if self.route(host) == "direct":
            self._check_reachable(host, port)
            return http_url(http_address(host), port)
        with self._lock:
            forward = self._forwards.get((host.name, port))
        if forward is None:
            self._connect(host)  # SSH failures surface here, worded, not as a dropped HTTP connection
            with self._lock:
                forward = self._forwards.get((host.name, port))
                if forward is None:
                    opener = self._opener(host)
                    forward = self._forwards[(host.name, port)] = Forward(host.name, port, opener)
        return http_url("127.0.0.1", forward.local_port)

    def _opener(self, host: Host) -> ChannelOpener:
        def open_channel(port: int, peer: tuple[str, int]) -> Any:
            return self._connect(host).open_channel("direct-tcpip", ("127.0.0.1", port), peer)

        return open_channel

    def _ssh_connect(self, host: Host) -> Any:
        from vllmctl.transport.ssh import SshTransport  # ssh imports this module's neighbours only

        with self._lock:
            transport = self._transports.setdefault(host.name, SshTransport(host))
            connecting = self._connecting.setdefault(host.name, threading.Lock())
        with connecting:  # the first connections of a benchmark arrive together: one SSH connection
            return transport.connect().client.get_transport()

    def _check_reachable(self, host: Host, port: int) -> None:
        """With `tunnel_http: never` on a host SSH reaches through a jump host, say which port the
        controller cannot reach and why, instead of every request timing out one by one."""
        if host.ssh.tunnel_http != "never" or (host.name, port) in self._probed:
            return
        if http_route("auto", resolve_target(host, shared_ssh_config())) == "direct":
            return
        address = http_address(host)
        try:
            socket.create_connection((address, port), timeout=PROBE_TIMEOUT_S).close()
        except OSError as exc:
            # refused means routable (the engine may not listen yet); silence or no route means a wall
            if isinstance(exc, TimeoutError) or exc.errno in UNROUTED:
                raise TransportError(
                    f"{host.name}: port {port} at {address} is unreachable from the controller "
                    f"({exc or 'timed out'}) and ssh.tunnel_http is never, so HTTP to it does not go "
                    "through the jump host",
                    "set ssh.tunnel_http: auto (or always) to reach it through SSH, or open the port to the "
                    "controller",
                ) from exc
        self._probed.add((host.name, port))

    def overhead_ms(self, host: Host, port: int, samples: int = OVERHEAD_SAMPLES) -> float | None:
        """What the forward adds to one request: the median `GET /health` through it (one kept-alive
        connection) minus the same measured on the host itself; None when either could not be measured."""
        import httpx

        times = []
        try:
            with httpx.Client(base_url=self.base_url(host, port), timeout=10) as client:
                for index in range(samples + 1):
                    started = time.perf_counter()
                    client.get("/health").raise_for_status()
                    if index:  # the first opens the channel: a benchmark pays that once per connection
                        times.append(time.perf_counter() - started)
        except (httpx.HTTPError, TransportError):
            return None
        answer = self._run_on_host(host, ["python3", "-c", ON_HOST_TIMING, str(port), str(samples)])
        try:
            on_host = float(answer or "")
        except ValueError:
            return None
        return round(max(0.0, statistics.median(times) * 1000 - on_host), 2)

    def _ssh_run(self, host: Host, argv: list[str]) -> str | None:
        from vllmctl.transport.ssh import SshTransport

        with self._lock:
            transport = self._transports.get(host.name)
        owned = transport is None
        transport = transport or SshTransport(host)
        try:
            result = transport.run(argv, timeout=60)
        except TransportError:
            return None
        finally:
            if owned:
                transport.close()
        return result.stdout if result.ok else None

    def forwards(self) -> dict[tuple[str, int], Forward]:
        with self._lock:
            return dict(self._forwards)

    def close(self) -> None:
        with self._lock:
            forwards, transports = list(self._forwards.values()), list(self._transports.values())
            self._forwards, self._transports, self._probed, self._connecting = {}, {}, set(), {}
        for forward in forwards:
            forward.stop()
        for transport in transports:  # also ends a channel open still waiting on the host
            transport.close()
        for forward in forwards:
            forward.close()


_RUN = HttpTunnels()


def base_url(host: Host, port: int) -> str:
    """The run's base URL for a host's port (module-level so pure code gets it as a plain callback)."""
    return _RUN.base_url(host, port)


def route_of(host: Host) -> Route:
    return _RUN.route(host)


def tunnel_overhead_ms(host: Host, port: int) -> float | None:
    return _RUN.overhead_ms(host, port)


def close_tunnels() -> None:
    """Closes every forward, channel and SSH connection the run's HTTP opened; the CLI calls it last."""
    _RUN.close()


@contextlib.contextmanager
def tunnels_closed() -> Iterator[None]:
    try:
        yield
    finally:
        close_tunnels()


atexit.register(close_tunnels)  # library use without the CLI leaves nothing behind either
