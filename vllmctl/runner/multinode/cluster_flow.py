"""The `vllmctl cluster` flows for one multi-node model: its plan from the inventory, and the bring-up (lock,
Ray into each node's venv, preflight, then the group release) that stops before anything starts when the
preflight finds a problem."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from vllmctl.errors import InputError
from vllmctl.inventory import load_inventory
from vllmctl.inventory.model import ClusterSpec, EngineSpec, Inventory, ModelDeployment
from vllmctl.multinode.plan import ClusterPlan, clusters_for, plan_cluster
from vllmctl.multinode.preflight import PreflightReport, node_addresses
from vllmctl.planner.inventory_plan import plan_inventory
from vllmctl.releases.group import group_spec
from vllmctl.runner.fleet.hosts import load_model_archs, resolve_secrets
from vllmctl.runner.multinode.cluster import prepare_nodes, run_preflight
from vllmctl.runner.multinode.cluster_release import GroupOutcome, deploy_group, lock_group
from vllmctl.runner.multinode.group_gate import GroupGateOptions
from vllmctl.tasks.desired import index_credentials


@dataclass(frozen=True)
class ModelCluster:
    inventory: Inventory
    model: ModelDeployment
    cluster: ClusterSpec
    plan: ClusterPlan
    engine: EngineSpec


def model_cluster(inventory_path: str, model_name: str, offline: bool) -> ModelCluster:
    """The multi-node model's group, planned; an input error when it is unknown or not multi-node."""
    inv = load_inventory(inventory_path)
    model = inv.models.get(model_name)
    if model is None:
        raise InputError(f"no model named {model_name!r}", f"models: {', '.join(inv.models) or 'none'}")
    archs, failures = load_model_archs(inv, online=not offline)
    if model.source in failures:
        raise failures[model.source]
    cluster = clusters_for(inv, plan_inventory(inv, None, archs).entries).get(model.name)
    if cluster is None:
        raise InputError(
            f"model {model.name!r} is not multi-node",
            "serve it on a group with multi_node: true (see docs/multinode.md)",
        )
    plan = plan_cluster(inv, model, cluster, None, archs.get(model.source))
    engine = model.engine or inv.hosts[plan.head].engine
    return ModelCluster(inv, model, cluster, plan, engine)


def bring_up(
    found: ModelCluster,
    opts: GroupGateOptions,
    start_engine: bool,
    timeout_s: float,
    log: Callable[[str], None],
) -> tuple[PreflightReport, GroupOutcome | None]:
    """Under the group lock: Ray into each node's venv, the preflight, then (only if it passed) the group
    release; the outcome is None when the preflight stopped it."""
    inv, plan, engine = found.inventory, found.plan, found.engine
    locked = lock_group(inv, plan.hosts, opts)  # before Ray goes into the venvs
    try:
        secret = index_credentials(engine)
        credentials = resolve_secrets(inv, os.environ, {secret}).get(secret) if secret else None
        prepare_nodes(inv, plan, engine, engine.index_url, log, credentials)
        report = run_preflight(inv, found.model, found.cluster, engine, timeout_s=timeout_s)
        if not report.ok:
            return report, None
        # without Ray there is no cluster without the engine: its units are the engine's ranks
        starts = start_engine or found.cluster.ray_free
        spec = group_spec(inv, plan, engine, node_addresses(inv, report.facts), starts)
        return report, deploy_group(inv, spec, opts, log, locked)
    finally:
        locked.close()
