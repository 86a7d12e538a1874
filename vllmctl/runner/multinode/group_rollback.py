"""Multi-node groups in `vllmctl rollback` and `cluster --rollback`: which groups a host selection rolls back
(a group whose model cannot be planned now is found from the release its hosts record), the plan, and each
group's previous (or named) known-good release re-activated on every node under the host lock."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from vllmctl.errors import VllmctlError
from vllmctl.inventory.model import Inventory
from vllmctl.releases.group import GroupManifest, group_rollback_target
from vllmctl.releases.group_history import GroupNodes, GroupSelection, multi_node_only, select_groups
from vllmctl.releases.host import HostReleases, ReleaseError
from vllmctl.runner.multinode.cluster_release import (
    GroupOutcome,
    back_in_rotation,
    lock_group,
    out_of_rotation,
    reactivate,
    with_gateway,
)
from vllmctl.runner.multinode.group_gate import GroupGateOptions
from vllmctl.runner.multinode.group_nodes import (
    Connect,
    Nodes,
    multi_node_groups,
    read_group_listings,
    read_states,
    ssh_node,
)

Log = Callable[[str], None]


def roll_back_group(
    inv: Inventory,
    group: str,
    model: str,
    hosts: Sequence[str],
    to: str | None,
    opts: GroupGateOptions,
    log: Log,
) -> GroupOutcome:
    """The previous (or named) known-good group release, re-activated on every node (its API servers out of
    the gateway's rotation meanwhile, when the model is behind it)."""
    nodes = lock_group(inv, hosts, opts)
    try:
        states = read_states(nodes, group)
        target = group_rollback_target(states, hosts, to)
        drain = out_of_rotation(inv, model, opts)
        try:
            outcome = reactivate(inv, nodes, group, model, states, target, opts, log, None, (), drain)
        finally:
            lost = back_in_rotation(drain, log)
        return with_gateway(outcome, drain, lost)
    finally:
        nodes.close()


def rollback_plan(
    inv: Inventory,
    group: str,
    hosts: Sequence[str],
    to: str | None,
    timeout_s: float,
    connect: Connect = ssh_node,
) -> tuple[dict[str, str | None], str]:
    """What a rollback without `--yes` shows: each node's current release, and the target (or raises)."""
    nodes = Nodes(inv, hosts, timeout_s, connect=connect)
    try:
        states = read_states(nodes, group)
        return {node: states[node].current for node in hosts}, group_rollback_target(states, hosts, to)
    finally:
        nodes.close()


def recorded_group(inv: Inventory, model: str, timeout_s: float, connect: Connect) -> GroupNodes:
    """The group's used nodes as its current group release records them on its hosts (head first): a
    rollback goes back to what the hosts hold, whatever the inventory plans today."""
    cluster = inv.models[model].cluster
    assert cluster is not None
    listings = read_group_listings(inv, cluster.hosts, cluster.group, timeout_s, connect)
    found: set[tuple[str, ...]] = set()
    for state in listings.values():
        current = state.get(state.current) if isinstance(state, HostReleases) else None
        if current is not None and isinstance(current.manifest, GroupManifest) and current.manifest.nodes:
            found.add(tuple(current.manifest.nodes))
    if len(found) != 1:
        said = "none of them records a current group release" if not found else "they disagree on its nodes"
        unreachable = [node for node, state in listings.items() if isinstance(state, VllmctlError)]
        more = f" ({', '.join(unreachable)} did not answer)" if unreachable else ""
        raise ReleaseError(
            f"group '{cluster.group}' on {', '.join(cluster.hosts)}: {said}{more}",
            "see `vllmctl history`; roll back with `--limit` set to the nodes that hold the release",
        )
    nodes = found.pop()
    return GroupNodes(cluster.group, model, nodes, tuple(h for h in cluster.hosts if h not in nodes))


def select(
    inv: Inventory, selected: Sequence[str], timeout_s: float, connect: Connect
) -> tuple[GroupSelection, list[str]]:
    """The groups rolled back as a whole, the hosts they cover, and the groups that cannot be rolled back."""
    groups, unplanned = multi_node_groups(inv)
    problems: list[str] = []
    lost: dict[str, str] = {}
    for model, exc in unplanned.items():
        cluster = inv.models[model].cluster
        if cluster is None or not set(cluster.hosts) & set(selected):
            continue
        try:
            groups.append(recorded_group(inv, model, timeout_s, connect))
        except VllmctlError as found:
            problems.append(
                f"group of {model}: not rolled back: it cannot be planned ({exc.message}) and its hosts "
                f"do not say where it runs: {found.render()}"
            )
            for host in selected:
                if host in cluster.hosts and multi_node_only(inv, host):
                    lost[host] = f"its group's model {model} could not be planned"
    selection = select_groups(inv, groups, selected)
    return GroupSelection(selection.groups, {**selection.covered, **lost}), problems


def group_plan(
    inv: Inventory, group: GroupNodes, to: str | None, timeout_s: float, connect: Connect, problems: list[str]
) -> dict[str, Any]:
    try:
        current, target = rollback_plan(inv, group.group, group.nodes, to, timeout_s, connect)
    except VllmctlError as exc:
        problems.append(f"group {group.group}: {exc.render()}")
        current, target = {}, None
    return {"model": group.model, "nodes": list(group.nodes), "current": current, "to": target}


def roll_back_groups(
    inv: Inventory,
    groups: Sequence[GroupNodes],
    to: str | None,
    opts: GroupGateOptions,
    log: Log,
    stopped: Callable[[], str] = str,
    failed: Callable[[str, str], None] = lambda name, why: None,
) -> dict[str, dict[str, Any]]:
    """One group after another, each as one group release under the host lock on all its nodes, until the
    rollout stops (`stopped` says why); each failed group is reported to `failed`."""
    done: dict[str, dict[str, Any]] = {}
    for group in groups:
        if why := stopped():
            done[group.group] = {"nodes": list(group.nodes), "ok": False, "reasons": [f"not started: {why}"]}
            continue
        try:
            outcome = roll_back_group(inv, group.group, group.model, group.nodes, to, opts, log)
            done[group.group] = {"nodes": list(group.nodes), **outcome.to_json()}
        except VllmctlError as exc:
            done[group.group] = {"nodes": list(group.nodes), "ok": False, "reasons": [exc.render()]}
        if not done[group.group].get("ok", True):
            failed(f"group {group.group}", "; ".join(done[group.group].get("reasons", [])) or "failed")
    return done
