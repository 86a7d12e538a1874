"""NVLink Subnet Manager on NVLink5 boards (HGX B200/GB200), pure: `nvlsm` installed and held, `ib_umad`
loaded now and at boot, so that Fabric Manager can start; nothing on other hosts."""

from __future__ import annotations

from vllmctl.ops.base import (
    Args,
    Command,
    FactRequests,
    Facts,
    Operation,
    OpError,
    Step,
    Upload,
    noop,
    run,
)
from vllmctl.ops.files import config_file

# NVIDIA's Fabric Manager user guide ("Systems Using Fourth Generation NVSwitches"): Fabric Manager runs
# beside NVLSM, which reaches the NVSwitches through ib_umad; the unit's precheck refuses to start without it
# (spectrocloud/CanvOS#700). NVLSM is versioned by date (nvlsm_2025.06.10-1), not by driver: held as
# installed.
NVLSM = "nvlsm"
IB_UMAD = "ib_umad"
# ib_umad loaded shows as its device node: NVLSM reaches the switches through /dev/infiniband/umad<N>, one
# per port of the ConnectX bridges, which the module creates (Linux Documentation/infiniband/user_mad.rst)
IB_UMAD_LOADED = "/dev/infiniband/umad0"
MODULES_LOAD_PATH = "/etc/modules-load.d/ib_umad.conf"
MODULES_LOAD = "# written by vllmctl: NVLink Subnet Manager (nvlsm) needs it for Fabric Manager\nib_umad\n"


def _facts(args: Args) -> FactRequests:
    return {
        "gpu_health": (),
        "dpkg": (NVLSM,),
        "driver_packages": (),
        "paths": (IB_UMAD_LOADED, MODULES_LOAD_PATH),
    }


def _plan(args: Args, facts: Facts) -> Step:
    if not args.get("branch"):
        return noop("nvlsm", NVLSM, "no driver branch pinned (driver.branch)")
    health: Facts = facts.get("gpu_health") or {}
    if not health.get("nvlink5", False):
        return noop(
            "nvlsm", NVLSM, "not an NVLink5 board (no SW_MNG in an InfiniBand device's VPD): not needed"
        )
    installed = facts.get("dpkg")
    if installed is None:
        raise OpError(
            "this NVLink5 board needs the NVLink Subnet Manager (nvlsm) and the host has no dpkg",
            "install nvlsm from NVIDIA's CUDA repository and load ib_umad, then apply again",
        )
    version = installed.get(NVLSM)
    held = NVLSM in set((facts.get("driver_packages") or {}).get("held", []))
    paths = facts.get("paths") or {}
    conf = config_file(MODULES_LOAD_PATH, MODULES_LOAD, facts)
    loaded = paths.get(IB_UMAD_LOADED, {}).get("type", "absent") != "absent"
    actions: list[Command | Upload] = []
    if version is None:
        actions += [
            run("apt-get", "update", "-q"),
            run("env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q", NVLSM),
        ]
    if version is None or not held:
        actions.append(run("apt-mark", "hold", NVLSM))
    if conf is not None:
        actions += conf[0]
    if not loaded:
        actions.append(run("modprobe", IB_UMAD))
    if not actions:
        return noop("nvlsm", NVLSM, f"nvlsm {version} installed and held, ib_umad loaded and loaded at boot")
    return Step("nvlsm", NVLSM, tuple(actions))


NVLSM_OP = Operation("nvlsm", _facts, _plan)
