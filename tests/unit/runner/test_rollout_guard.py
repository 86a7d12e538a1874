"""RolloutGuard over a fake gateway host answering real `show stat` rows (UP, DOWN, DRAIN) and over fake
health probes: a host waits, then is held back with the reason; a failed host stops the rollout before the
next host of its model is touched; the turn is kept until the host is UP again; the runner leaves a held
host on its release, never restarted."""

from __future__ import annotations

import io
import threading
import time
from typing import Any

import paramiko
from executor_builders import inventory, model
from fake_remote import FakeHost, FakeRemote

from vllmctl.console import Ui
from vllmctl.gateway.config import Server
from vllmctl.inventory.model import GatewaySpec
from vllmctl.ops import Command
from vllmctl.releases.rollout import MaxFail, RolloutLedger, ServingReplica
from vllmctl.runner.core.execute import RunOptions
from vllmctl.runner.core.playbook_run import run_playbook
from vllmctl.runner.core.view import show_failures
from vllmctl.runner.fleet.hosts import host_contexts
from vllmctl.runner.gateway.control import GatewayControl
from vllmctl.runner.releases.rollout import RolloutGuard, rollout_guard, serving_replicas
from vllmctl.tasks.desired import HostContext
from vllmctl.tasks.playbooks import parse_playbook
from vllmctl.transport import Result

HEADER = "# pxname,svname,qcur,qmax,scur,smax,slim,stot,status,type,check_status\n"
SERVERS = [Server("tiny", "a-8000", "a", "10.0.0.1", 8000), Server("tiny", "b-8000", "b", "10.0.0.2", 8000)]
REPLICAS = [ServingReplica("tiny", s.host, s.ref, f"http://{s.address}:8000") for s in SERVERS]


class StatGateway:
    """A gateway host whose servers' states the test sets; drain/ready commands change them like HAProxy."""

    def __init__(self, **states: str) -> None:
        self.states, self.sent = states, []
        self.mutex = threading.Lock()

    def execute(self, action: Any, timeout: float) -> Result:
        assert isinstance(action, Command)
        text = action.render()
        with self.mutex:
            self.sent.append(text)
            for host in self.states:
                if f"tiny/{host}-8000 state drain" in text:
                    self.states[host] = "DRAIN"
                elif f"tiny/{host}-8000 state ready" in text:
                    self.states[host] = "UP"
            rows = "".join(f"tiny,{h}-8000,0,0,0,1,,5,{s},2,L7OK\n" for h, s in self.states.items())
        return Result(HEADER + rows, "", 0)

    def close(self) -> None:
        pass


def guard(gateway: Any = None, probe: Any = None, max_fail: MaxFail | None = None, **kw: Any) -> RolloutGuard:
    control = None
    if gateway is not None:
        spec = GatewaySpec(("gw",), {"tiny": 9100}, drain_timeout_s=1.0, check_interval_s=0.01)
        control = GatewayControl(spec, SERVERS, lambda name: gateway, sleep=lambda s: None)
    ledger = RolloutLedger(max_fail or MaxFail(), total=2)
    return RolloutGuard(
        REPLICAS, {"tiny": 1}, ledger, control, probe or (lambda r: False), wait_s=0.3, poll_s=0.02, **kw
    )


def test_a_host_goes_and_is_drained_when_the_other_replica_is_up() -> None:
    gw = StatGateway(a="UP", b="UP")
    rollout = guard(gw)
    assert rollout.take_out("a") == ""
    assert gw.states == {"a": "DRAIN", "b": "UP"}
    assert rollout.put_back("a", "") == ""
    assert gw.states["a"] == "UP" and rollout.stopped == ""
    assert [e["event"] for e in rollout.host_events("a")] == ["out", "back"]


def test_a_host_waits_then_is_held_back_while_the_other_replica_is_down_or_draining() -> None:
    for state in ("DOWN", "DRAIN", "MAINT"):
        gw = StatGateway(a="UP", b=state)
        rollout = guard(gw)
        started = time.monotonic()
        why = rollout.take_out("a")
        assert time.monotonic() - started >= 0.3  # it waited its bound
        assert why == (
            "held back after waiting 0.3 s: tiny would be left with 0 serving replica(s) (min_available 1); "
            "not serving: tiny/b-8000"
        )
        assert gw.states["a"] == "UP" and not any("state drain" in c for c in gw.sent)  # never drained


