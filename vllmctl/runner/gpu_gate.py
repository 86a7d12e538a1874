"""The GPU health gate's verdict per host for `vllmctl status`: the gate's own plan (the same arguments apply
gives it) over facts gathered now, so status says what the next apply's gate would."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vllmctl.inventory.model import Inventory
from vllmctl.ops.gpu_health import GPU_HEALTH
from vllmctl.runner import DEFAULT_FORKS
from vllmctl.runner.fleet import gather_fleet_facts, host_contexts
from vllmctl.tasks.desired import HostContext
from vllmctl.tasks.provision import PROVISION_TASKS

GATE_FACTS = ("gpu_health", "gpu_topology")


def host_gate(ctx: HostContext, gathered: Mapping[str, Any]) -> dict[str, Any]:
    """{"status": passed | refused | not gated | unknown, "reason": the gate's line, or its first finding}."""
    if "error" in gathered:
        return {"status": "unknown", "reason": f"facts not gathered: {gathered['error']}"}
    (call,) = PROVISION_TASKS["gpu_health"](ctx, {})
    step = GPU_HEALTH(call.args, dict(gathered.get("facts") or {}))
    if step.noop is None:
        return {"status": "refused", "reason": step.warnings[0] if step.warnings else "refused"}
    # the gate's no-op says either healthy or why the host is not gated (no engine here, a CPU host)
    return {"status": "passed" if step.noop.startswith("healthy") else "not gated", "reason": step.noop}


def gate_view(inv: Inventory, hosts: list[str], timeout_s: float) -> dict[str, dict[str, Any]]:
    """Per host the gate's verdict, one more facts round trip per host (in parallel)."""
    contexts = host_contexts(inv, hosts, {}, stage_models=False)
    gathered = gather_fleet_facts(contexts, GATE_FACTS, timeout_s, forks=DEFAULT_FORKS)
    return {
        name: host_gate(ctx, gathered.get(name, {"error": "no answer"})) for name, ctx in contexts.items()
    }
