"""Launcher data_parallel with balancing external behind the gateway, end to end on two temp-dir nodes (the
real group steps in bash, a systemctl stand-in), a gateway host answering HAProxy's runtime API and a
temp-dir keeper host holding the out-of-service records in a real shell: every node's API server drained
before any engine stops and set ready after the verdict (passed, rolled back, rolled back by hand), the gate
on every node's API server, a killed run's drains healed by the next run, and `apply --check` exact."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from dp_nodes import dp_nodes
from gate_flow import bench as smoke
from local_remote import LocalRemote

from vllmctl.bench.readiness import HealthResult
from vllmctl.facts.lock_owner import Owner, format_owner
from vllmctl.gateway.runtime import NOT_SET_UP
from vllmctl.inventory.model import Inventory
from vllmctl.multinode.preflight import NodeFacts
from vllmctl.ops import Command
from vllmctl.paths import out_record
from vllmctl.releases.group import group_spec
from vllmctl.releases.rollout import MaxFail
from vllmctl.runner.core.audit import this_controller
from vllmctl.runner.fleet.hosts import load_model_archs
from vllmctl.runner.gateway.control import ssh_gateway
from vllmctl.runner.gateway.out_records import OutRecords
from vllmctl.runner.multinode import apply_groups as apply_module
from vllmctl.runner.multinode.apply_groups import GroupApplyOptions, GroupRun, apply_groups, group_plans
from vllmctl.runner.multinode.cluster_release import GroupOutcome, deploy_group
from vllmctl.runner.multinode.group_gate import GroupGateOptions
from vllmctl.runner.multinode.group_gateway import GatewayAccess, GroupGateway
from vllmctl.runner.multinode.group_nodes import Nodes
from vllmctl.runner.multinode.group_rollback import roll_back_group
from vllmctl.runner.releases.orphans import heal_orphans
from vllmctl.runner.releases.rollout import rollout_guard
from vllmctl.transport import Result

Load = Callable[[str], Inventory]
NODES = ("gpu-01", "gpu-02")
ADDRESSES = {"gpu-01": "192.168.50.1", "gpu-02": "192.168.50.2"}
URLS = {"gpu-01": "http://10.0.0.11:8000", "gpu-02": "http://10.0.0.12:8000"}
ENGINE = "vllmctl-dsv3-0.service"
REFS = ("dsv3/gpu-01-8000", "dsv3/gpu-02-8000")
CRASH = "--max-num-seqs 99"  # gpu-02's rank dies at start
SICK = "--max-num-seqs 77"  # gpu-02's API server runs but never answers /health; the head's does
HEADER = "# pxname,svname,qcur,qmax,scur,smax,slim,stot,status,type,check_status\n"
INVENTORY = """\
groups:
  wide:
    hosts: [gpu-01, gpu-02]
    multi_node: true
    cluster_interface: eth1
    launcher: data_parallel
    data_parallel: {size_local: 8, size: 16, balancing: external}
models:
  dsv3:
    source: deepseek-ai/DeepSeek-V3
    hosts: wide
    max_model_len: 8192
    engine: {name: vllm, version: "0.32.0"}
    engine_args: {max_num_seqs: SEQS}
GATEWAY"""
GATEWAY = """\
gateway:
  hosts: gpu-03
  models: {dsv3: {port: 9100}}
  check_interval_s: 1