def test_a_waiting_host_goes_once_the_other_replica_comes_back_up() -> None:
    gw = StatGateway(a="UP", b="DOWN")
    rollout = guard(gw)
    rollout.wait_s = 5.0
    threading.Timer(0.2, lambda: gw.states.update(b="UP")).start()
    assert rollout.take_out("a") == ""


def test_a_failed_host_stops_the_rollout_before_the_next_host_of_its_model_is_touched() -> None:
    gw = StatGateway(a="UP", b="UP")
    rollout = guard(gw)
    rollout.wait_s = 10.0
    assert rollout.take_out("a") == ""
    answer: list[str] = []
    second = threading.Thread(target=lambda: answer.append(rollout.take_out("b")))
    second.start()
    time.sleep(0.2)
    assert answer == [] and gw.states["b"] == "UP"  # b waits while a is out
    gw.states["a"] = "DOWN"  # a's new release failed; its rollback did not bring it back either
    rollout.put_back("a", "release r2: rolled_back")
    second.join(5)
    assert answer == ["the rollout stopped: 1 failed (a), more than --max-fail 0"]
    assert gw.states["b"] == "UP"


def test_with_max_fail_1_the_next_host_still_waits_for_a_serving_replica() -> None:
    gw = StatGateway(a="DOWN", b="UP")  # a failed and stays down: b must not be drained
    rollout = guard(gw, max_fail=MaxFail(1))
    rollout.fail("a", "release r2: failed")
    assert rollout.take_out("b").startswith("held back after waiting 0.3 s: tiny would be left with 0")


def test_a_release_that_passed_but_never_came_up_in_the_gateway_counts_as_failed() -> None:
    class NeverUp(StatGateway):
        def execute(self, action: Any, timeout: float) -> Result:
            result = super().execute(action, timeout)
            self.states["a"] = "DOWN"
            return result

    gw = NeverUp(a="UP", b="UP")
    rollout = guard(gw)
    rollout.gateway.clock = iter(range(0, 10_000, 50)).__next__  # type: ignore[union-attr,assignment]
    assert rollout.take_out("a") == ""
    lost = rollout.put_back("a", "")
    assert lost.startswith("a: its release passed, but the gateway did not see it UP in time (gw:"), lost
    assert lost.endswith("(gw:tiny/a-8000 DOWN (check L7OK))"), lost  # what HAProxy said last
    assert rollout.stopped.startswith("the rollout stopped: 1 failed (a)")


def test_without_a_gateway_the_engines_health_says_who_serves() -> None:
    serving = {"a": True, "b": False}
    rollout = guard(probe=lambda r: serving[r.host])
    assert rollout.take_out("a").endswith("not serving: tiny/b-8000")
    serving["b"] = True
    assert rollout.take_out("a") == ""


def test_an_unreachable_gateway_falls_back_to_the_engines_health() -> None:
    class Down(StatGateway):
        def execute(self, action: Any, timeout: float) -> Result:
            return Result("", "socat: No such file or directory", 1)

    asked: list[str] = []
    rollout = guard(Down(), probe=lambda r: asked.append(r.host) or r.host == "a")
    assert "not serving: tiny/b-8000" in rollout.take_out("a")
    assert set(asked) == {"a", "b"}


def test_replicas_come_from_the_plans_and_are_named_as_the_gateways_servers() -> None:
    inv = inventory(["a", "b"], {"tiny": model("tiny", ("a", "b"), port=8100)})
    found = serving_replicas(inv, {})
    assert [(r.host, r.ref, r.url) for r in found] == [
        ("a", "http://10.0.0.1:8100", "http://10.0.0.1:8100"),
        ("b", "http://10.0.0.2:8100", "http://10.0.0.2:8100"),
    ]


