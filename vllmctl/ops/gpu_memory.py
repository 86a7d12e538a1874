"""GPU memory others hold, pure: before this host's engines start, each GPU a vLLM replica uses must
have the share its plan takes (`gpu_memory_utilization` x total) free of processes outside vllmctl's units,
as vLLM's own start checks; else the host is refused with those processes and the fix, not vLLM."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vllmctl.facts.gpu import foreign_gpu_mib
from vllmctl.ops.base import Args, FactRequests, Facts, Operation, Step, noop, run
from vllmctl.ops.gpu_health import Finding

# vLLM's EngineArgs default; the planner sets it for every GPU plan, an inventory may leave it out
VLLM_DEFAULT_UTILIZATION = 0.9


def memory_findings(
    budgets: Sequence[Mapping[str, Any]], gpus: Sequence[Mapping[str, Any]], held: Mapping[str, Any] | None
) -> list[Finding]:
    """A GPU whose planned share (the sum over the replicas that use it) does not fit beside what processes
    outside vllmctl's units hold: vLLM (from 0.9.1) refuses to start when free memory is below its share."""
    measured = [dict(g) for g in gpus if isinstance(g.get("memory_used_mib"), int)]
    foreign = dict(
        zip((int(g["index"]) for g in measured), foreign_gpu_mib(measured, dict(held or {})), strict=True)
    )
    others = [p for p in (held or {}).get("processes", []) if not p.get("unit")]
    found: list[Finding] = []
    for gpu in gpus:
        index, total = int(gpu["index"]), gpu.get("memory_total_mib")
        users = [b for b in budgets if index in b["gpus"]]
        if not users or not isinstance(total, int) or index not in foreign:
            continue
        share = sum(float(b["utilization"]) for b in users)
        need, free = round(share * total), total - foreign[index]
        if free >= need:
            continue
        models = ", ".join(sorted({str(b["model"]) for b in users}))
        pids = [f"pid {p['pid']} ({p['mib']} MiB)" for p in others if p["gpu"] == index]
        holders = "; ".join(pids) if pids else "no compute process listed (memory held by the driver or MIG)"
        room = int(free / total * 100) / 100
        over = f" of {models} summed" if len(users) > 1 else ""
        found.append(
            Finding(
                "gpu memory",
                f"GPU {index}: {foreign[index]} MiB of {total} held outside vllmctl's units ({holders}); "
                f"{models} plan {share:g} x {total} = {need} MiB, {free} MiB is free (vLLM refuses to start)",
                "stop those processes (`nvidia-smi --query-compute-apps=pid,process_name,used_memory`), or "
                f"lower gpu_memory_utilization{over} to at most {room:g}",
            )
        )
    return found


def _facts(args: Args) -> FactRequests:
    return {"gpus": (), "gpu_processes": ()} if args.get("budgets") else {}


def _plan(args: Args, facts: Facts) -> Step:
    budgets = list(args.get("budgets") or [])
    if not budgets:
        return noop("gpu_memory", "gpus", "no vLLM engine on a GPU here")
    smi = facts.get("gpus") or {}
    if smi.get("status") != "ok":
        return noop("gpu_memory", "gpus", "nvidia-smi gave no GPUs (the GPU health gate judges that)")
    found = memory_findings(budgets, smi.get("gpus") or [], facts.get("gpu_processes"))
    if not found:
        return noop("gpu_memory", "gpus", "every planned GPU share is free of other processes")
    lines = ["GPU memory: engines not started", *(f.render() for f in found)]
    refuse = run("sh", "-c", 'printf "%s\\n" "$@" >&2; exit 1', "gpu-memory", *lines, sudo=False)
    return Step("gpu_memory", "gpus", (refuse,), warnings=tuple(lines[1:]))


GPU_MEMORY = Operation("gpu_memory", _facts, _plan, {"budgets": None})
