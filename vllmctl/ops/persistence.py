"""nvidia-persistenced, pure: enabled and running wherever the driver's utilities ship it, so the driver keeps
its state while no client is attached (each CUDA start otherwise pays the GPU initialisation again; NVIDIA's
driver persistence docs, `docs.nvidia.com/deploy/driver-persistence`), and with persistence mode on: where the
packaged unit passes `--no-persistence-mode` (Ubuntu's does), a drop-in runs it without that flag. The GPU
health gate then checks that every GPU reports persistence mode Enabled."""

from __future__ import annotations

from vllmctl.ops.base import (
    Action,
    Args,
    FactRequests,
    Facts,
    FileChange,
    Operation,
    Step,
    Upload,
    make_dirs,
    noop,
    run,
)
from vllmctl.render.quoting import unit_exec

PERSISTENCED = "nvidia-persistenced.service"
DROPIN_DIR = f"/etc/systemd/system/{PERSISTENCED}.d"
DROPIN = f"{DROPIN_DIR}/vllmctl-persistence-mode.conf"
NO_PERSISTENCE = "--no-persistence-mode"


def _facts(args: Args) -> FactRequests:
    return {"services": (PERSISTENCED,), "paths": (DROPIN,)}


def dropin(exec_start: str) -> str:
    """The packaged command line without `--no-persistence-mode` (NVIDIA's own Ansible role overrides
    ExecStart the same way), each word quoted for ExecStart (`systemctl show` prints specifiers resolved)."""
    kept = unit_exec(word for word in exec_start.split() if word != NO_PERSISTENCE)
    return (
        f"# written by vllmctl: the packaged unit passes {NO_PERSISTENCE}: persistence mode stays off\n"
        f"[Service]\nExecStart=\nExecStart={kept}\n"
    )


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
    actions: list[Action] = []
    change = None
    exec_start = str(unit.get("exec_start", ""))
    flagged = NO_PERSISTENCE in exec_start.split()
    if flagged and "$" in exec_start:
        # `$VAR` is expanded when the daemon starts: written back verbatim it would be a literal word
        return noop(
            "persistence",
            PERSISTENCED,
            f"its ExecStart passes {NO_PERSISTENCE} and expands variables: not rewritten (drop the flag "
            "in a drop-in of your own; the gate checks persistence mode)",
        )
    if flagged:
        content = dropin(exec_start)
        current = (facts.get("paths") or {}).get(DROPIN, {"type": "absent"})
        change = FileChange(DROPIN, content, exists=current.get("type") == "file")
        actions += [make_dirs(DROPIN_DIR), Upload(DROPIN, content), run("systemctl", "daemon-reload")]
    if unit.get("unit_file_state") not in ("enabled", "static", "enabled-runtime"):
        actions.append(run("systemctl", "enable", PERSISTENCED))
    if change is not None:
        actions.append(run("systemctl", "restart", PERSISTENCED))
    elif unit.get("active_state") != "active":
        actions.append(run("systemctl", "start", PERSISTENCED))
    if not actions:
        return noop("persistence", PERSISTENCED, f"{unit.get('unit_file_state')} and running")
    return Step("persistence", PERSISTENCED, tuple(actions), change=change)


PERSISTENCE = Operation("persistence", _facts, _plan)
