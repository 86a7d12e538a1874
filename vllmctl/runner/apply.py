"""The apply flow: plan the fleet, converge each host with the release gate after it, then each multi-node
model as one group release, and record the run in the local audit log."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vllmctl.bench.readiness import FLOOR_S
from vllmctl.console import Ui
from vllmctl.errors import VllmctlError
from vllmctl.fanout.schedule import FolderFanout
from vllmctl.inventory import load_inventory
from vllmctl.inventory.controller import LocalFiles
from vllmctl.inventory.model import Inventory
from vllmctl.ops import sha256_text
from vllmctl.planner.inventory_plan import GpuFacts
from vllmctl.planner.rules.base import HostResources
from vllmctl.releases.host import inventory_digest
from vllmctl.releases.rollout import MaxFail
from vllmctl.releases.waves import MaxUnavailable
from vllmctl.runner import DEFAULT_FORKS, bookkeeping_timeout_s
from vllmctl.runner.apply_hooks import gate_options, gates, keep_current_hook, release_hook
from vllmctl.runner.core.audit import append_local_audit, local_audit_path, lock_owner
from vllmctl.runner.core.execute import RunOptions
from vllmctl.runner.core.fact_cache import default_root as fact_cache_root
from vllmctl.runner.core.playbook_run import run_playbook
from vllmctl.runner.core.results import RunResult
from vllmctl.runner.core.view import Progress
from vllmctl.runner.fanout.folders import fan_out_first
from vllmctl.runner.fanout.record import record_fanout
from vllmctl.runner.fleet.engine_cuda import with_engine_cuda
from vllmctl.runner.fleet.hosts import (
    cached_ssh_remote,
    deployment_plans,
    gather_fleet_facts,
    gpu_facts_from,
    host_contexts,
    host_resources_from,
    keys_from,
    load_model_archs,
    planned_inventory,
    resolve_secrets,
    select_hosts,
    ssh_remote,
)
from vllmctl.runner.gateway.control import fleet_servers, gateway_plans, gateway_secrets, ssh_gateway
from vllmctl.runner.releases.orphans import heal_lines, heal_orphans
from vllmctl.runner.releases.rollout import DEFAULT_WAIT_S, RolloutGuard, rollout_guard
from vllmctl.runner.releases.waves import planned_waves, ran_waves, with_max_unavailable
from vllmctl.tasks.desired import HostContext, render_env
from vllmctl.tasks.playbooks import load_playbook, with_task_params

if TYPE_CHECKING:  # imported where used: a run with no gate and no multi-node model never loads them
    from vllmctl.multinode.plan import ClusterPlan
    from vllmctl.runner.multinode.apply_groups import GroupRun


@dataclass(frozen=True)
class ApplyRequest:
    """What `vllmctl apply` was asked: the inventory, the playbook and how to run it."""

    inventory: str
    playbook: str = "site"
    limit: str | None = None
    check: bool = False
    diff: bool = False
    forks: int = DEFAULT_FORKS
    batch_size: int | None = None
    max_fail_percentage: float | None = None
    max_fail: MaxFail = field(
        default_factory=MaxFail
    )  # failed hosts the rollout tolerates before it takes no further host out
    wait_available: float = DEFAULT_WAIT_S  # how long a host waits for its models' other replicas to serve
    max_unavailable: MaxUnavailable | None = None  # every model's, for this run; None: the inventory's
    timeout: float = 600.0  # one remote command
    host_timeout: float = 3600.0
    no_gate: bool = False
    keep_releases: int | None = None
    health_timeout: float | None = None
    break_lock: bool = False
    offline: bool = False
    fresh_facts: bool = False  # no fact cache: every begin reads its facts under sudo

    @property
    def bookkeeping_timeout(self) -> float:
        """Release records, pointers, journal tails: never longer than the policy's cap."""
        return bookkeeping_timeout_s(self.timeout)


