"""Cluster planning, pure: one engine across a multi-node group's hosts with TP = GPUs per node and PP = the
fewest nodes that hold the model, each choice with its reason; mismatched nodes are a clear error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.loader import resolve_catalog
from vllmctl.errors import PlanError, VllmctlError
from vllmctl.inventory.model import ClusterSpec, EngineSpec, Inventory, ModelDeployment
from vllmctl.multinode import launch_support
from vllmctl.multinode.dp_plan import DataParallelLayout, plan_data_parallel
from vllmctl.planner import plan_deployment
from vllmctl.planner.inventory_plan import GpuFacts, HostModelPlan, deployment_request, host_gpus
from vllmctl.planner.types import Decision, DeploymentPlan

# the planner's own parallelism reasons are replaced by the cluster's, which know the nodes
REPLACED_REASONS = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_replicas")
DP_REPLACED = (*REPLACED_REASONS, "enable_expert_parallel", "data_parallel_size")
RAY_WHY = "the nodes form one Ray cluster and vLLM on the head places its workers through it"
LAUNCHER_WHY = (
    "launcher vllm: vLLM's own multi-node launcher (--nnodes/--node-rank/--master-addr), every node runs the "
    "mp executor for its ranks, the others headless; no Ray"
)
SAME_NODES_HINT = (
    "every node of a multi-node engine needs the same GPU kind and count (TP = GPUs per node): "
    "put matching hosts in the group"
)


@dataclass(frozen=True)
class ClusterPlan:
    """One engine over `hosts` (head first); `spare` hosts of the group are not needed by this model."""

    model: str
    cluster: ClusterSpec
    hosts: tuple[str, ...]
    spare: tuple[str, ...]
    tp: int
    pp: int
    plan: DeploymentPlan
    data_parallel: DataParallelLayout | None = None  # launcher data_parallel: the ranks on each node

    @property
    def head(self) -> str:
        return self.hosts[0]

    @property
    def workers(self) -> tuple[str, ...]:
        return self.hosts[1:]

    @property
    def api_hosts(self) -> tuple[str, ...]:
        """The nodes that run an API server: every used node in vLLM's hybrid and external data-parallel
        modes, else the head alone."""
        return self.data_parallel.api_hosts if self.data_parallel is not None else self.hosts[:1]

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "group": self.cluster.group,
            "head": self.head,
            "workers": list(self.workers),
            "spare": list(self.spare),
            "tensor_parallel_size": self.tp,
            "pipeline_parallel_size": self.pp,
            "plan": self.plan.to_json(),
            **({"data_parallel": self.data_parallel.to_json()} if self.data_parallel else {}),
        }


def implicit_cluster(model: ModelDeployment) -> ClusterSpec:
    """A model whose plan needs several of its hosts but names no multi_node group: default ports, no NIC."""
    return ClusterSpec(group=model.name, hosts=model.hosts)


def _node_gpus(
    cluster: ClusterSpec, inv: Inventory, gpu_facts: Mapping[str, GpuFacts] | None
) -> tuple[str, int, Any]:
    kinds: dict[tuple[str, int], list[str]] = {}
    found_gpu = None
    for name in cluster.hosts:
        found = host_gpus(inv.hosts[name], gpu_facts)
        if found is None:
            raise PlanError(
                f"no GPUs known for host '{name}'", "declare gpus: {model, count} or gather facts first"
            )
        gpu, count, _ = found
        kinds.setdefault((gpu.name, count), []).append(name)
        found_gpu = found_gpu or gpu
    if len(kinds) > 1:
        listed = "; ".join(f"{', '.join(hosts)}: {count}x {gpu}" for (gpu, count), hosts in kinds.items())
        raise PlanError(f"multi-node group '{cluster.group}' mixes GPUs ({listed})", SAME_NODES_HINT)
    (gpu_name, count) = next(iter(kinds))
    return gpu_name, count, found_gpu


def plan_cluster(
    inv: Inventory,
    model: ModelDeployment,
    cluster: ClusterSpec,
    gpu_facts: Mapping[str, GpuFacts] | None = None,
    arch: ModelArch | None = None,
) -> ClusterPlan:
    """TP = GPUs per node, PP = the fewest nodes that hold the model (or the explicit value), or PlanError."""
    arch = arch or resolve_catalog(model.source)
    if arch is None:
        raise PlanError(
            f"architecture of {model.source!r} is not known offline",
            "load it with catalog.load_arch (hub or local config.json)",
        )
    gpu_name, count, gpu = _node_gpus(cluster, inv, gpu_facts)
    engines: dict[str, list[str]] = {}
    for name in cluster.hosts:
        engine = model.engine or inv.hosts[name].engine
        engines.setdefault(f"{engine.distribution} {engine.version}", []).append(name)
    if len(engines) > 1:
        listed = "; ".join(f"{', '.join(hosts)}: {engine}" for engine, hosts in engines.items())
        raise PlanError(
            f"multi-node group '{cluster.group}' mixes engines ({listed})",
            "one engine version for every node: set engine once in defaults or on the model",
        )
    _check_launcher(cluster, model.engine or inv.hosts[cluster.hosts[0]].engine)
    nodes = len(cluster.hosts)
    if cluster.launcher == "data_parallel":
        request = deployment_request(model, inv.hosts[cluster.hosts[0]], nodes)
        plan, layout, reasons = plan_data_parallel(cluster, arch, gpu, count, request)
        kept = tuple(d for d in plan.reasons if d.flag not in DP_REPLACED)
        used, spare = layout.hosts, cluster.hosts[len(layout.hosts) :]
        why = f"first rank's node and the DP RPC port on {used[0]}; then {', '.join(used[1:])}" + (
            f"; not needed: {', '.join(spare)}" if spare else ""
        )
        engine_args = {**plan.engine_args, "distributed_executor_backend": "mp"}
        decisions = (*reasons, Decision("nodes", list(used), why), *kept)
        planned = replace(plan, engine_args=engine_args, reasons=decisions)
        return ClusterPlan(model.name, cluster, used, spare, layout.tp, 1, planned, layout)
    explicit_tp = model.engine_args.get("tensor_parallel_size")
    args = {**model.engine_args, "tensor_parallel_size": explicit_tp or count}
    head = inv.hosts[cluster.hosts[0]]
    request = replace(deployment_request(model, head, nodes), engine_args=args)
    explicit_pp = model.engine_args.get("pipeline_parallel_size")
    if isinstance(explicit_pp, int) and explicit_pp > nodes:
        raise PlanError(
            f"pipeline_parallel_size {explicit_pp} needs {explicit_pp} nodes; "
            f"group '{cluster.group}' has {nodes}",
            "add hosts to the group or lower pipeline_parallel_size",
        )
    plan = plan_deployment(arch, gpu, count, request)
    tp = int(plan.engine_args["tensor_parallel_size"])
    pp = int(plan.engine_args.get("pipeline_parallel_size", 1))
    one_node_why = ""
    if pp > 1 and explicit_pp is None:
        try:
            plan_deployment(arch, gpu, count, replace(request, nodes=1))
        except VllmctlError as exc:
            one_node_why = exc.message
    reasons = _reasons(cluster, gpu_name, count, tp, pp, explicit_tp, explicit_pp, one_node_why)
    kept = tuple(d for d in plan.reasons if d.flag not in REPLACED_REASONS)
    backend = "mp" if cluster.launcher == "vllm" else "ray"
    engine_args = {**plan.engine_args, "pipeline_parallel_size": pp, "distributed_executor_backend": backend}
    planned = replace(plan, engine_args=engine_args, reasons=(*reasons, *kept))
    return ClusterPlan(model.name, cluster, cluster.hosts[:pp], cluster.hosts[pp:], tp, pp, planned)


def _check_launcher(cluster: ClusterSpec, engine: EngineSpec) -> None:
    """Launcher vllm needs `--nnodes` and its companions in the engine's release, as read from its source
    (came with vLLM PR #23691, first in 0.11.1); a release not read is refused, not run unchecked."""
    if cluster.launcher == "vllm":
        launch_support.check_release(cluster.group, "vllm", engine.version, launch_support.NNODES_FLAGS)


def _reasons(
    cluster: ClusterSpec,
    gpu: str,
    count: int,
    tp: int,
    pp: int,
    explicit_tp: Any,
    explicit_pp: Any,
    one_node_why: str,
) -> list[Decision]:
    nodes = len(cluster.hosts)
    tp_why = (
        f"GPUs per node: {count}x {gpu} on each of the {nodes} hosts; tensor parallel stays inside a node"
    )
    if explicit_pp is not None:
        pp_why = f"explicit: {pp} pipeline stage(s), one per node"
    elif pp > 1:
        pp_why = f"the fewest nodes that hold the model: one node cannot ({one_node_why})"
    else:
        pp_why = f"one node of {count}x {gpu} holds the model: the engine runs on the head alone"
    used = cluster.hosts[:pp]
    spare = cluster.hosts[pp:]
    own = cluster.launcher == "vllm"
    nodes_why = f"{'rank 0' if own else 'Ray head'} and API server on {used[0]}" + (
        f"; {'headless ranks' if own else 'workers'} {', '.join(used[1:])}" if pp > 1 else ""
    )
    if spare:
        nodes_why += f"; not needed: {', '.join(spare)}"
    backend = (
        Decision("distributed_executor_backend", "mp", LAUNCHER_WHY)
        if own
        else Decision("distributed_executor_backend", "ray", f"launcher ray: {RAY_WHY}")
    )
    return [
        Decision("tensor_parallel_size", tp, f"explicit; {tp_why}" if explicit_tp else tp_why),
        Decision("pipeline_parallel_size", pp, pp_why),
        backend,
        Decision("nodes", list(used), nodes_why),
    ]


def clusters_for(inv: Inventory, entries: Sequence[HostModelPlan]) -> dict[str, ClusterSpec]:
    """Multi-node models: those on a multi_node group, and those whose per-host plan needs several hosts."""
    clusters = {name: m.cluster for name, m in inv.models.items() if m.cluster is not None}
    for entry in entries:
        model = inv.models[entry.model]
        needs_nodes = entry.plan is not None and len(entry.plan.replicas[0].nodes) > 1
        if model.cluster is None and needs_nodes:
            clusters.setdefault(model.name, implicit_cluster(model))
    return clusters


def with_planned_clusters(inv: Inventory, entries: Sequence[HostModelPlan]) -> Inventory:
    """`inv` where each model whose plan needs several of its plain-list hosts is one engine over them, as if
    they were a multi_node group named after the model: every command then treats it as one group."""
    implicit = {n: c for n, c in clusters_for(inv, entries).items() if inv.models[n].cluster is None}
    if not implicit:
        return inv
    models = {name: replace(m, cluster=implicit.get(name, m.cluster)) for name, m in inv.models.items()}
    return replace(inv, models=models, clusters={**inv.clusters, **{c.group: c for c in implicit.values()}})


def cluster_entries(
    inv: Inventory,
    entries: Sequence[HostModelPlan],
    gpu_facts: Mapping[str, GpuFacts] | None = None,
    archs: Mapping[str, ModelArch] | None = None,
) -> list[HostModelPlan]:
    """Per-host entries where each multi-node model's hosts show the one cluster plan and their role in it."""
    clusters = clusters_for(inv, entries)
    planned: dict[str, ClusterPlan | VllmctlError] = {}
    for name, cluster in clusters.items():
        model = inv.models[name]
        try:
            planned[name] = plan_cluster(inv, model, cluster, gpu_facts, (archs or {}).get(model.source))
        except VllmctlError as exc:
            planned[name] = exc
    result: list[HostModelPlan] = []
    for entry in entries:
        outcome = planned.get(entry.model)
        if outcome is None:
            result.append(entry)
        elif isinstance(outcome, VllmctlError):
            result.append(replace(entry, plan=None, error=outcome.message, hint=outcome.hint))
        else:
            result.append(replace(entry, plan=_for_host(outcome, entry.host)))
    return result


def _for_host(cluster: ClusterPlan, host: str) -> DeploymentPlan:
    own = cluster.cluster.launcher == "vllm"
    dp = cluster.data_parallel
    if dp is not None and host in dp.hosts:
        first = dp.start_rank(host)
        serves = "runs an API server" if host in dp.api_hosts else "headless"
        role = "head" if host == cluster.head else "worker"
        why = f"DP ranks {first}-{first + dp.size_local - 1} of {dp.size} (TP {dp.tp} each); {serves}"
    elif host == cluster.head:
        kind = "vLLM rank head" if own else "Ray head"
        role, why = "head", f"{kind}; runs the API server and pipeline stage 0 of {cluster.pp}"
    elif host in cluster.workers:
        stage = cluster.hosts.index(host)
        kind = "vLLM rank (headless) worker" if own else "Ray worker"
        role, why = "worker", f"{kind}; pipeline stage {stage} of {cluster.pp} (head {cluster.head})"
    else:
        role, why = "spare", "the model fits on fewer nodes; nothing of it runs here"
    return replace(cluster.plan, reasons=(*cluster.plan.reasons, Decision("role", role, why)))
