"""The `gateway:` checks the schema cannot express: its hosts and models exist (a multi-node model only with
an API server per node), every value that reaches haproxy.cfg has a safe spelling there, its ports clash with
nothing on its hosts, an API key it checks exists, a virtual IP is usable, and (on the controller) its TLS
files are there and the key is private."""

from __future__ import annotations

import ipaddress
import stat
from typing import Any

from vllmctl.inventory.positions import FieldPath
from vllmctl.inventory.resolve import Checker, mapping
from vllmctl.inventory.schema import did_you_mean


def check_gateway(checker: Checker) -> None:
    gateway = checker.data.get("gateway")
    if not isinstance(gateway, dict):
        return
    hosts = _hosts(checker, gateway.get("hosts"))
    checker.resolved.gateway_hosts = hosts
    models = mapping(checker.data.get("models"))
    for name in mapping(gateway.get("models")):
        if name not in models:
            hint = did_you_mean(name, set(models)) or "add it under `models:` or remove it here"
            checker.add(("gateway", "models", name), f"gateway model '{name}' is not a model", hint, True)
        elif name in checker.resolved.model_clusters and not _external_dp(checker, name):
            group = checker.resolved.model_clusters[name]
            hint = (
                "only a group with `launcher: data_parallel` and `data_parallel: {balancing: external}` "
                f"runs an API server per node for the gateway to balance; serve '{name}' without the "
                f"gateway, or give group '{group}' external data parallel (docs/multinode.md)"
            )
            message = f"gateway model '{name}' is a multi-node model with one API server: nothing to balance"
            checker.add(("gateway", "models", name), message, hint, True)
        elif gateway.get("check_api_key") and not _api_key(models[name]):
            hint = "give the model `engine_args: {api_key: {secret: NAME}}`, or set check_api_key: false"
            message = f"check_api_key: model '{name}' has no API key to check"
            checker.add(("gateway", "check_api_key"), message, hint)
    _address(checker, gateway.get("address", "0.0.0.0"))
    _ports(checker, gateway, hosts, models)
    if isinstance(gateway.get("vip"), dict):
        _vip(checker, gateway, hosts)
    if checker.files is not None:
        _tls_files(checker, mapping(gateway.get("tls")))


def _external_dp(checker: Checker, model: str) -> bool:
    """The model's multi_node group runs an API server on every node (launcher data_parallel, external
    balancing): the one kind of multi-node model the gateway balances over."""
    group = mapping(mapping(checker.data.get("groups")).get(checker.resolved.model_clusters[model]))
    balancing = mapping(group.get("data_parallel")).get("balancing")
    return group.get("launcher") == "data_parallel" and balancing == "external"


def _api_key(model: Any) -> bool:
    value = mapping(mapping(model).get("engine_args")).get("api_key")
    return isinstance(value, dict) and "secret" in value


def _hosts(checker: Checker, selectors: Any) -> tuple[str, ...]:
    items = [selectors] if isinstance(selectors, str) else selectors if isinstance(selectors, list) else []
    found: list[str] = []
    for index, selector in enumerate(items):
        if not isinstance(selector, str):
            continue
        path = ("gateway", "hosts", index) if isinstance(selectors, list) else ("gateway", "hosts")
        names = checker.resolved.groups.get(selector) or (
            (selector,) if selector in checker.resolved.hosts else ()
        )
        if not names:
            choices = {*checker.resolved.hosts, *checker.resolved.groups}
            checker.add(path, f"unknown host or group '{selector}'", did_you_mean(selector, choices) or "")
        found.extend(name for name in names if name not in found)
    return tuple(found)


def _address(checker: Checker, address: Any) -> None:
    try:
        parsed = ipaddress.ip_address(str(address))
    except ValueError:
        parsed = None
    if parsed is None or parsed.version != 4:
        hint = "an IPv4 address of the gateway host, or 0.0.0.0 for all of them"
        checker.add(
            ("gateway", "address"), f"gateway address {str(address)[:60]!r} is not an IPv4 address", hint
        )


