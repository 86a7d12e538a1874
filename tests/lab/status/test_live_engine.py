"""Real vLLM (CPU build) with a 1536-token KV cache and two sequences: a burst must queue, the metrics and
startup log must read as such, and the advice must name the limit. Loopback only; always stopped."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from vllmctl.status.advice import advise
from vllmctl.status.metrics import EngineMetrics, parse_metrics, parse_startup_log, rates

if TYPE_CHECKING:
    from vllmctl.lab.local_engine import ServeLocalVllm

pytestmark = [pytest.mark.engine, pytest.mark.slow]

PORTS = range(18200, 18300)  # this machine's share for metrics work; other servers use other ports
READY_DEADLINE_S = 600.0  # a slow start on a loaded 2-core CI machine; a crash is reported at once
SMALL_KV = ["--block-size", "32", "--num-gpu-blocks-override", "48", "--max-model-len", "1024"]
MAX_NUM_SEQS = 2
# Long requests: on a loaded machine the API server hands requests to the engine slowly, and short ones
# finish before the next arrives, so no queue would ever be seen.
REQUESTS, MAX_TOKENS = 24, 960


@pytest.fixture(scope="module")
def server(serve_local_vllm: ServeLocalVllm) -> Iterator[tuple[str, str, Path]]:
    flags = [*SMALL_KV, "--max-num-seqs", str(MAX_NUM_SEQS)]
    with serve_local_vllm(flags, ports=PORTS, ready_deadline_s=READY_DEADLINE_S) as running:
        yield running.base_url, running.model_id, running.log_path


def _scrape(base_url: str) -> EngineMetrics:
    return next(iter(parse_metrics(httpx.get(f"{base_url}/metrics", timeout=30).text).values()))


def _queue_seconds(base_url: str) -> float:
    """Seconds all finished requests spent waiting for a slot, as vLLM counts them."""
    text = httpx.get(f"{base_url}/metrics", timeout=30).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "vllm:request_queue_time_seconds_sum"
    )


def test_startup_log_reports_the_small_cache(server: tuple[str, str, Path]) -> None:
    kv = parse_startup_log(server[2].read_text(errors="replace"))
    assert (kv.kv_tokens, kv.max_concurrency, kv.concurrency_context) == (1536, 1.5, 1024)


def test_a_burst_queues_and_the_advice_names_the_limit(server: tuple[str, str, Path]) -> None:
    base_url, model, _ = server
    before, started, queued_before = _scrape(base_url), time.monotonic(), _queue_seconds(base_url)
    assert before.kv_capacity_tokens == 1536
    payload = {"model": model, "prompt": "Tell the planner about the fleet", "max_tokens": MAX_TOKENS}
    payload |= {"ignore_eos": True, "temperature": 0}

    failures: list[str] = []

    def complete() -> None:
        try:
            httpx.post(f"{base_url}/v1/completions", json=payload, timeout=300).raise_for_status()
        except httpx.HTTPError as exc:
            failures.append(f"{exc}: {getattr(getattr(exc, 'response', None), 'text', '')}")

    clients = [threading.Thread(target=complete) for _ in range(REQUESTS)]
    for client in clients:
        client.start()
    during: list[EngineMetrics] = []
    while any(client.is_alive() for client in clients):
        during.append(_scrape(base_url))
        time.sleep(0.2)
    for client in clients:
        client.join()
    after, dt_s = _scrape(base_url), time.monotonic() - started
    assert failures == []

    seen = [(s.requests_running, s.requests_waiting, s.kv_usage) for s in during]
    assert all(s.requests_running <= MAX_NUM_SEQS for s in during), seen
    # A loaded CPU server may answer /metrics only between bursts of work, so a scrape that lands while
    # requests wait is luck; the engine's own queue-time total is not: 24 long requests through two slots
    # wait for seconds in all.
    assert _queue_seconds(base_url) - queued_before > 1.0
    assert after.requests_waiting == 0
    assert (after.requests_succeeded_total or 0) - (before.requests_succeeded_total or 0) == REQUESTS
    assert (after.generation_tokens_total or 0) - (
        before.generation_tokens_total or 0
    ) == REQUESTS * MAX_TOKENS
    between = rates(before, after, dt_s)
    advice = advise("vllm", {"max_num_seqs": MAX_NUM_SEQS}, during, between)
    # Two sequences on 1536 tokens: either they preempt each other or the cap of two holds the queue.
    assert [a.code for a in advice] in (["frequent-preemption"], ["max-num-seqs-too-low"], ["kv-cache-full"])
