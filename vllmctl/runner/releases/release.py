"""Releases at the edge, one host under its lock: record what an apply started as a release, run the gate
(health, smoke benchmark, SLO), mark it known-good or roll back to the known-good one and wait for health."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from vllmctl.bench.readiness import FLOOR_S, HealthCheck
from vllmctl.bench.smoke import SmokeBench
from vllmctl.errors import VllmctlError
from vllmctl.facts.state import ACTIVE_STATES
from vllmctl.ops import Command, Step
from vllmctl.ops.release import (
    activate_release,
    create_release,
    journal_tail_command,
    mark_healthy,
    prune_releases,
    reinstall_units,
)
from vllmctl.ops.release import record_verdict as verdict_step
from vllmctl.releases.gate import (
    JOURNAL_TAIL_LINES,
    EndpointCheck,
    Verdict,
    decide,
)
from vllmctl.releases.host import (
    DEFAULT_KEEP,
    HostReleases,
    Manifest,
    listing_command,
    parse_listing,
    pointer_switch,
    prune_candidates,
    release_id,
    release_ports,
    rollback_target,
    serving_digest,
)
from vllmctl.releases.kv import (
    parse_startup_lines,
    record_kv_step,
    startup_lines_command,
    with_measured,
    with_predictions,
)
from vllmctl.runner.core.engine_watch import smoke_bench, wait_for_health, watch_units
from vllmctl.runner.core.remote import Remote
from vllmctl.runner.fleet.kv import KvPredictor
from vllmctl.tasks.adapters import served_extras
from vllmctl.tasks.desired import HostContext, env_path, render_unit, unit_name, venv_path
from vllmctl.transport.tunnel import base_url, route_of, tunnel_overhead_ms

KvPrediction = Callable[[HostContext], dict[str, dict[str, Any]]]  # model -> predicted KV figures


@dataclass(frozen=True)
class GateOptions:
    owner: str = "vllmctl"
    created_at: str = ""  # ISO 8601 UTC from the edge; also the source of new release ids
    inventory_digest: str = ""
    keep: int = DEFAULT_KEEP
    command_timeout_s: float = 120.0
    health_timeout_s: float = FLOOR_S
    health: HealthCheck = wait_for_health
    bench: SmokeBench = smoke_bench
    clock: Callable[[], float] = time.monotonic
    predict_kv: KvPrediction = field(default_factory=KvPredictor)
    # model -> the API key its engine requires, read on the controller (`runner.fleet.api_keys`)
    api_keys: Mapping[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class GateOutcome:
    """`unchanged`, `passed`, `rolled_back` (the host serves its known-good release again) or `failed`."""

    host: str
    status: str
    release: str | None = None
    reasons: tuple[str, ...] = ()
    figures: dict[str, Any] = field(default_factory=dict)
    rolled_back_to: str | None = None
    rollback_s: float | None = None  # failure detected → serving again

    @property
    def ok(self) -> bool:
        return self.status in ("unchanged", "passed")

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in (None, (), {})} | {"ok": self.ok}


def desired_manifest(ctx: HostContext, opts: GateOptions) -> Manifest:
    """Pure: what the inventory says this host serves, as a release manifest (the id hashes the units)."""
    units: dict[str, str] = {}
    models: dict[str, dict[str, Any]] = {}
    plans: dict[str, Any] = {}
    for model in ctx.models():
        plan, engine = ctx.plan(model), ctx.engine(model)
        for replica in plan.replicas:
            units[unit_name(model.name, replica.index)] = render_unit(ctx, model, replica)
        models[model.name] = {
            "source": model.source,
            "revision": model.revision,
            "ports": [r.port for r in plan.replicas],
            "venv": venv_path(engine),
            "slo": dict(model.slo),
            **served_extras(model),
        }
        plans[model.name] = {"engine_args": dict(plan.engine_args), "replicas": len(plan.replicas)}
    engine = ctx.host.engine
    digest = serving_digest(units, venv_path(engine))
    created = datetime.fromisoformat(opts.created_at) if opts.created_at else datetime.fromtimestamp(0, UTC)
    return Manifest(
        id=release_id(created, digest),
        host=ctx.host.name,
        created_at=opts.created_at,
        created_by=opts.owner,
        inventory_digest=opts.inventory_digest,
        engine=engine.name,
        engine_version=engine.version,
        venv_path=venv_path(engine),
        units=units,
        models=models,
        plan=plans,
    )


def read_releases(remote: Remote, host: str, timeout_s: float) -> HostReleases:
    result = remote.execute(Command(shell=listing_command()), timeout_s)
    if not result.ok:
        raise VllmctlError(
            f"{host}: listing releases failed (exit {result.exited})",
            f"stderr: {result.stderr.strip()[-500:] or '(none)'}",
        )
    return parse_listing(result.stdout, host)


def run_step(remote: Remote, host: str, step: Step, timeout_s: float) -> None:
    for action in step.actions:
        result = remote.execute(action, timeout_s)
        if not result.ok:
            raise replace(result, host=host).error(f"`{action.render()}`")


def check_serving(
    remote: Remote, ctx: HostContext, manifest: Manifest, opts: GateOptions, bench: bool
) -> Verdict:
    """Health of every endpoint, then (bench) the smoke benchmark; the journal only when health failed."""
    checks = []
    for model, port in release_ports(manifest):
        url = base_url(ctx.host, port)
        watch = watch_units(remote, sorted(manifest.units), opts.command_timeout_s)
        key = opts.api_keys.get(model)
        health = opts.health(url, model, opts.health_timeout_s, watch, api_key=key)
        tail = ""
        if not health.ok:
            tail = remote.execute(journal_tail_command(manifest.units), opts.command_timeout_s).stdout
        report = opts.bench(url, model, api_key=key) if bench and health.ok else None
        slo = manifest.models.get(model, {}).get("slo", {})
        added = None
        if report is not None and route_of(ctx.host) == "tunnel":
            added = tunnel_overhead_ms(ctx.host, port)
        checks.append(EndpointCheck(model, health, report, slo, tail, added))
    return decide(checks, require_bench=bench)


def activate(remote: Remote, ctx: HostContext, manifest: Manifest, opts: GateOptions) -> Verdict:
    """Stop → start from the release dir → health; known-good moves to it only once it serves. The state
    records are rewritten for what now serves, so apply plans restarts from the truth."""
    host = ctx.host.name
    units = remote.gather({"units": ()}, opts.command_timeout_s).get("units", {})
    running = [u for u, s in units.items() if s.get("active_state") in ACTIVE_STATES]
    step = activate_release(manifest, running, list(units), env_files(manifest))
    run_step(remote, host, step, opts.command_timeout_s)
    verdict = check_serving(remote, ctx, manifest, opts, bench=False)
    if verdict.passed:
        run_step(remote, host, mark_healthy(manifest.units), opts.command_timeout_s)
        run_step(remote, host, _pointer("known-good", manifest.id), opts.command_timeout_s)
    return verdict


def keep_current(ctx: HostContext, remote: Remote, timeout_s: float) -> str:
    """A host the rollout held back: the units of the release it serves are put back in place (apply may
    have written new ones already), so a crash restarts what served; returns what the host is left on."""
    state = read_releases(remote, ctx.host.name, timeout_s)
    current = state.get(state.current)
    if current is None or current.manifest is None:
        return "no release recorded yet"
    run_step(remote, ctx.host.name, reinstall_units(current.manifest), timeout_s)
    return f"release {current.id}"


def env_files(manifest: Manifest) -> dict[str, str]:
    """unit -> the env file its engine reads: a model's replicas are its units 0..n-1."""
    return {
        unit_name(model, index): env_path(model)
        for model in manifest.models
        for index in range(len(manifest.units))
        if unit_name(model, index) in manifest.units
    }


