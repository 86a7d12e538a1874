"""What a smoke benchmark asks (LoadSpec) and reports per endpoint, and the SLO check over a report (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from vllmctl.bench.stats import LevelSummary, Violation, check_slo


@dataclass(frozen=True)
class LoadSpec:
    """What each level sends: `requests` prompts (default 4 per concurrent slot, at least 8)."""

    concurrency: tuple[int, ...] = (1, 4, 16)
    output_tokens: int = 64
    requests: int | None = None
    level_timeout_s: float = 120.0
    request_timeout_s: float = 60.0
    warmup: bool = True
    # recorded request shapes (input tokens, output tokens), taken in turn; empty: every request alike
    shapes: tuple[tuple[int, int], ...] = ()

    def requests_for(self, concurrency: int) -> int:
        return self.requests if self.requests is not None else max(8, 4 * concurrency)

    def output_for(self, index: int) -> int:
        """The output length of a level's `index`-th request."""
        return self.shapes[index % len(self.shapes)][1] if self.shapes else self.output_tokens


@dataclass(frozen=True)
class EndpointReport:
    """One endpoint's levels, or why none ran (the warm-up request failed)."""

    base_url: str
    model_id: str
    levels: tuple[LevelSummary, ...] = ()
    error: str = ""

    def to_json(self) -> dict[str, object]:
        return {
            "base_url": self.base_url,
            "model_id": self.model_id,
            "error": self.error or None,
            "levels": [level.to_json() for level in self.levels],
        }


def check_report(report: EndpointReport, slo: dict[str, float]) -> list[Violation]:
    """SLO violations over every level; an endpoint that never answered breaks `max_error_rate` outright."""
    if report.error:
        return [Violation("max_error_rate", float(slo.get("max_error_rate", 0.0)), 1.0, 0)]
    return [violation for level in report.levels for violation in check_slo(level, slo)]
