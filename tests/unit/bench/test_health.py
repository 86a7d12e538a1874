"""The health poller against a real local HTTP server, with a fake clock so no test really waits."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from vllmctl.bench.health import wait_healthy
from vllmctl.bench.readiness import Progress, growing_waits, startup_deadline_s


def test_startup_deadline_has_a_floor_and_grows_with_the_weights() -> None:
    assert startup_deadline_s(0) == 300.0
    assert startup_deadline_s(-1) == 300.0
    assert startup_deadline_s(16) == 364.0
    assert startup_deadline_s(131) == pytest.approx(824.0)


def test_waits_grow_by_half_and_stop_growing_at_the_cap() -> None:
    waits = growing_waits()
    assert [next(waits) for _ in range(4)] == [0.5, 0.75, 1.125, 1.6875]
    assert [next(growing_waits(8.0, 2.0, 10.0)) for _ in range(1)] == [8.0]
    capped = growing_waits(8.0, 2.0, 10.0)
    assert [next(capped) for _ in range(3)] == [8.0, 10.0, 10.0]


def test_503_then_200_is_ready_after_growing_waits(fake_server: Any, make_clock: Any) -> None:
    fake_server.script.health_failures = 2
    clock = make_clock()
    seen: list[Progress] = []
    result = wait_healthy(fake_server.base_url, "tiny", 60.0, clock, clock.sleep, seen.append)
    assert result.ok and result.stage == "ready" and result.last_error == ""
    assert result.attempts == 3
    assert clock.sleeps == [0.5, 0.75]
    assert result.elapsed_s == pytest.approx(1.25)
    assert [(p.attempt, p.stage, p.error, p.next_wait_s) for p in seen] == [
        (1, "health", "GET /health answered 503", 0.5),
        (2, "health", "GET /health answered 503", 0.75),
    ]


def test_never_healthy_gives_up_exactly_at_the_deadline(fake_server: Any, make_clock: Any) -> None:
    fake_server.script.health_failures = 10**6
    clock = make_clock()
    result = wait_healthy(fake_server.base_url, "tiny", 5.0, clock, clock.sleep)
    assert not result.ok
    assert clock.sleeps == [0.5, 0.75, 1.125, 1.6875, pytest.approx(0.9375)]
    assert sum(clock.sleeps) == pytest.approx(5.0)
    assert result.attempts == 6
    assert result.last_error == "GET /health answered 503"


def test_healthy_but_serving_another_model_is_not_ready(fake_server: Any, make_clock: Any) -> None:
    fake_server.script.models = ["other-model"]
    clock = make_clock()
    result = wait_healthy(fake_server.base_url, "tiny", 2.0, clock, clock.sleep)
    assert not result.ok and result.stage == "models"
    assert result.last_error == "/v1/models lists other-model, not tiny"


def test_nothing_listening_is_retried_as_a_connection_error(make_clock: Any) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    clock = make_clock()
    result = wait_healthy(f"http://127.0.0.1:{port}", "tiny", 1.0, clock, clock.sleep)
    assert not result.ok and result.attempts == 3  # waits 0.5, then the 0.5 left
    assert result.last_error.startswith("ConnectError")
