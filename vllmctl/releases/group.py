"""Group releases, pure: one multi-node model's release recorded on every used node of its group under
`/var/lib/vllmctl/groups/<group>/` with the same id everywhere, the group's current and known-good release
and the rollback target (steps: group_ops.py; see docs/multinode.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from vllmctl.inventory.model import EngineSpec, Inventory
from vllmctl.multinode.dp_units import render_dp_node_unit
from vllmctl.multinode.plan import ClusterPlan
from vllmctl.multinode.units import (
    ray_unit_name,
    render_head_engine_unit,
    render_node_engine_unit,
    render_ray_unit,
)
from vllmctl.paths import GROUPS_DIR
from vllmctl.releases.host import (
    HostReleases,
    Manifest,
    Release,
    ReleaseError,
    listing_command,
    parse_listing,
    prune_candidates,
    release_id,
    required_venvs,
)
from vllmctl.tasks.desired import unit_name, venv_path

NodeStates = Mapping[str, HostReleases]


def group_dir(group: str) -> str:
    return f"{GROUPS_DIR}/{group}"


def group_releases_dir(group: str) -> str:
    return f"{group_dir(group)}/releases"


@dataclass(frozen=True)
class GroupManifest(Manifest):
    """One node's copy of a group release: the node's own units (`host` is the node) plus the group's shape,
    so a rollback can re-form the cluster from what is on the nodes alone."""

    group: str = ""
    model: str = ""
    head: str = ""
    nodes: Sequence[str] = ()
    tp: int = 0
    pp: int = 0
    gpus_per_node: int = 0
    ray_address: str = ""  # the head's GCS, IP:port, as the Ray units of this release use it
    launcher: str = "ray"  # vllm, data_parallel: the engine unit on every node, no Ray (older manifests: ray)


@dataclass(frozen=True)
class GroupSpec:
    """What one `vllmctl cluster` run wants on the group: each used node's units (head first)."""

    group: str
    model: str
    head: str
    nodes: Sequence[str]
    tp: int
    pp: int
    gpus_per_node: int
    ray_address: str
    engine: str
    engine_version: str
    venv_path: str
    units: Mapping[str, Mapping[str, str]]  # node -> unit file name -> content
    models: Mapping[str, Mapping[str, Any]]  # on the head when the engine is part of the release
    launcher: str = "ray"  # vllm or data_parallel: the engine unit on every node, no Ray
    data_parallel: Mapping[str, Any] = field(default_factory=dict)  # launcher data_parallel: its layout


def group_spec(
    inv: Inventory, plan: ClusterPlan, engine: EngineSpec, addresses: Mapping[str, str], start_engine: bool
) -> GroupSpec:
    """What the run wants. Launcher ray: every used node's Ray unit, and the engine unit on the head when it
    is started. Launchers vllm and data_parallel: the engine unit on every used node (`start_engine` False:
    nothing to run)."""
    cluster, gpus, dp = plan.cluster, int(plan.plan.gpu_count), plan.data_parallel
    envs = {host: inv.hosts[host].vars.get("env", {}) for host in plan.hosts}
    model = inv.models[plan.model]
    own = cluster.ray_free
    render_engine = render_node_engine_unit if dp is None else render_dp_node_unit
    units: dict[str, dict[str, str]] = {host: {} for host in plan.hosts}
    engine_unit = unit_name(model.name, 0)
    for host in plan.hosts:
        if not own:
            text = render_ray_unit(cluster, engine, host, addresses, gpus, envs[host])
            units[host][ray_unit_name(cluster.group)] = text
        if start_engine and own:
            units[host][engine_unit] = render_engine(model, engine, plan, host, addresses, envs[host])
    models: dict[str, dict[str, Any]] = {}
    if start_engine:
        if not own:
            text = render_head_engine_unit(model, engine, plan, addresses, envs[plan.head])
            units[plan.head][engine_unit] = text
        ports = [model.port]
        models[model.name] = {
            "source": model.source,
            "revision": model.revision,
            "ports": ports,
            "slo": dict(model.slo),
        }
    return GroupSpec(
        group=cluster.group,
        model=plan.model,
        head=plan.head,
        nodes=plan.hosts,
        tp=plan.tp,
        pp=plan.pp,
        gpus_per_node=gpus,
        ray_address="" if own else f"{addresses[plan.head]}:{cluster.ray.gcs_port}",
        launcher=cluster.launcher,
        data_parallel=dp.to_json() if dp is not None else {},
        engine=engine.name,
        engine_version=engine.version,
        venv_path=venv_path(engine),
        units=units,
        models=models,
    )


def group_digest(units: Mapping[str, Mapping[str, str]], venv_path: str) -> str:
    """Every node's units and the venv: the same on every node, so every node gets the same id."""
    body = {node: dict(sorted(found.items())) for node, found in sorted(units.items())}
    return hashlib.sha256(json.dumps({"units": body, "venv": venv_path}, sort_keys=True).encode()).hexdigest()


