"""Launcher data_parallel's units, pure text out: on every node `vllm serve` for its DP ranks, through the
same CLI script as launcher vllm, with the flags vLLM's data-parallel launcher reads for the chosen mode.
"""

from __future__ import annotations

from collections.abc import Mapping

from vllmctl.inventory.model import EngineSpec, ModelDeployment
from vllmctl.multinode.dp_plan import DataParallelLayout
from vllmctl.multinode.plan import ClusterPlan
from vllmctl.multinode.units import API_SERVER_MODULE, node_environment
from vllmctl.paths import HOME_DIR, SERVICE_USER, VLLM_CLI_HELPER
from vllmctl.render.templates import render_template
from vllmctl.tasks.desired import ModelPlan, Replica, env_path, exec_argv, unit_name


def _layout(plan: ClusterPlan) -> DataParallelLayout:
    if plan.data_parallel is None:
        raise ValueError(f"group {plan.cluster.group} is not planned for launcher data_parallel")
    return plan.data_parallel


def dp_node_flags(dp: DataParallelLayout, host: str, head_ip: str) -> list[str]:
    """The node's own DP flags. Internal: the head starts rank 0 and the coordinator, the others add their
    first rank and --headless (a start rank without --headless would make vLLM infer hybrid mode). Hybrid:
    every node its first rank and --data-parallel-hybrid-lb (vLLM 0.12 infers it only from a non-zero start
    rank). External, one rank per node: --data-parallel-rank, which vLLM reads as its external mode."""
    address = ["--data-parallel-address", head_ip, "--data-parallel-rpc-port", str(dp.rpc_port)]
    start = str(dp.start_rank(host))
    if dp.mode == "external":
        return ["--data-parallel-rank", start, *address]
    local = ["--data-parallel-size-local", str(dp.size_local), *address]
    if dp.mode == "hybrid":
        return [*local, "--data-parallel-start-rank", start, "--data-parallel-hybrid-lb"]
    if host == dp.hosts[0]:
        return local
    return [*local, "--data-parallel-start-rank", start, "--headless"]


def dp_node_argv(
    model: ModelDeployment, engine: EngineSpec, plan: ClusterPlan, host: str, head_ip: str
) -> list[str]:
    """`vllm serve` with the plan's flags (--data-parallel-size, TP, expert parallel) and the node's own."""
    dp = _layout(plan)
    replica = Replica(0, model.port)
    python, flag, module, *rest = exec_argv(
        model, engine, ModelPlan(plan.plan.engine_args, (replica,)), replica
    )
    if (flag, module) != ("-m", API_SERVER_MODULE):
        raise ValueError(f"launcher data_parallel runs vLLM only, not {module}")
    return [python, VLLM_CLI_HELPER, "serve", *rest, *dp_node_flags(dp, host, head_ip)]


def render_dp_node_unit(
    model: ModelDeployment,
    engine: EngineSpec,
    plan: ClusterPlan,
    host: str,
    addresses: Mapping[str, str],
    extra_env: Mapping[str, str] | None = None,
) -> str:
    """The model's engine unit on one node of a data-parallel group (the same unit name on every node)."""
    dp = _layout(plan)
    first = dp.start_rank(host)
    return render_template(
        "vllm-dp-node.service.j2",
        {
            "model": model.name,
            "group": plan.cluster.group,
            "engine": engine.name,
            "engine_version": engine.version,
            "first_rank": first,
            "last_rank": first + dp.size_local - 1,
            "dp": dp.size,
            "node": dp.hosts.index(host),
            "nodes": len(dp.hosts),
            "tp": dp.tp,
            "mode": dp.mode,
            "api": host in dp.api_hosts,
            "user": SERVICE_USER,
            "home": HOME_DIR,
            "env_file": env_path(model.name),
            "environment": node_environment(plan.cluster, addresses[host], extra_env),
            "exec_argv": dp_node_argv(model, engine, plan, host, addresses[dp.hosts[0]]),
            "restart_sec": 10,
            "start_timeout_sec": 1800,
            "unit_stem": unit_name(model.name, 0).removesuffix(".service"),
        },
    )
