"""Ray node units (head and workers) and the head's vLLM unit of a multi-node model, rendered from the
cluster plan and each node's address on the cluster interface; pure text out.
"""

from __future__ import annotations

from collections.abc import Mapping

from vllmctl.inventory.model import ClusterSpec, EngineSpec, ModelDeployment
from vllmctl.multinode.plan import ClusterPlan
from vllmctl.paths import HOME_DIR, RAY_DIR, SERVICE_USER
from vllmctl.render.quoting import unit_file_name
from vllmctl.render.templates import render_template
from vllmctl.tasks.desired import ModelPlan, Replica, env_path, exec_argv, unit_name
from vllmctl.tasks.desired import venv_path as engine_venv_path


def ray_unit_name(group: str) -> str:
    return unit_file_name(f"vllmctl-ray-{group}.service")


def node_environment(
    cluster: ClusterSpec, node_ip: str, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """What every process of the engine on this node needs: its own address, and the NIC for NCCL and Gloo.

    `extra` is the host's `vars.env`: Ray starts the engine's workers, so they inherit the Ray unit's env.
    """
    environment = {str(k): str(v) for k, v in (extra or {}).items()}
    environment.update({"RAY_USAGE_STATS_ENABLED": "0", "VLLM_HOST_IP": node_ip})
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
