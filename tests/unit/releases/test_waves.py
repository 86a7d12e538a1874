"""The wave planner on plain data: max_unavailable as a count or a share, the canary alone first, hosts
serving several models, and (hypothesis) no wave ever takes a model past its bounds."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vllmctl.releases.waves import MaxUnavailable, RolloutLimits, Wave, budget, plan_waves


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("1", MaxUnavailable(1)),
        (2, MaxUnavailable(2)),
        ("25%", MaxUnavailable(0, 25.0)),
        (" 100% ", MaxUnavailable(0, 100.0)),
    ],
)
def test_max_unavailable_reads_a_count_or_a_percentage(text: str | int, parsed: MaxUnavailable) -> None:
    assert MaxUnavailable.parse(text) == parsed


@pytest.mark.parametrize("text", ["", "x", "0", "-1", "1.5", "0%", "150%", "%"])
def test_max_unavailable_refuses_anything_else(text: str) -> None:
    with pytest.raises(ValueError, match="max_unavailable"):
        MaxUnavailable.parse(text)


def test_a_percentage_rounds_down_but_never_below_one_host() -> None:
    assert MaxUnavailable(0, 25.0).hosts(16) == 4
    assert MaxUnavailable(0, 25.0).hosts(3) == 1
    assert MaxUnavailable(0, 50.0).hosts(5) == 2


def test_the_default_is_one_host_or_all_of_them_where_min_available_is_0() -> None:
    assert RolloutLimits().max_out(8) == 1
    assert RolloutLimits(min_available=0).max_out(8) == 8
    assert RolloutLimits(min_available=0, max_unavailable=MaxUnavailable(2)).max_out(8) == 2


def one_model(
    hosts: list[str], limits: RolloutLimits | None = None
) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    return {h: ["m"] for h in hosts}, {"m": hosts}


def test_by_default_one_host_at_a_time_as_before() -> None:
    hosts = ["a", "b", "c"]
    serves, hosts_of = one_model(hosts, RolloutLimits())
    plan = plan_waves(hosts, serves, hosts_of, {"m": RolloutLimits()})
    assert plan.waves == (Wave(("a",), canary=True), Wave(("b",)), Wave(("c",)))


def test_three_hosts_max_unavailable_2_min_available_1_go_two_at_a_time_after_the_canary() -> None:
    hosts = ["a", "b", "c"]
    limits = {"m": RolloutLimits(1, MaxUnavailable(2))}
    plan = plan_waves(hosts, *one_model(hosts, limits["m"]), limits)
    assert plan.waves == (Wave(("a",), canary=True), Wave(("b", "c")))


def test_min_available_caps_the_wave_below_max_unavailable() -> None:
    hosts = ["a", "b", "c", "d"]
    limits = {"m": RolloutLimits(3, MaxUnavailable(0, 100.0), canary=0)}
    plan = plan_waves(hosts, *one_model(hosts, limits["m"]), limits)
    assert [w.hosts for w in plan.waves] == [("a",), ("b",), ("c",), ("d",)]
    assert budget("m", limits["m"], hosts, (), ()) == (1, "m: 4 serving, min_available 3")


def test_a_host_serving_two_models_waits_for_the_stricter_one() -> None:
    serves = {"a": ["x", "y"], "b": ["x", "y"], "c": ["x", "y"], "d": ["x"]}
    hosts_of = {"x": ["a", "b", "c", "d"], "y": ["a", "b", "c"]}
    limits = {"x": RolloutLimits(1, MaxUnavailable(3), canary=0), "y": RolloutLimits(1, canary=0)}
    plan = plan_waves(list(serves), serves, hosts_of, limits)
    assert [w.hosts for w in plan.waves] == [("a", "d"), ("b",), ("c",)]


def test_hosts_out_elsewhere_count_and_a_model_short_of_replicas_holds_its_hosts() -> None:
    hosts = ["a", "b", "c"]
    limits = {"m": RolloutLimits(2, MaxUnavailable(2))}
    plan = plan_waves(["a", "b"], *one_model(hosts, limits["m"]), limits, out={"c"})
    assert plan.waves == ()
    assert plan.held == {"a": "m: 2 serving, min_available 2", "b": "m: 2 serving, min_available 2"}


def test_hosts_that_do_not_serve_go_first_together() -> None:
    hosts = ["a", "b", "c", "d"]
    limits = {"m": RolloutLimits()}
    plan = plan_waves(hosts, *one_model(hosts, limits["m"]), limits, down={"a", "c"})
    assert plan.waves == (Wave(("a", "c")), Wave(("b",), canary=True), Wave(("d",)))


def test_a_lone_replica_goes_as_its_canary() -> None:
    limits = {"m": RolloutLimits()}
    plan = plan_waves(["a"], {"a": ["m"]}, {"m": ["a"]}, limits)
    assert plan.to_json() == {"waves": [{"hosts": ["a"], "canary": True}], "held": {}}


@st.composite
def fleets(
    draw: st.DrawFn,
) -> tuple[
    list[str], dict[str, list[str]], dict[str, list[str]], dict[str, RolloutLimits], set[str], set[str]
]:
    hosts = [f"h{i}" for i in range(draw(st.integers(1, 12)))]
    models = [f"m{i}" for i in range(draw(st.integers(1, 4)))]
    hosts_of = {m: draw(st.lists(st.sampled_from(hosts), min_size=1, unique=True)) for m in models}
    serves: dict[str, list[str]] = {h: [m for m in models if h in hosts_of[m]] for h in hosts}
    limits = {}
    for model in models:
        share = draw(
            st.one_of(
                st.none(),
                st.integers(1, 5).map(MaxUnavailable),
                st.integers(1, 100).map(lambda p: MaxUnavailable(0, float(p))),
            )
        )
        limits[model] = RolloutLimits(draw(st.integers(0, 4)), share, draw(st.integers(0, 3)))
    changing = draw(st.lists(st.sampled_from(hosts), unique=True))
    out = draw(st.sets(st.sampled_from(hosts)).map(lambda s: s - set(changing)))
    down = draw(st.sets(st.sampled_from(hosts)).map(lambda s: s - out))
    return changing, serves, hosts_of, limits, out, down


@settings(max_examples=300, deadline=None)
@given(fleets())
def test_no_wave_takes_a_model_past_its_bounds_and_every_host_appears_once(fleet: tuple) -> None:  # type: ignore[type-arg]
    changing, serves, hosts_of, limits, out, down = fleet
    plan = plan_waves(changing, serves, hosts_of, limits, out, down)
    placed = [h for w in plan.waves for h in w.hosts]
    assert sorted(placed + list(plan.held)) == sorted(changing)
    assert len(placed) == len(set(placed))
    for number, wave in enumerate(plan.waves):
        if wave.canary:  # alone: the only canary wave, and the first one with a serving host
            assert [w.canary for w in plan.waves].count(True) == 1
            assert all(h in down for w in plan.waves[:number] for h in w.hosts)
        for model, hosts in hosts_of.items():
            taken = [h for h in wave.hosts if h in hosts and h not in down]
            if len(hosts) <= 1 or not taken:
                continue
            limit = limits[model]
            already = len(out & set(hosts))
            assert len(taken) + already <= limit.max_out(len(hosts))
            serving = [h for h in hosts if h not in out and h not in down]
            assert len(serving) - len(taken) >= limit.min_available
            if wave.canary:  # each model's canary hosts only
                assert len(taken) <= limit.canary
