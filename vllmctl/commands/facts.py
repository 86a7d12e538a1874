"""`vllmctl facts INVENTORY`: gather each host's facts in one round trip and show them per host."""

from __future__ import annotations

import argparse
from typing import Any

from rich.table import Table

from vllmctl.commands import _options as options
from vllmctl.console import Ui
from vllmctl.errors import EXIT_FAILURE, EXIT_OK
from vllmctl.facts import HOST_FACTS
from vllmctl.inventory import load_inventory
from vllmctl.ops.gpu_health import verdict
from vllmctl.ops.gpu_links import link_warnings
from vllmctl.runner.fleet.hosts import gather_fleet_facts, host_contexts, select_hosts

SHOWN = (*HOST_FACTS, "units", "releases")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("facts", help="gather and show host facts")
    parser.add_argument("inventory", help="inventory file")
    options.add_limit(parser)
    options.add_forks(parser)
    options.add_timeout(parser)
    options.add_json(parser)
    parser.set_defaults(func=run)


def summarize(name: str, value: Any, gpus_declared: int | None = None) -> str:
    if value is None:
        return "-"
    if name == "gpus":
        gpus = value.get("gpus", [])
        if value.get("status") != "ok":
            return f"{value.get('status')}: {value.get('message', '')}".strip(": ")
        return ", ".join(f"{g['index']}: {g['name']} {g['memory_total_mib']} MiB" for g in gpus) or "none"
    if name == "gpu_health":
        warned = [f"warning: {w}" for w in link_warnings(value)]
        return "; ".join([verdict(value, expected=gpus_declared), *warned])
    if name == "os_release":
        return str(value.get("pretty_name", "?"))
    if name == "kernel":
        return f"{value['release']} {value['machine']}"
    if name == "resources":
        disk = value["disk_root"]
        return f"{value['cpus']} CPUs, {value['memory_mib']} MiB RAM, / {disk['available_mib']} MiB free"
    if name == "gpu_topology":
        return ", ".join(
            f"{a}-{b}: {link}" for a, peers in value["links"].items() for b, link in peers.items()
        )
    if isinstance(value, dict):
        if name == "units":
            return ", ".join(f"{u}: {s['active_state']}" for u, s in value.items()) or "none"
        if name == "releases":
            return f"current={value.get('current') or '-'} known-good={value.get('known_good') or '-'}"
        return ", ".join(sorted(value)) or "none"
    return str(value)


def run(args: argparse.Namespace, ui: Ui) -> int:
    inventory = load_inventory(args.inventory)
    hosts = select_hosts(inventory, args.limit)
    gathered = gather_fleet_facts(
        host_contexts(inventory, hosts, {}, stage_models=False), SHOWN, args.timeout, args.forks
    )
    if args.json:
        ui.json(gathered)
    else:
        for name, found in gathered.items():
            table = Table(title=name, show_header=False, box=None)
            table.add_column("fact", style="bold")
            table.add_column("value")
            declared = inventory.hosts[name].gpus if name in inventory.hosts else None
            for fact in SHOWN:
                value = found.get("facts", {}).get(fact)
                table.add_row(fact, summarize(fact, value, declared.count if declared else None))
            if "error" in found:
                table.add_row("error", f"{found['error']} (hint: {found['hint']})")
            ui.table(table)
    failed = [name for name, found in gathered.items() if "error" in found]
    for name in failed:
        ui.error(f"{gathered[name]['error']}\n  hint: {gathered[name]['hint']}")
    return EXIT_FAILURE if failed else EXIT_OK
