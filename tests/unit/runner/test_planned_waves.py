"""`apply --check`'s waves: from the hosts whose planned steps stop engines, with the inventory's bounds or
`--max-unavailable` for the run; how they print; the flag's parsing."""

from __future__ import annotations

import pytest
from executor_builders import inventory, model

from vllmctl import cli
from vllmctl.commands.apply import wave_lines
from vllmctl.ops import Command, Step
from vllmctl.releases.waves import MaxUnavailable
from vllmctl.runner.core.results import HostResult, RunResult, StepResult
from vllmctl.runner.releases.waves import planned_waves, with_max_unavailable

HOSTS = ["a", "b", "c", "d"]


def checked(stopping: list[str]) -> RunResult:
    result = RunResult("site", True, {})
    for name in HOSTS:
        restart = Step(
            "service", "tiny", (Command("systemctl restart tiny"),), stops_engines=name in stopping
        )
        result.hosts[name] = HostResult(name, steps=[StepResult("services", restart, "planned")])
    return result


def test_check_plans_the_canary_then_waves_of_max_unavailable() -> None:
    inv = inventory(HOSTS, {"tiny": model("tiny", tuple(HOSTS), max_unavailable=MaxUnavailable(2))})
    plan = planned_waves(inv, checked(["a", "b", "c", "d"]))
    assert [(w.hosts, w.canary) for w in plan.waves] == [(("a",), True), (("b", "c"), False), (("d",), False)]
    assert wave_lines(plan.to_json()) == [
        "rollout wave 1 (canary, alone): a",
        "rollout wave 2: b, c",
        "rollout wave 3: d",
    ]


def test_only_hosts_that_stop_engines_are_in_the_waves_and_the_flag_overrides_the_inventory() -> None:
    inv = with_max_unavailable(
        inventory(HOSTS, {"tiny": model("tiny", tuple(HOSTS))}), MaxUnavailable(0, 50.0)
    )
    assert inv.models["tiny"].max_unavailable == MaxUnavailable(0, 50.0)
    plan = planned_waves(inv, checked(["b", "c", "d"]))
    assert [w.hosts for w in plan.waves] == [("b",), ("c", "d")]


def test_a_run_prints_each_wave_with_its_time_and_canary_models() -> None:
    ran = {"waves": [{"hosts": ["a"], "canary": ["tiny"], "start": 10.0, "end": 52.4}]}
    ran["waves"].append({"hosts": ["b", "c"], "canary": [], "start": 53.0, "end": None})
    assert wave_lines(ran) == ["rollout wave 1 (canary of tiny): a in 42 s", "rollout wave 2: b, c"]
    assert wave_lines({"waves": [], "held": {"a": "m: 1 serving, min_available 1"}}) == [
        "rollout held: a: m: 1 serving, min_available 1"
    ]


def test_a_run_prints_each_canary_soak_with_both_sides_figures_and_its_verdict() -> None:
    from vllmctl.releases.canary_check import Counters, EngineWindow, soak_record

    sides = (Counters(12, 0, 2950.4), Counters(88, 1, 101.0))
    engines = (EngineWindow(12, 41.0, 180, 8.0), EngineWindow(88, 30.2, 1300, 7.5))
    soak = soak_record("tiny", ["a"], sides, engines, "")
    assert wave_lines({"waves": [], "soaks": [soak]}) == [
        "canary soak of tiny: canary 12 requests, 0 failed, 2950 ms a session, first token 41 ms, 8.0 ms a "
        "token; peers 88 requests, 1 failed, 101 ms a session, first token 30 ms, 7.5 ms a token: "
        "not judged (fewer than 20 requests on the canary side)"
    ]


def test_the_flag_takes_a_count_or_a_percentage() -> None:
    parser = cli.build_parser()
    assert parser.parse_args(["apply", "inv.yml"]).max_unavailable is None
    assert parser.parse_args(
        ["apply", "inv.yml", "--max-unavailable", "25%"]
    ).max_unavailable == MaxUnavailable(0, 25.0)
    with pytest.raises(SystemExit):
        parser.parse_args(["apply", "inv.yml", "--max-unavailable", "0"])
