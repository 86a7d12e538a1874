"""`vllmctl cluster INVENTORY MODEL`: Ray into each node's engine venv, the preflight, then the Ray
cluster (head, workers, `ray status` barrier) and, with `--start-engine`, vLLM on the head, as one group
release recorded on every node, gated and rolled back as a whole; `--rollback` goes back by hand. Nothing
starts when the preflight finds a problem.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from vllmctl.bench.readiness import FLOOR_S
from vllmctl.commands import _options as options
from vllmctl.console import Ui
from vllmctl.errors import EXIT_CHANGES, EXIT_FAILURE, EXIT_OK
from vllmctl.inventory.model import Inventory
from vllmctl.multinode.plan import ClusterPlan
from vllmctl.multinode.preflight import PreflightReport
from vllmctl.releases.host import ReleaseError, inventory_digest
from vllmctl.runner.core.audit import lock_owner
from vllmctl.runner.fleet.hosts import api_keys
from vllmctl.runner.multinode.cluster import cluster_status, run_preflight
from vllmctl.runner.multinode.cluster_flow import bring_up, model_cluster
from vllmctl.runner.multinode.cluster_release import GroupOutcome
from vllmctl.runner.multinode.group_gate import GroupGateOptions
from vllmctl.runner.multinode.group_rollback import roll_back_group, rollback_plan
from vllmctl.status.model import ClusterState


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("cluster", help="preflight and bring up the Ray cluster of a multi-node model")
    parser.add_argument("inventory", help="inventory file")
    parser.add_argument("model", help="the multi-node model's name")
    parser.add_argument("--preflight-only", action="store_true", help="check the hosts; start nothing")
    parser.add_argument("--start-engine", action="store_true", help="start vLLM on the head once Ray formed")
    parser.add_argument(
        "--status", action="store_true", help="show the group's units and Ray nodes; change nothing"
    )
    parser.add_argument(
        "--rollback", action="store_true", help="re-activate the group's previous known-good release"
    )
    parser.add_argument("--to", help="with --rollback: the group release id to re-activate")
    parser.add_argument("--yes", action="store_true", help="with --rollback: do it; without, only show it")
    parser.add_argument(
        "--health-timeout", type=float, default=FLOOR_S, help="seconds to wait for the engine's health"
    )
    parser.add_argument("--offline", action="store_true", help="never fetch config.json from the hub")
    options.add_timeout(parser)
    options.add_json(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, ui: Ui) -> int:
    found = model_cluster(args.inventory, args.model, args.offline)
    inv, plan, engine = found.inventory, found.plan, found.engine
    ui.info(f"{found.model.name}: PP {plan.pp} x TP {plan.tp} on {', '.join(plan.hosts)} (head {plan.head})")
    if args.status:
        return _show_status(ui, cluster_status(inv, plan, engine, args.timeout), args.json)
    if args.rollback:
        return _roll_back(args, ui, inv, plan)
    if args.preflight_only:
        report = run_preflight(inv, found.model, found.cluster, engine, timeout_s=args.timeout)
        return _preflight(args, ui, report)
    report, outcome = bring_up(found, _gate_options(args, inv), args.start_engine, args.timeout, ui.info)
    if _preflight(args, ui, report) != EXIT_OK or outcome is None:
        return EXIT_FAILURE
    return _report(ui, outcome, plan.hosts, args.json)


def _preflight(args: argparse.Namespace, ui: Ui, report: PreflightReport) -> int:
    """Its problems, or that it passed; only `--preflight-only` prints the passing JSON."""
    if not report.ok:
        for problem in report.problems:
            ui.error(problem.render())
        ui.error(f"preflight: {len(report.problems)} problem(s); nothing was started")
        if args.json:
            ui.json({"ok": False, "problems": [vars(p) for p in report.problems]})
        return EXIT_FAILURE
    ui.info(f"preflight passed on {', '.join(report.facts)}")
    if args.preflight_only and args.json:
        ui.json({"ok": True, "problems": []})
    return EXIT_OK


def _show_status(ui: Ui, status: ClusterState, as_json: bool) -> int:
    if as_json:
        ui.json(status.to_json())
    else:
        units = ", ".join(f"{host} {state}" for host, state in status.ray_units.items())
        own = status.ray_free
        ui.data(f"group {status.group} (head {status.head}): {'engine' if own else 'Ray'} units: {units}")
        if not own:
            ui.data(f"ray status: {status.ray_nodes} nodes, {status.ray_gpus:g} GPUs")
        ui.data(f"{status.engine_unit} on {status.head}: {status.engine}")
        if len(status.api_servers) > 1:  # external data parallel: the gateway balances over these
            ui.data(f"API servers: {', '.join(f'{h}:{p}' for h, p in status.api_servers.items())}")
        current = ", ".join(f"{host} {found}" for host, found in status.releases.items())
        known_good = ", ".join(f"{host} {found}" for host, found in status.known_good.items())
        ui.data(f"group releases: current: {current}; known-good: {known_good}")
        for problem in status.problems():
            ui.warn(problem)
    return EXIT_OK if status.ray_ok else EXIT_FAILURE


def _gate_options(args: argparse.Namespace, inv: Inventory) -> GroupGateOptions:
    now = datetime.now(UTC).isoformat(timespec="seconds")
    return GroupGateOptions(
        owner=lock_owner(now, "cluster"),
        created_at=now,
        inventory_digest=inventory_digest(Path(args.inventory).read_text()),
        command_timeout_s=options.bookkeeping_timeout(args),
        health_timeout_s=args.health_timeout,
        api_keys=api_keys(inv, os.environ),
    )


def _roll_back(args: argparse.Namespace, ui: Ui, inv: Inventory, plan: ClusterPlan) -> int:
    """Like `vllmctl rollback`: without --yes the plan only (exit 3); with it, every node, then the gate."""
    group, hosts = plan.cluster.group, plan.hosts
    if not args.yes:
        try:
            current, target = rollback_plan(inv, group, hosts, args.to, args.timeout)
        except ReleaseError as exc:
            ui.error(exc.render())
            return EXIT_FAILURE
        if args.json:
            ui.json({"plan": {"current": current, "to": target}})
        for host, found in current.items():
            ui.data(f"{host}: group release {found or '-'} -> {target}")
        ui.info("nothing changed; add --yes to roll the group back")
        return EXIT_CHANGES
    outcome = roll_back_group(inv, group, plan.model, hosts, args.to, _gate_options(args, inv), ui.info)
    return _report(ui, outcome, hosts, args.json)


def _report(ui: Ui, outcome: GroupOutcome, hosts: Sequence[str], as_json: bool) -> int:
    if as_json:
        ray = {"ray_nodes": outcome.ray.nodes, "ray_gpus": outcome.ray.gpus} if outcome.ray else {}
        ui.json({"ok": outcome.ok, "problems": [], **ray, "release": outcome.to_json()})
    if outcome.status == "reactivated":
        ui.info(f"group rolled back to {outcome.rolled_back_to} on {', '.join(hosts)}: formed again")
    if outcome.ok:
        return EXIT_OK
    reasons = "\n".join(f"  {reason}" for reason in outcome.reasons)
    ui.error(f"group release {outcome.release} failed:\n{reasons}")
    if outcome.status == "rolled_back":
        ui.error(f"rolled back to group release {outcome.rolled_back_to} on {', '.join(hosts)}: formed again")
    return EXIT_FAILURE
