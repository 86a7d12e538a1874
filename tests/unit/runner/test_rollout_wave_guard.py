"""RolloutGuard with max_unavailable and a canary, over health probes: the canary goes alone, then hosts go
two at a time; a failed canary holds the rest; the soak is waited; a host serving two models waits for the
stricter one; the waves are recorded with their hosts, start and end."""

from __future__ import annotations

import threading
import time
from typing import Any

from vllmctl.gateway.config import Server
from vllmctl.inventory.model import GatewaySpec
from vllmctl.releases.canary import Canaries
from vllmctl.releases.canary_check import EngineReading
from vllmctl.releases.rollout import MaxFail, RolloutLedger, ServingReplica
from vllmctl.releases.waves import MaxUnavailable, RolloutLimits
from vllmctl.runner.gateway.control import GatewayControl
from vllmctl.runner.releases.canary_soak import SoakJudge
from vllmctl.runner.releases.rollout import RolloutGuard
from vllmctl.transport import Result

TINY = [ServingReplica("tiny", h, f"http://{h}:8000") for h in "abc"]


def guard(replicas: list[ServingReplica], limits: dict[str, RolloutLimits], **kw: Any) -> RolloutGuard:
    hosts = {r.host for r in replicas}
    ledger = RolloutLedger(kw.pop("max_fail", MaxFail()), total=len(hosts))
    minimum = {m: lim.min_available for m, lim in limits.items()}
    rollout = RolloutGuard(replicas, minimum, ledger, None, lambda r: True, wait_s=0.3, poll_s=0.01, **kw)
    rollout.max_out = {
        m: lim.max_out(len({r.host for r in replicas if r.model == m})) for m, lim in limits.items()
    }
    rollout.canaries = Canaries(limits)
    return rollout


def later(rollout: RolloutGuard, host: str) -> tuple[threading.Thread, list[str]]:
    said: list[str] = []
    thread = threading.Thread(target=lambda: said.append(rollout.take_out(host)), daemon=True)
    thread.start()
    return thread, said


def until(check: Any, timeout: float = 3.0) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_the_canary_goes_alone_then_two_at_a_time() -> None:
    rollout = guard(TINY, {"tiny": RolloutLimits(1, MaxUnavailable(2))})
    assert rollout.take_out("a") == ""
    b, said_b = later(rollout, "b")
    c, said_c = later(rollout, "c")
    time.sleep(0.5)  # past wait_s: a canary's wait follows the canary, it is not held back
    assert b.is_alive() and c.is_alive() and rollout.ledger.out == {"a"}
    assert rollout.put_back("a", "") == ""
    b.join(3), c.join(3)
    assert said_b == [""] and said_c == [""] and rollout.ledger.out == {"b", "c"}
    rollout.put_back("b", ""), rollout.put_back("c", "")
    waves = rollout.waves.to_json()
    assert [(sorted(w["hosts"]), w["canary"]) for w in waves] == [(["a"], ["tiny"]), (["b", "c"], [])]
    assert all(w["start"] <= w["end"] for w in waves) and waves[0]["end"] <= waves[1]["start"]
    assert rollout.host_events("a")[0]["canary"] == ["tiny"]


def test_the_default_bounds_keep_one_host_at_a_time() -> None:
    rollout = guard(TINY, {"tiny": RolloutLimits()})
    assert rollout.take_out("a") == ""
    rollout.put_back("a", "")
    assert rollout.take_out("b") == ""
    b_out = rollout.ledger.out.copy()
    c, said = later(rollout, "c")
    time.sleep(0.1)
    assert c.is_alive() and b_out == {"b"}
    rollout.put_back("b", "")
    c.join(3)
    assert said == [""]
    rollout.put_back("c", "")
    assert [w["hosts"] for w in rollout.waves.to_json()] == [["a"], ["b"], ["c"]]


def test_a_failed_canary_holds_the_model_back_at_once() -> None:
    rollout = guard(TINY, {"tiny": RolloutLimits(1, MaxUnavailable(2))}, max_fail=MaxFail(5))
    assert rollout.take_out("a") == ""
    rollout.put_back("a", "release r2: rolled_back")
    assert rollout.stopped == ""  # under --max-fail 5 the rollout goes on, but not for this model
    assert rollout.take_out("b") == "tiny: its canary a failed (release r2: rolled_back); its rollout stopped"
    assert rollout.host_events("b")[-1]["event"] == "held"


def test_the_implicit_canary_only_goes_first_its_failure_counts_against_max_fail() -> None:
    # no `canary` in the inventory: the rollout before waves, where --max-fail 1 rolls the other hosts on
    implicit = RolloutLimits(1, canary_holds=False)
    rollout = guard(TINY, {"tiny": implicit}, max_fail=MaxFail(1))
    assert rollout.take_out("a") == ""
    rollout.put_back("a", "release r2: rolled_back")
    assert rollout.stopped == ""
    assert rollout.take_out("b") == ""
    rollout.put_back("b", "")
    assert rollout.take_out("c") == ""


