"""The release gate, pure: a health result, a smoke-benchmark report and the model's SLO decide whether a
release becomes known-good or is rolled back, with every reason and the figures behind it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllmctl.bench.readiness import HealthResult
from vllmctl.bench.report import EndpointReport, LoadSpec, check_report

# Small on purpose: the gate proves the engine answers within its SLO, it is not a capacity test.
SMOKE_SPEC = LoadSpec(concurrency=(1, 4), output_tokens=32, requests=8, level_timeout_s=120.0, warmup=True)
SMOKE_INPUT_TOKENS = 128
JOURNAL_TAIL_LINES = 40


@dataclass(frozen=True)
class EndpointCheck:
    """One served model on one host: how health went, the smoke report (None if never run), the SLO."""

    model: str
    health: HealthResult
    report: EndpointReport | None
    slo: Mapping[str, float] = field(default_factory=dict)
    journal_tail: str = ""  # the unit's journal, fetched at the edge when health failed
    tunnel_overhead_ms: float | None = None  # what an SSH port forward added to each smoke request


@dataclass(frozen=True)
class Verdict:
    passed: bool
    reasons: tuple[str, ...]
    figures: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "reasons": list(self.reasons), "figures": self.figures}


def _figures(report: EndpointReport) -> dict[str, Any]:
    return {
        f"c{level.concurrency}": {
            "ttft_p50_ms": round(level.ttft.p50_ms, 2),
            "ttft_p99_ms": round(level.ttft.p99_ms, 2),
            "itl_p50_ms": round(level.itl.p50_ms, 2),
            "e2e_p99_ms": round(level.e2e.p99_ms, 2),
            "output_tokens_per_s": round(level.output_throughput, 2),
            "error_rate": round(level.error_rate, 4),
        }
        for level in report.levels
    }


def _check_one(check: EndpointCheck, require_bench: bool) -> tuple[list[str], dict[str, Any]]:
    figures: dict[str, Any] = {"health_s": round(check.health.elapsed_s, 2)}
    if not check.health.ok:
        reason = (
            f"{check.model}: not healthy after {check.health.elapsed_s:.0f}s "
            f"(reached {check.health.stage}: {check.health.last_error or 'no answer'})"
        )
        tail = check.journal_tail.strip().splitlines()[-JOURNAL_TAIL_LINES:]
        if tail:
            reason += "\n  journal tail:\n" + "\n".join(f"    {line}" for line in tail)
        return [reason], figures
    if check.report is None:
        return ([f"{check.model}: the smoke benchmark did not run"] if require_bench else []), figures
    figures.update(_figures(check.report))
    via = ""
    if check.tunnel_overhead_ms is not None:  # said beside any SLO miss: the latencies include the tunnel
        figures["tunnel_overhead_ms"] = check.tunnel_overhead_ms
        via = f" (through an SSH port forward adding {check.tunnel_overhead_ms:.2f} ms per request)"
    reasons = []
    if check.report.error:
        reasons.append(f"{check.model}: smoke benchmark failed: {check.report.error}")
    failed = [level for level in check.report.levels if level.failed]
    for level in failed:
        sample = f" ({level.errors[0]})" if level.errors else ""
        reasons.append(
            f"{check.model}: {level.failed} of {level.requests} requests failed at "
            f"concurrency {level.concurrency}{sample}"
        )
    if not check.report.error:
        reasons += [
            f"{check.model}: SLO miss, {v.message}{via}" for v in check_report(check.report, dict(check.slo))
        ]
    return reasons, figures


def decide(checks: Sequence[EndpointCheck], require_bench: bool = True) -> Verdict:
    """Pass only when every endpoint is healthy, answered every smoke request, and meets its SLO (if any).

    A rollback re-activates a release that already passed, so it asks for health alone (require_bench False).
    """
    if not checks:
        return Verdict(True, (), {})
    reasons: list[str] = []
    figures: dict[str, Any] = {}
    for check in checks:
        found, measured = _check_one(check, require_bench)
        reasons += found
        figures[check.model] = measured
    return Verdict(not reasons, tuple(reasons), figures)