"""


def owner(pid: int) -> str:
    here = this_controller()
    return format_owner(Owner("ops", here.host, pid, "2026-12-03T09:00:00+00:00", here.boot, "apply"))


DEAD_PID = 999_999_999  # beyond any pid_max
ME, DEAD = owner(os.getpid()), owner(DEAD_PID)


def inventory(load: Load, seqs: int = 8, balancing: str = "external") -> Inventory:
    text = INVENTORY.replace("SEQS", str(seqs)).replace("balancing: external", f"balancing: {balancing}")
    return load(text.replace("GATEWAY", GATEWAY if balancing == "external" else ""))


class Gateway:
    """HAProxy's runtime API on the gateway host: drain and ready change a server's state, a ready server
    is UP only while its node's engine runs; every command goes to the nodes' order file, and each drain
    notes the record the keeper holds for that server at that moment."""

    def __init__(self, hosts: dict[str, LocalRemote], keeper: LocalRemote, order: Path) -> None:
        self.hosts, self.keeper, self.order = hosts, keeper, order
        self.states = {ref: "UP" for ref in REFS}
        self.claimed: dict[str, str] = {}
        self.sent: list[str] = []

    def execute(self, action: Any, timeout: float) -> Result:
        assert isinstance(action, Command)
        text = action.render()
        self.sent.append(text)
        for ref in REFS:
            for state in ("drain", "ready"):
                if f"{ref} state {state}" in text:
                    with self.order.open("a") as order:
                        order.write(f"gateway {state} {ref}\n")
                    self.states[ref] = state
                    record = self.keeper.local(out_record("dsv3", ref.split("/")[1]))
                    if state == "drain":
                        self.claimed[ref] = record.read_text().strip() if record.exists() else ""
        rows = "".join(f"dsv3,{ref.split('/')[1]},0,0,0,1,,5,{self._status(ref)},2,L7OK\n" for ref in REFS)
        return Result(HEADER + rows, "", 0)

    def _status(self, ref: str) -> str:
        node = ref.split("/")[1].rsplit("-", 1)[0]
        if self.states[ref] == "drain":
            return "DRAIN"
        remote = self.hosts[node]
        unit = remote.local(f"/etc/systemd/system/{ENGINE}")
        api = unit.exists() and "--headless" not in unit.read_text()  # a headless node has no API server
        return "UP" if api and (remote.root / "active" / ENGINE).exists() else "DOWN"

    def close(self) -> None:
        pass


class Keeper(LocalRemote):
    """The first gateway host as the records' keeper, its audit log moved into the temp dir too."""

    def _moved(self, text: str) -> str:
        return super()._moved(text).replace("/var/log/vllmctl", str(self.local("/var/log/vllmctl")))


@pytest.fixture
def hosts(tmp_path: Path, load: Load) -> dict[str, LocalRemote]:
    engine = inventory(load).models["dsv3"].engine
    assert engine is not None
    return dp_nodes(tmp_path, NODES, engine, {"gpu-02": CRASH})


@pytest.fixture
def keeper(tmp_path: Path) -> Keeper:
    return Keeper(tmp_path / "gpu-03", "gpu-03")


@pytest.fixture
def gateway(tmp_path: Path, hosts: dict[str, LocalRemote], keeper: Keeper) -> Gateway:
    return Gateway(hosts, keeper, tmp_path / "order")


def health_of(hosts: dict[str, LocalRemote], asked: list[str]) -> Any:
    """Each API server healthy while its node's rank runs (and every rank runs: they form one DP group);
    gpu-02's never when its unit carries SICK."""

    def health(
        url: str, model: str, deadline_s: float, on_progress: Any, api_key: str | None = None
    ) -> HealthResult:
        asked.append(url)
        ok = all((remote.root / "active" / ENGINE).exists() for remote in hosts.values())
        unit = hosts["gpu-02"].local(f"/etc/systemd/system/{ENGINE}").read_text()
        ok = ok and not (url == URLS["gpu-02"] and SICK in unit)
        return HealthResult(ok, 1.0, 2, "ready" if ok else "health", "" if ok else "connection refused")

    return health


def options(
    hosts: dict[str, LocalRemote],
    gateway: Gateway,
    keeper: Keeper,
    second: int,
    asked: list[str],
    **more: Any,
) -> GroupGateOptions:
    benched: list[str] = more.pop("benched", [])

    def bench(url: str, model: str, api_key: str | None = None) -> Any:
        benched.append(url)
        return smoke(url, model, api_key)

    return GroupGateOptions(
        owner=more.pop("owner", ME),
        created_at=f"2026-12-03T09:00:{second:02d}+00:00",
        health=health_of(hosts, asked),
        bench=bench,
        connect=lambda host: hosts[host.name],
        gateway=GatewayAccess(connect=lambda name: gateway, records=lambda name: keeper),  # type: ignore[arg-type,return-value]
        sleep=lambda seconds: None,
    )


