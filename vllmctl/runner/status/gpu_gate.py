"""The GPU gates' verdict per host for `vllmctl status`: the health gate's and the GPU memory gate's own
plans (the same arguments apply gives them) over facts gathered now, so status says what the next apply's
gates would."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vllmctl.inventory.model import Inventory
from vllmctl.ops.gpu_health import GPU_HEALTH
from vllmctl.ops.gpu_memory import GPU_MEMORY
from vllmctl.runner import DEFAULT_FORKS
from vllmctl.runner.fleet.hosts import gather_fleet_facts, host_contexts
from vllmctl.tasks.desired import HostContext
from vllmctl.tasks.provision import PROVISION_TASKS

GATE_FACTS = ("gpu_health", "gpu_topology", "gpus", "gpu_processes")


def host_gate(ctx: HostContext, gathered: Mapping[str, Any]) -> dict[str, Any]:
    """{"status": passed | refused | not gated | unknown, "reason": the gate's line, or its first finding}."""
    if "error" in gathered:
        return {"status": "unknown", "reason": f"facts not gathered: {gathered['error']}"}
    health, memory = PROVISION_TASKS["gpu_health"](ctx, {})
    facts = dict(gathered.get("facts") or {})
    step = GPU_HEALTH(health.args, facts)
    if step.noop is None:
        return {"status": "refused", "reason": step.warnings[0] if step.warnings else "refused"}
    held = GPU_MEMORY(memory.args, facts)
    if held.noop is None:
        return {"status": "refused", "reason": held.warnings[0] if held.warnings else "refused"}
    # the gate's no-op says either healthy or why the host is not gated (no engine here, a CPU host)
    return {"status": "passed" if step.noop.startswith("healthy") else "not gated", "reason": step.noop}


def gate_view(inv: Inventory, hosts: list[str], timeout_s: float) -> dict[str, dict[str, Any]]:
    """Per host the gate's verdict, one more facts round trip per host (in parallel)."""
    contexts = host_contexts(inv, hosts, {}, stage_models=False)
    gathered = gather_fleet_facts(contexts, GATE_FACTS, timeout_s, forks=DEFAULT_FORKS)
    return {
        name: host_gate(ctx, gathered.get(name, {"error": "no answer"})) for name, ctx in contexts.items()
    }
