"""The canary's comparison, pure: its requests, errors and mean session time through the gateway, and its
engines' time to first token and inter-token latency, over its soak against the peers still on the old
release; worse beyond a bound stops the model's rollout."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

MIN_REQUESTS = 20  # fewer requests on either side over the soak: not judged (too few to tell)
# HAProxy 2.6 keeps a server's session time as a plain sum over its first 1024 requests, then as a sliding
# sum that loses 1/1024 per request (src/stream.c, stream_update_time_stats: swrate_add_dynamic), and `ttime`
# is that sum over min(req_tot, 1024) (src/stats.c, stats_fill_sv_stats): an average over the last ~1024
# requests, which a soak of tens of requests barely moves. `window` undoes it to the soak's own mean.
TIME_STATS_SAMPLES = 1024


@dataclass(frozen=True)
class Reading:
    """One server's `show stat` row at one moment: requests since HAProxy started (`req_tot`), failed ones
    (`hrsp_5xx` + `eresp`) and its average session time (`ttime`, ms)."""

    requests: int = 0
    errors: int = 0
    ttime_ms: int = 0
    downs: int = 0  # times its health checks took it from UP to DOWN (`chkdown`)


@dataclass(frozen=True)
class Counters:
    """One server (or a sum of them) over a window: requests, failed ones, mean session time, and the times
    its health checks took it out of rotation."""

    requests: int = 0
    errors: int = 0
    time_ms: float = 0.0
    downs: int = 0

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0

    def to_json(self) -> dict[str, Any]:
        figures = {
            "requests": self.requests,
            "errors": self.errors,
            "mean_session_ms": round(self.time_ms, 1),
        }
        return {**figures, "downs": self.downs}


@dataclass(frozen=True)
class CanaryBounds:
    max_error_rate: float = 0.01  # the canary's error rate may exceed its peers' by this much
    max_latency_ratio: float = 1.5  # and its mean session time may be this many times theirs


def window(before: Reading, after: Reading) -> Counters:
    """What one server did between two readings, its mean session time taken out of HAProxy's running
    average: exact below 1024 requests, and for a steady time within a millisecond or two above."""
    if after.requests < before.requests:
        before = Reading()  # HAProxy restarted: its counters started again from zero
    count = after.requests - before.requests
    errors = max(after.errors - before.errors, 0)
    downs = max(after.downs - before.downs, 0)
    if count == 0:
        return Counters(0, errors, 0.0, downs)
    n = TIME_STATS_SAMPLES
    summed = [r.ttime_ms * min(r.requests, n) for r in (before, after)]
    plain = min(max(n - before.requests, 0), count)  # added to the sum as they are, none lost
    kept = (1 - 1 / n) ** (count - plain)  # what is left of the earlier sum after the sliding ones
    mean = (summed[1] - summed[0] * kept) / (plain * kept + n * (1 - kept))
    return Counters(count, errors, max(mean, 0.0), downs)


def pooled(servers: Iterable[Counters]) -> Counters:
    """Several servers as one: requests and errors add up, the time is weighted by requests."""
    found = list(servers)
    requests = sum(c.requests for c in found)
    errors = sum(c.errors for c in found)
    time_ms = sum(c.time_ms * c.requests for c in found) / requests if requests else 0.0
    return Counters(requests, errors, time_ms, sum(c.downs for c in found))


def judge(canary: Counters, peers: Counters, bounds: CanaryBounds) -> str:
    """Why the canary is worse than its peers beyond `bounds`, or "". Taken out of rotation by its health
    checks while no peer was is worse on any count (a slow canary the balancer stops sending to would
    otherwise serve too few requests to judge); else fewer than MIN_REQUESTS a side are not judged."""
    if canary.downs and not peers.downs:
        return f"its health checks took it out of the gateway {canary.downs} time(s), its peers' never"
    if canary.requests < MIN_REQUESTS or peers.requests < MIN_REQUESTS:
        return ""
    if canary.error_rate > peers.error_rate + bounds.max_error_rate:
        return (
            f"its error rate {canary.error_rate:.1%} over {canary.requests} requests is above its peers' "
            f"{peers.error_rate:.1%} + {bounds.max_error_rate:.1%}"
        )
    if peers.time_ms > 0 and canary.time_ms > peers.time_ms * bounds.max_latency_ratio:
        return (
            f"its mean session time {canary.time_ms:.0f} ms is above {bounds.max_latency_ratio:g}x its "
            f"peers' {peers.time_ms:.0f} ms"
        )
    return ""


@dataclass(frozen=True)
class EngineReading:
    """One engine's latency histograms at one moment (`/metrics`): time to first token and inter-token
    latency, each as its running sum (s) and count."""

    ttft: tuple[float, float] = (0.0, 0.0)
    itl: tuple[float, float] = (0.0, 0.0)


@dataclass(frozen=True)
class EngineWindow:
    """Engines (one or pooled) over a window: their requests' first tokens and the tokens after, in ms."""

    first_tokens: int = 0
    ttft_ms: float = 0.0
    tokens: int = 0
    itl_ms: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "first_tokens": self.first_tokens,
            "ttft_ms": round(self.ttft_ms, 1),
            "tokens": self.tokens,
            "itl_ms": round(self.itl_ms, 2),
        }


