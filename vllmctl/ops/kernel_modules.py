"""What the NVIDIA kernel modules need before the driver install, pure: the running kernel's headers (Secure
Boot off), Canonical's signed modules (Ubuntu, Secure Boot on), or a refusal with the fix (Debian, on)."""

from __future__ import annotations

from vllmctl.ops.base import Args, Command, FactRequests, Facts, Operation, OpError, Step, noop, run
from vllmctl.ops.driver import gpu_name, is_branch, running_driver
from vllmctl.ops.driver_flavor import choose_flavor

# Canonical signs the precompiled linux-modules-nvidia-<branch>[-server][-open]-<kernel release> (NVIDIA's GPU
# Operator, "Installing Precompiled and Canonical Signed Drivers": required on Secure Boot nodes; the -open
# variants on packages.ubuntu.com); Debian's wiki page SecureBoot: DKMS signs with /var/lib/dkms/mok.pub,
# which the firmware trusts only once enrolled with `mokutil --import`.
SIGNED_MODULES = "linux-modules-nvidia-*"


def signed_modules_package(branch: str, flavor: str, release: str) -> str:
    """`570`, `server-open`, `6.8.0-60-generic` -> `linux-modules-nvidia-570-server-open-6.8.0-60-generic`."""
    return f"linux-modules-nvidia-{branch.split('.')[0]}" + (f"-{flavor}" if flavor else "") + f"-{release}"


def _facts(args: Args) -> FactRequests:
    return {"gpu_health": (), "gpus": (), "os_release": (), "dpkg": (SIGNED_MODULES,)}


def _install(package: str) -> tuple[Command, ...]:
    return (
        run("apt-get", "update", "-q"),
        run("env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q", package),
    )


def _plan(args: Args, facts: Facts) -> Step:
    branch = args.get("branch")
    if not branch:
        return noop("kernel_modules", "kernel", "no driver branch pinned (driver.branch)")
    branch = str(branch)
    running = running_driver(facts.get("gpus"))
    if is_branch(running, branch):
        return noop("kernel_modules", "kernel", f"nvidia-smi reports driver {running}: its modules load")
    health: Facts = facts.get("gpu_health") or {}
    release = health.get("kernel_release")
    installed = facts.get("dpkg")
    if not release or installed is None:
        why = "the kernel release is unknown" if not release else "the host has no dpkg"
        return noop("kernel_modules", "kernel", f"{why}: nothing to prepare for the driver")
    os_release: Facts = facts.get("os_release") or {}
    if health.get("secure_boot") is True:
        if os_release.get("id") == "ubuntu":
            requested = args.get("flavor")
            choice = choose_flavor(
                gpu_name(args, facts), branch, None if requested is None else str(requested)
            )
            package = signed_modules_package(branch, choice.flavor, str(release))
            if package in installed:
                return noop(
                    "kernel_modules", package, "Secure Boot is on: Canonical's signed modules installed"
                )
            return Step("kernel_modules", package, _install(package))
        raise OpError(
            f"Secure Boot is on and {os_release.get('id') or 'this OS'} builds the NVIDIA modules with DKMS: "
            "the firmware refuses them until DKMS's signing key is enrolled",
            "enrol it (`sudo mokutil --import /var/lib/dkms/mok.pub`, reboot, confirm in MokManager; Debian "
            "wiki SecureBoot) and install the driver, or turn Secure Boot off; a running driver of the "
            "pinned branch is left alone",
        )
    # Secure Boot off, or unknown (a BIOS boot has none): DKMS builds against the running kernel's headers
    headers = f"linux-headers-{release}"
    if health.get("kernel_headers") is None:
        return noop("kernel_modules", headers, "whether the kernel headers are installed is unknown")
    if health.get("kernel_headers"):
        return noop("kernel_modules", headers, f"headers for {release} present (DKMS builds against them)")
    return Step("kernel_modules", headers, _install(headers))


KERNEL_MODULES = Operation("kernel_modules", _facts, _plan, {"flavor": None})
