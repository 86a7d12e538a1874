"""`vllmctl rollback INVENTORY [--to ID]`: re-activate the previous (or named) known-good release on each
selected host (after an interrupted apply, each host's current one), and each selected multi-node group as
one (runner/rollback.py); without --yes, the plan."""

from __future__ import annotations

import argparse
import os
from datetime import UTC, datetime

from rich.table import Table

from vllmctl.bench.readiness import HealthCheck
from vllmctl.commands import _options as options
from vllmctl.console import Ui
from vllmctl.errors import EXIT_CHANGES, EXIT_FAILURE, EXIT_OK
from vllmctl.inventory import load_inventory
from vllmctl.runner.core.audit import lock_owner
from vllmctl.runner.core.engine_watch import wait_for_health
from vllmctl.runner.core.view import stale_lock_note
from vllmctl.runner.fleet.hosts import api_keys, planned_inventory, select_hosts, ssh_remote
from vllmctl.runner.releases.history import RemoteFor
from vllmctl.runner.rollback import RollbackOptions, RollbackRun, rollback


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("rollback", help="re-activate the previous (or named) known-good release")
    parser.add_argument("inventory", help="inventory file")
    parser.add_argument("--to", help="release id to activate (see `vllmctl history`)")
    options.add_limit(parser)
    options.add_yes(parser)
    options.add_forks(parser)
    options.add_timeout(parser, changes_hosts=True)
    parser.add_argument("--health-timeout", type=float, default=600.0, help="seconds to wait for health")
    parser.add_argument("--break-lock", action="store_true", help="clear a lock left by a dead apply")
    options.add_rollout(parser)
    options.add_json(parser)
    parser.set_defaults(func=run)


def run(
    args: argparse.Namespace,
    ui: Ui,
    remote_for: RemoteFor = ssh_remote,
    health: HealthCheck = wait_for_health,
) -> int:
    inventory = planned_inventory(load_inventory(args.inventory))
    selected = select_hosts(inventory, args.limit)
    opts = RollbackOptions(
        owner=lock_owner(datetime.now(UTC).isoformat(timespec="seconds"), "rollback"),
        to=args.to,
        forks=args.forks,
        command_timeout_s=args.timeout,
        health_timeout_s=args.health_timeout,
        break_lock=args.break_lock,
        max_fail=args.max_fail,
        wait_available=args.wait_available,
        api_keys=api_keys(inventory, os.environ) if args.yes else {},
        health=health,
        remote_for=remote_for,
    )
    found = rollback(inventory, selected, args.yes, opts, ui.info)
    if not found.done:
        _show_plan(ui, found, args.json)
    else:
        _show_done(ui, found, args.json)
    for problem in found.problems:
        ui.error(problem)
    if not found.done:
        return EXIT_FAILURE if found.problems else EXIT_CHANGES
    return EXIT_OK if found.ok else EXIT_FAILURE


def _show_plan(ui: Ui, found: RollbackRun, as_json: bool) -> None:
    rows = list(found.rows)
    for name, group in found.groups.items():
        for node, current in group["current"].items():
            rows.append((f"{node} (group {name})", current or "-", group["to"] or "(refused)"))
    if as_json:
        plan = {
            host: {"current": current, "to": to.split(" ")[0], "action": found.actions.get(host)}
            for host, current, to in found.rows
        }
        ui.json({"plan": plan, "groups": found.groups, "covered": found.covered, "problems": found.problems})
        return
    table = Table(title="rollback plan (nothing changed; add --yes to do it)")
    for column in ("host", "current", "rolls back to"):
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    ui.table(table)
    for host, why in found.covered.items():
        ui.info(f"{host}: {why}")


def _show_done(ui: Ui, found: RollbackRun, as_json: bool) -> None:
    for o in found.hosts:
        if o.broke_lock:
            ui.warn(f"{o.host}: {stale_lock_note(o.broke_lock)}")
        if o.ok and o.noop:
            ui.info(f"{o.host}: {'; '.join(o.reasons)}: nothing to do")
        elif o.ok:
            why = f" ({o.reasons[0]})" if o.reasons else ""
            ui.info(f"{o.host}: {o.from_id or '-'} → {o.to_id}, serving again after {o.seconds:.1f}s{why}")
        else:
            ui.error(f"{o.host}: rollback failed\n" + "\n".join(f"  {r}" for r in o.reasons))
    for name, group in found.groups.items():
        nodes = ", ".join(group["nodes"])
        if group["ok"]:
            ui.info(f"group {name}: rolled back to {group['rolled_back_to']} on {nodes}: formed again")
        else:
            reasons = "\n".join(f"  {r}" for r in group["reasons"])
            ui.error(f"group {name} ({nodes}): rollback failed\n{reasons}")
    if as_json:  # hosts at the top level as before; the groups under their own key
        ui.json({o.host: o.to_json() for o in found.hosts} | {"groups": found.groups})
