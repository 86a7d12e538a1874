"""Fabric Manager and NSCQ on NVSwitch and NVLink5 hosts, pure: each at exactly the running driver's version,
under the name the host's apt sources offer it by, held; the service enabled and running; nothing elsewhere.

Without Fabric Manager CUDA fails at init with error 802, "system not yet initialized"
(gpustack/gpustack#4154); it refuses to start on a driver one patch apart (NVIDIA/gpu-operator#544), and an
unheld one drifted to another branch (NVIDIA/gpu-driver-container#735), so a mismatch is stopped and replaced,
never left running. NVIDIA's CUDA repository names them without the branch (`nvidia-fabricmanager` from 580,
`libnvidia-nscq`), Ubuntu's archive with it (`nvidia-fabricmanager-580`; NVIDIA Driver Installation Guide
r580, "Recent Updates"): the name is what the host's apt sources offer at the driver's version.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from vllmctl.ops.base import Args, Command, FactRequests, Facts, Operation, Step, noop, run
from vllmctl.ops.driver import running_driver, upstream_version
from vllmctl.render.quoting import shell_join, shell_word

FM_SERVICE = "nvidia-fabricmanager.service"
FM_BASE, NSCQ_BASE = "nvidia-fabricmanager", "libnvidia-nscq"
# NVIDIA's repository has dropped the branch from the names since 580; Ubuntu's archive keeps it
UNSUFFIXED_FROM = 580


def candidates(base: str, branch: str) -> tuple[str, ...]:
    """The names a package of `branch` goes by, the likelier first: `nvidia-fabricmanager` and
    `nvidia-fabricmanager-580` for 580, the suffixed one first before 580."""
    major = branch.split(".")[0]
    suffixed, unsuffixed = f"{base}-{major}", base
    return (unsuffixed, suffixed) if int(major) >= UNSUFFIXED_FROM else (suffixed, unsuffixed)


def offered_name(names: Sequence[str], version: str, offered: Mapping[str, Sequence[str]]) -> str | None:
    """The first of `names` the apt sources offer at upstream `version`, None when none does."""
    for name in names:
        if any(upstream_version(v) == version for v in offered.get(name, ())):
            return name
    return None


def _facts(args: Args) -> FactRequests:
    branch = str(args.get("branch") or "")
    names = (*candidates(FM_BASE, branch), *candidates(NSCQ_BASE, branch)) if branch else ()
    return {"gpus": (), "gpu_health": (), "services": (FM_SERVICE,), "apt_versions": names}


def _ours(name: str, base: str) -> bool:
    """`name` is a package of `base` under either naming (not its -dev headers)."""
    return (name == base or name.startswith(base + "-")) and not name.startswith(base + "-dev")


def install_script(
    choices: Sequence[tuple[Sequence[str], str | None]], version: str, removals: Sequence[str]
) -> str:
    """apt-get install of each package at `version`: by the name the facts found offered, else (the lists the
    facts read were stale or empty) the first of its names apt offers after the update, or a clear failure."""
    lines, words = ["set -e"], []
    for index, (names, chosen) in enumerate(choices):
        if chosen:
            words.append(shell_word(f"{chosen}={version}-*"))
            continue
        var, listed = f"p{index}", shell_join(names)
        grep = shell_word(f"| {version}-")
        lines += [
            f'{var}=$(for p in {listed}; do apt-cache madison "$p" 2>/dev/null | grep -qF {grep} '
            f'&& {{ echo "$p"; break; }}; done)',
            f'[ -n "${var}" ] || {{ echo {shell_word(f"no {version} of {listed} in the apt sources")} >&2; '
            "exit 1; }",
        ]
        words.append(f'"${var}={version}-*"')
    install = "env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --allow-downgrades"
    install += " --allow-change-held-packages -o Dpkg::Options::=--force-confold"
    lines.append(" ".join([install, *words, *(shell_word(f"{p}-") for p in removals)]))
    return "\n".join(lines)


def _plan(args: Args, facts: Facts) -> Step:
    branch = args.get("branch")
    if not branch:
        return noop("fabric_manager", "fabric", "no driver branch pinned (driver.branch)")
    health: Facts = facts.get("gpu_health") or {}
    if not (health.get("nvswitch") or health.get("nvlink5")):
        return noop(
            "fabric_manager",
            "fabric",
            "no NVSwitch and no NVLink5 switch management device on this host: Fabric Manager is not needed",
        )
    driver = running_driver(facts.get("gpus"))
    if driver is None:
        return noop("fabric_manager", FM_BASE, "no running driver yet: Fabric Manager follows its version")
    packages: dict[str, str] = dict(health.get("packages", {}))
    offered: Mapping[str, Sequence[str]] = facts.get("apt_versions") or {}
    fm_names, nscq_names = candidates(FM_BASE, str(branch)), candidates(NSCQ_BASE, str(branch))

    def wanted(names: Sequence[str], base: str) -> tuple[str | None, list[str], list[str]]:
        """The name to have (an installed one that matches first), the installed ones to replace, and those of
        them to remove (other names; one picked on the host only once it is known is replaced in place)."""
        mine = [p for p in packages if _ours(p, base)]
        matching = [p for p in mine if p in names and upstream_version(packages[p]) == driver]
        chosen = matching[0] if matching else offered_name(names, driver, offered)
        stale = [p for p in mine if p != chosen or upstream_version(packages[p]) != driver]
        removed = [p for p in stale if p != chosen and (chosen is not None or p not in names)]
        return chosen, stale, removed

    fm, fm_stale, fm_removed = wanted(fm_names, FM_BASE)
    nscq, nscq_stale, nscq_removed = wanted(nscq_names, NSCQ_BASE)
    stale = sorted({*fm_stale, *nscq_stale})
    held = set(health.get("held", []))
    service = dict((facts.get("services") or {}).get(FM_SERVICE, {}))
    matches = fm is not None and nscq is not None and not stale and {fm, nscq} <= set(packages)
    target = f"{fm or FM_BASE} {driver}"
    actions: list[Command] = []
    if not matches:
        if stale:
            # one of another version refuses to start, or worse runs against the wrong driver; apt's resolver
            # will not remove a held package of another name (a branch change), so unhold and remove it too
            actions += [run("systemctl", "stop", FM_SERVICE), run("apt-mark", "unhold", *stale)]
        removals = sorted({*fm_removed, *nscq_removed})
        script = install_script([(fm_names, fm), (nscq_names, nscq)], driver, removals)
        actions += [
            run("apt-get", "update", "-q"),
            Command(shell=script),
            run("systemctl", "daemon-reload"),  # the unit as the new package ships it
        ]
    holds = [p for p in (fm, nscq) if p and p not in held] if matches else []
    if not matches:
        hold = "dpkg-query -W -f='${db:Status-Abbrev} ${Package}\\n' " + shell_join([*fm_names, *nscq_names])
        actions.append(
            Command(shell=f"{hold} 2>/dev/null | awk '$1 ~ /^.i/ {{print $2}}' | xargs -r apt-mark hold")
        )
    elif holds:
        actions.append(run("apt-mark", "hold", *holds))
    if not matches or service.get("unit_file_state") != "enabled":
        actions.append(run("systemctl", "enable", FM_SERVICE))
    if not matches or service.get("active_state") != "active":
        actions.append(run("systemctl", "restart", FM_SERVICE))
    if not actions:
        return noop("fabric_manager", target, f"{fm} and {nscq} match driver {driver}, held, running")
    return Step("fabric_manager", target, tuple(actions))


FABRIC_MANAGER = Operation("fabric_manager", _facts, _plan)