def test_the_others_wait_for_the_canarys_soak() -> None:
    now = [100.0]
    rollout = guard(TINY, {"tiny": RolloutLimits(1, MaxUnavailable(2), soak_s=30.0)}, clock=lambda: now[0])
    assert rollout.take_out("a") == ""
    rollout.put_back("a", "")
    reasons: list[str] = []
    said: list[str] = []
    thread = threading.Thread(target=lambda: said.append(rollout.take_out("b", reasons.append)), daemon=True)
    thread.start()
    until(lambda: reasons)
    assert reasons[0] == "tiny: its canary a soaks 30 s (30 s left)" and thread.is_alive()
    now[0] = 131.0
    thread.join(3)
    assert said == [""]


def test_a_host_serving_two_models_waits_for_the_stricter_one() -> None:
    replicas = [*TINY, *(ServingReplica("big", h, f"http://{h}:9000") for h in "bc")]
    limits = {"tiny": RolloutLimits(1, MaxUnavailable(2), canary=0), "big": RolloutLimits(1, canary=0)}
    rollout = guard(replicas, limits)
    assert rollout.take_out("a") == "" and rollout.take_out("b") == ""
    reasons: list[str] = []
    said: list[str] = []
    thread = threading.Thread(target=lambda: said.append(rollout.take_out("c", reasons.append)), daemon=True)
    thread.start()
    until(lambda: reasons)
    rollout.put_back("a", "")
    time.sleep(0.1)
    assert thread.is_alive()  # tiny would let it go now; big keeps one of its hosts out at a time
    until(lambda: any("big: b is out of service; one of its hosts at a time" in r for r in reasons))
    rollout.put_back("b", "")
    thread.join(3)
    assert said == [""]


class CountingGateway:
    """A gateway host answering `show stat` with each server's status and the counters the test sets."""

    HEADER = "# pxname,svname,qcur,scur,req_tot,status,type,check_status,hrsp_5xx,eresp,ttime\n"

    def __init__(self) -> None:
        self.states = dict.fromkeys("abc", "UP")
        self.counters = {h: (0, 0, 0) for h in "abc"}  # requests, 5xx, average session time (ms)

    def execute(self, action: Any, timeout: float) -> Result:
        text = action.render()
        for host in self.states:
            if f"tiny/{host}-8000 state drain" in text:
                self.states[host] = "DRAIN"
            elif f"tiny/{host}-8000 state ready" in text:
                self.states[host] = "UP"
        rows = ""
        for host, status in self.states.items():
            total, errors, ttime = self.counters[host]
            rows += f"tiny,{host}-8000,0,0,{total},{status},2,L7OK,{errors},0,{ttime}\n"
        return Result(self.HEADER + rows, "", 0)

    def close(self) -> None:
        pass


def soaking(gw: CountingGateway, now: list[float], engines: Any = None) -> RolloutGuard:
    servers = [Server("tiny", f"{h}-8000", h, f"10.0.0.{i}", 8000) for i, h in enumerate("abc", 1)]
    replicas = [ServingReplica("tiny", s.host, s.ref, f"http://{s.address}:8000") for s in servers]
    spec = GatewaySpec(("gw",), {"tiny": 9100}, drain_timeout_s=1.0, check_interval_s=0.01)
    control = GatewayControl(spec, servers, lambda name: gw, sleep=lambda s: None)
    limits = {"tiny": RolloutLimits(1, MaxUnavailable(2), soak_s=30.0)}
    rollout = guard(replicas, limits, clock=lambda: now[0], max_fail=MaxFail(5))
    rollout.gateway, rollout.soak = control, SoakJudge(control, replicas, engines)
    return rollout


