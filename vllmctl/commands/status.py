"""`vllmctl status INVENTORY`: per host and model, the service, release, health, load, KV cache and advice.

The gathering is runner/status/collect.py; this module parses flags, calls it (once, or every `--every`
seconds with `--watch`) and prints.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from datetime import UTC, datetime

from rich.live import Live

from vllmctl.commands import _options as options
from vllmctl.console import Ui
from vllmctl.errors import EXIT_FAILURE, EXIT_OK
from vllmctl.inventory import load_inventory
from vllmctl.runner.fleet.hosts import planned_inventory, select_hosts, served_plan
from vllmctl.runner.gateway.control import gateway_view
from vllmctl.runner.gateway.out_records import with_holders
from vllmctl.runner.status import collect as status_flow
from vllmctl.runner.status.gpu_gate import gate_view
from vllmctl.runner.status.vip import ssh_vip_view, vip_line
from vllmctl.status.model import ModelStatus
from vllmctl.status.view import (
    drain_lines,
    findings,
    gate_lines,
    gateway_table,
    lock_lines,
    status_json,
    status_screen,
    status_table,
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("status", help="show serving status, live metrics and tuning advice")
    parser.add_argument("inventory", help="inventory file")
    options.add_limit(parser)
    parser.add_argument("--model", action="append", default=[], help="only this model (repeatable)")
    parser.add_argument(
        "--interval",
        type=float,
        default=1.0,
        help="seconds between the two scrapes, which rates cover (default 1)",
    )
    parser.add_argument(
        "--watch", action="store_true", help="refresh until Ctrl-C (with --json: one JSON document per line)"
    )
    parser.add_argument(
        "--every",
        type=float,
        default=5.0,
        help="with --watch: seconds from one round to the next (default 5)",
    )
    options.add_timeout(parser)
    options.add_json(parser)
    parser.set_defaults(func=run)


def _show_round(args: argparse.Namespace, ui: Ui, live: Live | None) -> Callable[[list[ModelStatus]], None]:
    """A terminal redraws one screen in place; JSON and piped text get each round after the one before."""

    def show(statuses: list[ModelStatus]) -> None:
        stamp, now = time.strftime("%Y-%m-%dT%H:%M:%S%z"), datetime.now(UTC)
        if args.json:
            ui.json_line({"time": stamp, **status_json(statuses, now)})
            return
        screen = status_screen(statuses, f"{stamp}  every {args.every:g}s, Ctrl-C to stop", now)
        if live is None:
            ui.out.print(screen)
        else:
            live.update(screen, refresh=True)

    return show


def run(args: argparse.Namespace, ui: Ui) -> int:
    inv = planned_inventory(load_inventory(args.inventory))
    hosts = select_hosts(inv, args.limit)
    plan = served_plan(inv)
    if args.watch:

        def gather() -> list[ModelStatus]:
            return status_flow.gather(inv, hosts, plan, args.model, args.interval, args.timeout)

        if args.json or not ui.out.is_terminal:
            statuses = status_flow.watch(gather, _show_round(args, ui, None), args.every)
        else:
            with Live(status_screen([]), console=ui.out, auto_refresh=False) as live:
                statuses = status_flow.watch(gather, _show_round(args, ui, live), args.every)
    else:
        statuses = status_flow.gather(inv, hosts, plan, args.model, args.interval, args.timeout)
        gateway = with_holders(inv, gateway_view(inv, args.timeout), args.timeout)
        now = datetime.now(UTC)
        vip = ssh_vip_view(inv, args.timeout)
        gpu_gate = gate_view(inv, hosts, args.timeout)
        if args.json:
            extra = {**({"gateway": gateway} if gateway else {}), **({"gateway_vip": vip} if vip else {})}
            ui.json({**status_json(statuses, now), **extra, "gpu_gate": gpu_gate})
        else:
            ui.table(status_table(statuses))
            if gateway:
                ui.table(gateway_table(gateway))
            for line in drain_lines(gateway):
                ui.warn(line)
            for line in lock_lines(statuses, now):
                ui.warn(line)
            if vip:
                ui.info(vip_line(vip))
            for line in findings(statuses):
                ui.info(line)
            for line in gate_lines(gpu_gate):
                ui.warn(line)
    return EXIT_OK if statuses and all(s.ok for s in statuses) else EXIT_FAILURE
