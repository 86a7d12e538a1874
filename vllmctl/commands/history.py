"""`vllmctl history INVENTORY`: each host's releases, oldest first, with status, pointers and gate figures,
then each multi-node model's group releases across its nodes (read by runner/releases/history.py)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from rich.table import Table

from vllmctl.commands import _options as options
from vllmctl.console import Ui
from vllmctl.errors import EXIT_FAILURE, EXIT_OK
from vllmctl.facts.lock import held_locks
from vllmctl.releases.host import recovery_needed
from vllmctl.runner.fleet.hosts import ssh_remote
from vllmctl.runner.multinode.group_nodes import read_group_listings
from vllmctl.runner.releases.history import GroupReader, RemoteFor, read_history


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
    history = read_history(args.inventory, args.limit, args.timeout, args.forks, remote_for, read_groups)
    found, rows, groups = history.found, history.rows, history.groups
    failed = [s for s in found if s.error]
    locks = held_locks({s.host: s.state.lock for s in found if s.state}, datetime.now(UTC))
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
                "locks": {lock.host: lock.to_json() for lock in locks},
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
        for lock in locks:
            ui.warn(lock.sentence())
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
