"""Rolls back the canaries their soak found worse than their peers: each drained from the gateway, back on
its release before (the gate's rollback path, under the host lock), and readied again."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from vllmctl.errors import VllmctlError
from vllmctl.runner.core.remote import Remote
from vllmctl.runner.core.results import RunResult
from vllmctl.runner.releases.release import GateOptions
from vllmctl.runner.releases.rollback_host import roll_back_host
from vllmctl.runner.releases.rollout import RolloutGuard
from vllmctl.tasks.desired import HostContext


def roll_back_canaries(
    guard: RolloutGuard,
    result: RunResult,
    contexts: Mapping[str, HostContext],
    connect: Callable[[HostContext], Remote],
    gate: GateOptions,
) -> dict[str, dict[str, Any]]:
    """Host -> its rollback (`ok`, from, to, reasons) or the error that stopped it; each canary's result
    fails with why. Its peers serve (the model's other hosts were held back), so the canary is drained
    without waiting its turn."""
    done: dict[str, dict[str, Any]] = {}
    for host in guard.canaries.worse:
        if host not in contexts:
            continue
        if guard.gateway is not None:
            guard.gateway.drain(host)
        try:
            done[host] = roll_back_host(contexts[host], connect(contexts[host]), gate).to_json()
        except VllmctlError as exc:
            done[host] = {"ok": False, "error": exc.message}
        finally:
            readied = guard.gateway is None or guard.gateway.ready(host)
        if not readied:
            done[host] = {**done[host], "ok": False, "error": "not UP in the gateway after its rollback"}
        if host in result.hosts:
            mine, back = result.hosts[host], done[host]
            mine.status, mine.error = "failed", guard.canaries.failed[host]
            mine.hint = (
                f"rolled back to {back.get('to')}" if back.get("ok") else f"its rollback: {back.get('error')}"
            )
    return done
