"""Which NVIDIA kernel modules a host gets, pure: open or proprietary per GPU and branch, with the reason.

NVIDIA's driver installation guide (`kernel-modules.html`): the open kernel modules are the default from
branch 560 and need Turing (compute capability 7.5) or newer; Grace Hopper and Blackwell are supported only by
the open modules ("NVIDIA Transitions Fully Towards Open-Source GPU Kernel Modules"). A flavour is the package
suffix Ubuntu and NVIDIA's CUDA repository use: `nvidia-driver-<branch>[-server][-open]`.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllmctl.catalog.gpus import GpuModel, find_gpu
from vllmctl.ops.base import OpError

OPEN_DEFAULT_BRANCH = 560
TURING = (7, 5)
BLACKWELL = (10, 0)
FLAVORS = ("", "open", "server", "server-open")


@dataclass(frozen=True)
class FlavorChoice:
    flavor: str
    reason: str


def is_open(flavor: str) -> bool:
    return flavor.endswith("open")


def open_only(gpu: GpuModel) -> str | None:
    """Why `gpu` runs only on the open modules, or None."""
    if "GH200" in gpu.smi_name or "GB200" in gpu.smi_name or "GB300" in gpu.smi_name:
        return f"{gpu.name} (Grace Hopper/Blackwell) is supported only by the open kernel modules"
    if gpu.compute_capability >= BLACKWELL:
        return f"{gpu.name} (Blackwell) is supported only by the open kernel modules"
    return None


def proprietary_only(gpu: GpuModel) -> str | None:
    if gpu.compute_capability < TURING:
        cc = ".".join(map(str, gpu.compute_capability))
        return f"{gpu.name} (compute capability {cc}) predates Turing: the open kernel modules do not run it"
    return None


def choose_flavor(gpu_name: str | None, branch: str, requested: str | None) -> FlavorChoice:
    """The flavour for `gpu_name` (inventory or nvidia-smi spelling) on `branch`; `requested` (the inventory's
    `driver.flavor`) wins unless the GPU cannot run it, which is refused with the fix."""
    gpu = find_gpu(gpu_name) if gpu_name else None
    major = int(branch.split(".")[0])
    if requested is not None:
        if requested not in FLAVORS:
            raise OpError(
                f"driver flavor {requested!r} is not one vllmctl knows",
                f"use one of: {', '.join(repr(f) for f in FLAVORS)} ('' is the proprietary modules)",
            )
        modules = "open" if is_open(requested) else "proprietary"
        why_not = (open_only(gpu) if modules == "proprietary" else proprietary_only(gpu)) if gpu else None
        if why_not:
            server = "server" in requested
            other = (
                ("server-open" if server else "open")
                if modules == "proprietary"
                else ("server" if server else "")
            )
            raise OpError(
                f"driver flavor {requested!r} installs the {modules} kernel modules, but {why_not}",
                f"set driver.flavor to {other!r}, or drop it and let vllmctl choose",
            )
        return FlavorChoice(requested, f"driver.flavor {requested!r} ({modules} kernel modules)")
    if gpu is not None:
        needs = open_only(gpu)
        if needs:
            return FlavorChoice("open", needs)
        legacy = proprietary_only(gpu)
        if legacy:
            return FlavorChoice("", legacy)
    if major >= OPEN_DEFAULT_BRANCH:
        return FlavorChoice(
            "open", f"open kernel modules, NVIDIA's default from branch {OPEN_DEFAULT_BRANCH}"
        )
    return FlavorChoice("", f"proprietary kernel modules, the default before branch {OPEN_DEFAULT_BRANCH}")


def host_driver_plan(host: str, gpu: str | None, branch: str, requested: str | None) -> dict[str, str]:
    """What `vllmctl plan` shows for one host's driver: the modules chosen, why, and the Ubuntu package
    (Debian keeps `nvidia-driver-<branch>`); raises OpError for a flavour the GPU cannot run."""
    choice = choose_flavor(gpu, branch, requested)
    package = f"nvidia-driver-{branch.split('.')[0]}" + (f"-{choice.flavor}" if choice.flavor else "")
    modules = "open" if is_open(choice.flavor) else "proprietary"
    return {
        "host": host,
        "branch": branch,
        "modules": modules,
        "ubuntu_package": package,
        "why": choice.reason,
    }
