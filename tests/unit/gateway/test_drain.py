"""GatewayControl over a fake gateway host: drain waits for sessions to reach 0 (bounded), ready waits for
HAProxy to see the server up; and the runner drains a host before its first engine restart and sets it ready
after its release gate."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from executor_builders import inventory, model
from fake_remote import FakeHost, FakeRemote

from vllmctl.gateway.config import Server
from vllmctl.gateway.runtime import NOT_SET_UP, set_state
from vllmctl.inventory.model import GatewaySpec
from vllmctl.ops import Command
from vllmctl.paths import HAPROXY_FILES_DIR
from vllmctl.runner.core.execute import RunOptions
from vllmctl.runner.core.playbook_run import run_playbook
from vllmctl.runner.fleet.hosts import host_contexts
from vllmctl.runner.gateway.control import GatewayControl, GatewayNotSetUp
from vllmctl.tasks.desired import HostContext
from vllmctl.tasks.playbooks import parse_playbook
from vllmctl.transport import Result

HEADER = "# pxname,svname,qcur,qmax,scur,smax,slim,stot,status,type,check_status\n"


def stat_text(*rows: str) -> str:
    return HEADER + "".join(row + "\n" for row in rows)


SERVERS = [Server("tiny", "a-8000", "a", "10.0.0.1", 8000), Server("tiny", "b-8000", "b", "10.0.0.2", 8000)]


class FakeGateway:
    """Answers `show stat` from a script of rows per call and records every runtime command."""

    def __init__(self, answers: list[str]) -> None:
        self.answers, self.sent, self.closed = answers, [], False

    def execute(self, action: Any, timeout: float) -> Result:
        assert isinstance(action, Command)
        self.sent.append(action.render())
        if "show stat" in action.render():
            text = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
            return Result(text, "", 0)
        return Result("\n", "", 0)

    def close(self) -> None:
        self.closed = True


def control(gateway: FakeGateway, drain_timeout_s: float = 5.0) -> GatewayControl:
    clock = [0.0]
    spec = GatewaySpec(("gw",), {"tiny": 9100}, drain_timeout_s=drain_timeout_s)

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    return GatewayControl(spec, SERVERS, lambda name: gateway, clock=lambda: clock[0], sleep=sleep)  # type: ignore[arg-type,return-value]


def test_drain_waits_for_the_sessions_to_finish_then_ready_waits_for_up() -> None:
    gateway = FakeGateway(
        [
            stat_text("tiny,a-8000,0,0,2,2,,5,DRAIN,2,L7OK"),
            stat_text("tiny,a-8000,0,0,1,2,,5,DRAIN,2,L7OK"),
            stat_text("tiny,a-8000,0,0,0,2,,5,DRAIN,2,L7OK"),
            stat_text("tiny,a-8000,0,0,0,2,,5,DOWN,2,L4CON"),
            stat_text("tiny,a-8000,0,0,0,2,,5,UP,2,L7OK"),
        ]
    )
    guard = control(gateway)
    guard.drain("a")
    assert "set server tiny/a-8000 state drain" in gateway.sent[0]
    drained = guard.events[0]
    assert (drained["event"], drained["pending"], drained["waited_s"]) == ("drained", {}, 1.0)
    guard.ready("a")
    assert "set server tiny/a-8000 state ready" in gateway.sent[4]
    assert [e["event"] for e in guard.host_events("a")] == ["drained", "ready"]
    assert guard.events[1]["pending"] == {}
    guard.close()
    assert gateway.closed


def test_ready_is_said_again_when_a_reloaded_gateway_brought_the_drain_back() -> None:
    """The gateway host's own config change reloaded HAProxy while this host was out: the new process loaded
    the server as drained (its saved state) and ignored the first `ready`; the next round's `ready` lands."""

    class ReloadedGateway(FakeGateway):
        def execute(self, action: Any, timeout: float) -> Result:
            readies = sum("state ready" in c for c in self.sent)
            if "show stat" in action.render():
                status = "UP" if readies >= 2 else "DRAIN"  # the reload swallowed the first
                self.sent.append(action.render())
                return Result(stat_text(f"tiny,a-8000,0,0,0,2,,5,{status},2,L7OK"), "", 0)
            return super().execute(action, timeout)

    gateway = ReloadedGateway([])
    guard = control(gateway)
    assert guard.ready("a")
    readies = [c for c in gateway.sent if "set server tiny/a-8000 state ready" in c]
    assert len(readies) == 2
    assert guard.events[0]["pending"] == {} and guard.events[0]["waited_s"] == 5.0


