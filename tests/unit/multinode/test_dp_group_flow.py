"""Launcher data_parallel's group release end to end on two temp-dir nodes (the real group steps in bash, a
systemctl stand-in, the units rendered from the inventory): the headless node started before the head, the
release recorded on both, a rank that dies taking the group back on both, `apply --check` naming each
node's unit as for launcher vllm, and `vllmctl cluster` starting the engine without being asked."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from dp_nodes import dp_nodes
from gate_flow import bench
from local_remote import LocalRemote

from vllmctl.bench.readiness import HealthResult
from vllmctl.inventory.model import Inventory
from vllmctl.multinode.preflight import NodeFacts, PreflightReport
from vllmctl.releases.group import GroupSpec, group_spec
from vllmctl.runner.fleet.hosts import load_model_archs
from vllmctl.runner.multinode import apply_groups as apply_module
from vllmctl.runner.multinode import cluster_flow
from vllmctl.runner.multinode.apply_groups import GroupApplyOptions, GroupRun, apply_groups, group_plans
from vllmctl.runner.multinode.cluster_release import GroupOutcome, deploy_group
from vllmctl.runner.multinode.group_gate import GroupGateOptions
from vllmctl.runner.multinode.group_nodes import Nodes, read_states

Load = Callable[[str], Inventory]
NODES = ("gpu-01", "gpu-02")
ADDRESSES = {"gpu-01": "192.168.50.1", "gpu-02": "192.168.50.2"}
ENGINE = "vllmctl-dsv3-0.service"
CRASH = "--max-num-seqs 99"  # the release whose rank on gpu-02 dies at start
INVENTORY = """\
groups:
  wide:
    hosts: [gpu-01, gpu-02]
    multi_node: true
    cluster_interface: eth1
    launcher: LAUNCHER
models:
  dsv3:
    source: SOURCE
    hosts: wide
    max_model_len: 8192
    engine: {name: vllm, version: "0.32.0"}
    engine_args: {max_num_seqs: SEQS}
"""
DP = "data_parallel\n    data_parallel: {size_local: 8, size: 16}"


def inventory(load: Load, seqs: int = 8, launcher: str = DP) -> Inventory:
    source = "deepseek-ai/DeepSeek-V3" if launcher == DP else "meta-llama/Llama-3.1-405B"
    text = INVENTORY.replace("LAUNCHER", launcher).replace("SOURCE", source)
    return load(text.replace("SEQS", str(seqs)))


@pytest.fixture
def hosts(tmp_path: Path, load: Load) -> dict[str, LocalRemote]:
    engine = inventory(load).models["dsv3"].engine
    assert engine is not None
    return dp_nodes(tmp_path, NODES, engine, {"gpu-02": CRASH})


def options(hosts: dict[str, LocalRemote], second: int) -> GroupGateOptions:
    def health(
        base_url: str, model: str, deadline_s: float, on_progress: Any, api_key: str | None = None
    ) -> HealthResult:
        # the head's API answers only once every DP rank joined it through the RPC port
        ok = all((remote.root / "active" / ENGINE).exists() for remote in hosts.values())
        return HealthResult(ok, 1.0, 2, "ready" if ok else "health", "" if ok else "connection refused")

    return GroupGateOptions(
        owner="ops@ctl",
        created_at=f"2026-12-03T09:00:{second:02d}+00:00",
        health=health,
        bench=bench,
        connect=lambda host: hosts[host.name],
        sleep=lambda seconds: None,
    )


def spec_of(inv: Inventory) -> GroupSpec:
    plans = group_plans(inv, None, *load_model_archs(inv, online=False))
    engine = inv.models["dsv3"].engine
    assert engine is not None
    return group_spec(inv, plans["dsv3"], engine, ADDRESSES, start_engine=True)


def order(tmp_path: Path) -> list[str]:
    """Each node's `systemctl start` of the engine, in the order the nodes saw them."""
    lines = (tmp_path / "order").read_text().splitlines()
    return [line.split()[0] for line in lines if line.split()[1:] == ["start", "--", ENGINE]]


def check(inv: Inventory, hosts: dict[str, LocalRemote], monkeypatch: pytest.MonkeyPatch) -> GroupRun:
    """`apply --check` of the group: node facts and connections from the temp-dir nodes, not SSH."""
    facts = {node: NodeFacts(1.0, ADDRESSES[node], "0.32.0", None, "abc") for node in NODES}
    monkeypatch.setattr(apply_module, "node_facts", lambda *args: facts)
    monkeypatch.setattr(
        apply_module, "Nodes", lambda inv, nodes, timeout: Nodes(inv, nodes, timeout, connect=local(hosts))
    )
    plans = group_plans(inv, None, *load_model_archs(inv, online=False))
    opts = GroupApplyOptions(check=True, gate=GroupGateOptions(created_at="2026-12-03T10:00:00+00:00"))
    (run,) = apply_groups(inv, plans, NODES, [], opts, lambda line: None)
    return run