def test_a_canary_slower_than_its_peers_over_its_soak_holds_the_model_back() -> None:
    gw, now = CountingGateway(), [100.0]
    rollout = soaking(gw, now)
    gw.counters = {"a": (5, 0, 100), "b": (5, 0, 100), "c": (5, 0, 100)}
    assert rollout.take_out("a") == ""
    assert rollout.put_back("a", "") == ""  # the soak starts from these counters
    # below 1024 requests HAProxy's ttime is their plain mean: the soak's 40 took 1000 ms each, the peers'
    # 100 took 100 and 122 ms on average (c: 5 x 100 ms, then 50 more making a mean of 120)
    gw.counters = {"a": (45, 0, 900), "b": (55, 0, 100), "c": (55, 0, 120)}
    now[0] = 131.0
    assert rollout.take_out("b") == (
        "tiny: its canary a failed (worse than its peers over its soak: its mean session time 1000 ms is "
        "above 1.5x its peers' 111 ms); its rollout stopped"
    )
    assert rollout.canaries.judged["tiny"].startswith("its mean session time 1000 ms")
    assert rollout.ledger.failed["a"].startswith("worse than its peers over its soak: its mean")
    assert rollout.soak is not None and [s["verdict"] for s in rollout.soak.records] == ["worse"]
    canary = rollout.soak.records[0]["canary"]
    assert canary["requests"] == 40 and canary["mean_session_ms"] == 1000.0 and canary["first_tokens"] == 0
    assert gw.states == {"a": "UP", "b": "UP", "c": "UP"}  # b was never drained


def test_a_canary_as_good_as_its_peers_lets_the_waves_start() -> None:
    gw, now = CountingGateway(), [100.0]
    rollout = soaking(gw, now)
    assert rollout.take_out("a") == "" and rollout.put_back("a", "") == ""
    gw.counters = {"a": (40, 0, 130), "b": (50, 0, 100), "c": (50, 1, 100)}
    now[0] = 131.0
    assert rollout.take_out("b") == "" and rollout.take_out("c") == ""
    assert rollout.canaries.judged == {"tiny": ""}
    assert rollout.soak is not None and [s["verdict"] for s in rollout.soak.records] == ["passed"]


def test_a_canary_whose_engine_is_slower_to_its_first_token_holds_the_model_back() -> None:
    """The gateway sees the same session times; the engines' /metrics say the canary's first tokens took
    twice as long (its streamed sessions last as long as the client reads)."""
    gw, now = CountingGateway(), [100.0]
    histograms = {h: EngineReading((1.0, 10.0), (1.0, 100.0)) for h in "abc"}
    rollout = soaking(gw, now, lambda replica: histograms[replica.host])
    assert rollout.take_out("a") == "" and rollout.put_back("a", "") == ""
    gw.counters = {"a": (40, 0, 100), "b": (50, 0, 100), "c": (50, 0, 100)}
    histograms["a"] = EngineReading((1.0 + 40 * 0.2, 50.0), (1.0 + 0.4, 500.0))  # 200 ms, 1 ms a token
    histograms["b"] = EngineReading((1.0 + 50 * 0.1, 60.0), (1.0 + 0.5, 600.0))  # 100 ms
    histograms["c"] = None  # its /metrics did not answer at the end: left out, b alone is the peers
    now[0] = 131.0
    assert rollout.take_out("b") == (
        "tiny: its canary a failed (worse than its peers over its soak: its engine's mean time to first "
        "token 200.0 ms is above 1.5x its peers' 100.0 ms); its rollout stopped"
    )
    assert rollout.soak is not None and rollout.soak.records[0]["peers"]["first_tokens"] == 50


def test_a_worse_canary_is_drained_rolled_back_readied_and_its_result_fails(monkeypatch: Any) -> None:
    from vllmctl.runner.core.results import HostResult, RunResult
    from vllmctl.runner.releases import canary_rollback
    from vllmctl.runner.releases.release import GateOptions
    from vllmctl.runner.releases.rollback_host import HostRollback

    gw, now = CountingGateway(), [100.0]
    rollout = soaking(gw, now)
    assert rollout.take_out("a") == "" and rollout.put_back("a", "") == ""
    gw.counters = {"a": (40, 30, 100), "b": (50, 0, 100), "c": (50, 0, 100)}
    now[0] = 131.0
    assert rollout.take_out("b").startswith("tiny: its canary a failed (worse than its peers")
    seen: list[tuple[str, dict[str, str]]] = []

    def roll_back(ctx: Any, remote: Any, gate: Any) -> HostRollback:
        seen.append((ctx, dict(gw.states)))
        return HostRollback("a", True, "r2", "r1", 12.0)

    monkeypatch.setattr(canary_rollback, "roll_back_host", roll_back)
    result = RunResult("site", False, {"a": HostResult("a"), "b": HostResult("b", "skipped")})
    done = canary_rollback.roll_back_canaries(
        rollout, result, {"a": "ctx-a"}, lambda ctx: None, GateOptions()
    )  # type: ignore[dict-item]
    assert seen == [("ctx-a", {"a": "DRAIN", "b": "UP", "c": "UP"})]  # drained while it rolled back
    assert done["a"]["ok"] and done["a"]["to"] == "r1" and gw.states["a"] == "UP"
    assert result.hosts["a"].status == "failed" and result.hosts["a"].hint == "rolled back to r1"
    assert result.hosts["a"].error.startswith("worse than its peers over its soak: its error rate 75.0%")
