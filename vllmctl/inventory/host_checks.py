"""Checks on merged hosts, native and Ansible-imported alike (one function per value, located where it was
written): addresses, SSH users and jump hosts, hosts sharing an address, names that differ only in case,
and the host folders models are written to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vllmctl.inventory.resolve import mapping
from vllmctl.inventory.values import (
    Finding,
    address_key,
    address_problem,
    host_path_problem,
    jump_host_problem,
    user_problem,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from vllmctl.inventory.positions import FieldPath
    from vllmctl.inventory.resolve import Checker

HOST_FIELDS: dict[FieldPath, Callable[[str], Finding | None]] = {
    ("address",): address_problem,
    ("ssh", "user"): user_problem,
    ("ssh", "jump_host"): jump_host_problem,
}
NO_HOSTS_HINT = "add `hosts:` with at least one host, or import them with `ansible_inventory:`"


def _setting(merged: dict[str, Any], path: FieldPath) -> Any:
    value: Any = merged
    for part in path:
        value = mapping(value).get(str(part))
    return value


def check_hosts(checker: Checker) -> None:
    data = checker.data
    if not checker.resolved.hosts and "hosts" not in data and "ansible_inventory" not in data:
        checker.add(("vllmctl",), "the inventory defines no hosts", NO_HOSTS_HINT, True)
    seen: dict[tuple[str, int], str] = {}
    for name, merged in checker.resolved.hosts.items():
        for path, check in HOST_FIELDS.items():
            value = _setting(merged, path)
            # other types are the schema's to report; an empty address means the host name
            if isinstance(value, str) and value and (found := check(value)) is not None:
                checker.add_at(checker.where(name, path), found.message, found.hint)
        address, port = merged.get("address"), mapping(merged.get("ssh")).get("port", 22)
        if isinstance(address, str) and isinstance(port, int) and address_problem(address) is None:
            other = seen.setdefault((address_key(address), port), name)
            if other != name:
                checker.add_at(
                    checker.where(name, ("address",)),
                    f"host '{name}' has the same address and SSH port as host '{other}' ({address}, {port})",
                    "each host is one machine: remove the duplicate, or give it its own address or port",
                )
    for name, body in mapping(data.get("models")).items():
        check_model_paths(checker, name, mapping(body))


def check_model_paths(checker: Checker, name: str, body: dict[str, Any]) -> None:
    """Folders vllmctl (as root) or the engine writes on the host: a local source and the download dir."""
    source = body.get("source")
    if isinstance(source, str) and source.startswith("/") and (found := host_path_problem(source)):
        checker.add(("models", name, "source"), found.message, found.hint)
    download = mapping(body.get("engine_args")).get("download_dir")
    if isinstance(download, str) and download and (found := host_path_problem(download)):
        checker.add(("models", name, "engine_args", "download_dir"), found.message, found.hint)


def check_names(checker: Checker) -> None:
    """Hosts, groups and models whose names differ only in case: names become unit and file names, and
    DNS ignores case."""
    hosts = list(checker.resolved.hosts)
    groups = list(mapping(checker.data.get("groups")))  # Ansible's own are Ansible's to name
    models = list(mapping(checker.data.get("models")))
    for kind, names in (("host", hosts), ("group", groups), ("model", models)):
        first: dict[str, str] = {}
        for name in names:
            other = first.setdefault(name.lower(), name)
            if other == name:
                continue
            message = f"{kind} '{name}' differs from {kind} '{other}' only in case"
            hint = "rename one of them: names become service, file and host names, where case is lost"
            if kind == "host":
                checker.add_at(checker.where(name, (), at_key=True), message, hint)
            else:
                checker.add((f"{kind}s", name), message, hint, True)
