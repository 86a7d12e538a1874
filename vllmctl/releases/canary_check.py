"""The canary's comparison, pure: its requests, errors and session time through the gateway over its soak
against the peers still on the old release; worse beyond a bound stops the model's rollout."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

MIN_REQUESTS = 20  # fewer requests on either side over the soak: not judged (too few to tell)


@dataclass(frozen=True)
class Counters:
    """One server (or a sum of them) over a window: requests, failed ones, average session time."""

    requests: int = 0
    errors: int = 0
    time_ms: float = 0.0

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0


@dataclass(frozen=True)
class CanaryBounds:
    max_error_rate: float = 0.01  # the canary's error rate may exceed its peers' by this much
    max_latency_ratio: float = 1.5  # and its average session time may be this many times theirs


def window(before: Counters, after: Counters) -> Counters:
    """What happened between two readings: counters subtract; the time is the later moving average."""
    return Counters(
        max(after.requests - before.requests, 0), max(after.errors - before.errors, 0), after.time_ms
    )


def pooled(servers: Iterable[Counters]) -> Counters:
    """Several servers as one: requests and errors add up, the time is weighted by requests."""
    found = list(servers)
    requests = sum(c.requests for c in found)
    errors = sum(c.errors for c in found)
    time_ms = sum(c.time_ms * c.requests for c in found) / requests if requests else 0.0
    return Counters(requests, errors, time_ms)


def judge(canary: Counters, peers: Counters, bounds: CanaryBounds) -> str:
    """Why the canary is worse than its peers beyond `bounds`, or "" (also when either side served fewer
    than MIN_REQUESTS requests: nothing to compare)."""
    if canary.requests < MIN_REQUESTS or peers.requests < MIN_REQUESTS:
        return ""
    if canary.error_rate > peers.error_rate + bounds.max_error_rate:
        return (
            f"its error rate {canary.error_rate:.1%} over {canary.requests} requests is above its peers' "
            f"{peers.error_rate:.1%} + {bounds.max_error_rate:.1%}"
        )
    if peers.time_ms > 0 and canary.time_ms > peers.time_ms * bounds.max_latency_ratio:
        return (
            f"its average session time {canary.time_ms:.0f} ms is above {bounds.max_latency_ratio:g}x its "
            f"peers' {peers.time_ms:.0f} ms"
        )
    return ""