def local(hosts: dict[str, LocalRemote]) -> Any:
    return lambda host: hosts[host.name]


def test_the_headless_node_starts_first_and_a_dying_rank_takes_the_group_back_on_both(
    tmp_path: Path, load: Load, hosts: dict[str, LocalRemote], monkeypatch: pytest.MonkeyPatch
) -> None:
    log: list[str] = []
    first = deploy_group(inventory(load), spec_of(inventory(load)), options(hosts, 1), log.append)
    assert (first.status, first.ray) == ("passed", None), first
    assert order(tmp_path) == ["gpu-02", "gpu-01"]
    assert [line for line in log if " started (" in line] == [
        f"gpu-02: {ENGINE} started (headless, DP ranks 8-15)",
        f"gpu-01: {ENGINE} started (API server, DP 16 x TP 1)",
    ]
    nodes = Nodes(inventory(load), NODES, 10, connect=local(hosts))
    try:
        states = read_states(nodes, "wide")
    finally:
        nodes.close()
    for node in NODES:  # the same group release, current and known-good, on every node
        assert (states[node].current, states[node].known_good) == (first.release, first.release), node
        manifest = states[node].get(first.release)
        assert manifest is not None and manifest.manifest is not None
        assert manifest.manifest.units == spec_of(inventory(load)).units[node]
    assert check(inventory(load), hosts, monkeypatch).status == "unchanged"

    bad = deploy_group(inventory(load, 99), spec_of(inventory(load, 99)), options(hosts, 2), log.append)
    assert (bad.status, bad.rolled_back_to) == ("rolled_back", first.release), bad
    assert "connection refused" in "\n".join(bad.reasons)
    nodes = Nodes(inventory(load), NODES, 10, connect=local(hosts))
    try:
        states = read_states(nodes, "wide")
    finally:
        nodes.close()
    for node, remote in hosts.items():  # both nodes back on the first release, running it
        unit = remote.local(f"/etc/systemd/system/{ENGINE}").read_text()
        assert CRASH not in unit and (remote.root / "active" / ENGINE).exists(), node
        assert (states[node].current, states[node].known_good) == (first.release, first.release), node
        failed = states[node].get(bad.release or "")
        assert failed is not None and failed.status == "failed", node
    assert order(tmp_path)[-2:] == ["gpu-02", "gpu-01"]  # the rollback starts them in the same order
    assert check(inventory(load), hosts, monkeypatch).status == "unchanged"


def test_check_names_each_nodes_engine_unit_as_for_launcher_vllm(
    load: Load, hosts: dict[str, LocalRemote], monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = {
        launcher: check(inventory(load, launcher=launcher), hosts, monkeypatch) for launcher in (DP, "vllm")
    }
    for run in runs.values():
        assert (run.status, run.nodes) == ("would_change", NODES), run
        assert run.reasons == (
            f"gpu-01: {ENGINE} would be installed and started",
            f"gpu-02: {ENGINE} would be installed and started",
        )  # no Ray to install, no Ray unit: the same steps for both launchers


def test_cluster_starts_the_engine_of_a_data_parallel_group_unasked(
    load: Load, hosts: dict[str, LocalRemote], monkeypatch: pytest.MonkeyPatch
) -> None:
    inv = inventory(load)
    plans = group_plans(inv, None, *load_model_archs(inv, online=False))
    model, plan = inv.models["dsv3"], plans["dsv3"]
    assert model.cluster is not None and model.engine is not None
    found = cluster_flow.ModelCluster(inv, model, model.cluster, plan, model.engine)
    facts = {node: NodeFacts(1.0, ADDRESSES[node], "0.32.0", None, "abc") for node in NODES}
    wanted: list[GroupSpec] = []

    def deploy(inv: Inventory, spec: GroupSpec, *rest: Any) -> GroupOutcome:
        wanted.append(spec)
        return GroupOutcome("passed")

    monkeypatch.setattr(cluster_flow, "prepare_nodes", lambda *args: None)
    monkeypatch.setattr(cluster_flow, "run_preflight", lambda *a, **k: PreflightReport([], facts))
    monkeypatch.setattr(cluster_flow, "deploy_group", deploy)
    report, outcome = cluster_flow.bring_up(found, options(hosts, 1), False, 10, lambda line: None)
    assert report.ok and outcome is not None and outcome.status == "passed"
    assert {node: list(units) for node, units in wanted[0].units.items()} == {n: [ENGINE] for n in NODES}
