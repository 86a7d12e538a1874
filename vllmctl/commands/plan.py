"""`vllmctl plan INVENTORY`: engine flags, per-GPU memory and the reason for every choice, per host and model.

Plans from the GPUs each host declares (or, with `--gather-facts`, reports over SSH), the shipped model
catalog and local model directories; hub ids outside the catalog are fetched unless `--offline`.
`--from-status` instead reads the fleet's live status and proposes engine_args changes as an inventory diff.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.table import Table

from vllmctl.catalog.adapters import load_adapter_configs
from vllmctl.commands import _options as options
from vllmctl.console import Ui
from vllmctl.errors import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, InputError, Problem, VllmctlError
from vllmctl.inventory import load_inventory
from vllmctl.inventory.model import Inventory, runs_on_cpu
from vllmctl.multinode.plan import cluster_entries
from vllmctl.ops.base import OpError
from vllmctl.ops.driver import unsupported_os
from vllmctl.ops.driver_flavor import host_driver_plan
from vllmctl.planner.inventory_plan import HostModelPlan, plan_inventory
from vllmctl.planner.plan_groups import hosts_label, same_plan_groups
from vllmctl.planner.presets import CpuEnginePlan
from vllmctl.runner.fleet.engine_cuda import engine_driver_errors
from vllmctl.runner.fleet.hosts import (
    cpu_engine_plans,
    gather_fleet_facts,
    gpu_facts_from,
    host_contexts,
    host_resources_from,
    load_model_archs,
    select_hosts,
    served_plan,
)
from vllmctl.runner.fleet.refusals import refused_problems, vet_proposals
from vllmctl.runner.status.collect import collect
from vllmctl.status.proposals import Proposal, changed_inventory, engine_args_diff, propose_all


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "plan", help="show the planned engine flags, memory and reasons per host and model"
    )
    parser.add_argument("inventory", help="inventory file")
    options.add_limit(parser)
    parser.add_argument("--offline", action="store_true", help="never fetch config.json from the hub")
    parser.add_argument(
        "--gather-facts",
        action="store_true",
        help="read each host's GPUs over SSH; unreachable hosts fall back to their declared gpus",
    )
    options.add_timeout(parser)
    options.add_json(parser)
    parser.add_argument(
        "--from-status",
        action="store_true",
        help="propose engine_args changes from the live metrics `vllmctl status` reads, as an inventory diff",
    )
    parser.add_argument(
        "--interval", type=float, default=5.0, help="--from-status: seconds the scrapes are spread over"
    )
    parser.add_argument("--samples", type=int, default=6, help="--from-status: scrapes per server (>= 2)")
    parser.add_argument("--model", action="append", default=[], help="--from-status: only this model")
    parser.add_argument("--write", metavar="PATH", help="--from-status: write the changed inventory to PATH")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, ui: Ui) -> int:
    if args.write and not args.from_status:
        raise InputError(
            "--write needs --from-status", "vllmctl plan INVENTORY --from-status --write NEW.yml"
        )
    if args.from_status and args.samples < 2:
        raise InputError(f"--samples must be at least 2, got {args.samples}", "rates need two scrapes")
    inv = load_inventory(args.inventory)
    if args.from_status:
        return _from_status(args, ui, inv)
    selected = set(select_hosts(inv, args.limit))
    facts, resources, releases = None, None, {}
    if args.gather_facts:
        contexts = host_contexts(inv, [h for h in inv.hosts if h in selected], {}, stage_models=False)
        wanted = ("gpus", "gpu_processes", "resources", "engine_venvs", "os_release")
        gathered = gather_fleet_facts(contexts, wanted, args.timeout, forks=options.DEFAULT_FORKS)
        facts, resources = gpu_facts_from(gathered, ui), host_resources_from(gathered)
        releases = {h: r["facts"].get("os_release") for h, r in gathered.items() if "facts" in r}
    archs, arch_failures = load_model_archs(inv, online=not args.offline)
    adapters = load_adapter_configs(inv.models.values(), online=not args.offline)
    plan = plan_inventory(inv, facts, archs, resources, adapters)
    entries = [e for e in cluster_entries(inv, plan.entries, facts, archs) if e.host in selected]
    entries = [_with_arch_failure(e, inv, arch_failures) for e in entries]
    on_cpu = cpu_engine_plans(inv, archs)  # a CPU build sizes its own memory: no GPU plan to show
    ok = all(e.plan or (e.host, e.model) in on_cpu for e in entries)
    refused = refused_problems(inv, [e for e in entries if (e.host, e.model) not in on_cpu])
    drivers, driver_errors = driver_plans(inv, selected, releases)
    pinned = host_contexts(inv, [h for h in inv.hosts if h in selected], {}, stage_models=False)
    driver_errors += engine_driver_errors(pinned, ui.warn, online=not args.offline)
    if args.json:
        problems = [{**_problem_json(p)} for p in refused] + driver_errors
        entries_json = [_cpu_json(e, on_cpu) for e in entries]
        ui.json({"ok": ok, "entries": entries_json, "drivers": drivers, "problems": problems})
    else:
        for line, driven in _same_driver_lines(drivers):
            ui.data(f"{hosts_label(driven)}: {line}")
        for error in driver_errors:
            ui.error(f"{error['host']}: {error['message']}\n  hint: {error['hint']}")
        cpu_plans = [repr(on_cpu.get((entry.host, entry.model))) for entry in entries]
        for entry, hosts in same_plan_groups(entries, cpu_plans):
            cpu = on_cpu.get((entry.host, entry.model))
            if cpu:
                _show_cpu(ui, entry, cpu, hosts_label(hosts))
            elif not entry.input_error:  # shown below with the inventory line that set the flag
                _show(ui, entry, hosts_label(hosts))
        for problem in refused:
            ui.error(problem.render())
    if refused or driver_errors:
        return EXIT_USAGE
    return EXIT_OK if ok else EXIT_FAILURE


def driver_plans(
    inv: Inventory, selected: set[str], releases: Mapping[str, Any] | None = None
) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """Each selected host's driver with a pinned branch: the kernel modules chosen for its GPU and why, or
    the refusal of a `driver.flavor` its GPU cannot run, or (its os-release gathered) of an OS the driver
    stack is not managed on, before anything is installed."""
    plans: list[dict[str, str]] = []
    errors: list[dict[str, str]] = []
    for name, host in inv.hosts.items():
        if name not in selected or host.driver.branch is None:
            continue
        gpu = host.gpus.model if host.gpus else None
        refused = unsupported_os((releases or {}).get(name))
        if refused is not None:
            errors.append({"host": name, "message": refused.message, "hint": refused.hint})
            continue
        try:
            plans.append(host_driver_plan(name, gpu, str(host.driver.branch), host.driver.flavor))
        except OpError as exc:
            errors.append({"host": name, "message": exc.message, "hint": exc.hint})
    return plans, errors


def _problem_json(problem: Problem) -> dict[str, Any]:
    where = problem.location
    return {"file": where.file, "line": where.line, "column": where.column, "field": where.path,
            "message": problem.message, "hint": problem.hint}  # fmt: skip


def _cpu_json(entry: HostModelPlan, on_cpu: dict[tuple[str, str], CpuEnginePlan]) -> dict[str, Any]:
    cpu = on_cpu.get((entry.host, entry.model))
    if cpu is None:
        return entry.to_json()
    return {**entry.to_json(), "gpu_source": None, "gpu_indices": [], "plan": cpu.to_json(), "error": None}


def _show_cpu(ui: Ui, entry: HostModelPlan, cpu: CpuEnginePlan, label: str) -> None:
    ui.data(
        f"{label} / {entry.model}: CPU build of {cpu.engine} {cpu.engine_version}; it sizes its own "
        "memory (vLLM: VLLM_CPU_KVCACHE_SPACE), so only device-independent decisions are planned"
    )
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    for column in ("flag", "value", "why"):
        table.add_column(column)
    for decision in cpu.decisions:
        table.add_row(decision.flag, str(decision.value), decision.reason)
    if cpu.decisions:
        ui.table(table)
    else:
        ui.data("  no decisions: the inventory's engine_args as written")
    ui.data(f"  replica 0: port {cpu.port}")
    for warning in cpu.warnings:
        ui.warn(f"{label} / {entry.model}: {warning}")
    ui.data("")


def _from_status(args: argparse.Namespace, ui: Ui, inv: Inventory) -> int:
    hosts = select_hosts(inv, args.limit)
    statuses = collect(inv, hosts, served_plan(inv), args.model, args.interval, args.timeout, args.samples)
    looked_at = {s.model for s in statuses}
    proposals = propose_all({m: dict(inv.models[m].engine_args) for m in looked_at}, statuses)
    proposals = vet_proposals(inv, proposals, load_model_archs(inv, online=False)[0], runs_on_cpu)
    written = _write(args, inv, proposals) if args.write else None
    if args.json:
        ui.json({"proposals": [p.to_json() for p in proposals], "written": written})
    else:
        for proposal in proposals:
            _show_proposal(ui, proposal, args.inventory)
        if written:
            ui.info(f"wrote {written}: apply it with `vllmctl apply {written}`")
    return EXIT_OK if any(s.metrics is not None for s in statuses) else EXIT_FAILURE


def _write(args: argparse.Namespace, inv: Inventory, proposals: list[Proposal]) -> str:
    target = Path(args.write)
    target.write_text(changed_inventory(Path(inv.path).read_text(), proposals))
    load_inventory(str(target))  # what apply will read: it must validate like the original
    return str(target)


def _show_proposal(ui: Ui, proposal: Proposal, inventory_name: str) -> None:
    ui.info(f"{proposal.model}: {proposal.reason}")
    for finding in proposal.findings:
        evidence = ", ".join(f"{k}={v:g}" for k, v in finding.evidence.items())
        ui.info(f"  {finding.where}: {finding.advice.code} [{evidence}]")
    for line in proposal.unmeasured:
        ui.warn(f"  {line}")
    diff = engine_args_diff(proposal, inventory_name)
    ui.data(diff.rstrip("\n") if diff else f"{proposal.model}: no change")


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
    probe = memory.get("graph_probe_gib") or 0.0
    non_torch = _gib(memory["non_torch_gib"]) + (f" (sample graph capture {_gib(probe)})" if probe else "")
    encoder = memory.get("encoder_gib") or 0.0
    return [
        f"requested {_gib(memory['requested_gib'])} of {_gib(memory['total_gib'])} per GPU",
        f"weights {_gib(memory['weights_gib'])}, activation peak {_gib(memory['activation_peak_gib'])}, "
        f"non-torch {non_torch}, CUDA graphs {_gib(memory['cudagraph_gib'])} ({graphs})"
        + (f", vision encoder {_gib(encoder)} (weights + profile run, included above)" if encoder else ""),
        f"KV cache {_gib(memory['available_kv_cache_gib'])} = {memory['kv_cache_tokens']:,} tokens, "
        f"max concurrency {memory['max_concurrency']:.2f}x at {memory['max_model_len']:,} tokens",
    ]


def _same_driver_lines(drivers: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    lines: dict[str, list[str]] = {}
    for driver in drivers:
        line = f"driver {driver['branch']}, {driver['ubuntu_package']} on Ubuntu: {driver['why']}"
        lines.setdefault(line, []).append(driver["host"])
    return list(lines.items())


def _show(ui: Ui, entry: HostModelPlan, label: str) -> None:
    if entry.plan is None:
        ui.error(
            f"{label} / {entry.model}: {entry.error}" + (f"\n  hint: {entry.hint}" if entry.hint else "")
        )
        return
    plan = entry.plan
    ui.data(
        f"{label} / {entry.model}: {plan.gpu_count}x {plan.gpu} ({entry.gpu_source}), "
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
        ui.warn(f"{label} / {entry.model}: {warning}")
    ui.data("")
