"""`vllmctl plan INVENTORY`: engine flags, per-GPU memory and the reason for every choice, per host and model.

Plans from the GPUs each host declares (or, with `--gather-facts`, reports over SSH), the shipped model
catalog and local model directories; hub ids outside the catalog are fetched unless `--offline`.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from rich.table import Table

from vllmctl.console import Ui
from vllmctl.errors import EXIT_FAILURE, EXIT_OK, VllmctlError
from vllmctl.inventory import load_inventory
from vllmctl.inventory.model import Inventory
from vllmctl.planner.inventory_plan import HostModelPlan, plan_inventory
from vllmctl.runner.fleet import (
    gather_fleet_facts,
    gpu_facts_from,
    host_contexts,
    load_model_archs,
    select_hosts,
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "plan", help="show the planned engine flags, memory and reasons per host and model"
    )
    parser.add_argument("inventory", help="inventory file")
    parser.add_argument("--limit", help="comma-separated host or group names")
    parser.add_argument("--offline", action="store_true", help="never fetch config.json from the hub")
    parser.add_argument(
        "--gather-facts",
        action="store_true",
        help="read each host's GPUs over SSH; unreachable hosts fall back to their declared gpus",
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per host when gathering facts")
    parser.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, ui: Ui) -> int:
    inv = load_inventory(args.inventory)
    selected = set(select_hosts(inv, args.limit))
    facts = None
    if args.gather_facts:
        contexts = host_contexts(inv, [h for h in inv.hosts if h in selected], {})
        facts = gpu_facts_from(gather_fleet_facts(contexts, ("gpus",), args.timeout, forks=16), ui)
    archs, arch_failures = load_model_archs(inv, online=not args.offline)
    plan = plan_inventory(inv, facts, archs)
    entries = [e for e in plan.entries if e.host in selected]
    entries = [_with_arch_failure(e, inv, arch_failures) for e in entries]
    if args.json:
        ui.json({"ok": all(e.plan for e in entries), "entries": [e.to_json() for e in entries]})
    else:
        for entry in entries:
            _show(ui, entry)
    return EXIT_OK if all(e.plan for e in entries) else EXIT_FAILURE


def _with_arch_failure(
    entry: HostModelPlan, inv: Inventory, failures: dict[str, VllmctlError]
) -> HostModelPlan:
    failure = failures.get(inv.models[entry.model].source)
    if entry.plan is None and failure is not None:
        return replace(entry, error=failure.message, hint=failure.hint)
    return entry


def _gib(value: float) -> str:
    return f"{value:.2f} GiB"


def memory_lines(memory: dict[str, Any]) -> list[str]:
    if memory.get("engine") == "sglang":
        return [f"{key}: {value}" for key, value in memory.items() if key != "engine"]
    graphs = "in budget" if memory["cudagraph_in_budget"] else "outside budget"
    encoder = memory.get("encoder_gib") or 0.0
    return [
        f"requested {_gib(memory['requested_gib'])} of {_gib(memory['total_gib'])} per GPU",
        f"weights {_gib(memory['weights_gib'])}, activation peak {_gib(memory['activation_peak_gib'])}, "
        f"non-torch {_gib(memory['non_torch_gib'])}, CUDA graphs {_gib(memory['cudagraph_gib'])} ({graphs})"
        + (f", vision encoder {_gib(encoder)} (weights + profile run, included above)" if encoder else ""),
        f"KV cache {_gib(memory['available_kv_cache_gib'])} = {memory['kv_cache_tokens']:,} tokens, "
        f"max concurrency {memory['max_concurrency']:.2f}x at {memory['max_model_len']:,} tokens",
    ]


def _show(ui: Ui, entry: HostModelPlan) -> None:
    if entry.plan is None:
        ui.error(
            f"{entry.host} / {entry.model}: {entry.error}" + (f"\n  hint: {entry.hint}" if entry.hint else "")
        )
        return
    plan = entry.plan
    ui.data(
        f"{entry.host} / {entry.model}: {plan.gpu_count}x {plan.gpu} ({entry.gpu_source}), "
        f"{plan.engine} {plan.engine_version}, profile {plan.profile}"
    )
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("flag")
    table.add_column("value")
    table.add_column("why")
    for decision in plan.reasons:
        table.add_row(decision.flag, str(decision.value), decision.reason)
    ui.table(table)
    for line in memory_lines(plan.memory.to_json()):
        ui.data(f"  {line}")
    for replica in plan.replicas:
        ui.data(f"  replica {replica.index}: GPUs {list(replica.gpu_indices)}, port {replica.port}")
    for warning in plan.warnings:
        ui.warn(f"{entry.host} / {entry.model}: {warning}")
    ui.data("")
