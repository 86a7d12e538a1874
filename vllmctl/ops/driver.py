"""NVIDIA driver operations: keep the pinned branch installed (apt) and held, and reboot into it when the
running driver is not the installed one (only with `driver.reboot: true`; otherwise stop with the fix)."""

from __future__ import annotations

import re
from typing import Any

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
    sha256_text,
)
from vllmctl.ops.driver_flavor import choose_flavor
from vllmctl.ops.reboot import REBOOT_WAIT_S, WaitForReboot, schedule_reboot
from vllmctl.ops.service_start import wait_serving
from vllmctl.paths import DRIVER_PIN_PREFS
from vllmctl.render.quoting import shell_word

DRIVER_PACKAGE = re.compile(r"^nvidia-driver-\d+(-server|-open|-server-open)?$")
# every package of a driver branch (NVIDIA's version-locking guide: lock each one; one unheld libnvidia-*
# moved alone gives "NVML: Driver/library version mismatch"); Fabric Manager is fabric_manager's
BRANCH_PACKAGE = re.compile(r"^(lib)?nvidia-(?!fabricmanager)")
# where the apt steps below are known to work: Ubuntu LTS releases (NVIDIA's CUDA repository and Ubuntu's own
# nvidia-driver-<branch> packages) and Debian (its nvidia-driver packages; the lab)
UBUNTU_RELEASES = ("22.04", "24.04")


def package_for(branch: str, flavor: str = "") -> str:
    """`570` -> `nvidia-driver-570`; flavor `server` (Ubuntu's -server) -> `nvidia-driver-570-server`."""
    return f"nvidia-driver-{branch.split('.')[0]}" + (f"-{flavor}" if flavor else "")


def running_driver(gpus: Facts | None) -> str | None:
    """The driver version nvidia-smi reports, None when there is no working driver (or no GPU)."""
    if not gpus or gpus.get("status") != "ok":
        return None
    versions = [g["driver_version"] for g in gpus.get("gpus", []) if g.get("driver_version")]
    return versions[0] if versions else None


def is_branch(version: str | None, branch: str) -> bool:
    """`580.95.05` is branch `580` and `580.95`; a pin may name a major branch or a minor release."""
    return bool(version) and (version == branch or str(version).startswith(branch + "."))


def upstream_version(deb_version: str) -> str:
    """`570.133.07-0ubuntu1` and `1:570.133.07-1` -> `570.133.07`, comparable with nvidia-smi's version."""
    return deb_version.split(":", 1)[-1].split("-", 1)[0]


def _facts(args: Args) -> FactRequests:
    branch = str(args.get("branch") or "")
    # what apt offers of the driver package (any flavour): a pinned release is installed at that version
    offered = tuple(package_for(branch, f) for f in ("", "open", "server", "server-open")) if branch else ()
    return {
        "gpus": (),
        "driver_packages": (),
        "os_release": (),
        "gpu_health": (),
        "apt_versions": offered,
        "paths": (DRIVER_PIN_PREFS,),
    }


def version_prefix(branch: str) -> str:
    """What every Debian version of `branch` starts with, epoch aside: `580.95.05-` for a full release,
    `580.95.` for a minor pin, `580.` for a branch."""
    return branch + ("-" if branch.count(".") >= 2 else ".")


def pin_preferences(branch: str) -> str:
    """The apt preferences that hold every NVIDIA package (driver, its libraries, Fabric Manager, NSCQ) at a
    release, epoch or not: apt resolves them all to it, down as well as up, as NVIDIA's pinning packages
    (`nvidia-driver-pinning-<version>`) do (NVIDIA Driver Installation Guide r580, "Version locking")."""
    # the separator as a regex: a literal "-" after a full release, an escaped "." after a minor pin
    release = re.escape(branch) + ("-" if branch.count(".") >= 2 else r"\.")
    return (
        f"# vllmctl: driver.branch pins NVIDIA release {branch}\n"
        f"Package: *nvidia*\nPin: version /^([0-9]+:)?{release}/\nPin-Priority: 1001\n"
    )


def preferences_actions(branch: str, facts: Facts) -> list[Command | Upload]:
    """Write the release pin's preferences when they differ, remove them when only a branch is pinned."""
    current: Facts = (facts.get("paths") or {}).get(DRIVER_PIN_PREFS, {"type": "absent"})
    if not is_release_pin(branch):
        return [] if current.get("type") == "absent" else [run("rm", "-f", DRIVER_PIN_PREFS)]
    content = pin_preferences(branch)
    return [] if current.get("sha256") == sha256_text(content) else [Upload(DRIVER_PIN_PREFS, content)]


def is_release_pin(branch: str) -> bool:
    """`580.95.05` or `580.95` pins a release (installed at exactly that version); `580` a branch."""
    return "." in branch


