"""The streaming client against a real local HTTP server: timings, request bodies, concurrency, failures."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from vllmctl.bench.client import completion_payload, stream_completion
from vllmctl.bench.report import LoadSpec
from vllmctl.bench.smoke import benchmark_endpoint


def _one(base_url: str, model: str, tokens: int, clock: Any) -> Any:
    async def go() -> Any:
        async with aiohttp.ClientSession() as session:
            payload = completion_payload(model, "one two three", tokens)
            return await stream_completion(session, f"{base_url}/v1/completions", payload, clock)

    return asyncio.run(go())


def test_timings_follow_token_chunks_and_counts_come_from_the_usage_chunk(
    fake_server: Any, make_clock: Any
) -> None:
    clock = make_clock(tick=1.0)  # every reading is one second later: start 1, tokens at 2, 3, 4
    result = _one(fake_server.base_url, "tiny", 3, clock)
    assert result.ok, result.error
    assert (result.start, result.ttft, result.itl, result.latency) == (1.0, 1.0, (1.0, 1.0), 3.0)
    assert (result.output_tokens, result.prompt_tokens) == (3, 4)


def test_the_request_body_fixes_the_output_length_and_asks_for_usage(fake_server: Any) -> None:
    _one(fake_server.base_url, "tiny", 5, make_real_clock())
    body = fake_server.script.bodies[0]
    assert body["max_tokens"] == 5 and body["ignore_eos"] is True and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


def make_real_clock() -> Any:
    import time

    return time.perf_counter


def test_an_http_error_and_an_error_event_fail_the_request_with_the_servers_words(
    fake_server: Any, make_clock: Any
) -> None:
    refused = _one(fake_server.base_url, "bad-request", 3, make_clock())
    assert not refused.ok
    assert refused.error.startswith("HTTP 400") and "max_tokens is too large" in refused.error
    died = _one(fake_server.base_url, "midstream-error", 5, make_clock())
    assert (died.ok, died.error) == (False, "engine died")


def test_levels_send_the_requested_count_with_at_most_concurrency_in_flight(fake_server: Any) -> None:
    fake_server.script.delay_s = 0.05  # 0.2 s a request: long enough to overlap on a loaded machine
    spec = LoadSpec(concurrency=(1, 4), output_tokens=4, requests=8)
    seen: list[int] = []
    report = benchmark_endpoint(
        fake_server.base_url, "tiny", spec, 16, on_level=lambda s: seen.append(s.concurrency)
    )
    assert report.error == "" and seen == [1, 4]
    assert [(lv.concurrency, lv.requests, lv.completed, lv.failed) for lv in report.levels] == [
        (1, 8, 8, 0),
        (4, 8, 8, 0),
    ]
    assert len(fake_server.script.bodies) == 1 + 16  # the warm-up request, then two levels of 8
    # never more than the level's concurrency; more than one at once (exactly 4 needs all four to overlap,
    # which a starved client cannot promise)
    assert 2 <= fake_server.script.most_in_flight <= 4
    level = report.levels[1]
    assert level.total_output_tokens == 32 and level.itl.count == 8 * 3
    assert 0 < level.ttft.p50_ms <= level.e2e.p50_ms
    assert level.output_throughput == pytest.approx(32 / level.duration_s)
    assert {len(str(b["prompt"]).split()) for b in fake_server.script.bodies} == {16}
    assert len({str(b["prompt"]) for b in fake_server.script.bodies}) == 17  # no two prompts alike


def test_a_failing_warm_up_stops_before_any_level(fake_server: Any) -> None:
    report = benchmark_endpoint(fake_server.base_url, "bad-request", LoadSpec(concurrency=(1,)), 8)
    assert report.levels == () and report.error.startswith("warm-up request failed: HTTP 400")
    assert report.to_json()["error"] == report.error


def test_requests_unfinished_at_the_level_deadline_fail_with_the_reason(fake_server: Any) -> None:
    fake_server.script.delay_s = 0.2
    spec = LoadSpec(concurrency=(2,), output_tokens=5, requests=4, level_timeout_s=0.5, warmup=False)
    (level,) = benchmark_endpoint(fake_server.base_url, "tiny", spec, 4).levels
    assert (level.requests, level.completed, level.failed) == (4, 0, 4)
    assert level.errors == ("level deadline of 0.5 s passed first",)
    assert level.duration_s < 1.5


def test_a_request_past_its_own_timeout_fails_and_the_level_goes_on(fake_server: Any) -> None:
    fake_server.script.delay_s = 0.15
    spec = LoadSpec(concurrency=(1,), output_tokens=3, requests=1, request_timeout_s=0.2, warmup=False)
    (level,) = benchmark_endpoint(fake_server.base_url, "tiny", spec, 4).levels
    assert level.failed == 1 and level.errors == ("no reply within 0.2 s",)


def test_default_request_count_is_four_per_slot_and_at_least_eight() -> None:
    spec = LoadSpec()
    assert [spec.requests_for(c) for c in (1, 4, 16)] == [8, 16, 64]
    assert LoadSpec(requests=3).requests_for(16) == 3
