"""Benchmark statistics, pure: per-request timings to a per-level summary, and SLO checks against it.

Definitions follow `vllm bench serve` (vllm/benchmarks/serve.py, `calculate_metrics`); see docs/bench.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

PERCENTILES = (50.0, 90.0, 99.0)
MAX_ERROR_MESSAGES = 3


@dataclass(frozen=True)
class RequestResult:
    """One request's timings in seconds, measured from when it was sent."""

    ok: bool
    start: float = 0.0
    ttft: float = 0.0  # until the first chunk carrying a choice
    itl: tuple[float, ...] = ()  # gaps between successive token chunks
    latency: float = 0.0  # until the last token chunk (the usage chunk and [DONE] do not count)
    output_tokens: int = 0
    prompt_tokens: int = 0
    error: str = ""


@dataclass(frozen=True)
class Distribution:
    """Mean and percentiles in milliseconds; all zero when there were no samples (as vLLM reports)."""

    mean_ms: float = 0.0
    p50_ms: float = 0.0
    p90_ms: float = 0.0
    p99_ms: float = 0.0
    count: int = 0


@dataclass(frozen=True)
class LevelSummary:
    concurrency: int
    requests: int
    completed: int
    failed: int
    duration_s: float
    request_throughput: float  # completed requests per second of the level's wall time
    output_throughput: float  # output tokens of completed requests per second of wall time
    total_input_tokens: int
    total_output_tokens: int
    ttft: Distribution
    itl: Distribution
    tpot: Distribution
    e2e: Distribution
    errors: tuple[str, ...] = field(default_factory=tuple)

    @property
    def error_rate(self) -> float:
        return self.failed / self.requests if self.requests else 0.0

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["errors"] = list(self.errors)
        data["error_rate"] = self.error_rate
        return data


def percentile(samples: Sequence[float], pct: float) -> float:
    """Linear interpolation between closest ranks: numpy.percentile's default, which vLLM uses."""
    if not samples:
        return 0.0
    ordered = sorted(samples)
    rank = (len(ordered) - 1) * pct / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def distribution(seconds: Sequence[float]) -> Distribution:
    if not seconds:
        return Distribution()
    p50, p90, p99 = (percentile(seconds, p) * 1000.0 for p in PERCENTILES)
    return Distribution(sum(seconds) / len(seconds) * 1000.0, p50, p90, p99, len(seconds))


def tpot_of(result: RequestResult) -> float | None:
    """(latency − TTFT) / (output tokens − 1); undefined for one-token outputs, which vLLM leaves out."""
    if result.output_tokens <= 1:
        return None
    return (result.latency - result.ttft) / (result.output_tokens - 1)


def summarize(results: Sequence[RequestResult], concurrency: int, duration_s: float) -> LevelSummary:
    """The summary of one concurrency level; `duration_s` is its wall time, from first send to last reply."""
    done = [r for r in results if r.ok]
    failed = [r for r in results if not r.ok]
    tpots = [t for t in map(tpot_of, done) if t is not None]
    output = sum(r.output_tokens for r in done)
    per_s = 1.0 / duration_s if duration_s > 0 else 0.0
    messages: list[str] = []
    for result in failed:
        if result.error and result.error not in messages and len(messages) < MAX_ERROR_MESSAGES:
            messages.append(result.error)
    return LevelSummary(
        concurrency=concurrency,
        requests=len(results),
        completed=len(done),
        failed=len(failed),
        duration_s=duration_s,
        request_throughput=len(done) * per_s,
        output_throughput=output * per_s,
        total_input_tokens=sum(r.prompt_tokens for r in done),
        total_output_tokens=output,
        ttft=distribution([r.ttft for r in done]),
        itl=distribution([gap for r in done for gap in r.itl]),
        tpot=distribution(tpots),
        e2e=distribution([r.latency for r in done]),
        errors=tuple(messages),
    )


@dataclass(frozen=True)
class Violation:
    """One SLO key the measurement broke, with both figures."""

    key: str
    limit: float
    measured: float
    concurrency: int

    @property
    def message(self) -> str:
        bound = "at least" if self.key.startswith("min_") else "at most"
        return (
            f"{self.key}: measured {self.measured:.4g} at concurrency {self.concurrency}, "
            f"SLO {bound} {self.limit:.4g}"
        )


# slo key -> (what it reads from a summary, True when the measurement must stay at or below the limit)
SLO_KEYS: dict[str, tuple[str, bool]] = {
    "ttft_p50_ms": ("ttft.p50_ms", True),
    "ttft_p99_ms": ("ttft.p99_ms", True),
    "itl_p50_ms": ("itl.p50_ms", True),
    "itl_p99_ms": ("itl.p99_ms", True),
    "e2e_p99_ms": ("e2e.p99_ms", True),
    "min_output_tokens_per_s": ("output_throughput", False),
    "max_error_rate": ("error_rate", True),
}


def _read(summary: LevelSummary, dotted: str) -> float:
    value: Any = summary
    for part in dotted.split("."):
        value = getattr(value, part)
    return float(value)


def check_slo(summary: LevelSummary, slo: Mapping[str, float]) -> list[Violation]:
    """Every SLO key the summary breaks; keys vllmctl does not measure (e.g. `concurrency`) are ignored.

    Latency keys are checked only over completed requests; a level where every request failed breaks
    `max_error_rate` (and `min_output_tokens_per_s`), never the latency keys with zeros.
    """
    violations: list[Violation] = []
    for key, limit in slo.items():
        if key not in SLO_KEYS:
            continue
        source, at_most = SLO_KEYS[key]
        if at_most and source != "error_rate" and summary.completed == 0:
            continue
        measured = _read(summary, source)
        broken = measured > limit if at_most else measured < limit
        if broken:
            violations.append(Violation(key, float(limit), measured, summary.concurrency))
    return violations