@dataclass(frozen=True)
class ApplyOutcome:
    result: RunResult
    groups: list[GroupRun]
    gateway_gate: dict[str, Any] | None = None  # the gateway's verdict after a rollout changed hosts
    staging: list[FolderFanout] = field(default_factory=list)  # the host-to-host copies before the run
    # the servers a dead run left out of service, put back before this run began (runner/releases/orphans.py)
    healed: list[dict[str, Any]] = field(default_factory=list)
    # the rollout's waves: planned (--check: "waves" and "held"), or as they ran (hosts, canary, start, end)
    waves: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        gateway_failed = self.gateway_gate is not None and not self.gateway_gate["passed"]
        return self.result.failed or any(g.failed for g in self.groups) or gateway_failed

    @property
    def changed(self) -> bool:
        return bool(self.result.changed) or any(g.changed for g in self.groups)

    def to_json(self) -> dict[str, Any]:
        groups = {g.model: g.to_json() for g in self.groups}
        staging = {f.folder: f.to_json() for f in self.staging}
        return {
            **self.result.to_json(),
            "groups": groups,
            "gateway_gate": self.gateway_gate,
            "staging": staging,
            "healed": self.healed,
            "rollout": self.waves,
        }


Confirm = Callable[[int, str], bool]  # (hosts, playbook) -> go ahead?


