"""Fabric Manager on NVSwitch hosts, pure: `nvidia-fabricmanager-<branch>` at exactly the running driver's
version, held, enabled and running; nothing on hosts without NVSwitches.

Without it CUDA fails at init with error 802, "system not yet initialized" (gpustack/gpustack#4154); Fabric
Manager refuses to start on a driver one patch apart (NVIDIA/gpu-operator#544), and an unheld one drifted to
another branch (NVIDIA/gpu-driver-container#735), so a mismatch is stopped and replaced, never left running.
"""

from __future__ import annotations

from vllmctl.ops.base import Args, Command, FactRequests, Facts, Operation, Step, noop, run
from vllmctl.ops.driver import running_driver, upstream_version

FM_SERVICE = "nvidia-fabricmanager.service"


def fm_package(branch: str) -> str:
    """NVIDIA's CUDA repository and Ubuntu's archive name it per branch: `nvidia-fabricmanager-570`."""
    return f"nvidia-fabricmanager-{branch.split('.')[0]}"


def _facts(args: Args) -> FactRequests:
    return {"gpus": (), "gpu_health": (), "services": (FM_SERVICE,)}


def _plan(args: Args, facts: Facts) -> Step:
    branch = args.get("branch")
    if not branch:
        return noop("fabric_manager", "fabric", "no driver branch pinned (driver.branch)")
    health: Facts = facts.get("gpu_health") or {}
    if not health.get("nvswitch"):
        return noop("fabric_manager", "fabric", "no NVSwitch on this host: Fabric Manager is not needed")
    package = fm_package(str(branch))
    driver = running_driver(facts.get("gpus"))
    if driver is None:
        return noop("fabric_manager", package, "no running driver yet: Fabric Manager follows its version")
    packages = dict(health.get("packages", {}))
    installed = packages.get(package)
    # another branch's package has its own name and apt's resolver will not remove it while it is held
    # (a branch change), so it is unheld and removed in the same transaction
    others = sorted(p for p in packages if p.startswith("nvidia-fabricmanager-") and p != package)
    held = package in health.get("held", [])
    service = dict((facts.get("services") or {}).get(FM_SERVICE, {}))
    enabled = service.get("unit_file_state") == "enabled"
    active = service.get("active_state") == "active"
    target = f"{package} {driver}"
    matches = installed is not None and upstream_version(installed) == driver and not others
    actions: list[Command] = []
    if not matches:
        if installed is not None or others:
            # a Fabric Manager of another version refuses to start, or worse runs against the wrong driver
            unhold = [package] if installed is not None else []
            actions += [run("systemctl", "stop", FM_SERVICE), run("apt-mark", "unhold", *unhold, *others)]
        actions += [
            run("apt-get", "update", "-q"),
            run(
                "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q",
                "--allow-downgrades", "--allow-change-held-packages", "-o", "Dpkg::Options::=--force-confold",
                f"{package}={driver}-*", *(f"{other}-" for other in others),
            ),
            run("systemctl", "daemon-reload"),  # the unit as the new package ships it
        ]  # fmt: skip
    if not matches or not held:
        actions.append(run("apt-mark", "hold", package))
    if not matches or not enabled:
        actions.append(run("systemctl", "enable", FM_SERVICE))
    if not matches or not active:
        actions.append(run("systemctl", "restart", FM_SERVICE))
    if not actions:
        return noop("fabric_manager", target, f"{package} {installed} matches driver {driver}, held, running")
    return Step("fabric_manager", target, tuple(actions))


FABRIC_MANAGER = Operation("fabric_manager", _facts, _plan)
