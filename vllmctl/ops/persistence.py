"""nvidia-persistenced, pure: enabled and running wherever the driver's utilities ship it, so the driver keeps
its state while no client is attached (each CUDA start otherwise pays the GPU initialisation again; NVIDIA's
driver persistence docs, `docs.nvidia.com/deploy/driver-persistence`). The GPU health gate then checks that
every GPU reports persistence mode Enabled."""

from __future__ import annotations

from vllmctl.ops.base import Args, Command, FactRequests, Facts, Operation, Step, noop, run

PERSISTENCED = "nvidia-persistenced.service"


def _facts(args: Args) -> FactRequests:
    return {"services": (PERSISTENCED,)}


def _plan(args: Args, facts: Facts) -> Step:
    if not args.get("branch"):
        return noop("persistence", PERSISTENCED, "no driver branch pinned (driver.branch)")
    unit = dict((facts.get("services") or {}).get(PERSISTENCED, {}))
    if unit.get("load_state") != "loaded":
        return noop(
            "persistence",
            PERSISTENCED,
            "not installed here (the driver's utilities ship it; the gate checks persistence mode)",
        )
    actions: list[Command] = []
    if unit.get("unit_file_state") not in ("enabled", "static", "enabled-runtime"):
        actions.append(run("systemctl", "enable", PERSISTENCED))
    if unit.get("active_state") != "active":
        actions.append(run("systemctl", "start", PERSISTENCED))
    if not actions:
        return noop("persistence", PERSISTENCED, f"{unit.get('unit_file_state')} and running")
    return Step("persistence", PERSISTENCED, tuple(actions))


PERSISTENCE = Operation("persistence", _facts, _plan)
