"""`vllmctl rollback`: per host, re-activate the chosen release from what is still there (units from the
release dir, venv from the manifest) and wait for health, or leave a host already on it; a multi-node model's
group whose used nodes are all selected is rolled back as one group release. Without `yes`, only the plan."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from vllmctl.bench.readiness import HealthCheck
from vllmctl.inventory.model import Inventory
from vllmctl.releases.group_history import GroupSelection
from vllmctl.releases.host import HostReleases
from vllmctl.releases.rollback import HostChoice, HostUnits, choose
from vllmctl.releases.rollout import MaxFail
from vllmctl.runner.core.engine_guard import EngineGuard
from vllmctl.runner.core.engine_watch import wait_for_health
from vllmctl.runner.fleet.hosts import fan_out, host_contexts, ssh_remote
from vllmctl.runner.gateway.control import fleet_servers, ssh_gateway
from vllmctl.runner.multinode.group_gate import GroupGateOptions
from vllmctl.runner.multinode.group_nodes import Connect, ssh_node
from vllmctl.runner.multinode.group_rollback import group_plan, roll_back_groups, select
from vllmctl.runner.releases.history import RemoteFor, survey
from vllmctl.runner.releases.orphans import heal_lines, heal_orphans
from vllmctl.runner.releases.release import GateOptions, check_serving
from vllmctl.runner.releases.rollback_host import HostRollback, roll_back_host
from vllmctl.runner.releases.rollout import DEFAULT_WAIT_S, RolloutGuard, rollout_guard
from vllmctl.runner.releases.serving import Probe
from vllmctl.tasks.desired import HostContext

Log = Callable[[str], None]


@dataclass(frozen=True)
class RollbackOptions:
    owner: str = "vllmctl"  # also the host lock's owner
    to: str | None = None
    forks: int = 16
    command_timeout_s: float = 120.0
    health_timeout_s: float = 600.0
    break_lock: bool = False
    api_keys: Mapping[str, str] = field(default_factory=dict, repr=False)
    health: HealthCheck = wait_for_health
    remote_for: RemoteFor = ssh_remote
    connect: Connect = ssh_node  # a group node's connection
    guard: EngineGuard | None = None  # the rollout: asked before each host's engines stop (drains it)
    max_fail: MaxFail = field(default_factory=MaxFail)
    wait_available: float = DEFAULT_WAIT_S
    probe: Probe | None = None  # does a replica serve (models not behind the gateway); default: the gate's


@dataclass
class RollbackRun:
    """The plan (yes False: `rows` of host, current, target) or what was done (`hosts`, `groups`)."""

    done: bool
    rows: list[tuple[str, str, str]] = field(default_factory=list)
    actions: dict[str, str] = field(default_factory=dict)  # host -> activate, stay, refuse or none (plan)
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    hosts: list[HostRollback] = field(default_factory=list)
    covered: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        groups_ok = all(g.get("ok", True) for g in self.groups.values())
        return not self.problems and all(h.ok for h in self.hosts) and groups_ok


def roll_back_fleet(
    contexts: Mapping[str, HostContext],
    choices: Mapping[str, HostChoice],
    opts: RollbackOptions,
    gate: GateOptions,
) -> list[HostRollback]:
    """Each host as chosen: refused ones are reported and not counted against --max-fail (nothing was
    touched); one already on its release is checked for serving, and re-activated only if it does not."""

    def one(name: str) -> HostRollback:
        choice = choices[name]
        if choice.action == "none":
            return HostRollback(name, True, reasons=(choice.why,), noop=True)
        if choice.action == "refuse" or choice.target is None:
            return HostRollback(name, False, choice.current, reasons=(f"not rolled back: {choice.why}",))
        why = choice.why
        if choice.action == "stay":
            stayed = _check_stays(contexts[name], choice, opts, gate)
            if stayed.ok:
                return stayed
            why = f"{choice.why}, but it does not serve: re-activated ({'; '.join(stayed.reasons)})"
        outcome = _activate(contexts[name], choice.target.id, opts, gate)
        return replace(outcome, reasons=(why, *outcome.reasons)) if why else outcome

    done = fan_out(list(contexts), one, opts.forks)
    return [
        found if isinstance(found, HostRollback) else HostRollback(name, False, reasons=(found.render(),))
        for name, found in done.items()
    ]


def _check_stays(
    ctx: HostContext, choice: HostChoice, opts: RollbackOptions, gate: GateOptions
) -> HostRollback:
    """A host that runs its release: its endpoints' health, nothing stopped, no lock."""
    assert choice.target is not None and choice.target.manifest is not None
    remote = opts.remote_for(ctx)
    try:
        started = gate.clock()
        verdict = check_serving(remote, ctx, choice.target.manifest, gate, bench=False)
    finally:
        remote.close()
    seconds, reasons = gate.clock() - started, verdict.reasons or (f"{choice.why}, serving",)
    host, release = ctx.host.name, choice.target.id
    return HostRollback(host, verdict.passed, release, release, seconds, reasons, verdict.figures, noop=True)


