"""Benchmark statistics against hand-computed figures, and percentiles against numpy's definition."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from vllmctl.bench.stats import RequestResult, check_slo, percentile, summarize, tpot_of

# Two completed requests and one failure over a 2 s level:
#   r1: TTFT 0.1, gaps 0.02 0.03 0.05, latency 0.2, 4 tokens -> TPOT (0.2-0.1)/3 = 33.33 ms
#   r2: TTFT 0.3, gap 0.04, latency 0.4, 2 tokens            -> TPOT (0.4-0.3)/1 = 100 ms
RESULTS = [
    RequestResult(True, 0.0, 0.1, (0.02, 0.03, 0.05), 0.2, 4, 10),
    RequestResult(True, 0.0, 0.3, (0.04,), 0.4, 2, 12),
    RequestResult(False, 0.0, error="HTTP 500: boom"),
]


def test_throughputs_count_completed_requests_and_their_tokens_over_wall_time() -> None:
    summary = summarize(RESULTS, concurrency=4, duration_s=2.0)
    assert (summary.requests, summary.completed, summary.failed) == (3, 2, 1)
    assert summary.request_throughput == pytest.approx(1.0)
    assert summary.output_throughput == pytest.approx(3.0)  # (4 + 2) tokens / 2 s
    assert (summary.total_input_tokens, summary.total_output_tokens) == (22, 6)
    assert summary.error_rate == pytest.approx(1 / 3)
    assert summary.errors == ("HTTP 500: boom",)


def test_latency_distributions_match_hand_computed_percentiles() -> None:
    summary = summarize(RESULTS, concurrency=4, duration_s=2.0)
    # TTFT samples 0.1, 0.3: p90 = 0.1 + 0.9 * 0.2
    assert (summary.ttft.mean_ms, summary.ttft.p50_ms) == (pytest.approx(200.0), pytest.approx(200.0))
    assert (summary.ttft.p90_ms, summary.ttft.p99_ms) == (pytest.approx(280.0), pytest.approx(298.0))
    # ITL pools every gap of every request: 0.02 0.03 0.04 0.05; p50 rank 1.5, p90 rank 2.7
    assert summary.itl.count == 4
    assert (summary.itl.p50_ms, summary.itl.p90_ms) == (pytest.approx(35.0), pytest.approx(47.0))
    assert summary.itl.mean_ms == pytest.approx(35.0)
    assert summary.e2e.p99_ms == pytest.approx(398.0)
    assert summary.tpot.p50_ms == pytest.approx((100 / 3 + 100) / 2)


def test_tpot_leaves_out_single_token_outputs_as_vllm_does() -> None:
    one_token = RequestResult(True, 0.0, 0.5, (), 0.5, 1)
    assert tpot_of(one_token) is None
    summary = summarize([one_token], concurrency=1, duration_s=1.0)
    assert summary.tpot.count == 0 and summary.tpot.p99_ms == 0.0
    assert summary.ttft.p50_ms == pytest.approx(500.0)


def test_an_empty_or_all_failed_level_reports_zeros_and_the_first_distinct_errors() -> None:
    failures = [RequestResult(False, error=f"e{i % 4}") for i in range(8)]
    summary = summarize(failures, concurrency=2, duration_s=0.0)
    assert summary.completed == 0 and summary.request_throughput == 0.0
    assert summary.errors == ("e0", "e1", "e2")
    assert summary.error_rate == 1.0
    assert summarize([], 1, 1.0).error_rate == 0.0


@given(st.lists(st.floats(0, 1e3, allow_nan=False), min_size=1, max_size=50), st.floats(0, 100))
def test_percentile_is_numpys_linear_percentile(samples: list[float], pct: float) -> None:
    assert percentile(samples, pct) == pytest.approx(float(np.percentile(samples, pct)), abs=1e-9)


def test_slo_check_reports_each_broken_key_with_both_figures() -> None:
    summary = summarize(RESULTS, concurrency=4, duration_s=2.0)
    slo = {
        "ttft_p99_ms": 250,  # measured 298: broken
        "itl_p99_ms": 100,  # measured ~49.7: fine
        "itl_p50_ms": 30,  # measured 35: broken
        "e2e_p99_ms": 398.5,  # measured 398: fine
        "min_output_tokens_per_s": 5,  # measured 3: broken
        "max_error_rate": 0.5,  # measured 1/3: fine
        "concurrency": 8,  # not a measured key: ignored
    }
    violations = check_slo(summary, slo)
    assert [(v.key, v.limit, round(v.measured, 3)) for v in violations] == [
        ("ttft_p99_ms", 250.0, 298.0),
        ("itl_p50_ms", 30.0, 35.0),
        ("min_output_tokens_per_s", 5.0, 3.0),
    ]
    assert violations[0].message == "ttft_p99_ms: measured 298 at concurrency 4, SLO at most 250"
    assert "at least 5" in violations[2].message


def test_a_level_where_everything_failed_breaks_the_error_rate_not_the_latency_keys() -> None:
    summary = summarize([RequestResult(False, error="refused")], concurrency=1, duration_s=1.0)
    violations = check_slo(summary, {"ttft_p99_ms": 1, "max_error_rate": 0.0, "min_output_tokens_per_s": 1})
    assert sorted(v.key for v in violations) == ["max_error_rate", "min_output_tokens_per_s"]
