"""DCGM, pure: `dcgmi diag -r 1` before engines start where `driver.dcgm_diag` asks, once per boot (a failed
diag fails the host with its output tail; a passed one records the boot id, so a converged host plans
nothing), and NVIDIA's packaged DCGM Exporter where `driver.dcgm_exporter` asks."""

from __future__ import annotations

from vllmctl.ops.base import (
    Args,
    Command,
    FactRequests,
    Facts,
    Operation,
    OpError,
    Step,
    noop,
    run,
    sha256_text,
)
from vllmctl.paths import DCGM_DIAG_PASSED

# NVIDIA's "Install DCGM Exporter": a package-managed systemd service; datacenter-gpu-manager-exporter (CUDA
# repository) pulls in DCGM (datacenter-gpu-manager-4-core, with dcgmi) and ships nvidia-dcgm-exporter.service
# (NVIDIA/dcgm-exporter's packaging), which serves /metrics on :9400.
EXPORTER_PACKAGE = "datacenter-gpu-manager-exporter"
EXPORTER_SERVICE = "nvidia-dcgm-exporter.service"
EXPORTER_PORT = 9400
# dcgmi talks to DCGM's host engine (nv-hostengine, `nvidia-dcgm.service` of datacenter-gpu-manager-4-core);
# without it running the diag fails to connect, which says nothing about the GPUs
HOSTENGINE = "nvidia-dcgm.service"
DIAG_TAIL_LINES = 15  # the runner keeps 1,500 characters of a failed step's output
# dcgmi exits non-zero when a test fails; a `Fail` in its result table is checked as well, so that a
# failure is never reported as a pass
DIAG = (
    "out=$(dcgmi diag -r 1 2>&1); rc=$?; "
    'if [ "$rc" -ne 0 ] || printf "%s\\n" "$out" | grep -qw Fail; then '
    '{ printf "dcgmi diag -r 1 failed (exit %s):\\n" "$rc"; '
    f'printf "%s\\n" "$out" | tail -n {DIAG_TAIL_LINES}; }} >&2; exit 1; fi; '
    'printf "%s\\n" "$out" | tail -n 5; '
    f"cat /proc/sys/kernel/random/boot_id > {DCGM_DIAG_PASSED}"
)


def _diag_facts(args: Args) -> FactRequests:
    requests: FactRequests = {"gpu_health": (), "services": (HOSTENGINE,)}
    if args.get("diag"):  # the boot id (driver_packages runs dpkg-query and apt-mark) and the pass record
        requests |= {"driver_packages": (), "paths": (DCGM_DIAG_PASSED,)}
    return requests


def _passed_this_boot(facts: Facts) -> str:
    boot_id = str((facts.get("driver_packages") or {}).get("boot_id") or "")
    record = (facts.get("paths") or {}).get(DCGM_DIAG_PASSED, {})
    return boot_id if boot_id and record.get("sha256") == sha256_text(boot_id + "\n") else ""


def _plan_diag(args: Args, facts: Facts) -> Step:
    if not args.get("diag"):
        return noop("dcgm_diag", "gpus", "not asked (driver.dcgm_diag)")
    if not args.get("models"):
        return noop("dcgm_diag", "gpus", "no engine on this host")
    if not (facts.get("gpu_health") or {}).get("dcgm", False):
        return noop("dcgm_diag", "gpus", "dcgmi is not installed (DCGM; driver.dcgm_exporter installs it)")
    boot_id = _passed_this_boot(facts)
    if boot_id:
        return noop("dcgm_diag", "gpus", f"passed since this boot ({boot_id[:8]})")
    engine = dict((facts.get("services") or {}).get(HOSTENGINE, {}))
    start = engine.get("load_state") == "loaded" and engine.get("active_state") != "active"
    return Step(
        "dcgm_diag",
        "gpus",
        (*([run("systemctl", "start", HOSTENGINE)] if start else []), Command(shell=DIAG)),
    )


def _exporter_facts(args: Args) -> FactRequests:
    return {"dpkg": (EXPORTER_PACKAGE,), "services": (EXPORTER_SERVICE,)}


def _plan_exporter(args: Args, facts: Facts) -> Step:
    if not args.get("exporter"):
        return noop("dcgm_exporter", EXPORTER_SERVICE, "not asked (driver.dcgm_exporter)")
    if not args.get("branch"):
        return noop("dcgm_exporter", EXPORTER_SERVICE, "no driver branch pinned (driver.branch)")
    installed = facts.get("dpkg")
    if installed is None:
        raise OpError(
            f"driver.dcgm_exporter needs {EXPORTER_PACKAGE} and the host has no dpkg",
            "install DCGM Exporter with the host's package manager, or drop driver.dcgm_exporter",
        )
    unit = dict((facts.get("services") or {}).get(EXPORTER_SERVICE, {}))
    actions: list[Command] = []
    if EXPORTER_PACKAGE not in installed:
        actions += [
            run("apt-get", "update", "-q"),
            run("env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q", EXPORTER_PACKAGE),
            run("systemctl", "daemon-reload"),
        ]
    if EXPORTER_PACKAGE not in installed or unit.get("unit_file_state") != "enabled":
        actions.append(run("systemctl", "enable", EXPORTER_SERVICE))
    if EXPORTER_PACKAGE not in installed or unit.get("active_state") != "active":
        actions.append(run("systemctl", "restart", EXPORTER_SERVICE))
    if not actions:
        version = installed[EXPORTER_PACKAGE]
        return noop("dcgm_exporter", EXPORTER_SERVICE, f"{EXPORTER_PACKAGE} {version} enabled and running")
    return Step("dcgm_exporter", EXPORTER_SERVICE, tuple(actions))


DCGM_DIAG = Operation("dcgm_diag", _diag_facts, _plan_diag, {"diag": False})
DCGM_EXPORTER = Operation("dcgm_exporter", _exporter_facts, _plan_exporter, {"exporter": False})