def pinned_version(package: str, branch: str, facts: Facts) -> str:
    """The `package=<version>` apt installs for a release pin: the newest Debian version the host's apt
    sources offer of that release, or a glob apt resolves after its update when the lists the facts read
    do not know the package (a fresh host); refused when they know it and offer no such release."""
    offered: list[str] = list((facts.get("apt_versions") or {}).get(package, []))
    matching = [v for v in offered if is_branch(upstream_version(v), branch)]
    if matching:
        return matching[0]
    if offered:
        shown = ", ".join(dict.fromkeys(upstream_version(v) for v in offered))
        raise OpError(
            f"driver {branch} is not offered by this host's apt sources: {package} has {shown}",
            "pin a release the repository has (driver.branch), or add the repository that carries it",
        )
    return version_prefix(branch) + "*"


def _reboot_facts(args: Args) -> FactRequests:
    """The driver's facts, and the units of the engines the host serves: those enabled start at boot."""
    return {**_facts(args), **({"units": ()} if args.get("engines") else {})}


def unsupported_os(release: Facts | None) -> OpError | None:
    """The refusal of the driver stack on an OS other than Ubuntu 22.04/24.04 or Debian (None when the
    os-release is unknown: nothing is claimed about it)."""
    if not release or not release.get("id"):
        return None
    name, version = str(release["id"]), str(release.get("version_id") or "")
    if name == "debian" or (name == "ubuntu" and version in UBUNTU_RELEASES):
        return None
    shown = release.get("pretty_name") or f"{name} {version}".strip()
    return OpError(
        f"the driver stack is not managed on {shown}: vllmctl installs NVIDIA drivers on Ubuntu "
        f"{' and '.join(UBUNTU_RELEASES)} and Debian only",
        "run a supported OS on this host, or remove driver.branch for it and install the driver yourself "
        "(the GPU health gate still checks it before any engine starts)",
    )


def hold_branch(branch: str) -> Command:
    """Hold every installed `nvidia-*`/`libnvidia-*` package whose version is of `branch` (`580`, or a
    release `580.95.05`; epoch ignored), as apt just installed them: the fleet must not drift host to host."""
    query = (
        "dpkg-query -W -f='${db:Status-Abbrev} ${Package} ${Version}\\n' 'nvidia-*' 'libnvidia-*' 2>/dev/null"
    )
    pick = (
        "'$1 ~ /^.i/ && $2 !~ /fabricmanager/ && substr($3, index($3, \":\") + 1, length(b)) == b {print $2}'"
    )
    prefix = shell_word(version_prefix(branch))
    return Command(shell=f"{query} | awk -v b={prefix} {pick} | xargs -r apt-mark hold")


def unheld_branch_packages(facts: Facts, version: str, package: str) -> list[str]:
    """Installed packages of the running driver's exact version (and the driver package) not yet held."""
    health: Facts = facts.get("gpu_health") or {}
    packages: Facts = facts.get("driver_packages") or {}
    found = {
        name
        for name, deb in dict(health.get("packages", {})).items()
        if BRANCH_PACKAGE.match(name) and upstream_version(deb) == version
    }
    if package in dict(packages.get("installed", {})):
        found.add(package)
    held = set(packages.get("held", [])) | set(health.get("held", []))
    return sorted(found - held)


def gpu_name(args: Args, facts: Facts) -> str | None:
    """The GPU the flavour is chosen for: the inventory's, else the first nvidia-smi reports."""
    if args.get("gpu"):
        return str(args["gpu"])
    gpus = (facts.get("gpus") or {}).get("gpus") or []
    return str(gpus[0]["name"]) if gpus else None


def chosen_package(args: Args, facts: Facts) -> tuple[str, str]:
    """(package, why that flavour). On Ubuntu the kernel-module flavour is chosen per GPU and branch
    (`driver_flavor.choose_flavor`); elsewhere (Debian) the package is named as before,
    `nvidia-driver-<branch>` plus the requested flavour. A requested flavour the GPU cannot run is refused
    on every OS, and an OS vllmctl does not install drivers on before anything else."""
    refused = unsupported_os(facts.get("os_release"))
    if refused is not None:
        raise refused
    branch = str(args["branch"])
    requested = args.get("flavor")
    requested = None if requested is None else str(requested)
    release: Facts = facts.get("os_release") or {}
    if release.get("id") == "ubuntu":
        choice = choose_flavor(gpu_name(args, facts), branch, requested)
        return package_for(branch, choice.flavor), choice.reason
    if requested is not None:
        choose_flavor(gpu_name(args, facts), branch, requested)  # refuses what the GPU cannot run
    return package_for(branch, requested or ""), ""