def deploy(inv: Inventory, opts: GroupGateOptions) -> GroupOutcome:
    plans = group_plans(inv, None, *load_model_archs(inv, online=False))
    engine = inv.models["dsv3"].engine
    assert engine is not None
    spec = group_spec(inv, plans["dsv3"], engine, ADDRESSES, start_engine=True)
    return deploy_group(inv, spec, opts, lambda line: None)


def order(tmp_path: Path) -> list[str]:
    return (tmp_path / "order").read_text().splitlines()


def engine_calls(lines: list[str], verbs: tuple[str, ...]) -> list[int]:
    return [i for i, line in enumerate(lines) if line.split()[1] in verbs and ENGINE in line.split()]


def records(keeper: Keeper) -> dict[str, str]:
    found = keeper.local(out_record("dsv3", "x")).parent
    return {p.name: p.read_text().strip() for p in sorted(found.glob("*"))} if found.exists() else {}


def events(outcome: GroupOutcome) -> list[tuple[str, str]]:
    return [(event["host"], event["event"]) for event in outcome.gateway]


BOTH_OUT_AND_BACK = [
    ("gpu-01", "drained"),
    ("gpu-02", "drained"),
    ("gpu-01", "ready"),
    ("gpu-02", "ready"),
]


def test_every_nodes_server_is_drained_before_any_engine_stops_gated_and_set_ready_after_it_passed(
    tmp_path: Path, load: Load, hosts: dict[str, LocalRemote], gateway: Gateway, keeper: Keeper
) -> None:
    asked: list[str] = []
    benched: list[str] = []
    first = deploy(inventory(load), options(hosts, gateway, keeper, 1, asked, benched=benched))
    assert first.status == "passed", first
    assert (asked, benched) == ([URLS["gpu-01"], URLS["gpu-02"]],) * 2  # health and bench on every node
    assert gateway.claimed == {ref: ME for ref in REFS}  # each drain held by this run's record
    assert events(first) == BOTH_OUT_AND_BACK
    assert gateway.states == {ref: "ready" for ref in REFS} and records(keeper) == {}
    assert first.to_json()["gateway"] == list(first.gateway)
    last_ready = max(i for i, sent in enumerate(gateway.sent) if "state ready" in sent)
    assert any("show stat" in sent for sent in gateway.sent[last_ready:])  # waited for UP: it serves

    second = deploy(inventory(load, 16), options(hosts, gateway, keeper, 2, asked))
    assert second.status == "passed", second
    lines = order(tmp_path)
    drains = [i for i, line in enumerate(lines) if line.startswith("gateway drain")]
    readies = [i for i, line in enumerate(lines) if line.startswith("gateway ready")]
    stops = engine_calls(lines, ("stop", "restart", "disable"))
    starts = engine_calls(lines, ("start",))
    assert len(drains) == len(readies) == 4
    # the second release: both servers out before either node's engine stops, back after both started
    assert max(drains[2:]) < min(i for i in stops if i > readies[1])
    assert min(readies[2:]) > max(starts)


def test_the_gate_judges_every_nodes_api_server_not_only_the_heads(
    load: Load, hosts: dict[str, LocalRemote], gateway: Gateway, keeper: Keeper
) -> None:
    asked: list[str] = []
    first = deploy(inventory(load), options(hosts, gateway, keeper, 1, asked))
    bad = deploy(inventory(load, 77), options(hosts, gateway, keeper, 2, asked))
    assert (bad.status, bad.rolled_back_to) == ("rolled_back", first.release), bad
    assert [reason.split(":")[0] for reason in bad.reasons] == ["dsv3 on gpu-02"]
    assert events(bad) == BOTH_OUT_AND_BACK  # set ready once the rollback serves again
    assert gateway.states == {ref: "ready" for ref in REFS} and records(keeper) == {}