def test_a_drain_that_does_not_finish_gives_up_at_its_bound_with_what_was_left() -> None:
    gateway = FakeGateway([stat_text("tiny,a-8000,0,0,3,3,,5,DRAIN,2,L7OK")])
    guard = control(gateway, drain_timeout_s=2.0)
    guard.drain("a")
    assert guard.events[0]["waited_s"] == 2.0
    assert guard.events[0]["pending"] == {
        "gw:tiny/a-8000": {"status": "DRAIN", "sessions": 3, "queued": 0, "check": "L7OK"}
    }
    guard.ready("a")


def test_a_host_with_no_server_behind_the_gateway_is_not_drained() -> None:
    gateway = FakeGateway([stat_text()])
    guard = control(gateway)
    guard.drain("c")
    guard.ready("c")
    assert gateway.sent == [] and guard.events == []


def test_rollback_drains_every_replica_the_gateway_lists_for_the_host() -> None:
    # rollback gives only each model's first replica port; the gateway also routes a-8001 and "a-b" (a host
    # named a-b? not a port) and b-8000 (another host): only a's replicas are drained
    listed = stat_text(
        "tiny,a-8000,0,0,0,2,,5,UP,2,L7OK",
        "tiny,a-8001,0,0,0,2,,5,UP,2,L7OK",
        "tiny,a-b,0,0,0,2,,5,UP,2,L7OK",
        "tiny,b-8000,0,0,0,2,,5,UP,2,L7OK",
    )
    gateway = FakeGateway([listed])
    guard = control(gateway)
    guard.discover = True
    guard.drain("a")
    assert "set server tiny/a-8000 state drain" in gateway.sent[1]
    assert "set server tiny/a-8001 state drain" in gateway.sent[1]
    assert "a-b" not in gateway.sent[1] and "b-8000" not in gateway.sent[1]
    assert guard.events[0]["servers"] == ["tiny/a-8000", "tiny/a-8001"]
    guard.ready("a")
    assert "set server tiny/a-8001 state ready" in "".join(gateway.sent)


def test_without_discovery_only_the_given_servers_are_drained() -> None:
    gateway = FakeGateway([stat_text("tiny,a-8000,0,0,0,2,,5,UP,2,L7OK", "tiny,a-8001,0,0,0,2,,5,UP,2,L7OK")])
    guard = control(gateway)
    guard.drain("a")
    assert "a-8001" not in gateway.sent[0]
    guard.ready("a")


PLAYBOOK = parse_playbook(
    "name: t\nphases:\n"
    "  - name: models\n    tasks:\n      - task: model_env_files\n      - task: model_units\n"
    "  - name: services\n    tasks:\n      - task: model_services\n",
    "t.yml",
)


class Recorder:
    def __init__(self, hosts: Mapping[str, FakeHost], log: list[str]) -> None:
        self.hosts, self.log = hosts, log

    stopped = ""

    def take_out(self, host: str, waiting: Any = None) -> str:
        self.log.append(f"drain {host} after {len(self.hosts[host].executed)} commands")
        return ""

    def put_back(self, host: str, failure: str) -> str:
        self.log.append(f"ready {host}")
        return ""

    def fail(self, name: str, why: str) -> None:
        raise AssertionError("no group here")


def test_the_runner_drains_before_the_first_restart_and_readies_after_the_gate() -> None:
    inv = inventory(["a"], {"tiny": model("tiny", ("a",))})
    host = FakeHost("a")
    log: list[str] = []

    def after_host(ctx: HostContext, remote: Any, lock: Any, failure: str) -> dict[str, Any]:
        log.append("gate a")
        return {"ok": True}

    def run(**opts: Any) -> None:
        options = RunOptions(guard=Recorder({"a": host}, log), after_host=after_host, **opts)
        contexts = host_contexts(inv, ["a"], {})
        run_playbook(PLAYBOOK, contexts, lambda ctx: FakeRemote(host, [0.0], []), options, lambda: 0.0)

    run()
    # the service step enables, waits until no old engine is left, then starts; the drain comes first
    step = next(i for i, c in enumerate(host.executed) if c.startswith("systemctl enable vllmctl-tiny"))
    assert "engine-gone.py" in host.executed[step + 3]
    assert host.executed[step + 4].startswith("systemctl start vllmctl-tiny")
    assert log == [f"drain a after {step} commands", "gate a", "ready a"]
    log.clear()
    run()  # converged: nothing restarts, nothing is drained
    assert log == ["gate a"]