def test_a_tunnelled_replica_gets_its_forward_only_when_it_is_probed(monkeypatch: Any) -> None:
    from dataclasses import replace

    from executor_builders import host

    from vllmctl.transport import tunnel

    inv = inventory(["a", "b"], {"tiny": model("tiny", ("a", "b"), port=8100)})
    inv = replace(inv, hosts={n: host(n, h.address, tunnel_http="always") for n, h in inv.hosts.items()})
    opened: list[str] = []
    monkeypatch.setattr(tunnel, "_RUN", tunnel.HttpTunnels(connect=lambda h: opened.append(h.name)))
    monkeypatch.setattr(tunnel, "shared_ssh_config", lambda: paramiko.SSHConfig())
    rollout = rollout_guard(inv, {}, 2, MaxFail(0), None, wait_s=0.0)
    assert opened == []  # a fleet behind a bastion: no SSH connection per replica before any is asked
    asked = [r for r in rollout.replicas if r.host == "b"]
    try:
        assert rollout.probe(asked[0]) is False  # the stand-in connection opens no channel: not serving
    finally:
        tunnel._RUN.close()
    assert set(opened) == {"b"}  # only the replica asked about


PLAYBOOK = parse_playbook(
    "name: t\nphases:\n"
    "  - name: models\n    tasks:\n      - task: model_env_files\n      - task: model_units\n"
    "  - name: services\n    tasks:\n      - task: model_services\n",
    "t.yml",
)


def test_the_runner_stops_at_the_first_failed_release_and_leaves_the_other_host_serving() -> None:
    inv = inventory(["a", "b"], {"tiny": model("tiny", ("a", "b"))})
    hosts = {name: FakeHost(name) for name in "ab"}
    gated: list[str] = []

    def after_host(ctx: HostContext, remote: Any, lock: Any, failure: str) -> dict[str, Any]:
        gated.append(ctx.host.name)
        return {"ok": False, "release": "r2", "status": "rolled_back", "reasons": ["--bogus"]}

    # both engines serve the old release (health answers), so either host may go first, never both
    rollout = rollout_guard(inv, {}, 2, MaxFail(), None, wait_s=30.0, probe=lambda r: True)
    options = RunOptions(forks=2, after_host=after_host, guard=rollout)
    contexts = host_contexts(inv, ["a", "b"], {})
    connect = lambda ctx: FakeRemote(hosts[ctx.host.name], [0.0], [])  # noqa: E731
    result = run_playbook(PLAYBOOK, contexts, connect, options, time.monotonic)

    (first,) = gated
    second = "b" if first == "a" else "a"
    assert result.hosts[first].status == "failed"
    held = result.hosts[second]
    assert held.status == "skipped" and held.error == (
        f"the rollout stopped: 1 failed ({first}), more than --max-fail 0; left on the engines it runs"
    )
    assert not any(c.startswith("systemctl restart") for c in hosts[second].executed)
    assert result.aborted.startswith("the rollout stopped") and result.failed
    err = io.StringIO()
    show_failures(Ui(out=io.StringIO(), err=err), result)
    assert f"left as they were:\n  {second}: the rollout stopped" in err.getvalue()


def test_the_default_probe_is_the_gates_readiness_with_the_models_api_key(monkeypatch: Any) -> None:
    # another engine answering /health on the port does not serve this model: /v1/models must list it
    from vllmctl.bench import health
    from vllmctl.runner.releases.serving import health_probe

    asked: list[tuple[str, str, str | None]] = []

    def ready(client: Any, url: str, model: str, timeout: float, key: str | None = None) -> tuple[str, str]:
        asked.append((url, model, key))
        return ("ready", "") if url.endswith("10.0.0.1:8000") else ("models", "lists other, not tiny")

    monkeypatch.setattr(health, "probe", ready)
    probe = health_probe({"tiny": "sk-1"})
    assert [probe(r) for r in REPLICAS] == [True, False]
    assert asked == [("http://10.0.0.1:8000", "tiny", "sk-1"), ("http://10.0.0.2:8000", "tiny", "sk-1")]