def test_a_rank_that_dies_rolls_back_both_nodes_and_both_servers_come_back_after_the_rollback(
    tmp_path: Path, load: Load, hosts: dict[str, LocalRemote], gateway: Gateway, keeper: Keeper
) -> None:
    asked: list[str] = []
    first = deploy(inventory(load), options(hosts, gateway, keeper, 1, asked))
    bad = deploy(inventory(load, 99), options(hosts, gateway, keeper, 2, asked))
    assert (bad.status, bad.rolled_back_to) == ("rolled_back", first.release), bad
    assert {"dsv3 on gpu-01", "dsv3 on gpu-02"} <= {reason.split(":")[0] for reason in bad.reasons}
    assert events(bad) == BOTH_OUT_AND_BACK
    lines = order(tmp_path)
    last_start = engine_calls(lines, ("start",))[-1]
    assert [line for line in lines[last_start:] if line.startswith("gateway")] == [
        f"gateway ready {ref}" for ref in REFS
    ]  # after the rollback's starts, not between the failed release and its rollback
    assert records(keeper) == {}

    by_hand = roll_back_group(
        inventory(load),
        "wide",
        "dsv3",
        NODES,
        first.release,
        options(hosts, gateway, keeper, 3, asked),
        print,
    )
    assert by_hand.status == "reactivated" and events(by_hand) == BOTH_OUT_AND_BACK, by_hand


class Killed(BaseException):
    """The run killed while its servers are out (SIGKILL: no `finally` of it puts anything back)."""


def test_a_run_killed_mid_release_leaves_records_the_next_run_heals(
    monkeypatch: pytest.MonkeyPatch,
    load: Load,
    hosts: dict[str, LocalRemote],
    gateway: Gateway,
    keeper: Keeper,
) -> None:
    asked: list[str] = []
    deploy(inventory(load), options(hosts, gateway, keeper, 1, asked))

    def killed(*args: Any, **kwargs: Any) -> Any:
        raise Killed

    dying = options(hosts, gateway, keeper, 2, asked, owner=DEAD)
    with monkeypatch.context() as patch:  # killed during the gate, before any verdict
        patch.setattr(GroupGateway, "put_back", killed)
        with pytest.raises(Killed):
            deploy(inventory(load, 16), replace(dying, health=killed))
    assert records(keeper) == {"gpu-01-8000": DEAD, "gpu-02-8000": DEAD}
    assert gateway.states == {ref: "drain" for ref in REFS}

    # the next apply: its guard lists the group's servers and heals what the dead run left
    inv = inventory(load)
    guard = rollout_guard(inv, {}, 2, MaxFail(), ssh_gateway(inv, [], 5.0), probe=lambda r: True, owner=ME)
    assert guard.records is not None and guard.gateway is not None
    assert [r.ref for r in guard.group_servers] == ["dsv3/gpu-01-8000", "dsv3/gpu-02-8000"]
    guard.gateway.connect = lambda name: gateway  # type: ignore[assignment,return-value]
    guard.records = OutRecords(ME, guard.records.keeper, lambda name: keeper)
    assert guard.records.keeper == {"dsv3": "gpu-03"}
    healed = heal_orphans(guard)
    assert [(e["server"], e["event"]) for e in healed] == [
        ("gpu-01-8000", "healed"),
        ("gpu-02-8000", "healed"),
    ]
    assert gateway.states == {ref: "ready" for ref in REFS} and records(keeper) == {}
    # and its group step finishes the release the dead run left without a verdict
    again = deploy(inventory(load, 16), options(hosts, gateway, keeper, 3, asked))
    assert again.status == "passed" and events(again) == BOTH_OUT_AND_BACK, again