def _vip(checker: Checker, gateway: dict[str, Any], hosts: tuple[str, ...]) -> None:
    """An unused unicast IPv4 address, two or more gateway hosts with IPv4 addresses (keepalived's unicast
    peers), and HAProxy listening on every address, the VIP included."""
    vip = gateway["vip"]
    address = vip.get("address")
    parsed = _ipv4(address)
    if parsed is None or parsed.is_unspecified or parsed.is_loopback or parsed.is_multicast:
        hint = "an unused IPv4 address on the gateway hosts' network"
        checker.add(("gateway", "vip", "address"), f"vip address {str(address)[:60]!r} is not usable", hint)
    else:
        for name, host in checker.resolved.hosts.items():
            if _ipv4(mapping(host).get("address")) == parsed:
                message = f"vip address {parsed} is host '{name}'s address"
                checker.add(("gateway", "vip", "address"), message, "choose an address no host has")
    if len(hosts) < 2:
        hint = "list two or more gateway hosts: the VIP moves between them"
        checker.add(("gateway", "vip"), "a vip needs two or more gateway hosts", hint, True)
    for name in hosts:
        if _ipv4(mapping(checker.resolved.hosts[name]).get("address")) is None:
            message = f"gateway host '{name}' has no IPv4 address for keepalived's unicast peers"
            checker.add(("gateway", "vip"), message, f"give host '{name}' an IPv4 `address`", True)
    if str(gateway.get("address", "0.0.0.0")) != "0.0.0.0":
        hint = "remove gateway.address (0.0.0.0): HAProxy must listen on the VIP wherever it moves"
        checker.add(("gateway", "address"), "a gateway with a vip listens on 0.0.0.0", hint)


def _ipv4(value: Any) -> ipaddress.IPv4Address | None:
    try:
        parsed = ipaddress.ip_address(str(value))
    except ValueError:
        return None
    return parsed if isinstance(parsed, ipaddress.IPv4Address) else None


def _ports(checker: Checker, gateway: dict[str, Any], hosts: tuple[str, ...], models: dict[str, Any]) -> None:
    """A port used twice by the gateway, or by a model's first replica or SSH on a gateway host."""
    seen: dict[int, str] = {}
    listed: list[tuple[FieldPath, Any]] = [
        (("gateway", "models", name, "port"), mapping(body).get("port"))
        for name, body in mapping(gateway.get("models")).items()
    ]
    listed.append((("gateway", "metrics_port"), gateway.get("metrics_port")))
    for path, port in listed:
        if not isinstance(port, int):
            continue
        if port in seen:
            checker.add(path, f"gateway port {port} is also {seen[port]}", "give each endpoint its own port")
            continue
        seen[port] = f"gateway {'.'.join(str(p) for p in path[1:])}"
        for host in hosts:
            taken = {int(mapping(checker.resolved.hosts[host].get("ssh")).get("port", 22)): "its SSH port"}
            for name, body in models.items():
                if host in checker.resolved.model_hosts.get(name, ()):
                    taken.setdefault(int(mapping(body).get("port", 8000)), f"model '{name}'s port")
            if port in taken:
                message = f"gateway port {port} on host '{host}' is already {taken[port]}"
                checker.add(path, message, "choose another gateway port")


def _tls_files(checker: Checker, tls: dict[str, Any]) -> None:
    assert checker.files is not None
    for field in ("cert", "key"):
        path = tls.get(field)
        if not isinstance(path, str) or not path:
            continue
        found = checker.files.stat(checker.files.expand(path))
        if found is None:
            checker.add(("gateway", "tls", field), f"TLS {field} file {path} does not exist", "fix the path")
        elif field == "key" and found.st_mode & (stat.S_IROTH | stat.S_IWOTH):
            hint = f"chmod 600 {checker.files.expand(path)}"
            checker.add(("gateway", "tls", "key"), f"TLS key {path} is readable by anyone", hint)
