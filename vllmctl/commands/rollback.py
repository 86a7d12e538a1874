"""`vllmctl rollback INVENTORY [--to ID]`: re-activate the previous (or named) known-good release on each
host from what is still there (units from the release dir, venv from the manifest), then wait for health."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime

from rich.table import Table

from vllmctl.commands.history import RemoteFor, survey
from vllmctl.console import Ui
from vllmctl.desired import HostContext
from vllmctl.errors import EXIT_CHANGES, EXIT_FAILURE, EXIT_OK, VllmctlError
from vllmctl.inventory import load_inventory
from vllmctl.release_gate import (
    GateOptions,
    HealthCheck,
    activate,
    audit_line,
    read_releases,
    wait_for_health,
)
from vllmctl.releases import ReleaseError, rollback_target
from vllmctl.runner.fleet import host_contexts, lock_owner, select_hosts, ssh_remote
from vllmctl.runner.remote import Remote


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
    parser.add_argument("--limit", help="comma list of hosts or groups")
    parser.add_argument("--yes", action="store_true", help="do it; without it, only show what would happen")
    parser.add_argument("--forks", type=int, default=16, help="hosts rolled back at once (default 16)")
    parser.add_argument("--command-timeout", type=float, default=120.0, help="seconds per remote command")
    parser.add_argument("--health-timeout", type=float, default=600.0, help="seconds to wait for health")
    parser.add_argument("--break-lock", action="store_true", help="clear a lock left by a dead apply")
    parser.add_argument("--json", action="store_true", help="print the result as JSON to stdout")
    parser.set_defaults(func=run)


def _plan_table(rows: list[tuple[str, str, str]]) -> Table:
    table = Table(title="rollback plan (nothing changed; add --yes to do it)")
    for column in ("host", "current", "rolls back to"):
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    return table


def _show_plan(
    args: argparse.Namespace, ui: Ui, contexts: Mapping[str, HostContext], remote_for: RemoteFor
) -> int:
    rows, problems = [], []
    for found in survey(contexts, remote_for, args.command_timeout, args.forks):
        if found.state is None:
            problems.append(f"{found.error}\n  hint: {found.hint}")
            continue
        try:
            target = rollback_target(found.state, found.host, args.to).id
        except ReleaseError as exc:
            problems.append(exc.render())
            target = "(refused)"
        rows.append((found.host, found.state.current or "-", target))
    if args.json:
        ui.json({"plan": {host: {"current": cur, "to": to} for host, cur, to in rows}, "problems": problems})
    else:
        ui.table(_plan_table(rows))
    for problem in problems:
        ui.error(problem)
    return EXIT_FAILURE if problems else EXIT_CHANGES


def run(
    args: argparse.Namespace,
    ui: Ui,
    remote_for: RemoteFor = ssh_remote,
    health: HealthCheck = wait_for_health,
) -> int:
    inventory = load_inventory(args.inventory)
    contexts = host_contexts(inventory, select_hosts(inventory, args.limit), {})
    if not args.yes:
        return _show_plan(args, ui, contexts, remote_for)
    opts = GateOptions(
        owner=lock_owner(datetime.now(UTC).isoformat(timespec="seconds")),
        command_timeout_s=args.command_timeout,
        health_timeout_s=args.health_timeout,
        health=health,
    )
    ui.info(f"rolling back {len(contexts)} host(s)")
    outcomes = roll_back_fleet(contexts, remote_for, opts, args.forks, args.to, args.break_lock)
    if args.json:
        ui.json({o.host: o.to_json() for o in outcomes})
    for o in outcomes:
        if o.ok:
            ui.info(f"{o.host}: {o.from_id or '-'} → {o.to_id}, serving again after {o.seconds:.1f}s")
        else:
            ui.error(f"{o.host}: rollback failed\n" + "\n".join(f"  {r}" for r in o.reasons))
    return EXIT_OK if all(o.ok for o in outcomes) else EXIT_FAILURE
