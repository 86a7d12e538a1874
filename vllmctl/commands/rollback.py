"""`vllmctl rollback INVENTORY [--to ID]`: re-activate the previous (or named) known-good release on each
host from what is still there (units from the release dir, venv from the manifest), then wait for health.
A multi-node model's group whose used nodes are all selected is rolled back as one group release."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rich.table import Table

from vllmctl.bench.readiness import HealthCheck
from vllmctl.commands import _options as options
from vllmctl.commands.history import RemoteFor, survey
from vllmctl.console import Ui
from vllmctl.errors import EXIT_CHANGES, EXIT_FAILURE, EXIT_OK, VllmctlError
from vllmctl.inventory import load_inventory
from vllmctl.inventory.model import Inventory
from vllmctl.releases.group_history import GroupNodes, GroupSelection, multi_node_only, select_groups
from vllmctl.releases.host import ReleaseError, rollback_target
from vllmctl.runner.cluster_release import GroupGateOptions, roll_back_group, rollback_plan
from vllmctl.runner.fleet import (
    api_keys,
    host_contexts,
    lock_owner,
    planned_inventory,
    select_hosts,
    ssh_remote,
)
from vllmctl.runner.group_nodes import multi_node_groups
from vllmctl.runner.release import (
    GateOptions,
    activate,
    audit_line,
    read_releases,
    wait_for_health,
)
from vllmctl.runner.remote import Remote
from vllmctl.tasks.desired import HostContext


@dataclass(frozen=True)
class HostRollback:
    host: str
    ok: bool
    from_id: str | None = None
    to_id: str | None = None
    seconds: float = 0.0  # rollback started → every endpoint healthy (or gave up)
    reasons: tuple[str, ...] = ()
    figures: dict[str, object] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "from": self.from_id,
            "to": self.to_id,
            "seconds": round(self.seconds, 2),
            "reasons": list(self.reasons),
            "figures": self.figures,
        }


def roll_back_host(
    ctx: HostContext, remote: Remote, opts: GateOptions, to: str | None = None, break_lock: bool = False
) -> HostRollback:
    """Under the host lock: choose the target, stop → units from the release → start, wait for health."""
    host = ctx.host.name
    remote.begin({}, opts.owner, break_lock, opts.command_timeout_s)
    audit: dict[str, object] = {"to": to}
    try:
        state = read_releases(remote, host, opts.command_timeout_s)
        target = rollback_target(state, host, to)
        assert target.manifest is not None
        started = opts.clock()
        verdict = activate(remote, ctx, target.manifest, opts)
        outcome = HostRollback(
            host,
            verdict.passed,
            state.current,
            target.id,
            opts.clock() - started,
            verdict.reasons,
            verdict.figures,
        )
        audit = outcome.to_json()
        return outcome
    except VllmctlError as exc:
        audit["error"] = exc.message
        raise
    finally:
        remote.finish(audit_line(opts.owner, "rollback", audit), True, opts.command_timeout_s)


def roll_back_fleet(
    contexts: Mapping[str, HostContext],
    remote_for: RemoteFor,
    opts: GateOptions,
    forks: int,
    to: str | None = None,
    break_lock: bool = False,
) -> list[HostRollback]:
    def one(name: str) -> HostRollback:
        try:
            remote = remote_for(contexts[name])
        except VllmctlError as exc:
            return HostRollback(name, False, reasons=(exc.render(),))
        try:
            return roll_back_host(contexts[name], remote, opts, to, break_lock)
        except VllmctlError as exc:
            return HostRollback(name, False, reasons=(exc.render(),))
        finally:
            remote.close()

    hosts = list(contexts)
    with ThreadPoolExecutor(max_workers=max(1, min(forks, len(hosts) or 1))) as pool:
        return list(pool.map(one, hosts))


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
    options.add_json(parser)
    parser.set_defaults(func=run)


def _plan_table(rows: list[tuple[str, str, str]]) -> Table:
    table = Table(title="rollback plan (nothing changed; add --yes to do it)")
    for column in ("host", "current", "rolls back to"):
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    return table


def _selection(inv: Inventory, selected: list[str]) -> tuple[GroupSelection, list[str]]:
    """The groups rolled back as a whole, the hosts they cover, and the multi-node models not planned."""
    groups, unplanned = multi_node_groups(inv)
    selection = select_groups(inv, groups, selected)
    problems = []
    for model, exc in unplanned.items():
        cluster = inv.models[model].cluster
        hosts = [h for h in selected if cluster is not None and h in cluster.hosts]
        if hosts:
            problems.append(f"group of {model}: not rolled back, it cannot be planned: {exc.render()}")
        for host in hosts:
            if multi_node_only(inv, host):
                selection.covered[host] = f"its group's model {model} could not be planned"
    return selection, problems


def _group_plan(
    args: argparse.Namespace, inv: Inventory, group: GroupNodes, problems: list[str]
) -> dict[str, Any]:
    try:
        current, target = rollback_plan(inv, group.group, group.nodes, args.to, args.timeout)
    except VllmctlError as exc:
        problems.append(f"group {group.group}: {exc.render()}")
        current, target = {}, None
    return {"model": group.model, "nodes": list(group.nodes), "current": current, "to": target}


def _show_plan(
    args: argparse.Namespace,
    ui: Ui,
    inv: Inventory,
    contexts: Mapping[str, HostContext],
    remote_for: RemoteFor,
    selection: GroupSelection,
    problems: list[str],
) -> int:
    rows = []
    for found in survey(contexts, remote_for, args.timeout, args.forks):
        if found.state is None:
            problems.append(f"{found.error}\n  hint: {found.hint}")
            continue
        try:
            target = rollback_target(found.state, found.host, args.to).id
        except ReleaseError as exc:
            problems.append(exc.render())
            target = "(refused)"
        rows.append((found.host, found.state.current or "-", target))
    plan = {host: {"current": current, "to": to} for host, current, to in rows}
    groups = {group.group: _group_plan(args, inv, group, problems) for group in selection.groups}
    for name, group in groups.items():
        for node, current in group["current"].items():
            rows.append((f"{node} (group {name})", current or "-", group["to"] or "(refused)"))
    if args.json:
        ui.json({"plan": plan, "groups": groups, "covered": selection.covered, "problems": problems})
    else:
        ui.table(_plan_table(rows))
        for host, why in selection.covered.items():
            ui.info(f"{host}: {why}")
    for problem in problems:
        ui.error(problem)
    return EXIT_FAILURE if problems else EXIT_CHANGES


def _roll_back_groups(
    args: argparse.Namespace, ui: Ui, inv: Inventory, groups: tuple[GroupNodes, ...], opts: GateOptions
) -> dict[str, dict[str, Any]]:
    """One group after another, each as one group release under the host lock on all its nodes."""
    group_opts = GroupGateOptions(
        owner=opts.owner,
        break_lock=args.break_lock,
        command_timeout_s=opts.command_timeout_s,
        health_timeout_s=opts.health_timeout_s,
        health=opts.health,
        api_keys=opts.api_keys,
    )
    done: dict[str, dict[str, Any]] = {}
    for group in groups:
        nodes = ", ".join(group.nodes)
        try:
            outcome = roll_back_group(
                inv, group.group, group.model, group.nodes, args.to, group_opts, ui.info
            )
            done[group.group] = {"nodes": list(group.nodes), **outcome.to_json()}
        except VllmctlError as exc:
            done[group.group] = {"nodes": list(group.nodes), "ok": False, "reasons": [exc.render()]}
        if done[group.group]["ok"]:
            back = done[group.group]["rolled_back_to"]
            ui.info(f"group {group.group}: rolled back to {back} on {nodes}: formed again")
        else:
            reasons = "\n".join(f"  {r}" for r in done[group.group]["reasons"])
            ui.error(f"group {group.group} ({nodes}): rollback failed\n{reasons}")
    return done


def run(
    args: argparse.Namespace,
    ui: Ui,
    remote_for: RemoteFor = ssh_remote,
    health: HealthCheck = wait_for_health,
) -> int:
    inventory = planned_inventory(load_inventory(args.inventory))
    selected = select_hosts(inventory, args.limit)
    selection, problems = _selection(inventory, selected)
    hosts = [host for host in selected if host not in selection.covered]
    contexts = host_contexts(inventory, hosts, {}, stage_models=False)
    if not args.yes:
        return _show_plan(args, ui, inventory, contexts, remote_for, selection, problems)
    opts = GateOptions(
        owner=lock_owner(datetime.now(UTC).isoformat(timespec="seconds")),
        command_timeout_s=args.timeout,
        health_timeout_s=args.health_timeout,
        health=health,
        api_keys=api_keys(inventory, os.environ),
    )
    ui.info(f"rolling back {len(contexts)} host(s) and {len(selection.groups)} multi-node group(s)")
    for host, why in selection.covered.items():
        ui.info(f"{host}: {why}")
    outcomes = roll_back_fleet(contexts, remote_for, opts, args.forks, args.to, args.break_lock)
    for o in outcomes:
        if o.ok:
            ui.info(f"{o.host}: {o.from_id or '-'} → {o.to_id}, serving again after {o.seconds:.1f}s")
        else:
            ui.error(f"{o.host}: rollback failed\n" + "\n".join(f"  {r}" for r in o.reasons))
    groups = _roll_back_groups(args, ui, inventory, selection.groups, opts)
    if args.json:  # hosts at the top level as before; the groups under their own key
        ui.json({o.host: o.to_json() for o in outcomes} | {"groups": groups})
    for problem in problems:
        ui.error(problem)
    ok = all(o.ok for o in outcomes) and all(g["ok"] for g in groups.values()) and not problems
    return EXIT_OK if ok else EXIT_FAILURE
