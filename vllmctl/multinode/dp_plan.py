"""Data-parallel planning, pure: DP ranks of TP GPUs on every node of a group, the experts split over all
DP x TP ranks with expert parallel as vLLM's FusedMoE splits them, the all-to-all backend, and the ports.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.gpus import GpuModel
from vllmctl.errors import PlanError, VllmctlError
from vllmctl.inventory.model import ClusterSpec
from vllmctl.multinode import launch_support
from vllmctl.planner import plan_deployment
from vllmctl.planner.types import Decision, DeploymentPlan, DeploymentRequest
from vllmctl.planner.versions import parse_version

DP_HINT = "set groups.GROUP.data_parallel.size_local (ranks per node) and size, or tensor_parallel_size"
# Set by rank 0 at start (get_open_port) and handed to the other nodes in the DP handshake
# (vllm/v1/engine/utils.py, EngineHandshakeMetadata): they cannot be pinned, only allowed by subnet.
EPHEMERAL_PORTS = (
    "the DP coordinator's ZMQ sockets, the engines' input/output sockets and the DP process group's "
    "torch.distributed ports: picked free by the head at start (get_open_port) and sent in the handshake"
)


@dataclass(frozen=True)
class DataParallelLayout:
    """The ranks of one DP launch: `size_local` ranks of `tp` GPUs on each of `hosts` (head first)."""

    size: int
    size_local: int
    tp: int
    hosts: tuple[str, ...]
    balancing: str  # the inventory's: internal or external
    mode: str  # vLLM's: internal, hybrid or external (one rank per node)
    rpc_port: int
    expert_parallel: bool
    experts_per_rank: tuple[int, int]  # (most, fewest) routed experts on one rank; (0, 0) for a dense model
    all2all_backend: str | None  # None: no all-to-all (no expert parallel across DP)

    def start_rank(self, host: str) -> int:
        return self.hosts.index(host) * self.size_local

    @property
    def api_hosts(self) -> tuple[str, ...]:
        """The nodes that run an API server: the head alone (internal), else every node."""
        return self.hosts[:1] if self.mode == "internal" else self.hosts

    def ports(self, server_port: int) -> dict[str, Any]:
        """What each node listens on that the others (or the gateway) reach, and what is ephemeral."""
        return {
            "rpc": {"host": self.hosts[0], "port": self.rpc_port, "reached_by": list(self.hosts[1:])},
            "api": {host: server_port for host in self.api_hosts},
            "ephemeral": EPHEMERAL_PORTS,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "data_parallel_size": self.size,
            "data_parallel_size_local": self.size_local,
            "tensor_parallel_size": self.tp,
            "balancing": self.balancing,
            "vllm_mode": self.mode,
            "start_ranks": {host: self.start_rank(host) for host in self.hosts},
            "rpc_port": self.rpc_port,
            "enable_expert_parallel": self.expert_parallel,
            "experts_per_rank": list(self.experts_per_rank),
            "all2all_backend": self.all2all_backend,
        }


def experts_per_rank(num_experts: int, ranks: int) -> tuple[int, int]:
    """determine_expert_map (fused_moe/layer.py, 0.12.0; expert_map_manager.py, 0.34.0): `num // ranks`
    each, the first `num % ranks` ranks one more."""
    if num_experts <= 0:
        return 0, 0
    base, extra = divmod(num_experts, ranks)
    return base + (1 if extra else 0), base


def vllm_mode(balancing: str, size_local: int, size: int) -> str:
    """The load-balancing mode vLLM runs (create_engine_config, vllm/engine/arg_utils.py): external balancing
    is its hybrid mode, or its external one with one rank per node (it switches so itself)."""
    if balancing == "internal" or size_local == size:
        return "internal"
    return "external" if size_local == 1 else "hybrid"


def _sizes(cluster: ClusterSpec, tp: int, gpus_per_node: int) -> tuple[int, int]:
    settings = cluster.data_parallel
    local = settings.size_local or gpus_per_node // tp
    if local < 1 or local * tp > gpus_per_node:
        raise PlanError(
            f"group '{cluster.group}': {local or 1} DP rank(s) of TP {tp} need {(local or 1) * tp} GPUs per "
            f"node; each node has {gpus_per_node}",
            DP_HINT.replace("GROUP", cluster.group),
        )
    size = settings.size or local * len(cluster.hosts)
    if size % local or size // local > len(cluster.hosts):
        raise PlanError(
            f"group '{cluster.group}': data_parallel size {size} is not whole nodes of {local} rank(s) "
            f"within its {len(cluster.hosts)} hosts",
            DP_HINT.replace("GROUP", cluster.group),
        )
    return size, local


def _tp_choices(explicit: Any, gpus_per_node: int) -> list[int]:
    if isinstance(explicit, int):
        return [explicit]
    return [tp for tp in (1, 2, 4, 8, 16) if tp <= gpus_per_node and gpus_per_node % tp == 0]


def plan_data_parallel(
    cluster: ClusterSpec,
    arch: ModelArch,
    gpu: GpuModel,
    gpus_per_node: int,
    request: DeploymentRequest,
) -> tuple[DeploymentPlan, DataParallelLayout, list[Decision]]:
    """The smallest TP (or the explicit one) at which each rank holds its share of the model, with the
    experts split over all DP x TP ranks; PlanError naming the widest TP's refusal when none does."""
    version = parse_version(request.engine_version)
    explicit = request.engine_args
    last: VllmctlError | None = None
    for tp in _tp_choices(explicit.get("tensor_parallel_size"), gpus_per_node):
        size, local = _sizes(cluster, tp, gpus_per_node)
        ep = bool(explicit.get("enable_expert_parallel", arch.is_moe and tp * size > 1))
        args = {**explicit, "tensor_parallel_size": tp, "data_parallel_size": size}
        args["enable_expert_parallel"] = ep
        nodes = size // local
        try:
            plan = plan_deployment(arch, gpu, gpus_per_node, replace(request, engine_args=args, nodes=nodes))
        except VllmctlError as exc:
            last = exc
            continue
        mode = vllm_mode(cluster.data_parallel.balancing, local, size)
        _check_release(cluster, request.engine_version, mode, arch)
        ranks = tp * size
        experts = experts_per_rank(arch.num_experts if arch.is_moe else 0, ranks if ep else 1)
        all2all = launch_support.all2all_default(version) if ep and size > 1 else None
        layout = DataParallelLayout(
            size, local, tp, cluster.hosts[:nodes], cluster.data_parallel.balancing, mode,
            cluster.data_parallel.rpc_port, ep, experts, all2all,
        )  # fmt: skip
        return plan, layout, _reasons(cluster, arch, layout, "tensor_parallel_size" in explicit)
    assert last is not None
    raise last


