"""What `history` and `rollback` read, no lock: every host's releases (one command per host, in parallel),
each release as a row, and each multi-node group's releases across its nodes."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from vllmctl.errors import VllmctlError
from vllmctl.facts.state import UNIT_FILES_COMMAND, parse_unit_files
from vllmctl.inventory import load_inventory
from vllmctl.inventory.model import Inventory
from vllmctl.ops import Command
from vllmctl.releases.group_history import GroupNodes, group_history_rows
from vllmctl.releases.host import HostReleases
from vllmctl.releases.rollback import HostUnits
from vllmctl.runner.core.remote import Remote
from vllmctl.runner.fleet.hosts import host_contexts, planned_inventory, select_hosts
from vllmctl.runner.multinode.group_nodes import multi_node_groups
from vllmctl.runner.releases.release import read_releases
from vllmctl.tasks.desired import HostContext

RemoteFor = Callable[[HostContext], Remote]
GroupReader = Callable[[Inventory, Sequence[str], str, float], Mapping[str, HostReleases | VllmctlError]]


@dataclass(frozen=True)
class Survey:
    host: str
    state: HostReleases | None = None
    error: str = ""
    hint: str = ""
    units: HostUnits | None = None  # only when asked: what runs, for rollback's choice


def survey(
    contexts: Mapping[str, HostContext],
    remote_for: RemoteFor,
    timeout_s: float,
    forks: int,
    units: bool = False,
) -> list[Survey]:
    """Every host's releases in inventory order, and (`units`) its unit files and their states; an
    unreachable host is a Survey with its error."""

    def one(name: str) -> Survey:
        try:
            remote = remote_for(contexts[name])
        except VllmctlError as exc:
            return Survey(name, error=exc.message, hint=exc.hint)
        try:
            state = read_releases(remote, name, timeout_s)
            return Survey(name, state, units=read_units(remote, name, timeout_s) if units else None)
        except VllmctlError as exc:
            return Survey(name, error=exc.message, hint=exc.hint)
        finally:
            remote.close()

    hosts = list(contexts)
    with ThreadPoolExecutor(max_workers=max(1, min(forks, len(hosts) or 1))) as pool:
        return list(pool.map(one, hosts))


def read_units(remote: Remote, host: str, timeout_s: float) -> HostUnits:
    """Each vllmctl unit file's sha256 and each unit's systemd state (read-only, no lock)."""
    files = remote.execute(Command(shell=UNIT_FILES_COMMAND), timeout_s)
    if not files.ok:
        raise VllmctlError(
            f"{host}: reading its unit files failed (exit {files.exited})", files.stderr[-500:]
        )
    states = remote.gather({"units": ()}, timeout_s).get("units", {})
    return HostUnits(parse_unit_files(files.stdout, 0), states)


def history_rows(host: str, state: HostReleases) -> list[dict[str, Any]]:
    """Oldest first, one row per release: status, pointers, engine, and the gate's reasons and figures."""
    rows = []
    for release in state.releases:
        manifest, verdict = release.manifest, release.verdict or {}
        marks = [
            p
            for p, target in (("current", state.current), ("known-good", state.known_good))
            if target == release.id
        ]
        rows.append(
            {
                "host": host,
                "id": release.id,
                "status": release.status,
                "pointers": marks,
                "created_at": manifest.created_at if manifest else None,
                "created_by": manifest.created_by if manifest else None,
                "engine": f"{manifest.engine} {manifest.engine_version}" if manifest else None,
                "reasons": list(verdict.get("reasons", [])),
                "figures": dict(verdict.get("figures", {})),
            }
        )
    return rows


def group_history(
    inv: Inventory, selected: Sequence[str], read: GroupReader, timeout_s: float
) -> dict[str, dict[str, Any]]:
    """Per group with a selected used node: its nodes, pointers per node, rows, and per-node errors."""
    groups, failed = multi_node_groups(inv)
    found: dict[str, dict[str, Any]] = {}
    for model, exc in failed.items():  # not planned: the group's used nodes are not known
        cluster = inv.models[model].cluster
        if cluster is not None and set(cluster.hosts) & set(selected):
            found[cluster.group] = {"model": model, "error": exc.message, "hint": exc.hint}
    for group in groups:
        if set(group.nodes) & set(selected):
            found[group.group] = _one_group(group, read(inv, group.nodes, group.group, timeout_s))
    return found


def _one_group(group: GroupNodes, listings: Mapping[str, HostReleases | VllmctlError]) -> dict[str, Any]:
    states = {node: found for node, found in listings.items() if isinstance(found, HostReleases)}
    return {
        "model": group.model,
        "nodes": list(group.nodes),
        "current": {node: state.current for node, state in states.items()},
        "known_good": {node: state.known_good for node, state in states.items()},
        "releases": group_history_rows(group.nodes, states),
        "errors": {
            node: {"error": found.message, "hint": found.hint}
            for node, found in listings.items()
            if isinstance(found, VllmctlError)
        },
    }


@dataclass(frozen=True)
class History:
    """Every selected host's survey, its release rows, and each multi-node group's releases."""

    found: list[Survey]
    rows: list[dict[str, Any]]
    groups: dict[str, Any]


def read_history(
    inventory_path: str,
    limit: str | None,
    timeout_s: float,
    forks: int,
    remote_for: RemoteFor,
    read_groups: GroupReader,
) -> History:
    """`vllmctl history`: the releases on every selected host and on each group's nodes (read-only)."""
    inventory = planned_inventory(load_inventory(inventory_path))
    selected = select_hosts(inventory, limit)
    contexts = host_contexts(inventory, selected, {}, stage_models=False)
    found = survey(contexts, remote_for, timeout_s, forks)
    groups = group_history(inventory, selected, read_groups, timeout_s)
    rows = [row for s in found if s.state is not None for row in history_rows(s.host, s.state)]
    return History(found, rows, dict(groups))
