"""Gate decisions as data: health + smoke report + SLO → pass, or roll back with reasons and figures."""

from __future__ import annotations

import pytest

from vllmctl.bench.readiness import HealthResult
from vllmctl.bench.report import EndpointReport
from vllmctl.bench.stats import RequestResult, summarize
from vllmctl.releases.gate import EndpointCheck, decide

HEALTHY = HealthResult(ok=True, elapsed_s=12.3, attempts=5, stage="ready")
TIMED_OUT = HealthResult(
    ok=False, elapsed_s=300.0, attempts=40, stage="health", last_error="connection refused"
)


def report(ttft_s: float = 0.05, failed: int = 0, error: str = "") -> EndpointReport:
    done = [RequestResult(ok=True, ttft=ttft_s, itl=(0.01,) * 7, latency=ttft_s + 0.07, output_tokens=8)] * 4
    bad = [RequestResult(ok=False, error="HTTP 500")] * failed
    levels = () if error else (summarize(done + bad, 1, 1.0), summarize(done, 4, 0.5))
    return EndpointReport("http://h:8000", "m", levels, error)


CASES = [
    ("all_good_no_slo", EndpointCheck("m", HEALTHY, report()), True, []),
    ("all_good_within_slo", EndpointCheck("m", HEALTHY, report(), {"ttft_p99_ms": 100}), True, []),
    (
        "slo_missed_with_figures",
        EndpointCheck("m", HEALTHY, report(ttft_s=0.5), {"ttft_p99_ms": 100}),
        False,
        [
            "m: SLO miss, ttft_p99_ms: measured 500 at concurrency 1, SLO at most 100",
            "m: SLO miss, ttft_p99_ms: measured 500 at concurrency 4, SLO at most 100",
        ],
    ),
    (
        "failed_requests_without_slo",
        EndpointCheck("m", HEALTHY, report(failed=2)),
        False,
        ["m: 2 of 6 requests failed at concurrency 1 (HTTP 500)"],
    ),
    (
        "warmup_never_answered",
        EndpointCheck("m", HEALTHY, report(error="warm-up request failed: HTTP 404")),
        False,
        ["m: smoke benchmark failed: warm-up request failed: HTTP 404"],
    ),
    (
        "health_timeout_with_journal_tail",
        EndpointCheck(
            "m", TIMED_OUT, None, journal_tail="a\nb\nvllm: error: unrecognized arguments: --bogus\n"
        ),
        False,
        [
            "m: not healthy after 300s (reached health: connection refused)\n  journal tail:\n"
            "    a\n    b\n    vllm: error: unrecognized arguments: --bogus"
        ],
    ),
    ("bench_skipped", EndpointCheck("m", HEALTHY, None), False, ["m: the smoke benchmark did not run"]),
]


@pytest.mark.parametrize(("check", "passed", "reasons"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_gate_case(check: EndpointCheck, passed: bool, reasons: list[str]) -> None:
    verdict = decide([check])
    assert verdict.passed is passed
    assert list(verdict.reasons) == reasons
    assert verdict.figures["m"]["health_s"] == check.health.elapsed_s


def test_one_bad_endpoint_fails_the_host_and_figures_are_kept() -> None:
    verdict = decide([EndpointCheck("a", HEALTHY, report()), EndpointCheck("b", TIMED_OUT, None)])
    assert not verdict.passed
    assert [r.split(":")[0] for r in verdict.reasons] == ["b"]
    assert verdict.figures["a"]["c1"]["ttft_p99_ms"] == pytest.approx(50.0)
    assert verdict.figures["a"]["c4"]["error_rate"] == 0.0
    assert verdict.to_json()["passed"] is False


def test_a_host_serving_nothing_passes() -> None:
    assert decide([]).passed


def test_a_tunnelled_smoke_benchmark_says_what_the_tunnel_added_beside_its_figures_and_misses() -> None:
    check = EndpointCheck("m", HEALTHY, report(ttft_s=0.5), {"ttft_p99_ms": 100}, tunnel_overhead_ms=1.25)
    verdict = decide([check])
    assert verdict.figures["m"]["tunnel_overhead_ms"] == 1.25
    assert len(verdict.reasons) == 2  # one miss per concurrency level, each saying what the tunnel added
    added = "(through an SSH port forward adding 1.25 ms per request)"
    assert all(r.startswith("m: SLO miss, ") and r.endswith(added) for r in verdict.reasons)
    assert "tunnel_overhead_ms" not in decide([EndpointCheck("m", HEALTHY, report())]).figures["m"]
