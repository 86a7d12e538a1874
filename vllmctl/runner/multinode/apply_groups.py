"""`apply`'s multi-node step: once the per-host tasks have staged the model and the engine venv on every node
of a multi_node group, each such model is deployed as one group release (Ray into the venv, the preflight,
then `cluster_release.deploy_group` with the engine). With --check: what that would change, read-only.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllmctl.catalog.arch import ModelArch
from vllmctl.errors import VllmctlError
from vllmctl.gateway.config import server_name
from vllmctl.inventory.model import Inventory
from vllmctl.multinode.plan import ClusterPlan, plan_cluster
from vllmctl.multinode.preflight import node_addresses
from vllmctl.ops import sha256_text
from vllmctl.paths import UNIT_DIR
from vllmctl.planner.inventory_plan import GpuFacts
from vllmctl.releases.group import (
    GroupManifest,
    api_servers,
    group_manifests,
    group_spec,
    serving_unchanged,
)
from vllmctl.releases.host import HostReleases
from vllmctl.render.quoting import shell_word
from vllmctl.runner.core.engine_guard import EngineGuard
from vllmctl.runner.core.plan import unified_diff
from vllmctl.runner.multinode.cluster import node_facts, prepare_nodes, run_preflight
from vllmctl.runner.multinode.cluster_release import deploy_group, lock_group
from vllmctl.runner.multinode.group_gate import GroupGateOptions
from vllmctl.runner.multinode.group_nodes import Nodes, group_units, read_engine_env, read_states, read_units
from vllmctl.tasks.desired import env_path, index_credentials

Log = Callable[[str], None]
FAILED = ("rolled_back", "failed", "preflight_failed", "not_started")
CHANGED = ("passed", "rolled_back", "would_change")


@dataclass(frozen=True)
class GroupRun:
    """One multi-node model in one apply: `unchanged`, `passed`, `rolled_back`, `failed`, `preflight_failed`,
    `not_started` (its nodes' per-host tasks failed), `skipped` (--limit leaves out some of its nodes) or,
    with --check, `would_change`."""

    model: str
    group: str
    nodes: tuple[str, ...]
    status: str
    release: str | None = None
    reasons: tuple[str, ...] = ()
    rolled_back_to: str | None = None
    diffs: tuple[str, ...] = ()  # with --check --diff: each unit that would change, as a unified diff
    gateway: tuple[dict[str, Any], ...] = ()  # each node's API server drained, then set ready (time order)

    @property
    def failed(self) -> bool:
        return self.status in FAILED

    @property
    def changed(self) -> bool:
        return self.status in CHANGED

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "nodes": list(self.nodes),
            "status": self.status,
            "release": self.release,
            "reasons": list(self.reasons),
            "rolled_back_to": self.rolled_back_to,
            "ok": not self.failed,
            "diffs": list(self.diffs),
            "gateway": list(self.gateway),
        }


def group_plans(
    inv: Inventory,
    gpu_facts: Mapping[str, GpuFacts] | None,
    archs: Mapping[str, ModelArch],
    failures: Mapping[str, VllmctlError],
) -> dict[str, ClusterPlan]:
    """Each model on a multi_node group, planned as one engine over the group from the architectures (and
    load failures) of `load_model_archs` (raises PlanError, or the model's load failure)."""
    wanted = [m for m in inv.models.values() if m.cluster is not None]
    plans = {}
    for model in wanted:
        if model.source in failures:
            raise failures[model.source]
        assert model.cluster is not None
        plans[model.name] = plan_cluster(inv, model, model.cluster, gpu_facts, archs.get(model.source))
    return plans


def pending_changes(
    wanted: Mapping[str, GroupManifest],
    states: Mapping[str, HostReleases],
    installed: Mapping[str, Mapping[str, tuple[str, str | None]]],
    env_changed: bool = False,
) -> list[str]:
    """What deploying `wanted` would do, node by node; empty when `deploy_group` would leave it alone.
    `env_changed`: the head's env file will not be the one its engine last started with."""
    if serving_unchanged(states, wanted, installed) and not env_changed:
        return []
    changes = []
    if env_changed:
        head = next(iter(wanted.values()))
        changes.append(f"{head.head}: {env_path(head.model)} changed: the engine would be restarted")
    for node, manifest in wanted.items():
        for unit, text in sorted(manifest.units.items()):
            state, digest = installed.get(node, {}).get(unit, ("unknown", None))
            if digest is None:
                changes.append(f"{node}: {unit} would be installed and started")
            elif digest != sha256_text(text):
                changes.append(f"{node}: {unit} would change and be restarted")
            elif state != "active":
                changes.append(f"{node}: {unit} is {state}: would be started")
    release = next(iter(wanted.values())).id
    return changes or [f"group release {release} would be recorded on {', '.join(wanted)}"]


@dataclass(frozen=True)
class GroupApplyOptions:
    check: bool
    gate: GroupGateOptions
    diff: bool = False
    timeout_s: float = 60.0  # per node and preflight step
    # model -> sha256 of the env file the per-host tasks write on its head: what --check compares with the
    # engine's last start (a real run reads the file they wrote)
    engine_env: Mapping[str, str] = field(default_factory=dict)
    # secret name -> value: a package index's credentials for Ray's install (never argv)
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    guard: EngineGuard | None = None  # the rollout: no group starts once it stopped; failures count


def apply_groups(
    inv: Inventory,
    plans: Mapping[str, ClusterPlan],
    selected: Collection[str],
    failed_hosts: Collection[str],
    opts: GroupApplyOptions,
    log: Log,
) -> list[GroupRun]:
    """Every multi-node model whose nodes are all selected and passed their per-host tasks, one at a time,
    until the rollout stops."""
    runs = []
    for name, plan in plans.items():
        nodes = plan.hosts
        left_out = [n for n in nodes if n not in selected]
        broken = [n for n in nodes if n in failed_hosts]
        stopped = opts.guard.stopped if opts.guard is not None and not opts.check else ""
        if stopped:
            why = f"not started: {stopped}"
            runs.append(GroupRun(name, plan.cluster.group, nodes, "skipped", reasons=(why,)))
        elif left_out:
            why = f"--limit leaves out {', '.join(left_out)}: a multi-node model is deployed on all its nodes"
            runs.append(GroupRun(name, plan.cluster.group, nodes, "skipped", reasons=(why,)))
        elif broken:
            why = f"the per-host tasks failed on {', '.join(broken)}: the group was not started"
            runs.append(GroupRun(name, plan.cluster.group, nodes, "not_started", reasons=(why,)))
        else:
            try:
                runs.append(_one(inv, plan, opts, log))
            except VllmctlError as exc:
                runs.append(GroupRun(name, plan.cluster.group, nodes, "failed", reasons=(exc.render(),)))
            if runs[-1].failed and opts.guard is not None and not opts.check:
                opts.guard.fail(f"group {plan.cluster.group}", runs[-1].status)
    return runs


def _one(inv: Inventory, plan: ClusterPlan, opts: GroupApplyOptions, log: Log) -> GroupRun:
    model = inv.models[plan.model]
    engine = model.engine or inv.hosts[plan.head].engine
    group, nodes = plan.cluster.group, plan.hosts
    if opts.check:
        facts = node_facts(inv, model, plan.cluster, engine, nodes, opts.timeout_s)
        addresses = node_addresses(inv, facts)
        version = plan.cluster.ray.version
        missing_ray = [
            f"{h}: ray {version} would be installed in the engine venv"
            for h, f in facts.items()
            if f.ray_version != version and plan.cluster.launcher == "ray"
        ]
        spec = group_spec(inv, plan, engine, addresses, start_engine=True)
        wanted = group_manifests(spec, opts.gate.created_at, opts.gate.owner, opts.gate.inventory_digest)
        found = Nodes(inv, nodes, opts.timeout_s)
        try:
            states = read_states(found, group)
            installed = read_units(found, group_units(group, plan.model, nodes))
            env_changed = read_engine_env(found, group, plan.model).changed(opts.engine_env.get(plan.model))
            diffs = unit_diffs(found, wanted, installed) if opts.diff else ()
        finally:
            found.close()
        changes = [*missing_ray, *pending_changes(wanted, states, installed, env_changed)]
        if changes:
            changes += drains(inv, wanted[plan.head])
        if not changes:
            return GroupRun(plan.model, group, nodes, "unchanged", states[plan.head].current)
        release = wanted[plan.head].id
        return GroupRun(plan.model, group, nodes, "would_change", release, tuple(changes), diffs=diffs)
    locked = lock_group(inv, nodes, opts.gate)  # before Ray goes into the venvs
    try:
        credentials = opts.secrets.get(index_credentials(engine) or "")
        prepare_nodes(inv, plan, engine, engine.index_url, log, credentials)
        report = run_preflight(inv, model, plan.cluster, engine, timeout_s=opts.timeout_s)
        if not report.ok:
            problems = (*(p.render() for p in report.problems), "nothing was started")
            return GroupRun(plan.model, group, nodes, "preflight_failed", reasons=problems)
        log(f"preflight passed on {', '.join(nodes)}")
        addresses = node_addresses(inv, report.facts)
        spec = group_spec(inv, plan, engine, addresses, True)
        outcome = deploy_group(inv, spec, opts.gate, log, locked)
    finally:
        locked.close()
    back, events = outcome.rolled_back_to, outcome.gateway
    return GroupRun(
        plan.model, group, nodes, outcome.status, outcome.release, outcome.reasons, back, (), events
    )


def drains(inv: Inventory, head: GroupManifest) -> list[str]:
    """What `deploy_group` does in the gateway around a release of a model behind it."""
    gateway = inv.gateway
    if gateway is None or head.model not in gateway.ports:
        return []
    refs = ", ".join(f"{head.model}/{server_name(node, port)}" for node, port in api_servers(head))
    return [
        f"{refs} would be drained on {', '.join(gateway.hosts)} before any engine stops, "
        "and set ready after the gate"
    ]


def unit_diffs(
    nodes: Nodes,
    wanted: Mapping[str, GroupManifest],
    installed: Mapping[str, Mapping[str, tuple[str, str | None]]],
) -> tuple[str, ...]:
    """Each unit whose file would change, old (read from its node) against new."""
    diffs = []
    for node, manifest in wanted.items():
        for unit, text in sorted(manifest.units.items()):
            digest = installed.get(node, {}).get(unit, ("", None))[1]
            if digest == sha256_text(text):
                continue
            path = f"{UNIT_DIR}/{unit}"
            old = nodes.shell(node, f"cat -- {shell_word(path)}") if digest is not None else ""
            diffs.append(unified_diff(f"{node}:{path}", old, text))
    return tuple(diffs)


def summary(runs: Sequence[GroupRun]) -> list[str]:
    """One line per group for the text output."""
    lines = []
    for run in runs:
        release = f" release {run.release}" if run.release else ""
        back = f", rolled back to {run.rolled_back_to}" if run.rolled_back_to else ""
        where = f"{run.model} on {', '.join(run.nodes)}"
        lines.append(f"group {run.group} ({where}): {run.status}{release}{back}")
    return lines
