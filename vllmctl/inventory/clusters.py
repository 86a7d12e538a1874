"""Inventory checks for multi_node groups (sizes, interface, Ray ports) and the ClusterSpecs they build."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vllmctl.inventory.data_parallel_checks import check_group, check_model, data_parallel_settings
from vllmctl.inventory.model import MASTER_PORT, ClusterSpec, RaySettings

if TYPE_CHECKING:
    from vllmctl.inventory.resolve import Checker, Resolved

FIXED_PORTS = ("gcs_port", "node_manager_port", "object_manager_port", "distributed_port")
INTERFACE_HINT = (
    "add cluster_interface: the NIC the hosts reach each other on (e.g. eth1); Ray, NCCL and Gloo bind to it"
)


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def multi_node_groups(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Groups written as a mapping with `multi_node: true`, by name."""
    groups = _mapping(data.get("groups"))
    return {
        name: raw for name, raw in groups.items() if isinstance(raw, dict) and raw.get("multi_node") is True
    }


def ray_settings(raw: dict[str, Any]) -> RaySettings:
    return RaySettings(**_mapping(raw.get("ray")))


def check_clusters(checker: Checker) -> None:
    groups = multi_node_groups(checker.data)
    for name, raw in groups.items():
        hosts = checker.resolved.groups.get(name, ())
        if len(hosts) < 2:
            checker.add(
                ("groups", name, "hosts"),
                f"multi-node group '{name}' has {len(hosts)} host(s)",
                "a multi-node group needs at least 2 hosts; drop multi_node to serve on one host",
            )
        if "cluster_interface" not in raw:
            checker.add(
                ("groups", name),
                f"multi-node group '{name}' names no cluster_interface",
                INTERFACE_HINT,
                True,
            )
        _check_ports(checker, name, _mapping(raw.get("ray")))
        check_group(checker, name, raw, len(hosts))
    for model, body in _mapping(checker.data.get("models")).items():
        if isinstance(body, dict):
            _check_model(checker, model, body, groups)


def _check_ports(checker: Checker, group: str, ray: dict[str, Any]) -> None:
    defaults = RaySettings()
    values = {
        key: ray.get(key, getattr(defaults, key))
        for key in (*FIXED_PORTS, "min_worker_port", "max_worker_port")
    }
    if not all(isinstance(v, int) for v in values.values()):
        return  # the schema reported it
    low, high = values["min_worker_port"], values["max_worker_port"]
    if low > high:
        checker.add(
            ("groups", group, "ray", "min_worker_port"),
            f"min_worker_port {low} is above max_worker_port {high}",
            "make the worker port range low..high",
        )
    seen: dict[int, str] = {}
    for key in FIXED_PORTS:
        port = values[key]
        path = ("groups", group, "ray", key)
        if port in seen:
            checker.add(path, f"{key} {port} is also the {seen[port]}", "give each Ray port its own number")
        elif low <= port <= high:
            checker.add(
                path, f"{key} {port} lies in the worker port range {low}-{high}", "move it out of the range"
            )
        seen.setdefault(port, key)


def _check_model(
    checker: Checker, model: str, body: dict[str, Any], groups: dict[str, dict[str, Any]]
) -> None:
    selectors = body.get("hosts")
    items = [selectors] if isinstance(selectors, str) else selectors if isinstance(selectors, list) else []
    named = [item for item in items if isinstance(item, str) and item in groups]
    if not named:
        return
    if len(items) != 1:
        checker.add(
            ("models", model, "hosts"),
            f"model '{model}' names multi-node group '{named[0]}' together with other hosts",
            "serve a multi-node model on exactly one multi_node group",
        )
        return
    checker.resolved.model_clusters[model] = named[0]
    engine = _mapping(body.get("engine")).get("name")
    if engine == "sglang" or (engine is None and "sglang" in checker.engines_for(model, body)):
        checker.add(
            ("models", model, "hosts"),
            f"model '{model}' is multi-node but its engine is sglang",
            "multi-node serving is built for vllm only; use engine: {name: vllm}",
        )
    group = groups[named[0]]
    port = body.get("port", 8000)
    if group.get("launcher") == "data_parallel":
        check_model(checker, model, body, named[0], group)
        return
    if group.get("launcher") == "vllm":
        if port == group.get("master_port", MASTER_PORT):
            checker.add(
                ("models", model, "port"),
                f"port {port} is also the master_port of group '{named[0]}'",
                "pick a server port other than the group's master_port",
            )
        return
    ray = ray_settings_or_none(group)
    if ray is not None and isinstance(port, int):
        taken = {getattr(ray, key): key for key in FIXED_PORTS}
        if port in taken or ray.min_worker_port <= port <= ray.max_worker_port:
            checker.add(
                ("models", model, "port"),
                f"port {port} is also a Ray port of group '{named[0]}' ({taken.get(port, 'worker range')})",
                "pick a server port outside the group's Ray ports",
            )


def ray_settings_or_none(raw: dict[str, Any]) -> RaySettings | None:
    try:
        return ray_settings(raw)
    except TypeError:  # unknown keys: the schema reported them
        return None


def cluster_specs(data: dict[str, Any], resolved: Resolved) -> dict[str, ClusterSpec]:
    """ClusterSpecs for the multi_node groups; only called once every check passed."""
    return {
        name: ClusterSpec(
            group=name,
            hosts=resolved.groups.get(name, ()),
            interface=raw.get("cluster_interface"),
            ray=ray_settings(raw),
            launcher=raw.get("launcher", "ray"),
            master_port=raw.get("master_port", MASTER_PORT),
            data_parallel=data_parallel_settings(raw),
        )
        for name, raw in multi_node_groups(data).items()
    }
