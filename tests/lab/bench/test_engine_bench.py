"""The smoke benchmark against real vLLM (CPU build) serving the tiny model: sane, exact figures."""

from __future__ import annotations

from typing import Any

import pytest

from vllmctl.bench.prompts import load_tokenizer
from vllmctl.bench.report import LoadSpec, check_report
from vllmctl.bench.smoke import benchmark_endpoint

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def test_bench_against_real_vllm_gives_exact_token_counts_and_sane_latencies(vllm_server: Any) -> None:
    spec = LoadSpec(concurrency=(1, 4), output_tokens=16, requests=6, level_timeout_s=120)
    tokenizer = load_tokenizer(vllm_server.model_dir)
    report = benchmark_endpoint(vllm_server.base_url, vllm_server.model_id, spec, 32, tokenizer)
    assert report.error == ""
    for level in report.levels:
        assert (level.requests, level.completed, level.failed, level.errors) == (6, 6, 0, ())
        assert level.total_output_tokens == 6 * 16  # ignore_eos and max_tokens fix the output length
        assert level.total_input_tokens == 6 * 33  # 32 prompt tokens exactly, plus the <s> vLLM prepends
        # vLLM merges tokens into one chunk when the client falls behind, so gaps are per chunk, as in
        # `vllm bench serve`: at most one per token after the first.
        assert 0 < level.itl.count <= 6 * 15
        assert 0 < level.ttft.p50_ms < level.e2e.p50_ms
        assert level.ttft.p99_ms <= level.e2e.p99_ms
        assert level.tpot.p50_ms > 0 and level.output_throughput > 0
    assert check_report(report, {"max_error_rate": 0.0, "e2e_p99_ms": 60_000}) == []


def test_health_poller_sees_the_real_server_ready_and_a_wrong_model_not(vllm_server: Any) -> None:
    import time

    from vllmctl.bench.health import wait_healthy

    ready = wait_healthy(vllm_server.base_url, vllm_server.model_id, 10.0, time.monotonic, time.sleep)
    assert ready.ok and ready.attempts == 1
    wrong = wait_healthy(vllm_server.base_url, "not-served", 1.0, time.monotonic, time.sleep)
    assert not wrong.ok and wrong.stage == "models" and "not-served" in wrong.last_error