def _pointer(pointer: str, release: str) -> Step:
    return Step(
        "release_pointer", f"{pointer} -> {release}", (Command(shell=pointer_switch(pointer, release)),)
    )


def gate_host(
    ctx: HostContext, remote: Remote, lock: Callable[[], None], opts: GateOptions, failure: str = ""
) -> GateOutcome:
    """After an apply converged the host: nothing to do, or a release recorded, gated, kept or rolled back.

    `failure` is the apply's own services-phase failure (e.g. its health check timed out): the release is
    failed at once instead of being probed again.
    """
    host = ctx.host.name
    state = read_releases(remote, host, opts.command_timeout_s)
    wanted = desired_manifest(ctx, opts)
    current = state.get(state.current)
    serving = current.manifest if current is not None else None
    same = serving is not None and serving.serving_digest == wanted.serving_digest
    if same and current is not None and current.status == "good" and not failure:
        return GateOutcome(host, "unchanged", current.id)
    if not wanted.units and state.current is None:
        return GateOutcome(host, "unchanged")
    lock()
    if same and serving is not None and current is not None and current.status == "pending":
        release = serving  # an interrupted apply started it and never gated it: gate it now
    else:
        release = with_predictions(wanted, opts.predict_kv(ctx))
        run_step(remote, host, create_release(release, state), opts.command_timeout_s)
        run_step(remote, host, _pointer("current", release.id), opts.command_timeout_s)
    verdict = (
        _failed(remote, release, failure, opts)
        if failure
        else check_serving(remote, ctx, release, opts, True)
    )
    record_measured_kv(remote, host, release, opts)
    run_step(remote, host, verdict_step(release.id, verdict.to_json()), opts.command_timeout_s)
    state = read_releases(remote, host, opts.command_timeout_s)
    if verdict.passed:
        run_step(remote, host, prune_releases(prune_candidates(state, opts.keep)), opts.command_timeout_s)
        return GateOutcome(host, "passed", release.id, verdict.reasons, verdict.figures)
    return _roll_back_after(remote, ctx, release.id, verdict, state, opts)