def engine_window(before: EngineReading, after: EngineReading) -> EngineWindow:
    """What one engine did between two readings; a count that went down is an engine restarted since."""
    if after.ttft[1] < before.ttft[1] or after.itl[1] < before.itl[1]:
        before = EngineReading()
    firsts, tokens = after.ttft[1] - before.ttft[1], after.itl[1] - before.itl[1]
    ttft = (after.ttft[0] - before.ttft[0]) / firsts * 1000 if firsts else 0.0
    itl = (after.itl[0] - before.itl[0]) / tokens * 1000 if tokens else 0.0
    return EngineWindow(int(firsts), ttft, int(tokens), itl)


def pooled_engines(engines: Iterable[EngineWindow]) -> EngineWindow:
    """Several engines as one: each mean weighted by what it counted."""
    found = list(engines)
    firsts, tokens = sum(e.first_tokens for e in found), sum(e.tokens for e in found)
    ttft = sum(e.ttft_ms * e.first_tokens for e in found) / firsts if firsts else 0.0
    itl = sum(e.itl_ms * e.tokens for e in found) / tokens if tokens else 0.0
    return EngineWindow(firsts, ttft, tokens, itl)


def judge_engines(canary: EngineWindow, peers: EngineWindow, bounds: CanaryBounds) -> str:
    """Why the canary's engines answered slower than their peers' beyond `bounds`, or "" (also on fewer
    than MIN_REQUESTS first tokens a side)."""
    if canary.first_tokens < MIN_REQUESTS or peers.first_tokens < MIN_REQUESTS:
        return ""
    ratio = bounds.max_latency_ratio
    for name, mine, theirs in (
        ("time to first token", canary.ttft_ms, peers.ttft_ms),
        ("inter-token latency", canary.itl_ms, peers.itl_ms),
    ):
        if theirs > 0 and mine > theirs * ratio:
            return f"its engine's mean {name} {mine:.1f} ms is above {ratio:g}x its peers' {theirs:.1f} ms"
    return ""


def soak_record(
    model: str,
    canaries: Iterable[str],
    sides: tuple[Counters, Counters],
    engines: tuple[EngineWindow, EngineWindow],
    worse: str,
) -> dict[str, Any]:
    """The soak's outcome for the report: both sides' figures and `worse`, `passed` or `not judged`."""
    (canary, peers), named = sides, dict(zip(("canary", "peers"), engines, strict=True))
    few = [side for side, c in (("canary", canary), ("peers", peers)) if c.requests < MIN_REQUESTS]
    verdict = "worse" if worse else "not judged" if few else "passed"
    why = worse or (f"fewer than {MIN_REQUESTS} requests on the {' and '.join(few)} side" if few else "")
    return {
        "model": model,
        "canaries": sorted(canaries),
        "verdict": verdict,
        "reason": why,
        "canary": {**canary.to_json(), **named["canary"].to_json()},
        "peers": {**peers.to_json(), **named["peers"].to_json()},
    }