def group_manifests(
    spec: GroupSpec, created_at: str, created_by: str, inventory_digest: str
) -> dict[str, GroupManifest]:
    """One manifest per used node, all with the same id (time, then 8 hex of the digest of all units)."""
    created = datetime.fromisoformat(created_at) if created_at else datetime.fromtimestamp(0, UTC)
    release = release_id(created, group_digest(spec.units, spec.venv_path))
    return {
        node: GroupManifest(
            id=release,
            host=node,
            created_at=created_at,
            created_by=created_by,
            inventory_digest=inventory_digest,
            engine=spec.engine,
            engine_version=spec.engine_version,
            venv_path=spec.venv_path,
            units=dict(spec.units[node]),
            models={k: dict(v) for k, v in spec.models.items()} if node == spec.head else {},
            plan={"tensor_parallel_size": spec.tp, "pipeline_parallel_size": spec.pp}
            | ({"data_parallel": dict(spec.data_parallel)} if spec.data_parallel else {}),
            group=spec.group,
            model=spec.model,
            head=spec.head,
            nodes=list(spec.nodes),
            tp=spec.tp,
            pp=spec.pp,
            gpus_per_node=spec.gpus_per_node,
            ray_address=spec.ray_address,
            launcher=spec.launcher,
        )
        for node in spec.nodes
    }


def api_servers(head: GroupManifest) -> list[tuple[str, int]]:
    """(node, port) of each API server the release runs, from the head's manifest: every node's in vLLM's
    hybrid and external data-parallel modes (balancing external), else the head's alone."""
    ports = [int(p) for found in head.models.values() for p in found.get("ports", ())]
    dp = head.plan.get("data_parallel")
    every = isinstance(dp, Mapping) and dp.get("vllm_mode") in ("hybrid", "external")
    return [(node, port) for node in (head.nodes if every else [head.head]) for port in ports]


def group_listing_command(group: str) -> str:
    return listing_command(group_releases_dir(group), group_dir(group))


def parse_group_listing(output: str, host: str, group: str) -> HostReleases:
    return parse_listing(output, host, group_releases_dir(group), GroupManifest)


def good_everywhere(states: NodeStates, nodes: Sequence[str]) -> list[str]:
    """Ids, oldest first, complete with a passed verdict on every used node (a node missing it vetoes)."""
    ids = (
        {r.id for node in nodes for r in states[node].releases} if all(n in states for n in nodes) else set()
    )
    return sorted(i for i in ids if all(_status(states[node].get(i)) == "good" for node in nodes))


def _status(release: Release | None) -> str:
    return "missing" if release is None else release.status


def group_known_good(states: NodeStates, nodes: Sequence[str]) -> str | None:
    good = good_everywhere(states, nodes)
    return good[-1] if good else None


def group_current(states: NodeStates, nodes: Sequence[str]) -> str | None:
    """The release every node's `current` names, or None when they differ or one has none."""
    currents = {states[node].current if node in states else None for node in nodes}
    return currents.pop() if len(currents) == 1 else None


def group_rollback_target(states: NodeStates, nodes: Sequence[str], wanted: str | None = None) -> str:
    """The named release, else the newest known-good one before the current (when the current is good)."""
    good = good_everywhere(states, nodes)
    if wanted is not None:
        if wanted not in good:
            said = {
                node: _status(states[node].get(wanted)) if node in states else "missing" for node in nodes
            }
            found = ", ".join(f"{node} {status}" for node, status in said.items())
            raise ReleaseError(
                f"group release {wanted} is not known-good on every node ({found})",
                "roll back to a release that passed its gate on every node (see `vllmctl cluster --status`)",
            )
        target = wanted
    else:
        current = group_current(states, nodes)
        earlier = [i for i in good if current not in good or i < current]
        if not earlier:
            raise ReleaseError(
                "no earlier group release is known-good on every node",
                "fix the inventory and run `vllmctl cluster` again",
            )
        target = earlier[-1]
    for node in nodes:
        release = states[node].get(target)
        assert release is not None and release.manifest is not None
        gone = [v for v in required_venvs(release.manifest) if v not in states[node].venvs]
        if gone:
            raise ReleaseError(
                f"{node}: group release {target} runs from {', '.join(gone)}, which is gone",
                "rollback never reinstalls: run `vllmctl apply --playbook engine` with that engine version",
            )
    return target


def unchanged(states: NodeStates, wanted: Mapping[str, Manifest]) -> bool:
    """Every node's current release is known-good and serves exactly the wanted units from the same venv."""
    for node, manifest in wanted.items():
        state = states.get(node)
        current = state.get(state.current) if state is not None else None
        if current is None or current.status != "good" or current.manifest is None:
            return False
        if current.manifest.serving_digest != manifest.serving_digest:
            return False
    return True


def serving_unchanged(
    states: NodeStates,
    wanted: Mapping[str, Manifest],
    installed: Mapping[str, Mapping[str, tuple[str, str | None]]],
) -> bool:
    """`unchanged`, and every wanted unit active on its node: a deploy then records and restarts nothing."""
    active = all(installed[n].get(u, ("", None))[0] == "active" for n, m in wanted.items() for u in m.units)
    return active and unchanged(states, wanted)


def manifests_of(states: NodeStates, release: str) -> dict[str, GroupManifest]:
    found = {}
    for node, state in states.items():
        got = state.get(release)
        if got is not None and isinstance(got.manifest, GroupManifest):
            found[node] = got.manifest
    return found


def group_prune_candidates(states: NodeStates, nodes: Sequence[str], keep: int) -> dict[str, list[str]]:
    """Per node, oldest first, what the host rule prunes (beyond the newest `keep`, and half-made ones),
    except a release any node's `current` or `known-good` names: a group release stays whole."""
    asked = [node for node in nodes if node in states]
    protected = {pointer for node in asked for pointer in (states[node].current, states[node].known_good)}
    return {node: [i for i in prune_candidates(states[node], keep) if i not in protected] for node in asked}
