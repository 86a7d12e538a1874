"""Group releases at the edge: a `vllmctl cluster` run records its release on every used node, activates it
in the cluster's order (head Ray, worker Ray, `ray status` barrier, engine on the head), gates it (formed;
the engine healthy) and, when it fails, re-activates the group's known-good release on every node.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllmctl.bench.readiness import FLOOR_S, HealthCheck, HealthResult
from vllmctl.bench.smoke import SmokeBench
from vllmctl.errors import VllmctlError
from vllmctl.inventory.model import Inventory
from vllmctl.multinode import bringup
from vllmctl.multinode.group_ops import (
    activation,
    create_group_release,
    engine_journal_command,
    env_record_step,
    journal_errors,
    pointer_step,
    prune_step,
    restart_step,
    started_as,
    stop_step,
    verdict_step,
)
from vllmctl.multinode.units import ray_unit_name
from vllmctl.ops.release import journal_tail_command
from vllmctl.releases.gate import EndpointCheck, Verdict, decide
from vllmctl.releases.group import (
    GroupManifest,
    GroupSpec,
    NodeStates,
    group_manifests,
    group_prune_candidates,
    group_rollback_target,
    manifests_of,
    serving_unchanged,
)
from vllmctl.releases.host import release_endpoints
from vllmctl.releases.unit_exit import SHOW_PROPERTIES, restart_count
from vllmctl.render.quoting import shell_word
from vllmctl.runner.core.engine_watch import smoke_bench, wait_for_health, watch_units
from vllmctl.runner.multinode.group_nodes import (
    Connect,
    Nodes,
    group_units,
    read_engine_env,
    read_states,
    read_units,
    ssh_node,
)
from vllmctl.tasks.desired import env_path, unit_name

Log = Callable[[str], None]


@dataclass(frozen=True)
class GroupGateOptions:
    owner: str = "vllmctl"  # also the host lock's owner on every node
    break_lock: bool = False
    created_at: str = ""  # ISO 8601 UTC from the edge: the source of the release id
    inventory_digest: str = ""
    command_timeout_s: float = 120.0
    formed_timeout_s: float = 180.0
    health_timeout_s: float = FLOOR_S
    health: HealthCheck = wait_for_health
    bench: SmokeBench = smoke_bench
    api_keys: Mapping[str, str] = field(default_factory=dict, repr=False)  # model -> its engine's API key
    connect: Connect = ssh_node  # one node's connection (tests pass a local one)
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


@dataclass(frozen=True)
class GroupOutcome:
    """`unchanged`, `passed`, `rolled_back` (a failed release was undone: the group serves its known-good one
    again), `reactivated` (a rollback asked for by hand served again) or `failed`."""

    status: str
    release: str | None = None
    reasons: tuple[str, ...] = ()
    rolled_back_to: str | None = None
    ray: bringup.RayStatus | None = None

    @property
    def ok(self) -> bool:
        return self.status in ("unchanged", "passed", "reactivated")

    def to_json(self) -> dict[str, Any]:
        found = {"status": self.status, "release": self.release, "reasons": list(self.reasons)}
        return found | {"rolled_back_to": self.rolled_back_to, "ok": self.ok}


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
        verdict, ray = activate_and_check(nodes, wanted, installed, opts, log, bench=True)
        for node in spec.nodes:
            nodes.step(node, verdict_step(spec.group, release, verdict.to_json()))
        if verdict.passed:
            log(f"group release {release} passed: known-good on {', '.join(spec.nodes)}")
            if starts_engine and env.now is not None:
                nodes.step(spec.head, env_record_step(spec.group, env.now))
            pruned = group_prune_candidates(read_states(nodes, spec.group), spec.nodes, inv.releases.keep)
            nodes.each(lambda node: nodes.step(node, prune_step(spec.group, pruned[node])))
            return GroupOutcome("passed", release, verdict.reasons, ray=ray)
        return _roll_back_after(nodes, spec.group, spec.model, release, verdict, opts, log)
    finally:
        if locked is None:
            nodes.close()


def _roll_back_after(
    nodes: Nodes, group: str, model: str, failed: str, verdict: Verdict, opts: GroupGateOptions, log: Log
) -> GroupOutcome:
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
    return reactivate(nodes, group, model, states, target, opts, log, failed, verdict.reasons)


def reactivate(
    nodes: Nodes,
    group: str,
    model: str,
    states: NodeStates,
    target: str,
    opts: GroupGateOptions,
    log: Log,
    failed: str | None,
    reasons: tuple[str, ...],
) -> GroupOutcome:
    log(f"rolling group {group} back to {target} on {', '.join(nodes.names)}")
    manifests = manifests_of(states, target)
    installed = read_units(nodes, group_units(group, model, nodes.names))
    back, ray = activate_and_check(nodes, manifests, installed, opts, log, bench=False)
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
    engine on the head; the gate: the cluster formed and, with an engine, the engine healthy and (`bench`:
    a new release, as on a host; not a rollback) the smoke benchmark within the model's SLO."""
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