def record_measured_kv(remote: Remote, host: str, release: Manifest, opts: GateOptions) -> Manifest:
    """What each engine logged at startup, beside the prediction; a journal without it records nothing."""
    lines = remote.execute(startup_lines_command(sorted(release.units)), opts.command_timeout_s)
    measured = parse_startup_lines(lines.stdout) if lines.ok else {}
    if not measured:
        return release
    updated = with_measured(release, measured)
    run_step(remote, host, record_kv_step(updated), opts.command_timeout_s)
    return updated


def _failed(remote: Remote, release: Manifest, failure: str, opts: GateOptions) -> Verdict:
    tail = remote.execute(journal_tail_command(release.units), opts.command_timeout_s).stdout.strip()
    lines = tail.splitlines()[-JOURNAL_TAIL_LINES:]
    reason = failure + ("\n  journal tail:\n" + "\n".join(f"    {line}" for line in lines) if lines else "")
    return Verdict(False, (reason,), {})


def _roll_back_after(
    remote: Remote, ctx: HostContext, failed: str, verdict: Verdict, state: HostReleases, opts: GateOptions
) -> GateOutcome:
    host = ctx.host.name
    started = opts.clock()
    try:
        target = rollback_target(state, host)
    except VllmctlError as exc:
        reasons = (*verdict.reasons, f"not rolled back: {exc.render()}")
        return GateOutcome(host, "failed", failed, reasons, verdict.figures)
    assert target.manifest is not None
    back = activate(remote, ctx, target.manifest, opts)
    elapsed = opts.clock() - started
    if back.passed:
        return GateOutcome(host, "rolled_back", failed, verdict.reasons, verdict.figures, target.id, elapsed)
    reasons = (*verdict.reasons, f"rollback to {target.id} is not serving either:", *back.reasons)
    return GateOutcome(host, "failed", failed, reasons, verdict.figures, target.id, elapsed)


def audit_line(owner: str, action: str, outcome: dict[str, Any]) -> str:
    return json.dumps({"action": action, "by": owner, **outcome}, sort_keys=True, default=str)