def deploy_groups(
    args: ApplyRequest,
    inventory: Inventory,
    result: RunResult,
    plans: Mapping[str, ClusterPlan],
    contexts: Mapping[str, HostContext],
    started: str,
    keys: Mapping[str, str],
    guard: RolloutGuard | None,
    ui: Ui,
) -> list[GroupRun]:
    """After the per-host run: each multi-node model as one group release (or, with --check, its plan);
    none once the rollout has stopped, and each failed group counts against --max-fail."""
    from vllmctl.runner.multinode.apply_groups import GroupApplyOptions, GroupRun, apply_groups
    from vllmctl.runner.multinode.group_gate import GroupGateOptions

    gate = GroupGateOptions(
        owner=lock_owner(started),
        break_lock=args.break_lock,
        created_at=started,
        inventory_digest=inventory_digest(Path(args.inventory).read_text()),
        command_timeout_s=args.bookkeeping_timeout,
        health_timeout_s=args.health_timeout or FLOOR_S,
        api_keys=keys,
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
        check=args.check, gate=gate, diff=args.diff, engine_env=engine_env, secrets=secrets, guard=guard
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
    gathered = gather_fleet_facts(
        contexts, ("gpus", "gpu_processes", "resources", "engine_venvs"), 30.0, DEFAULT_FORKS
    )
    return gpu_facts_from(gathered, ui), host_resources_from(gathered)


def apply(request: ApplyRequest, ui: Ui, confirm: Confirm) -> ApplyOutcome:
    """Plan, then converge every selected host (releases gated per host), then each multi-node group;
    the local audit log records what was done."""
    args = request
    inventory = load_inventory(args.inventory, LocalFiles())  # validate's checks, the controller's too
    inventory = with_max_unavailable(inventory, args.max_unavailable)
    playbook = load_playbook(args.playbook)
    if args.health_timeout is not None:
        for task in ("health_check", "driver_reboot"):  # the wait for engines after a reboot too
            playbook = with_task_params(playbook, task, {"deadline_s": args.health_timeout})
    hosts = select_hosts(inventory, args.limit)
    gpus, resources = gathered_gpus(inventory, hosts, ui)
    archs, arch_failures = load_model_archs(inventory, online=not args.offline)  # once: hub fetches are slow
    inventory = planned_inventory(inventory, gpus, archs)
    plans = deployment_plans(inventory, hosts, gpus, archs=archs, resources=resources)
    clusters: Mapping[str, ClusterPlan] = {}
    if gates(playbook):  # only a gated playbook deploys multi-node models
        from vllmctl.runner.multinode.apply_groups import group_plans

        clusters = group_plans(inventory, gpus, archs, arch_failures)
    if not args.check and not confirm(len(hosts), playbook.name):
        raise VllmctlError("aborted; nothing was done", "pass --yes to skip this question")
    secrets = {**resolve_secrets(inventory, os.environ), **gateway_secrets(inventory)}
    keys = keys_from(inventory, secrets)  # the gates' API keys, from the secrets just read
    backends = gateway_plans(inventory, hosts, plans, gpus, archs, resources)
    contexts = {
        name: replace(ctx, fleet_plans=backends)
        for name, ctx in host_contexts(inventory, hosts, secrets, plans).items()
    }
    if playbook.runs("engine_install"):
        contexts = with_engine_cuda(contexts, ui.warn, online=not args.offline)  # the driver check's CUDA
    staged, contexts = fan_out_first(
        playbook, contexts, inventory.staging, args.check, args.forks, ui.info, args.offline
    )
    guard: RolloutGuard | None = None
    rolled: dict[str, Any] = {}  # canaries their soak found worse, rolled back
    started = datetime.now(UTC).isoformat(timespec="seconds")
    owner = lock_owner(started)
    healed: list[dict[str, Any]] = []
    if not args.check:
        gateway = ssh_gateway(inventory, fleet_servers(inventory, backends), args.timeout)
        known = {**backends, **plans}
        wait = args.wait_available
        guard = rollout_guard(
            inventory, known, len(hosts), args.max_fail, gateway, wait, api_keys=keys, owner=owner
        )
        healed = heal_orphans(guard)
        for line in heal_lines(healed):
            ui.warn(line)
    opts = RunOptions(
        forks=args.forks,
        batch_size=args.batch_size,
        max_fail_percentage=args.max_fail_percentage,
        command_timeout_s=args.timeout,
        host_timeout_s=args.host_timeout,
        check=args.check,
        diff=args.diff,
        break_lock=args.break_lock,
        lock_owner=owner,
        after_host=None
        if args.check or args.no_gate or not gates(playbook)
        else release_hook(args, inventory, started, keys),
        after_held=None if args.check or not gates(playbook) else keep_current_hook(args),
        guard=guard,
        first=staged.seeds,
        after_first=staged.after_seeds,
    )
    try:
        with Progress(ui, hosts) as progress:
            remotes = ssh_remote if args.fresh_facts else cached_ssh_remote(fact_cache_root(os.environ))
            result = run_playbook(playbook, contexts, remotes, opts, time.time, progress)
        if guard is not None and opts.after_host is not None and guard.canaries.worse:
            from vllmctl.runner.releases.canary_rollback import roll_back_canaries

            gate = gate_options(args, inventory, started, keys)
            rolled = roll_back_canaries(guard, result, contexts, remotes, gate)
    finally:
        if guard is not None:
            guard.close()
    record_fanout(result, staged.found, args.check)
    waves = planned_waves(inventory, result).to_json() if args.check else {}
    if guard is not None:
        for name, host in result.hosts.items():
            host.gateway = guard.gateway.host_events(name) if guard.gateway is not None else []
            host.rollout = guard.host_events(name)
        waves = ran_waves(guard, rolled)
    groups = []
    if clusters and not opts.stop.is_set():  # an interrupted run starts nothing more
        groups = deploy_groups(args, inventory, result, clusters, contexts, started, keys, guard, ui)
        result.aborted = result.aborted or (guard.stopped if guard is not None else "")
    verdict = None
    gateway_changed = guard is not None and guard.gateway is not None and result.changed
    if gateway_changed and opts.after_host is not None and not result.failed and not opts.stop.is_set():
        from vllmctl.runner.core.engine_watch import smoke_bench
        from vllmctl.runner.gateway.gate import gateway_gate

        verdict = gateway_gate(inventory, keys, smoke_bench).to_json()
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
    return ApplyOutcome(result, groups, verdict, staged.found, healed, waves)
