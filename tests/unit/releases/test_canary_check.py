"""The canary's comparison on plain counters: windows, pooling, and worse beyond a bound or not judged."""

from __future__ import annotations

from vllmctl.releases.canary_check import CanaryBounds, Counters, judge, pooled, window


def test_a_window_subtracts_counters_and_keeps_the_later_average() -> None:
    assert window(Counters(10, 1, 80.0), Counters(60, 3, 120.0)) == Counters(50, 2, 120.0)
    assert window(Counters(10, 1, 80.0), Counters(4, 0, 50.0)) == Counters(0, 0, 50.0)  # HAProxy reloaded


def test_pooled_servers_weight_the_time_by_requests() -> None:
    assert pooled([Counters(30, 0, 100.0), Counters(10, 2, 300.0)]) == Counters(40, 2, 150.0)
    assert pooled([]) == Counters()


def test_a_slower_or_failing_canary_is_worse_and_says_why() -> None:
    bounds = CanaryBounds()
    peers = Counters(100, 1, 200.0)
    assert judge(Counters(50, 0, 290.0), peers, bounds) == ""
    assert judge(Counters(50, 0, 320.0), peers, bounds) == (
        "its average session time 320 ms is above 1.5x its peers' 200 ms"
    )
    assert judge(Counters(50, 2, 100.0), peers, bounds) == (
        "its error rate 4.0% over 50 requests is above its peers' 1.0% + 1.0%"
    )


def test_too_few_requests_on_either_side_are_not_judged() -> None:
    assert judge(Counters(19, 19, 9000.0), Counters(100, 0, 100.0), CanaryBounds()) == ""
    assert judge(Counters(100, 50, 9000.0), Counters(19, 0, 100.0), CanaryBounds()) == ""