def _plan_driver(args: Args, facts: Facts) -> Step:
    branch = args.get("branch")
    if not branch:
        return noop("nvidia_driver", "driver", "no driver branch pinned (driver.branch)")
    branch = str(branch)
    package, why = chosen_package(args, facts)
    target = f"{package} ({why})" if why else package
    running = running_driver(facts.get("gpus"))
    packages: Facts = facts.get("driver_packages") or {}
    installed: dict[str, str] = dict(packages.get("installed", {}))
    held: list[str] = list(packages.get("held", []))
    prefs = preferences_actions(branch, facts)
    if is_branch(running, branch):
        assert running is not None
        unheld = unheld_branch_packages(facts, running, package)
        hold = [run("apt-mark", "hold", *unheld)] if unheld else []
        if prefs or hold:
            return Step("nvidia_driver", target, (*prefs, *hold))
        return noop("nvidia_driver", target, f"nvidia-smi reports driver {running} (branch {branch})")
    pin = is_release_pin(branch)
    if package in installed and (not pin or is_branch(upstream_version(installed[package]), branch)):
        if prefs:
            return Step("nvidia_driver", target, tuple(prefs))
        return noop(
            "nvidia_driver",
            target,
            f"{package} {installed[package]} is installed; the running driver is {running or 'none'}: "
            "a reboot is pending (driver_reboot decides)",
        )
    if not packages.get("apt", False):
        raise OpError(
            f"driver branch {branch} is wanted, nvidia-smi reports {running or 'no driver'} and the host has "
            "no apt-get",
            "install the driver with your distribution's tools, or drop driver.branch for this host",
        )
    health_held = list((facts.get("gpu_health") or {}).get("held", []))
    # the old release's holds (its driver and, held by vllmctl, its libraries) would stop apt replacing it
    others = sorted({p for p in [*held, *health_held] if BRANCH_PACKAGE.match(p) and (pin or p != package)})
    actions: list[Command | Upload] = list(prefs)
    if others:
        actions.append(run("apt-mark", "unhold", *others))
    # a release pin installs exactly that version, down as well as up (NVIDIA's version-locking guide)
    wanted = f"{package}={pinned_version(package, branch, facts)}" if pin else package
    downgrade = ("--allow-downgrades",) if pin else ()
    actions += [
        run("apt-get", "update", "-q"),
        run(
            "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q", *downgrade,
            "-o", "Dpkg::Options::=--force-confold", wanted,
        ),
        run("apt-mark", "hold", package),
        hold_branch(branch),
    ]  # fmt: skip
    return Step("nvidia_driver", target, tuple(actions))


def reboot_reason(package: str, facts: Facts) -> str | None:
    packages: Facts = facts.get("driver_packages") or {}
    if packages.get("reboot_required"):
        return "/var/run/reboot-required exists"
    if (facts.get("gpu_health") or {}).get("nouveau_loaded") and running_driver(facts.get("gpus")) is None:
        return "nouveau is loaded and holds the GPUs (blacklisted by nouveau_blacklist; a reboot unloads it)"
    installed = dict(packages.get("installed", {})).get(package)
    running = running_driver(facts.get("gpus"))
    if installed and running != upstream_version(installed):
        seen = running or "no driver"
        return f"{package} {upstream_version(installed)} is installed but nvidia-smi reports {seen}"
    return None


def _plan_reboot(args: Args, facts: Facts) -> Step:
    branch = args.get("branch")
    if not branch:
        return noop("driver_reboot", "host", "no driver branch pinned (driver.branch)")
    package, _ = chosen_package(args, facts)
    why = reboot_reason(package, facts)
    if why is None:
        return noop("driver_reboot", "host", "no reboot needed")
    if not args.get("reboot"):
        raise OpError(
            f"reboot required: {why}",
            "reboot the host (`sudo systemctl reboot`) and apply again, or set driver.reboot: true to let "
            "vllmctl reboot it and wait for SSH",
        )
    boot_id = str((facts.get("driver_packages") or {}).get("boot_id") or "")
    units: Facts = facts.get("units") or {}
    # the engines whose units start at boot: the host is back once they serve again (the rollout puts it
    # back in the gateway then, and only then lets the next host of their models go)
    back = [
        e for e in args.get("engines") or () if units.get(e["name"], {}).get("unit_file_state") == "enabled"
    ]
    actions: tuple[Any, ...] = (
        schedule_reboot(),
        WaitForReboot(boot_id, float(args.get("wait_s", REBOOT_WAIT_S))),
        *wait_serving(back),
    )
    return Step("driver_reboot", "host", actions, stops_engines=True)


NVIDIA_DRIVER = Operation("nvidia_driver", _facts, _plan_driver, {"flavor": None})
DRIVER_REBOOT = Operation(
    "driver_reboot", _reboot_facts, _plan_reboot, {"reboot": False, "flavor": None, "engines": ()}
)
