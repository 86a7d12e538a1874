"""A multi-node model's group seen as one, pure: the one script each used node runs for its state (its Ray
unit, or its engine ranks' without Ray, and group release pointers; on the head also the engine unit
and `ray status`), the answers read into a ClusterState, and which models `vllmctl status` shows as a group.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from vllmctl.errors import VllmctlError
from vllmctl.inventory.model import EngineSpec, Inventory
from vllmctl.multinode.bringup import RayStatus, cluster_formed, parse_ray_status
from vllmctl.multinode.plan import ClusterPlan
from vllmctl.multinode.preflight import MISSING, interface_ip_command
from vllmctl.multinode.units import ray_unit_name
from vllmctl.releases.group import group_dir
from vllmctl.render.quoting import shell_word
from vllmctl.status.model import NO_RELEASE, UNREACHABLE, ClusterState, ModelStatus
from vllmctl.tasks.desired import unit_name, venv_path

RAY_STATUS_MARK = "--- ray status ---"
# a head whose GCS does not answer must not hold `vllmctl status` up: it is "not formed" either way
RAY_STATUS_TIMEOUT_S = 20


def node_state_script(plan: ClusterPlan, engine: EngineSpec, host: str, head_address: str) -> str:
    """key=value lines: the Ray unit's state; on the head also the engine unit's state, then `ray status`
    after RAY_STATUS_MARK (at the cluster interface's address, else `head_address`)."""
    pointers = shell_word(group_dir(plan.cluster.group))
    engine_unit = shell_word(unit_name(plan.model, 0))
    with_ray = plan.cluster.launcher == "ray"
    node_unit = shell_word(ray_unit_name(plan.cluster.group)) if with_ray else engine_unit  # its ranks
    lines = [
        f"echo ray_unit=$(systemctl is-active {node_unit})",
        f"echo release=$(readlink {pointers}/current || echo {NO_RELEASE})",
        f"echo known_good=$(readlink {pointers}/known-good || echo {NO_RELEASE})",
    ]
    if host == plan.head and not with_ray:
        lines.append(f"echo engine_unit=$(systemctl is-active {engine_unit})")
    if host == plan.head and with_ray:
        fallback = shell_word(head_address)
        ray = shell_word(f"{venv_path(engine)}/bin/ray")
        lines += [
            f"echo engine_unit=$(systemctl is-active {engine_unit})",
            f"ip=$({interface_ip_command(plan.cluster.interface)})",
            f'[ "$ip" = {MISSING} ] && ip={fallback}',
            f"echo {shell_word(RAY_STATUS_MARK)}",
            f'timeout {RAY_STATUS_TIMEOUT_S} {ray} status --address="$ip":{plan.cluster.ray.gcs_port} 2>&1'
            ' || echo "ray status failed (exit $?)"',
        ]
    return "\n".join(lines) + "\n"


def parse_node_state(stdout: str) -> tuple[dict[str, str], str | None]:
    """(key -> value before the mark, the `ray status` text after it or None when there is none)."""
    head, mark, ray = stdout.partition(RAY_STATUS_MARK + "\n")
    values = dict(line.split("=", 1) for line in head.splitlines() if "=" in line)
    return {key: value.strip() or "unknown" for key, value in values.items()}, ray if mark else None


def cluster_state(
    plan: ClusterPlan, answers: Mapping[str, str | VllmctlError], port: int | None = None
) -> ClusterState:
    """Each used node's answer (its stdout, or the error that kept it from answering) into one state;
    `port`: the model's, on which each node of `plan.api_hosts` serves."""
    units: dict[str, str] = {}
    errors: dict[str, str] = {}
    releases: dict[str, str] = {}
    known_good: dict[str, str] = {}
    engine = UNREACHABLE
    ray_text: str | None = None
    for host in plan.hosts:
        answer = answers.get(host, VllmctlError("not asked", ""))
        if isinstance(answer, VllmctlError):
            units[host] = UNREACHABLE
            errors[host] = f"{UNREACHABLE}: {answer.message}"
            continue
        values, ray = parse_node_state(answer)
        units[host] = values.get("ray_unit", "unknown")
        # the pointers are relative links into releases/: the id is the link's last part
        releases[host] = values.get("release", NO_RELEASE).rsplit("/", 1)[-1]
        known_good[host] = values.get("known_good", NO_RELEASE).rsplit("/", 1)[-1]
        if host == plan.head:
            engine, ray_text = values.get("engine_unit", "unknown"), ray
    counted = parse_ray_status(ray_text) if ray_text else RayStatus(0, 0.0)
    if plan.cluster.ray_free:
        active = sum(state == "active" for state in units.values())
        missing = None if active == len(plan.hosts) else f"{active} of {len(plan.hosts)} ranks' units active"
    else:
        missing = cluster_formed(counted, plan.pp, int(plan.plan.gpu_count))
    said = (ray_text or "").strip()
    if missing is not None and said and "Active:" not in said:  # not a status at all: quote its last line
        missing += f" ({said.splitlines()[-1][-200:]})"
    return ClusterState(
        group=plan.cluster.group,
        head=plan.head,
        ray_units=units,
        ray_nodes=counted.nodes,
        ray_gpus=counted.gpus,
        missing=missing,
        engine_unit=unit_name(plan.model, 0),
        engine=engine,
        errors=errors,
        releases=releases,
        known_good=known_good,
        launcher=plan.cluster.launcher,
        api_servers={host: port for host in plan.api_hosts} if port is not None else {},
    )


def group_models(inv: Inventory, hosts: Sequence[str], models: Sequence[str] = ()) -> list[str]:
    """Models on a multi_node group that has one of `hosts` (only `models` when given): one entry each."""
    return [
        m.name
        for m in inv.models.values()
        if m.cluster is not None
        and (not models or m.name in models)
        and any(host in hosts for host in m.cluster.hosts)
    ]


def with_groups(
    statuses: Sequence[ModelStatus], states: Mapping[str, ClusterState | VllmctlError]
) -> list[ModelStatus]:
    """Each multi-node model's entry (one per API server) carries its group; its service state is its node's
    engine unit as the group gather saw it (the head may lie outside --limit). A group that could not be
    read is an error."""
    found: list[ModelStatus] = []
    for status in statuses:
        state = states.get(status.model)
        if isinstance(state, VllmctlError):
            status = replace(status, error=status.error or f"cluster: {state.message}")
        elif state is not None:
            # a node's own API server (external data parallel) runs in its node's engine unit
            unit = state.engine if status.host == state.head else state.ray_units.get(status.host, "unknown")
            status = replace(status, group=state, service_state=unit, release=state.release)
        found.append(status)
    return found