def test_an_unreachable_gateway_is_recorded_and_does_not_stop_the_rollout() -> None:
    class Down(FakeGateway):
        def execute(self, action: Any, timeout: float) -> Result:
            return Result("", "socat: No such file or directory", 1)

    guard = control(Down([]))
    guard.drain("a")
    guard.ready("a")
    assert [e["event"] for e in guard.events] == ["drain failed", "ready failed"]
    assert "No such file" in guard.events[0]["error"]
    assert guard.ready("b") is False  # an unreachable gateway never reports the host back UP


class NotSetUpGateway(FakeGateway):
    """A gateway host whose HAProxy vllmctl has not set up yet: the runtime command prints its marker."""

    def execute(self, action: Any, timeout: float) -> Result:
        self.sent.append(action.render())
        return Result(f"{NOT_SET_UP}\n", "", 0)


def test_the_runtime_command_says_when_vllmctl_has_not_set_haproxy_up() -> None:
    script = set_state(["tiny/a-8000"], "ready").render()
    assert script.startswith(f"if [ -d {HAPROXY_FILES_DIR} ] && command -v socat >/dev/null; then ")
    assert script.endswith(f"else echo {NOT_SET_UP}; fi")


def test_ready_passes_over_a_gateway_host_not_set_up_yet_and_says_so() -> None:
    """A first apply: the engine host's release passed before the gateway host installed HAProxy (it failed
    with `socat: not found` before). The host counts as back; the gateway's config, once written, lists it."""
    gateway = NotSetUpGateway([])
    guard = control(gateway)
    assert guard.ready("a")
    (event,) = guard.events
    assert (event["event"], event["not_set_up"], event["pending"]) == ("ready", ["gw"], {})
    assert not any("show stat" in sent for sent in gateway.sent)  # nothing to wait for there
    guard.drain("a")
    assert guard.events[1]["event"] == "drained" and guard.events[1]["not_set_up"] == ["gw"]


def test_ready_still_waits_for_up_on_the_gateway_hosts_that_are_set_up() -> None:
    set_up = FakeGateway(
        [stat_text("tiny,a-8000,0,0,0,2,,5,DOWN,2,L4CON"), stat_text("tiny,a-8000,0,0,0,2,,5,UP,2,L7OK")]
    )
    remotes = {"gw1": NotSetUpGateway([]), "gw2": set_up}
    clock = [0.0]
    spec = GatewaySpec(("gw1", "gw2"), {"tiny": 9100})
    guard = GatewayControl(
        spec,
        SERVERS,
        lambda name: remotes[name],  # type: ignore[arg-type,return-value]
        clock=lambda: clock[0],
        sleep=lambda s: clock.__setitem__(0, clock[0] + s),
    )
    assert guard.ready("a")
    assert guard.events[0]["not_set_up"] == ["gw1"] and guard.events[0]["waited_s"] == 0.5
    assert sum("show stat" in sent for sent in set_up.sent) == 2


def test_a_gateway_host_whose_haproxy_is_down_still_fails_ready() -> None:
    class Down(FakeGateway):
        def execute(self, action: Any, timeout: float) -> Result:
            return Result("", 'socat[1] E connect(5, AF=1 "/run/haproxy/admin.sock"): No such file', 1)

    guard = control(Down([]))
    assert not guard.ready("a")
    assert guard.events[0]["event"] == "ready failed" and "runtime API failed" in guard.events[0]["error"]


def test_who_serves_is_not_read_from_a_gateway_not_set_up() -> None:
    """Its marker is no `show stat` with no server UP: the rollout asks the engines themselves instead."""
    guard = control(NotSetUpGateway([]))
    with pytest.raises(GatewayNotSetUp):
        guard.up_refs()