def _check_release(cluster: ClusterSpec, engine_version: str, mode: str, arch: ModelArch) -> None:
    needed = (*launch_support.DP_FLAGS, *launch_support.MODE_FLAGS[mode])
    launch_support.check_release(cluster.group, "data_parallel", engine_version, needed)
    since = launch_support.EXTERNAL_DP_MOE_ONLY_SINCE
    if mode == "external" and not arch.is_moe and parse_version(engine_version) >= since:
        raise PlanError(
            f"group '{cluster.group}': one DP rank per node with an API server each is vLLM's external "
            f'data-parallel mode, which vLLM {engine_version} refuses for a dense model ("Non-MoE models '
            'do not support external data parallel mode", vllm/engine/arg_utils.py from 0.21.0)',
            "serve a dense model as replicas (a plain host list), or balancing: internal",
        )


def _reasons(
    cluster: ClusterSpec, arch: ModelArch, dp: DataParallelLayout, explicit_tp: bool
) -> list[Decision]:
    ranks = dp.size * dp.tp
    most, fewest = dp.experts_per_rank
    if dp.expert_parallel and arch.is_moe:
        split = f"{most} experts" if most == fewest else f"{fewest}-{most} experts"
        ep_why = (
            f"{arch.num_experts} experts over DP {dp.size} x TP {dp.tp} = {ranks} ranks: {split} whole each "
            "(FusedMoEParallelConfig: ep_size = DP x TP; determine_expert_map, linear placement)"
        )
    elif arch.is_moe:
        ep_why = (
            f"explicit; every expert TP-sharded over the {ranks} DP x TP ranks (vLLM flattens TP across DP)"
        )
    else:
        ep_why = "dense model: no experts to split; each DP rank holds the whole model"
    mode_why = {
        "internal": f"one API server on {dp.hosts[0]} balances over all {dp.size} ranks; the other nodes "
        "run --headless",
        "hybrid": "an API server per node balances over its local ranks (--data-parallel-hybrid-lb); the "
        "gateway balances between the nodes",
        "external": "one rank per node, each with its API server (--data-parallel-rank); the gateway "
        "balances between them",
    }[dp.mode]
    a2a = (
        f"vLLM's default for this release, used between the {ranks} expert-parallel ranks"
        if dp.all2all_backend
        else "none: no expert parallel across DP ranks"
    )
    tp_why = f"{'explicit; ' if explicit_tp else 'the smallest that holds a rank; '}inside one node"
    return [
        Decision("tensor_parallel_size", dp.tp, tp_why),
        Decision("data_parallel_size", dp.size, f"{dp.size_local} rank(s) per node on {len(dp.hosts)} nodes"),
        Decision("data_parallel_size_local", dp.size_local, f"GPUs per node / TP {dp.tp}, or explicit"),
        Decision("enable_expert_parallel", dp.expert_parallel, ep_why),
        Decision("all2all_backend", dp.all2all_backend, a2a),
        Decision("data_parallel_mode", dp.mode, mode_why),
        Decision("distributed_executor_backend", "mp", "launcher data_parallel: every node starts its own "
                 "ranks (mp), the head coordinates them over the DP RPC port; no Ray"),
    ]  # fmt: skip