def check(inv: Inventory, hosts: dict[str, LocalRemote], monkeypatch: pytest.MonkeyPatch) -> GroupRun:
    facts = {node: NodeFacts(1.0, ADDRESSES[node], "0.32.0", None, "abc") for node in NODES}
    monkeypatch.setattr(apply_module, "node_facts", lambda *args: facts)
    connect = lambda host: hosts[host.name]  # noqa: E731
    monkeypatch.setattr(
        apply_module, "Nodes", lambda inv, nodes, timeout: Nodes(inv, nodes, timeout, connect=connect)
    )
    plans = group_plans(inv, None, *load_model_archs(inv, online=False))
    opts = GroupApplyOptions(check=True, gate=GroupGateOptions(created_at="2026-12-03T10:00:00+00:00"))
    (run,) = apply_groups(inv, plans, NODES, [], opts, lambda line: None)
    return run


def test_check_names_the_drains_and_after_the_release_a_second_run_changes_nothing(
    monkeypatch: pytest.MonkeyPatch,
    load: Load,
    hosts: dict[str, LocalRemote],
    gateway: Gateway,
    keeper: Keeper,
) -> None:
    before = check(inventory(load), hosts, monkeypatch)
    assert before.status == "would_change" and before.reasons == (
        f"gpu-01: {ENGINE} would be installed and started",
        f"gpu-02: {ENGINE} would be installed and started",
        "dsv3/gpu-01-8000, dsv3/gpu-02-8000 would be drained on gpu-03 before any engine stops, and set "
        "ready after the gate",
    )
    assert gateway.sent == []  # --check asks no gateway
    assert deploy(inventory(load), options(hosts, gateway, keeper, 1, [])).status == "passed"
    assert check(inventory(load), hosts, monkeypatch).status == "unchanged"
    sent = len(gateway.sent)
    again = deploy(inventory(load), options(hosts, gateway, keeper, 2, []))
    assert (again.status, again.gateway, len(gateway.sent)) == ("unchanged", (), sent)


class NotSetUp(Gateway):
    """A gateway host whose HAProxy a first apply has not set up yet: the runtime API's command says so."""

    def execute(self, action: Any, timeout: float) -> Result:
        self.sent.append(action.render())
        return Result(f"{NOT_SET_UP}\n", "", 0)


def test_a_gateway_host_not_set_up_yet_is_passed_over(
    tmp_path: Path, load: Load, hosts: dict[str, LocalRemote], keeper: Keeper
) -> None:
    gateway = NotSetUp(hosts, keeper, tmp_path / "order")
    first = deploy(inventory(load), options(hosts, gateway, keeper, 1, []))
    assert first.status == "passed" and events(first) == BOTH_OUT_AND_BACK, first
    assert all(event["not_set_up"] == ["gpu-03"] for event in first.gateway)
    assert records(keeper) == {}  # held while out, removed once set ready (there is nothing to route)


def test_rolled_back_to_an_internal_release_the_node_without_an_api_server_is_set_ready_unwaited(
    load: Load, hosts: dict[str, LocalRemote], gateway: Gateway, keeper: Keeper
) -> None:
    """The group went external from internal (the head's API server alone, gpu-02 headless) and the new
    release failed: once the internal release serves again, gpu-02's server is set ready but not waited
    for (HAProxy's checks keep it out: nothing listens there), and no record is left for it."""
    internal = deploy(inventory(load, balancing="internal"), options(hosts, gateway, keeper, 1, []))
    assert internal.status == "passed" and internal.gateway == ()  # not behind the gateway then
    bad = deploy(inventory(load, 99), options(hosts, gateway, keeper, 2, []))
    assert (bad.status, bad.rolled_back_to) == ("rolled_back", internal.release), bad
    assert not any("UP in time" in reason for reason in bad.reasons)
    assert events(bad) == BOTH_OUT_AND_BACK
    assert [e["pending"] for e in bad.gateway[2:]] == [{}, {}]
    last_ready = max(i for i, sent in enumerate(gateway.sent) if "state ready" in sent)
    assert not any("show stat" in sent for sent in gateway.sent[last_ready:])  # gpu-02's: not waited for
    assert gateway._status(REFS[1]) == "DOWN" and records(keeper) == {}