def _activate(ctx: HostContext, target: str, opts: RollbackOptions, gate: GateOptions) -> HostRollback:
    """Through the rollout's guard: taken out (drained), re-activated, put back; a failure counts."""
    name, guard = ctx.host.name, opts.guard
    refusal = guard.take_out(name) if guard is not None else ""
    if refusal:
        return HostRollback(name, False, reasons=(f"not rolled back: {refusal}",))
    outcome: HostRollback | None = None
    lost = ""
    try:
        remote = opts.remote_for(ctx)
        try:
            outcome = roll_back_host(ctx, remote, gate, target, opts.break_lock)
        finally:
            remote.close()
    finally:
        if guard is not None:
            failure = "rollback did not finish" if outcome is None else ""
            if outcome is not None and not outcome.ok:
                failure = "; ".join(outcome.reasons) or "rollback failed"
            lost = guard.put_back(name, failure)
    assert outcome is not None  # roll_back_host raised otherwise
    return replace(outcome, ok=False, reasons=(*outcome.reasons, lost)) if lost else outcome


def rollback(
    inv: Inventory, selected: Sequence[str], yes: bool, opts: RollbackOptions, log: Log
) -> RollbackRun:
    """Plan, or (yes) roll back every selected host that has host releases, then every selected group."""
    selection, problems = select(inv, selected, opts.command_timeout_s, opts.connect)
    contexts = host_contexts(inv, [h for h in selected if h not in selection.covered], {}, stage_models=False)
    choices, unread = _choose(contexts, opts)
    if not yes:
        return _plan(inv, choices, unread, selection, problems, opts)
    gate = GateOptions(
        owner=opts.owner,
        command_timeout_s=opts.command_timeout_s,
        health_timeout_s=opts.health_timeout_s,
        health=opts.health,
        api_keys=opts.api_keys,
    )
    log(f"rolling back {len(contexts)} host(s) and {len(selection.groups)} multi-node group(s)")
    for host, why in selection.covered.items():
        log(f"{host}: {why}")
    guard: EngineGuard | None = opts.guard
    if guard is None:
        gateway = ssh_gateway(inv, fleet_servers(inv, {}), opts.command_timeout_s, discover=True)
        guard = rollout_guard(
            inv, {}, len(contexts), opts.max_fail, gateway, opts.wait_available, opts.probe, opts.api_keys,
            opts.owner,
        )  # fmt: skip
        for line in heal_lines(heal_orphans(guard)):
            log(line)
    try:
        hosts = roll_back_fleet({h: contexts[h] for h in choices}, choices, replace(opts, guard=guard), gate)
        hosts += [HostRollback(host, False, reasons=(why,)) for host, why in unread.items()]
    finally:
        if isinstance(guard, RolloutGuard) and guard is not opts.guard:
            guard.close()
    group_opts = GroupGateOptions(
        owner=opts.owner,
        break_lock=opts.break_lock,
        command_timeout_s=opts.command_timeout_s,
        health_timeout_s=opts.health_timeout_s,
        health=opts.health,
        api_keys=opts.api_keys,
        connect=opts.connect,
    )
    groups = roll_back_groups(
        inv, selection.groups, opts.to, group_opts, log, lambda: guard.stopped, guard.fail
    )
    return RollbackRun(True, groups=groups, hosts=hosts, covered=selection.covered, problems=problems)


def _choose(
    contexts: Mapping[str, HostContext], opts: RollbackOptions
) -> tuple[dict[str, HostChoice], dict[str, str]]:
    """Each reachable host's part (releases/rollback.py decides from its releases and what runs), and why
    each other host could not be read."""
    states: dict[str, HostReleases] = {}
    units: dict[str, HostUnits] = {}
    unread: dict[str, str] = {}
    for found in survey(contexts, opts.remote_for, opts.command_timeout_s, opts.forks, units=True):
        if found.state is None or found.units is None:
            unread[found.host] = f"{found.error}\n  hint: {found.hint}" if found.hint else found.error
            continue
        states[found.host], units[found.host] = found.state, found.units
    return choose(states, units, opts.to), unread


def _plan(
    inv: Inventory,
    choices: Mapping[str, HostChoice],
    unread: Mapping[str, str],
    selection: GroupSelection,
    problems: list[str],
    opts: RollbackOptions,
) -> RollbackRun:
    problems.extend(unread.values())
    problems.extend(c.why for c in choices.values() if c.action == "refuse")
    rows = [(host, c.current or "-", c.shown) for host, c in choices.items()]
    actions: dict[str, str] = {host: c.action for host, c in choices.items()}
    groups = {
        group.group: group_plan(inv, group, opts.to, opts.command_timeout_s, opts.connect, problems)
        for group in selection.groups
    }
    return RollbackRun(False, rows, actions, groups, covered=selection.covered, problems=problems)
