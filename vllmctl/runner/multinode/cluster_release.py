"""Group releases at the edge: a `vllmctl cluster` run records its release on every used node, activates it
in the cluster's order (head Ray, worker Ray, `ray status` barrier, engine on every node, the head last),
gates it (group_gate.py) with its API servers out of the gateway's rotation meanwhile (group_gateway.py)
and, when it fails, re-activates the group's known-good release on every node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from vllmctl.errors import VllmctlError
from vllmctl.inventory.model import Inventory
from vllmctl.multinode import bringup
from vllmctl.multinode.group_ops import (
    activation,
    create_group_release,
    env_record_step,
    pointer_step,
    prune_step,
    restart_step,
    stop_step,
    verdict_step,
)
from vllmctl.releases.gate import Verdict
from vllmctl.releases.group import (
    GroupManifest,
    GroupSpec,
    NodeStates,
    api_servers,
    group_manifests,
    group_prune_candidates,
    group_rollback_target,
    manifests_of,
    serving_unchanged,
)
from vllmctl.runner.multinode.group_gate import GroupGateOptions, check_engine, wait_formed
from vllmctl.runner.multinode.group_gateway import GroupGateway, group_gateway, group_servers
from vllmctl.runner.multinode.group_nodes import Nodes, group_units, read_engine_env, read_states, read_units
from vllmctl.tasks.desired import env_path, unit_name

Log = Callable[[str], None]


@dataclass(frozen=True)
class GroupOutcome:
    """`unchanged`, `passed`, `rolled_back` (a failed release was undone: the group serves its known-good one
    again), `reactivated` (a rollback asked for by hand served again) or `failed`."""

    status: str
    release: str | None = None
    reasons: tuple[str, ...] = ()
    rolled_back_to: str | None = None
    ray: bringup.RayStatus | None = None
    gateway: tuple[dict[str, Any], ...] = ()  # each node's API server drained, then set ready (time order)

    @property
    def ok(self) -> bool:
        return self.status in ("unchanged", "passed", "reactivated")

    def to_json(self) -> dict[str, Any]:
        found = {"status": self.status, "release": self.release, "reasons": list(self.reasons)}
        return found | {"rolled_back_to": self.rolled_back_to, "ok": self.ok, "gateway": list(self.gateway)}


def lock_group(inv: Inventory, nodes: Sequence[str], opts: GroupGateOptions) -> Nodes:
    """The group's nodes with the host lock taken on every one (HostLockedError when one is held)."""
    return Nodes(inv, nodes, opts.command_timeout_s, opts.owner, opts.break_lock, opts.connect)


def deploy_group(
    inv: Inventory, spec: GroupSpec, opts: GroupGateOptions, log: Log, locked: Nodes | None = None
) -> GroupOutcome:
    """Record → activate → gate on every node; a failed gate rolls the whole group back to its known-good.
    `locked`: nodes the caller locked before its own steps (Ray install, preflight); it closes them."""
    nodes = locked or lock_group(inv, spec.nodes, opts)
    try:
        states = read_states(nodes, spec.group)
        wanted = group_manifests(spec, opts.created_at, opts.owner, opts.inventory_digest)
        installed = read_units(nodes, group_units(spec.group, spec.model, spec.nodes))
        env = read_engine_env(nodes, spec.group, spec.model)
        starts_engine = unit_name(spec.model, 0) in wanted[spec.head].units
        env_changed = starts_engine and env.changed()
        if serving_unchanged(states, wanted, installed) and not env_changed:
            current = states[spec.head].current
            log(f"group release {current} unchanged and active on {', '.join(spec.nodes)}: not restarted")
            return GroupOutcome("unchanged", current, ray=wait_formed(nodes, wanted[spec.head], opts, log))
        if env_changed:
            log(f"{spec.head}: {env_path(spec.model)} differs from the engine's last start: restarting it")
        release = wanted[spec.head].id
        nodes.each(lambda node: nodes.step(node, create_group_release(wanted[node], states[node])))
        log(f"group release {release} recorded on {', '.join(spec.nodes)}")
        drain = out_of_rotation(inv, spec.model, opts)
        servers = group_servers(inv, spec.model, api_servers(wanted[spec.head]))
        try:
            if drain is not None:  # before any node's engine stops: a rank that goes takes its node's API
                drain.take_out(servers, log)
            verdict, ray = activate_and_check(nodes, wanted, installed, opts, log, bench=True)
            for node in spec.nodes:
                nodes.step(node, verdict_step(spec.group, release, verdict.to_json()))
            if verdict.passed:
                log(f"group release {release} passed: known-good on {', '.join(spec.nodes)}")
                if drain is not None:
                    drain.serves(servers)
                if starts_engine and env.now is not None:
                    nodes.step(spec.head, env_record_step(spec.group, env.now))
                pruned = group_prune_candidates(read_states(nodes, spec.group), spec.nodes, inv.releases.keep)
                nodes.each(lambda node: nodes.step(node, prune_step(spec.group, pruned[node])))
                outcome = GroupOutcome("passed", release, verdict.reasons, ray=ray)
            else:
                outcome = _roll_back_after(inv, nodes, spec, release, verdict, opts, log, drain)
        finally:
            lost = back_in_rotation(drain, log)
        return with_gateway(outcome, drain, lost)
    finally:
        if locked is None:
            nodes.close()


def out_of_rotation(inv: Inventory, model: str, opts: GroupGateOptions) -> GroupGateway | None:
    """The gateway's side of one group release (None when the model is not behind the gateway)."""
    return group_gateway(inv, model, opts.owner, opts.command_timeout_s, opts.gateway, opts.sleep)


