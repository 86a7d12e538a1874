"""Goodput: the request rate of the highest load level that met the SLO, levels taken in order of load."""

from __future__ import annotations

from vllmctl.bench.stats import Distribution, LevelSummary
from vllmctl.tune.goodput import goodput


def level(concurrency: int, rate: float, ttft_p99: float, failed: int = 0) -> LevelSummary:
    ms = Distribution(p99_ms=ttft_p99, p50_ms=ttft_p99 / 2, count=10)
    return LevelSummary(
        concurrency,
        10,
        10 - failed,
        failed,
        1.0,
        rate,
        rate * 10,
        100,
        100,
        ms,
        Distribution(),
        Distribution(),
        ms,
    )


def test_the_highest_level_within_the_slo_gives_the_goodput() -> None:
    levels = [level(4, 8.0, 300.0), level(1, 3.0, 100.0), level(16, 12.0, 900.0)]
    rate, at = goodput(levels, {"ttft_p99_ms": 500})
    assert rate == 8.0 and at is not None and at.concurrency == 4


def test_a_level_after_a_broken_one_does_not_count_and_failures_break_it() -> None:
    assert goodput([level(1, 3.0, 600.0), level(4, 8.0, 300.0)], {"ttft_p99_ms": 500}) == (0.0, None)
    rate, _ = goodput([level(1, 3.0, 100.0), level(4, 8.0, 100.0, failed=1)], {"ttft_p99_ms": 500})
    assert rate == 3.0
