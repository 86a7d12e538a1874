"""`vllmctl history INVENTORY`: each host's releases, oldest first, with status, pointers and gate figures,
then each multi-node model's group releases across its nodes.

Also owns the read-only survey (one command per host, no lock) that `rollback` plans from."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from rich.table import Table

from vllmctl.commands import _options as options
from vllmctl.console import Ui
from vllmctl.errors import EXIT_FAILURE, EXIT_OK, VllmctlError
from vllmctl.inventory import load_inventory
from vllmctl.inventory.model import Inventory
from vllmctl.releases.group_history import GroupNodes, group_history_rows
from vllmctl.releases.host import HostReleases, recovery_needed
from vllmctl.runner.fleet import host_contexts, planned_inventory, select_hosts, ssh_remote
from vllmctl.runner.group_nodes import multi_node_groups, read_group_listings
from vllmctl.runner.release import read_releases
from vllmctl.runner.remote import Remote
from vllmctl.tasks.desired import HostContext

RemoteFor = Callable[[HostContext], Remote]
GroupReader = Callable[[Inventory, Sequence[str], str, float], Mapping[str, HostReleases | VllmctlError]]


@dataclass(frozen=True)
class Survey:
    host: str
    state: HostReleases | None = None
    error: str = ""
    hint: str = ""


def survey(
    contexts: Mapping[str, HostContext], remote_for: RemoteFor, timeout_s: float, forks: int
) -> list[Survey]:
    """Every host's releases in inventory order; an unreachable host is a Survey with its error."""

    def one(name: str) -> Survey:
        try:
            remote = remote_for(contexts[name])
        except VllmctlError as exc:
            return Survey(name, error=exc.message, hint=exc.hint)
        try:
            return Survey(name, read_releases(remote, name, timeout_s))
        except VllmctlError as exc:
            return Survey(name, error=exc.message, hint=exc.hint)
        finally:
            remote.close()

    hosts = list(contexts)
    with ThreadPoolExecutor(max_workers=max(1, min(forks, len(hosts) or 1))) as pool:
        return list(pool.map(one, hosts))


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


def _figures_text(figures: Mapping[str, Any]) -> str:
    parts = []
    for model, measured in figures.items():
        levels = [
            f"{k}: ttft p99 {v['ttft_p99_ms']:.0f} ms" for k, v in measured.items() if k.startswith("c")
        ]
        parts.append(
            f"{model} health {measured.get('health_s', '?')}s" + (f", {', '.join(levels)}" if levels else "")
        )
    return "; ".join(parts)


def history_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="releases (oldest first)")
    for column in ("host", "release", "status", "pointers", "created", "by", "engine", "figures / reasons"):
        table.add_column(column)
    for row in rows:
        detail = _figures_text(row["figures"])
        if row["reasons"]:
            detail = "; ".join([*row["reasons"], detail] if detail else row["reasons"])
        table.add_row(
            row["host"],
            row["id"],
            row["status"],
            ", ".join(row["pointers"]) or "-",
            row["created_at"] or "-",
            row["created_by"] or "-",
            row["engine"] or "-",
            detail or "-",
        )
    return table


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


def group_table(group: str, shown: Mapping[str, Any]) -> Table:
    table = Table(title=f"group {group} ({shown['model']} on {', '.join(shown['nodes'])}): group releases")
    for column in ("release", "status", "on nodes", "pointers", "created", "by", "engine", "reasons"):
        table.add_column(column)
    for row in shown["releases"]:
        odd = {node: status for node, status in row["statuses"].items() if status != row["status"]}
        status = row["status"] + "".join(f", {node} {found}" for node, found in odd.items())
        table.add_row(
            row["id"],
            status,
            ", ".join(row["on"]),
            "; ".join(row["pointers"]) or "-",
            row["created_at"] or "-",
            row["created_by"] or "-",
            row["engine"] or "-",
            "; ".join(row["reasons"]) or "-",
        )
    return table


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("history", help="list releases per host with status and gate figures")
    parser.add_argument("inventory", help="inventory file")
    options.add_limit(parser, "--host")
    options.add_forks(parser)
    options.add_timeout(parser)
    options.add_json(parser)
    parser.set_defaults(func=run)


def run(
    args: argparse.Namespace,
    ui: Ui,
    remote_for: RemoteFor = ssh_remote,
    read_groups: GroupReader = read_group_listings,
) -> int:
    inventory = planned_inventory(load_inventory(args.inventory))
    selected = select_hosts(inventory, args.limit)
    contexts = host_contexts(inventory, selected, {}, stage_models=False)
    found = survey(contexts, remote_for, args.timeout, args.forks)
    groups = group_history(inventory, selected, read_groups, args.timeout)
    rows = [row for s in found if s.state is not None for row in history_rows(s.host, s.state)]
    failed = [s for s in found if s.error]
    if args.json:
        ui.json(
            {
                "hosts": {
                    s.host: {"error": s.error, "hint": s.hint}
                    if s.error
                    else {
                        "current": s.state.current if s.state else None,
                        "known_good": s.state.known_good if s.state else None,
                        "recovery": dict(zip(("action", "reason"), recovery_needed(s.state), strict=True))
                        if s.state
                        else None,
                        "releases": [r for r in rows if r["host"] == s.host],
                    }
                    for s in found
                },
                "groups": groups,
            }
        )
    else:
        if rows:
            ui.table(history_table(rows))
        else:
            ui.info("no releases on the selected hosts yet")
        for group, shown in groups.items():
            if shown.get("releases"):
                ui.table(group_table(group, shown))
            elif "releases" in shown:
                ui.info(f"group {group}: no group releases on {', '.join(shown['nodes'])} yet")
    for s in found:
        action, reason = recovery_needed(s.state) if s.state else ("none", "")
        if action != "none" and not args.json:
            ui.warn(
                f"{s.host}: {reason}; the next apply will {'gate it' if action == 'gate' else 'roll back'}"
            )
    for s in failed:
        ui.error(f"{s.error}\n  hint: {s.hint}")
    group_errors = _group_errors(groups)
    for problem in group_errors:
        ui.error(problem)
    return EXIT_FAILURE if failed or group_errors else EXIT_OK


def _group_errors(groups: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """A group that could not be planned, and each node of a group that could not be read."""
    found = []
    for group, shown in groups.items():
        for error in [shown, *shown.get("errors", {}).values()]:
            if "error" in error:
                found.append(f"group {group}: {error['error']}\n  hint: {error['hint']}")
    return found
