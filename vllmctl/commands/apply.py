"""`vllmctl apply INVENTORY`: converge hosts to a playbook (site.yml by default); --check shows the plan."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from vllmctl.bench.readiness import FLOOR_S
from vllmctl.commands import _options as options
from vllmctl.console import Ui
from vllmctl.errors import EXIT_CHANGES, EXIT_FAILURE, EXIT_OK, VllmctlError
from vllmctl.inventory import load_inventory
from vllmctl.inventory.controller import LocalFiles
from vllmctl.inventory.model import Inventory
from vllmctl.multinode.plan import ClusterPlan
from vllmctl.ops import sha256_text
from vllmctl.planner.inventory_plan import GpuFacts
from vllmctl.planner.rules.base import HostResources
from vllmctl.releases.host import inventory_digest
from vllmctl.runner.apply_groups import GroupApplyOptions, GroupRun, apply_groups, group_plans, summary
from vllmctl.runner.cluster_release import GroupGateOptions
from vllmctl.runner.execute import AfterHost, RunOptions, run_playbook
from vllmctl.runner.fleet import (
    api_keys,
    append_local_audit,
    deployment_plans,
    gather_fleet_facts,
    gpu_facts_from,
    host_contexts,
    host_resources_from,
    load_model_archs,
    local_audit_path,
    lock_owner,
    planned_inventory,
    resolve_secrets,
    select_hosts,
    ssh_remote,
)
from vllmctl.runner.release import GateOptions, gate_host
from vllmctl.runner.remote import Remote
from vllmctl.runner.results import RunResult
from vllmctl.runner.view import Progress, show_failures, show_plan, show_recap
from vllmctl.tasks.desired import HostContext, render_env
from vllmctl.tasks.playbooks import Playbook, load_playbook, with_task_params


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("apply", help="converge the fleet to a playbook (site.yml by default)")
    parser.add_argument("inventory", help="inventory file")
    parser.add_argument(
        "--playbook", default="site", help="a shipped playbook name or a file (default: site)"
    )
    options.add_limit(parser)
    parser.add_argument("--check", action="store_true", help="show what would change; change nothing")
    parser.add_argument("--diff", action="store_true", help="show unified diffs of changed files")
    options.add_forks(parser)
    parser.add_argument("--batch-size", type=int, help="hosts per batch (overrides the playbook's serial)")
    parser.add_argument("--max-fail-percentage", type=float, help="stop later batches past this failure rate")
    options.add_timeout(parser, changes_hosts=True)
    parser.add_argument("--host-timeout", type=float, default=3600.0, help="seconds per host for the run")
    parser.add_argument(
        "--no-gate",
        action="store_true",
        help="skip releases and the health/smoke-benchmark gate (no rollback)",
    )
    parser.add_argument(
        "--keep-releases", type=int, help="releases kept per host (default: the inventory's releases.keep)"
    )
    parser.add_argument(
        "--health-timeout",
        type=float,
        help="seconds an engine may take to answer health after its start "
        f"(default: {FLOOR_S:g} s, plus 15 s per GiB of weights on a single host)",
    )
    parser.add_argument("--break-lock", action="store_true", help="clear a lock left by a dead apply")
    options.add_yes(parser, "do not ask for confirmation on a terminal (never asked otherwise)")
    parser.add_argument(
        "--offline", action="store_true", help="never fetch model configs from the hub for planning"
    )
    options.add_json(parser)
    parser.add_argument("-v", "--verbose", action="store_true", help="also list steps that were no-ops")
    parser.set_defaults(func=run)


def gates(playbook: Playbook) -> bool:
    """Only a playbook that starts the model services makes releases."""
    return any(
        task.task == "model_services" and task.params.get("start", True) is not False
        for phase in playbook.phases
        for task in phase.tasks
    )


def release_hook(args: argparse.Namespace, inventory: Inventory, started: str) -> AfterHost:
    opts = GateOptions(
        owner=lock_owner(started),
        created_at=started,
        inventory_digest=inventory_digest(Path(args.inventory).read_text()),
        keep=args.keep_releases or inventory.releases.keep,
        command_timeout_s=options.bookkeeping_timeout(args),
        health_timeout_s=args.health_timeout or FLOOR_S,
        api_keys=api_keys(inventory, os.environ),
    )

    def after_host(
        ctx: HostContext, remote: Remote, lock: Callable[[], None], failure: str
    ) -> dict[str, Any]:
        return gate_host(ctx, remote, lock, opts, failure).to_json()

    return after_host


def deploy_groups(
    args: argparse.Namespace,
    inventory: Inventory,
    result: RunResult,
    plans: Mapping[str, ClusterPlan],
    contexts: Mapping[str, HostContext],
    started: str,
    ui: Ui,
) -> list[GroupRun]:
    """After the per-host run: each multi-node model as one group release (or, with --check, its plan)."""
    gate = GroupGateOptions(
        owner=lock_owner(started),
        break_lock=args.break_lock,
        created_at=started,
        inventory_digest=inventory_digest(Path(args.inventory).read_text()),
        command_timeout_s=options.bookkeeping_timeout(args),
        health_timeout_s=args.health_timeout or FLOOR_S,
        api_keys=api_keys(inventory, os.environ),
    )
    if args.no_gate:
        why = "--no-gate: a multi-node model is only deployed as a gated group release"
        return [GroupRun(m, p.cluster.group, p.hosts, "skipped", reasons=(why,)) for m, p in plans.items()]
    failed = [name for name, host in result.hosts.items() if host.status != "ok"]
    engine_env = {
        model: sha256_text(render_env(contexts[plan.head], inventory.models[model]))
        for model, plan in plans.items()
        if plan.head in contexts
    }
    secrets = next(iter(contexts.values())).secrets if contexts else {}
    opts = GroupApplyOptions(
        check=args.check, gate=gate, diff=args.diff, engine_env=engine_env, secrets=secrets
    )
    return apply_groups(inventory, plans, list(result.hosts), failed, opts, ui.info)


def gathered_gpus(
    inventory: Inventory, hosts: list[str], ui: Ui
) -> tuple[dict[str, GpuFacts], dict[str, HostResources]]:
    """GPUs and host memory from the hosts that declare no GPUs: facts fill in what the inventory omits."""
    undeclared = [h for h in hosts if inventory.hosts[h].gpus is None]
    if not undeclared:
        return {}, {}
    contexts = host_contexts(inventory, undeclared, {}, stage_models=False)
    gathered = gather_fleet_facts(contexts, ("gpus", "resources"), 30.0, 16)
    return gpu_facts_from(gathered, ui), host_resources_from(gathered)


def run(args: argparse.Namespace, ui: Ui) -> int:
    inventory = load_inventory(args.inventory, LocalFiles())  # validate's checks, the controller's too
    playbook = load_playbook(args.playbook)
    if args.health_timeout is not None:
        playbook = with_task_params(playbook, "health_check", {"deadline_s": args.health_timeout})
    hosts = select_hosts(inventory, args.limit)
    gpus, resources = gathered_gpus(inventory, hosts, ui)
    archs, arch_failures = load_model_archs(inventory, online=not args.offline)  # once: hub fetches are slow
    inventory = planned_inventory(inventory, gpus, archs)
    plans = deployment_plans(inventory, hosts, gpus, archs=archs, resources=resources)
    clusters = group_plans(inventory, gpus, archs, arch_failures) if gates(playbook) else {}
    if not (args.check or args.yes) and sys.stdin.isatty():
        answer = input(f"converge {len(hosts)} host(s) with playbook {playbook.name!r}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            raise VllmctlError("aborted; nothing was done", "pass --yes to skip this question")
    contexts = host_contexts(inventory, hosts, resolve_secrets(inventory, os.environ), plans)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    opts = RunOptions(
        forks=args.forks,
        batch_size=args.batch_size,
        max_fail_percentage=args.max_fail_percentage,
        command_timeout_s=args.timeout,
        host_timeout_s=args.host_timeout,
        check=args.check,
        diff=args.diff,
        break_lock=args.break_lock,
        lock_owner=lock_owner(started),
        after_host=None
        if args.check or args.no_gate or not gates(playbook)
        else release_hook(args, inventory, started),
    )
    with Progress(ui, hosts) as progress:
        result = run_playbook(playbook, contexts, ssh_remote, opts, time.time, progress)
    groups = deploy_groups(args, inventory, result, clusters, contexts, started, ui) if clusters else []
    if not args.check:
        record = {
            "time": started,
            "inventory": args.inventory,
            "playbook": playbook.name,
            "by": opts.lock_owner,
        }
        append_local_audit(
            local_audit_path(os.environ),
            {
                **record,
                "hosts": {name: h.recap() for name, h in result.hosts.items()},
                "groups": {g.model: {"status": g.status, "release": g.release} for g in groups},
            },
        )
    if args.json:
        ui.json({**result.to_json(), "groups": {g.model: g.to_json() for g in groups}})
    else:
        show_plan(ui, result, args.verbose)
    show_failures(ui, result)
    show_recap(ui, result)
    show_groups(ui, groups, diffs=not args.json)  # JSON carries them already; stdout stays one document
    if result.failed or any(g.failed for g in groups):
        return EXIT_FAILURE
    changed = result.changed or any(g.changed for g in groups)
    return EXIT_CHANGES if args.check and changed else EXIT_OK


def show_groups(ui: Ui, groups: list[GroupRun], diffs: bool) -> None:
    for group, line in zip(groups, summary(groups), strict=True):
        if group.failed:
            reasons = "\n".join(f"  {reason}" for reason in group.reasons)
            ui.error(f"{line}\n{reasons}")
        elif group.status in ("would_change", "skipped"):
            ui.warn("\n".join([line, *(f"  {reason}" for reason in group.reasons)]))
            for diff in group.diffs if diffs else ():
                ui.data(diff.rstrip("\n"))
        else:
            ui.info(line)