def check_engine(
    nodes: Nodes,
    manifest: GroupManifest,
    engine_unit: str,
    opts: GroupGateOptions,
    log: Log,
    bench: bool,
    ranks: Sequence[str] = (),
) -> Verdict:
    """The engine (re)started, headless `ranks` first (launcher vllm: they wait for rank 0 at its master
    port; data_parallel: for the head's DP RPC port), then gated on the head's API."""
    head = manifest.head
    show = f"systemctl show -p {SHOW_PROPERTIES} -- {shell_word(engine_unit)}"
    before = restart_count(nodes.shell(head, show, sudo=False))

    watch = watch_units(nodes.remotes[head], [engine_unit], nodes.timeout_s, before)
    since = nodes.shell(head, "date +%s", sudo=False).strip()
    for node in ranks:  # every rank restarts with rank 0: a rank left running holds the old group's state
        nodes.step(node, restart_step([engine_unit]))
        log(f"{node}: {engine_unit} started ({started_as(manifest, node, nodes.names.index(node))})")
    nodes.step(head, restart_step([engine_unit]))
    log(f"{head}: {engine_unit} started ({started_as(manifest, head, 0)})")
    checks, errors = [], []
    for model, url in release_endpoints(manifest, nodes.url_of(head)):
        key = opts.api_keys.get(model)
        health: HealthResult = opts.health(url, model, opts.health_timeout_s, watch, api_key=key)
        tail = "" if health.ok else nodes.shell(head, journal_tail_command([engine_unit]).render())
        if not health.ok:
            errors = journal_errors(nodes.shell(head, engine_journal_command(engine_unit, since)))
        report = opts.bench(url, model, api_key=key) if bench and health.ok else None
        slo = manifest.models.get(model, {}).get("slo", {})
        checks.append(EndpointCheck(model, health, report, slo, tail))
    verdict = decide(checks, require_bench=bench)
    if errors:
        causes = "\n".join(f"    {line}" for line in errors)
        reasons = (*verdict.reasons, f"errors the engine logged since its start:\n{causes}")
        verdict = Verdict(False, reasons, verdict.figures)
    return verdict


def wait_formed(
    nodes: Nodes, manifest: GroupManifest, opts: GroupGateOptions, log: Log
) -> bringup.RayStatus | None:
    """`ray status` on the head until every node and GPU of the release is there; None without Ray (launcher
    vllm: the ranks meet when the engine starts, and the gate judges them)."""
    if manifest.launcher != "ray":
        return None
    argv = [f"{manifest.venv_path}/bin/ray", "status", f"--address={manifest.ray_address}"]
    deadline = opts.clock() + opts.formed_timeout_s
    missing = "no answer yet"
    while opts.clock() < deadline:
        result = nodes.run(manifest.head, argv, 60)
        if result.ok:
            status = bringup.parse_ray_status(result.stdout)
            found = bringup.cluster_formed(status, manifest.pp, manifest.gpus_per_node)
            if found is None:
                log(f"ray status: {status.nodes} nodes, {status.gpus:g} GPUs")
                return status
            missing = found
        else:
            missing = (result.stderr or result.stdout).strip()[-300:]
        opts.sleep(2)
    raise VllmctlError(
        f"the Ray cluster of group '{manifest.group}' did not form within "
        f"{opts.formed_timeout_s:g}s: {missing}",
        f"see `journalctl -u {ray_unit_name(manifest.group)}` on the workers",
    )
