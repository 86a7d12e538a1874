"""Launcher data_parallel with balancing external behind the gateway, end to end on two temp-dir nodes (the
real group steps in bash, a systemctl stand-in), a gateway host answering HAProxy's runtime API and a
temp-dir keeper host holding the out-of-service records in a real shell: every node's API server drained
before any engine stops and set ready after the verdict (passed, rolled back, rolled back by hand), the gate
on every node's API server, a killed run's drains healed by the next run, and `apply --check` exact."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from dp_gateway import (
    ADDRESSES,
    BOTH_OUT_AND_BACK,
    CRASH,
    DEAD,
    ENGINE,
    ME,
    NODES,
    REFS,
    URLS,
    Gateway,
    Keeper,
    Load,
    NotSetUp,
    deploy,
    engine_calls,
    events,
    inventory,
    options,
    order,
    records,
)
from dp_nodes import dp_nodes
from local_remote import LocalRemote

from vllmctl.inventory.model import Inventory
from vllmctl.multinode.preflight import NodeFacts
from vllmctl.releases.rollout import MaxFail
from vllmctl.runner.fleet.hosts import load_model_archs
from vllmctl.runner.gateway.control import ssh_gateway
from vllmctl.runner.gateway.out_records import OutRecords
from vllmctl.runner.multinode import apply_groups as apply_module
from vllmctl.runner.multinode.apply_groups import GroupApplyOptions, GroupRun, apply_groups, group_plans
from vllmctl.runner.multinode.group_gate import GroupGateOptions
from vllmctl.runner.multinode.group_gateway import GroupGateway
from vllmctl.runner.multinode.group_nodes import Nodes
from vllmctl.runner.multinode.group_rollback import roll_back_group
from vllmctl.runner.releases.orphans import heal_orphans
from vllmctl.runner.releases.rollout import rollout_guard


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


def test_without_the_gateway_each_node_serves_its_own_api_and_nothing_is_drained(
    load: Load, hosts: dict[str, LocalRemote], gateway: Gateway, keeper: Keeper
) -> None:
    asked: list[str] = []
    alone = deploy(inventory(load, gateway=False), options(hosts, gateway, keeper, 1, asked))
    assert (alone.status, alone.gateway, gateway.sent) == ("passed", (), []), alone
    assert asked == [URLS["gpu-01"], URLS["gpu-02"]]  # still gated on every node's API server
