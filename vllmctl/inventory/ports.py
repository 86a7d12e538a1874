"""Replica ports on each host: replica i of a model listens on port + i, and every such port must lie in
1024..65535 and clash with no other model, the host's SSH port or a Ray port of a multi-node group there.

At validate time the replica count is the most the inventory allows: the host's declared GPUs, split evenly
between the models it serves, divided by the model's tensor_parallel_size (one replica for SGLang, pipeline
parallelism, multi-node models and hosts without declared GPUs). `planned_port_problems` checks the
replica counts a plan chose, with gathered facts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vllmctl.inventory.model import Inventory, RaySettings

if TYPE_CHECKING:
    from vllmctl.inventory.resolve import Checker

LOWEST, HIGHEST = 1024, 65535
FIXED_RAY_PORTS = ("gcs_port", "node_manager_port", "object_manager_port", "distributed_port")
RAY_DEFAULTS = {10001: "Ray's client server port", 52365: "Ray's dashboard agent port"}
RAY_DASHBOARD = 8265
REPLICA_RULE = "replicas on a host: its gpus.count ÷ the models it serves ÷ tensor_parallel_size"


@dataclass(frozen=True)
class Ports:
    """A run of ports: a model's replicas, or something else that listens on the host."""

    label: str  # "model 'x'", "the host's SSH port", "gcs_port of multi-node group 'g'", ...
    first: int
    last: int
    model: str = ""  # the model whose replicas these are
    group: str = ""  # the multi-node group whose configured Ray port this is (checked with that group)

    def text(self) -> str:
        return str(self.first) if self.first == self.last else f"{self.first}-{self.last}"


def ray_ports(group: str, ray: RaySettings) -> list[Ports]:
    """Every port a multi-node group's Ray cluster (and vLLM's rendezvous) opens on its hosts."""
    found = [
        Ports(f"{key} of multi-node group '{group}'", getattr(ray, key), getattr(ray, key), group=group)
        for key in FIXED_RAY_PORTS
    ]
    workers = f"the Ray worker ports of group '{group}'"
    found.append(Ports(workers, ray.min_worker_port, ray.max_worker_port, group=group))
    extra = {**RAY_DEFAULTS, **({RAY_DASHBOARD: "Ray's dashboard port"} if ray.dashboard else {})}
    return found + [Ports(f"{what} (group '{group}')", port, port) for port, what in extra.items()]


def conflicts(
    models: Mapping[str, list[Ports]], taken: Mapping[str, list[Ports]], clusters: Mapping[str, str]
) -> dict[str, tuple[str, str]]:
    """model -> (message, hint) for its first port problem. `models` lists, per host, each model's ports in
    inventory order; `taken` the other ports each host opens."""
    found: dict[str, tuple[str, str]] = {}
    for host, uses in models.items():
        placed: list[Ports] = []
        for ports in uses:
            model = ports.model
            if model in found:
                continue
            if ports.last > HIGHEST:
                used = f"model '{model}' on host '{host}' would use ports {ports.text()}, past {HIGHEST}"
                found[model] = (used, f"lower its port ({REPLICA_RULE})")
                continue
            for other in [*placed, *taken.get(host, [])]:
                own_group = other.group != "" and other.group == clusters.get(model)  # checked there
                if not own_group and ports.first <= other.last and other.first <= ports.last:
                    found[model] = _overlap(host, ports, other)
                    break
            placed.append(ports)
    return found


def _overlap(host: str, ports: Ports, other: Ports) -> tuple[str, str]:
    if ports.first == ports.last == other.first == other.last and other.model:
        used = f"port {ports.first} on host '{host}' is already used by {other.label}"
        return used, "give each model on a host its own port"
    plural = "s" if ports.first != ports.last else ""
    used = f"{ports.label} on host '{host}' would use port{plural} {ports.text()}"
    hint = f"give each its own ports: replica i listens on port + i ({REPLICA_RULE})"
    return f"{used}, which overlaps {other.label} ({other.text()})", hint


def _whole(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else 1


def worst_replicas(checker: Checker, model: str, body: dict[str, Any], host: str) -> int:
    args = body.get("engine_args")
    args = args if isinstance(args, dict) else {}
    single = model in checker.resolved.model_clusters or "vllm" not in checker.engines_for(model, body)
    gpus = checker.resolved.hosts[host].get("gpus")
    count = gpus.get("count") if isinstance(gpus, dict) else None
    if single or _whole(args.get("pipeline_parallel_size")) > 1 or not isinstance(count, int):
        return 1
    return max(1, count // max(1, len(checker.models_of(host))) // _whole(args.get("tensor_parallel_size")))


def check_ports(checker: Checker) -> None:
    from vllmctl.inventory.clusters import multi_node_groups, ray_settings_or_none

    bodies = checker.data.get("models")
    models: dict[str, list[Ports]] = {}
    for name, hosts in checker.resolved.model_hosts.items():
        body = bodies.get(name) if isinstance(bodies, dict) else None
        port = body.get("port", 8000) if isinstance(body, dict) else None
        if not isinstance(body, dict) or not isinstance(port, int) or not LOWEST <= port <= HIGHEST:
            continue  # the schema reported it
        for host in hosts:
            last = port + worst_replicas(checker, name, body, host) - 1
            models.setdefault(host, []).append(Ports(f"model '{name}'", port, last, name))
    taken: dict[str, list[Ports]] = {}
    for host, merged in checker.resolved.hosts.items():
        ssh_port = merged["ssh"].get("port", 22)
        if isinstance(ssh_port, int):
            taken[host] = [Ports("the host's SSH port", ssh_port, ssh_port)]
    groups = multi_node_groups(checker.data)
    for group in set(checker.resolved.model_clusters.values()):
        ray = ray_settings_or_none(groups[group])
        if ray is not None and all(isinstance(getattr(ray, key), int) for key in FIXED_RAY_PORTS):
            for host in checker.resolved.groups.get(group, ()):
                taken.setdefault(host, []).extend(ray_ports(group, ray))
    for model, (message, hint) in conflicts(models, taken, checker.resolved.model_clusters).items():
        checker.add(("models", model, "port"), message, hint)


def planned_port_problems(inventory: Inventory, replicas: Mapping[tuple[str, str], int]) -> list[str]:
    """The same checks for the replica counts a plan chose: (host, model) -> replicas."""
    models: dict[str, list[Ports]] = {}
    for model in inventory.models.values():
        for host in model.hosts:
            last = model.port + max(1, replicas.get((host, model.name), 1)) - 1
            models.setdefault(host, []).append(Ports(f"model '{model.name}'", model.port, last, model.name))
    taken = {
        name: [Ports("the host's SSH port", h.ssh.port, h.ssh.port)] for name, h in inventory.hosts.items()
    }
    clusters = {m.name: m.cluster.group for m in inventory.models.values() if m.cluster is not None}
    for cluster in inventory.clusters.values():
        if cluster.group in clusters.values():
            for host in cluster.hosts:
                taken.setdefault(host, []).extend(ray_ports(cluster.group, cluster.ray))
    return [f"{message}\n  hint: {hint}" for message, hint in conflicts(models, taken, clusters).values()]