def back_in_rotation(drain: GroupGateway | None, log: Log) -> list[str]:
    """Every server the release took out set ready (also when it raised); those that did not come UP."""
    if drain is None:
        return []
    try:
        return drain.put_back(log)
    finally:
        drain.close()


def with_gateway(outcome: GroupOutcome, drain: GroupGateway | None, lost: Sequence[str]) -> GroupOutcome:
    """The outcome with the gateway's events; a group that serves but is not UP in the gateway is not ok,
    as a host whose release passed but did not come back UP is not (its records stay for the next run)."""
    if drain is None:
        return outcome
    found = replace(outcome, gateway=tuple(drain.events))
    if not lost:
        return found
    said = f"the gateway did not see {', '.join(lost)} UP in time"
    status = "failed" if outcome.ok else outcome.status
    return replace(found, status=status, reasons=(*outcome.reasons, said))


def _roll_back_after(
    inv: Inventory,
    nodes: Nodes,
    spec: GroupSpec,
    failed: str,
    verdict: Verdict,
    opts: GroupGateOptions,
    log: Log,
    drain: GroupGateway | None,
) -> GroupOutcome:
    group, model = spec.group, spec.model
    states = read_states(nodes, group)
    try:
        target = group_rollback_target(states, nodes.names)
    except VllmctlError as exc:
        installed = read_units(nodes, group_units(group, model, nodes.names))
        for node in nodes.names:
            present = [unit for unit, (_state, digest) in installed[node].items() if digest is not None]
            nodes.step(node, stop_step(present))
        log(f"no known-good group release: the group's units are stopped on {', '.join(nodes.names)}")
        return GroupOutcome("failed", failed, (*verdict.reasons, f"not rolled back: {exc.render()}"))
    return reactivate(inv, nodes, group, model, states, target, opts, log, failed, verdict.reasons, drain)


def reactivate(
    inv: Inventory,
    nodes: Nodes,
    group: str,
    model: str,
    states: NodeStates,
    target: str,
    opts: GroupGateOptions,
    log: Log,
    failed: str | None,
    reasons: tuple[str, ...],
    drain: GroupGateway | None = None,
) -> GroupOutcome:
    """`target` activated and gated on every node; `drain` (the model behind the gateway) takes the target's
    API servers out of rotation first, those not out already; its caller puts them back."""
    log(f"rolling group {group} back to {target} on {', '.join(nodes.names)}")
    manifests = manifests_of(states, target)
    servers = group_servers(inv, model, api_servers(manifests[nodes.names[0]]))
    if drain is not None:
        drain.take_out(servers, log)
    installed = read_units(nodes, group_units(group, model, nodes.names))
    back, ray = activate_and_check(nodes, manifests, installed, opts, log, bench=False)
    if back.passed and drain is not None:
        drain.serves(servers)
    if back.passed:  # as on a host: the release that serves again is the one a later failure returns to
        for node in nodes.names:
            nodes.step(node, pointer_step(group, "known-good", target))
        env = read_engine_env(nodes, group, model)
        if unit_name(model, 0) in manifests[nodes.names[0]].units and env.now is not None:
            # the engine started again with the env file as it is now: the next apply compares with that
            nodes.step(nodes.names[0], env_record_step(group, env.now))
        return GroupOutcome(
            "rolled_back" if failed else "reactivated", failed or target, reasons, target, ray
        )
    more = (*reasons, f"rollback to {target} is not serving either:", *back.reasons)
    return GroupOutcome("failed", failed or target, more, target, ray)


def activate_and_check(
    nodes: Nodes,
    manifests: Mapping[str, GroupManifest],
    installed: Mapping[str, Mapping[str, tuple[str, str | None]]],
    opts: GroupGateOptions,
    log: Log,
    bench: bool,
) -> tuple[Verdict, bringup.RayStatus | None]:
    """Units from the release dir on every node, `current` moved, Ray head → workers, the barrier, then the
    engine (every other node's, the head's last); the gate: the cluster formed and, with an engine, every API
    server healthy and (`bench`: a new release, as on a host; not a rollback) the smoke benchmark on each
    within the model's SLO."""
    head = nodes.names[0]
    group, release = manifests[head].group, manifests[head].id
    engine_unit = unit_name(manifests[head].model, 0)
    plans = {node: activation(manifests[node], installed.get(node, {}), engine_unit) for node in nodes.names}
    try:
        for node in reversed(nodes.names):  # workers stop first: a worker whose head is gone drains for 30 s
            nodes.step(node, plans[node].install)
            nodes.step(node, pointer_step(group, "current", release))
        for node in nodes.names:  # the head first: workers join its GCS
            nodes.step(node, restart_step(plans[node].restart))
            if plans[node].restart:
                role = "head" if node == head else "worker"
                log(f"{node}: {', '.join(plans[node].restart)} started ({role})")
        ray = wait_formed(nodes, manifests[head], opts, log)
    except VllmctlError as exc:  # a unit that would not start fails the release like one that never formed
        return Verdict(False, (exc.render(),), {}), None
    if engine_unit not in manifests[head].units:
        return Verdict(True, (), {}), ray
    ranks = [node for node in nodes.names[1:] if engine_unit in manifests[node].units]
    try:
        return check_engine(nodes, manifests[head], engine_unit, opts, log, bench, ranks), ray
    except VllmctlError as exc:  # an engine unit that would not start: the same failed release
        return Verdict(False, (exc.render(),), {}), ray
