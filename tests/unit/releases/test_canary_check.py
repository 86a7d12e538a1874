"""The canary's comparison: a soak's window out of HAProxy's running average (checked against HAProxy 2.6's
own integer arithmetic), pooling, worse beyond a bound or not judged, and the soak's record."""

from __future__ import annotations

import random

import pytest

from vllmctl.releases.canary_check import (
    TIME_STATS_SAMPLES,
    CanaryBounds,
    Counters,
    EngineReading,
    EngineWindow,
    Reading,
    engine_window,
    judge,
    judge_engines,
    pooled,
    pooled_engines,
    soak_record,
    window,
)


class HAProxyServer:
    """A server's time counters as HAProxy 2.6 keeps them: swrate_add_dynamic on every request (a plain sum
    up to 1024 requests, then a sliding one), `ttime` = swrate_avg over min(req_tot, 1024), rounded up."""

    def __init__(self) -> None:
        self.requests, self.errors, self.sum = 0, 0, 0

    def serve(self, ms: int, failed: bool = False) -> None:
        self.requests += 1
        self.errors += failed
        n = TIME_STATS_SAMPLES if self.requests > TIME_STATS_SAMPLES else 0
        self.sum = self.sum - ((self.sum + n - 1) // n if n else 0) + ms

    def reading(self) -> Reading:
        samples = min(self.requests, TIME_STATS_SAMPLES) or TIME_STATS_SAMPLES
        return Reading(self.requests, self.errors, (self.sum + samples - 1) // samples)


@pytest.mark.parametrize(("earlier", "soak"), [(0, 40), (300, 50), (1000, 60), (5000, 25), (20000, 200)])
def test_a_window_recovers_the_soaks_own_mean_session_time(earlier: int, soak: int) -> None:
    rng = random.Random(earlier + soak)
    server = HAProxyServer()
    for _ in range(earlier):
        server.serve(rng.randint(80, 120))  # ~100 ms before the soak
    before = server.reading()
    times = [rng.randint(2500, 3500) for _ in range(soak)]  # ~3 s during it
    for ms in times:
        server.serve(ms, failed=ms > 3400)
    got = window(before, server.reading())
    assert got.requests == soak and got.errors == sum(ms > 3400 for ms in times)
    # HAProxy's own figure stays near the old average once past 1024 requests; the window does not
    assert got.time_ms == pytest.approx(sum(times) / soak, rel=0.05)
    if earlier >= 5000:  # what a plain read of `ttime` would have judged by: far below the soak's ~3 s
        assert server.reading().ttime_ms < sum(times) / soak / 4


def test_a_window_after_a_reload_counts_from_zero_and_an_idle_one_has_no_time() -> None:
    assert window(Reading(500, 3, 100), Reading(40, 1, 250)) == Counters(40, 1, 250.0)
    assert window(Reading(500, 3, 100), Reading(500, 3, 100)) == Counters(0, 0, 0.0)


def test_pooled_servers_weight_the_time_by_requests() -> None:
    assert pooled([Counters(30, 0, 100.0), Counters(10, 2, 300.0)]) == Counters(40, 2, 150.0)
    assert pooled([]) == Counters()


def test_a_slower_or_failing_canary_is_worse_and_says_why() -> None:
    bounds = CanaryBounds()
    peers = Counters(100, 1, 200.0)
    assert judge(Counters(50, 0, 290.0), peers, bounds) == ""
    assert judge(Counters(50, 0, 320.0), peers, bounds) == (
        "its mean session time 320 ms is above 1.5x its peers' 200 ms"
    )
    assert judge(Counters(50, 2, 100.0), peers, bounds) == (
        "its error rate 4.0% over 50 requests is above its peers' 1.0% + 1.0%"
    )


def test_a_canary_its_checks_took_out_of_rotation_is_worse_however_few_requests_it_served() -> None:
    assert window(Reading(100, 0, 90, downs=1), Reading(104, 0, 95, downs=3)).downs == 2
    assert pooled([Counters(4, downs=2), Counters(3, downs=1)]).downs == 3
    assert judge(Counters(4, 0, 5000.0, downs=2), Counters(200, 0, 100.0), CanaryBounds()) == (
        "its health checks took it out of the gateway 2 time(s), its peers' never"
    )
    # the peers went down too (the gateway's own network, say): nothing the canary did; too few to judge
    assert judge(Counters(4, 0, 5000.0, downs=1), Counters(200, 0, 100.0, downs=1), CanaryBounds()) == ""


def test_too_few_requests_on_either_side_are_not_judged() -> None:
    assert judge(Counters(19, 19, 9000.0), Counters(100, 0, 100.0), CanaryBounds()) == ""
    assert judge(Counters(100, 50, 9000.0), Counters(19, 0, 100.0), CanaryBounds()) == ""


def test_an_engine_window_is_the_mean_of_what_it_counted_and_restarts_count_from_zero() -> None:
    before = EngineReading((2.0, 20.0), (3.0, 300.0))
    after = EngineReading((14.0, 60.0), (11.0, 700.0))
    assert engine_window(before, after) == EngineWindow(40, 300.0, 400, 20.0)
    restarted = EngineReading((1.5, 10.0), (0.5, 100.0))
    assert engine_window(after, restarted) == EngineWindow(10, 150.0, 100, 5.0)
    assert engine_window(after, after) == EngineWindow()
    pooled_two = pooled_engines([EngineWindow(30, 100.0, 300, 10.0), EngineWindow(10, 300.0, 100, 30.0)])
    assert pooled_two == EngineWindow(40, 150.0, 400, 15.0)


def test_an_engine_slower_to_its_first_token_or_between_tokens_is_worse() -> None:
    peers = EngineWindow(100, 200.0, 1500, 10.0)
    assert judge_engines(EngineWindow(40, 290.0, 600, 14.0), peers, CanaryBounds()) == ""
    assert judge_engines(EngineWindow(40, 310.0, 600, 14.0), peers, CanaryBounds()) == (
        "its engine's mean time to first token 310.0 ms is above 1.5x its peers' 200.0 ms"
    )
    assert judge_engines(EngineWindow(40, 200.0, 600, 16.0), peers, CanaryBounds()).startswith(
        "its engine's mean inter-token latency 16.0 ms"
    )
    assert judge_engines(EngineWindow(19, 9000.0, 600, 99.0), peers, CanaryBounds()) == ""


def test_the_soaks_record_says_what_each_side_served_and_why_it_was_or_was_not_judged() -> None:
    engines = (EngineWindow(12, 40.0, 180, 8.0), EngineWindow(88, 30.0, 1300, 7.5))
    few = soak_record("m", ["b", "a"], (Counters(12, 0, 900.0), Counters(80, 0, 100.0)), engines, "")
    assert few["verdict"] == "not judged" and few["canaries"] == ["a", "b"]
    assert few["reason"] == "fewer than 20 requests on the canary side"
    assert few["canary"] == {
        "requests": 12,
        "errors": 0,
        "mean_session_ms": 900.0,
        "downs": 0,
        "first_tokens": 12,
        "ttft_ms": 40.0,
        "tokens": 180,
        "itl_ms": 8.0,
    }
    assert soak_record("m", ["a"], (Counters(30), Counters(30)), engines, "")["verdict"] == "passed"
    worse = soak_record("m", ["a"], (Counters(30), Counters(30)), engines, "its error rate ...")
    assert (worse["verdict"], worse["reason"]) == ("worse", "its error rate ...")
