"""A candidate's goodput under an SLO (pure): the request rate of the highest load level whose requests all
completed and whose percentiles met every limit, the levels taken in increasing load until one breaks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from vllmctl.bench.stats import LevelSummary, check_slo


def goodput(levels: Sequence[LevelSummary], slo: Mapping[str, float]) -> tuple[float, LevelSummary | None]:
    """(requests per second, the level it was measured at); (0, None) when even the lightest level broke."""
    best: tuple[float, LevelSummary | None] = (0.0, None)
    for level in sorted(levels, key=lambda lv: lv.concurrency):
        if level.failed or check_slo(level, slo):
            break
        best = (level.request_throughput, level)
    return best
