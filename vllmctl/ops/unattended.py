"""Unattended upgrades kept off the NVIDIA driver stack, pure: an apt.conf.d file whose
`Unattended-Upgrade::Package-Blacklist` names the driver's package prefixes, beside the holds, so the stack
moves only when `driver.branch` moves it (a lone `libnvidia-*` upgrade is NVML's version mismatch)."""

from __future__ import annotations

from vllmctl.ops.base import Args, FactRequests, Facts, Operation, Step, noop
from vllmctl.ops.files import config_file

BLACKLIST_PATH = "/etc/apt/apt.conf.d/51vllmctl-nvidia-driver.conf"
# unattended-upgrades matches each entry as a Python regex from the start of a package name; these prefixes
# are every driver-versioned package of a branch in NVIDIA's CUDA repository and Ubuntu's archive.
# Ubuntu's precompiled modules (linux-modules-nvidia-*) are left to follow their kernel: blocking them while
# the kernel upgrades would boot a kernel without NVIDIA modules; `kernel_modules` checks the running kernel's
DRIVER_PREFIXES = ("nvidia-", "libnvidia-", "cuda-drivers", "xserver-xorg-video-nvidia-", "nvlsm")
BLACKLIST = (
    "// written by vllmctl: the NVIDIA driver stack moves only with driver.branch (vllmctl apply)\n"
    "Unattended-Upgrade::Package-Blacklist {\n"
    + "".join(f'    "{prefix}";\n' for prefix in DRIVER_PREFIXES)
    + "};\n"
)


def _facts(args: Args) -> FactRequests:
    return {"paths": (BLACKLIST_PATH,)}


def _plan(args: Args, facts: Facts) -> Step:
    op = "unattended_upgrades"
    if not args.get("branch"):
        return noop(op, BLACKLIST_PATH, "no driver branch pinned (driver.branch)")
    written = config_file(BLACKLIST_PATH, BLACKLIST, facts)
    if written is None:
        return noop(op, BLACKLIST_PATH, "unattended upgrades skip the NVIDIA driver stack")
    actions, change = written
    return Step(op, BLACKLIST_PATH, actions, change=change)


UNATTENDED_UPGRADES = Operation("unattended_upgrades", _facts, _plan)
