"""DCGM, pure: `dcgmi diag -r 1` before engines start where `driver.dcgm_diag` asks, once per boot (a failed
diag fails the host with its output tail; a passed one records the boot id, so a converged host plans
nothing), and NVIDIA's packaged DCGM Exporter where `driver.dcgm_exporter` asks, exporting its default fields
and the ones vllmctl's alerts read that the defaults lack."""

from __future__ import annotations

from vllmctl.ops.base import (
    Action,
    Args,
    Command,
    FactRequests,
    Facts,
    FileChange,
    Operation,
    OpError,
    Step,
    Upload,
    make_dirs,
    noop,
    run,
    sha256_text,
)
from vllmctl.ops.files import config_file
from vllmctl.paths import DCGM_DIAG_PASSED

# NVIDIA's "Install DCGM Exporter": a package-managed systemd service; datacenter-gpu-manager-exporter (CUDA
# repository) pulls in DCGM (datacenter-gpu-manager-4-core, with dcgmi) and ships nvidia-dcgm-exporter.service
# (NVIDIA/dcgm-exporter's packaging), which serves /metrics on :9400.
EXPORTER_PACKAGE = "datacenter-gpu-manager-exporter"
EXPORTER_SERVICE = "nvidia-dcgm-exporter.service"
EXPORTER_PORT = 9400
# The packaged unit runs `dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv` (NVIDIA/dcgm-exporter,
# packaging/config-files/systemd/nvidia-dcgm-exporter.service). Those defaults (etc/default-counters.csv: the
# field and its Prometheus type) have no Fabric Manager status, which the alerts read (go-dcgm field 170,
# dcgmFabricManagerStatus_t), so vllmctl writes its own list, the defaults plus EXTRA_COUNTERS, and a drop-in
# that points the exporter at it.
DEFAULT_COUNTERS = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock (MHz)"),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "memory clock (MHz)"),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "memory temperature (C)"),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (C)"),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "power draw (W)"),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "energy since boot (mJ)"),
    ("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "counter", "PCIe bytes sent (KB)"),
    ("DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "counter", "PCIe bytes received (KB)"),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "PCIe retries"),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilisation (%)"),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "memory utilisation (%)"),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "encoder utilisation (%)"),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "decoder utilisation (%)"),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "the last Xid"),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "framebuffer free (MiB)"),
    ("DCGM_FI_DEV_FB_USED", "gauge", "framebuffer used (MiB)"),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "NVLink bandwidth counters, all lanes"),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU licence status"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "rows remapped for uncorrectable errors"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "rows remapped for correctable errors"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "row remapping failed"),
)
EXTRA_COUNTERS = (("DCGM_FI_DEV_FABRIC_MANAGER_STATUS", "gauge", "Fabric Manager status (3 is success)"),)
COUNTERS_PATH = "/etc/dcgm-exporter/vllmctl-counters.csv"
EXPORTER_DROPIN_DIR = f"/etc/systemd/system/{EXPORTER_SERVICE}.d"
EXPORTER_DROPIN = f"{EXPORTER_DROPIN_DIR}/vllmctl-counters.conf"
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


def counters_csv(rows: tuple[tuple[str, str, str], ...]) -> str:
    """A counters file in the exporter's format: `field, Prometheus type, help` per line."""
    return "".join(f"{field}, {kind}, {text}\n" for field, kind, text in rows)


EXPORTER_COUNTERS = counters_csv(DEFAULT_COUNTERS + EXTRA_COUNTERS)
EXPORTER_DROPIN_TEXT = (
    "# written by vllmctl: the default counters lack fields its alerts read\n"
    f"[Service]\nExecStart=\nExecStart=/usr/bin/dcgm-exporter -f {COUNTERS_PATH} -a :{EXPORTER_PORT}\n"
)


def _exporter_facts(args: Args) -> FactRequests:
    paths = (COUNTERS_PATH, EXPORTER_DROPIN)
    return {"dpkg": (EXPORTER_PACKAGE,), "services": (EXPORTER_SERVICE,), "paths": paths}


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
    fresh = EXPORTER_PACKAGE not in installed
    actions: list[Action] = []
    if fresh:
        actions += [
            run("apt-get", "update", "-q"),
            run("env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q", EXPORTER_PACKAGE),
        ]
    paths = facts.get("paths") or {}
    counters = config_file(COUNTERS_PATH, EXPORTER_COUNTERS, facts)
    if counters is not None:
        actions += counters[0]
    dropin = paths.get(EXPORTER_DROPIN, {"type": "absent"})
    change = None
    if dropin.get("sha256") != sha256_text(EXPORTER_DROPIN_TEXT):
        change = FileChange(EXPORTER_DROPIN, EXPORTER_DROPIN_TEXT, exists=dropin.get("type") == "file")
        actions += [make_dirs(EXPORTER_DROPIN_DIR), Upload(EXPORTER_DROPIN, EXPORTER_DROPIN_TEXT)]
    if fresh or change is not None:
        actions.append(run("systemctl", "daemon-reload"))
    if fresh or unit.get("unit_file_state") != "enabled":
        actions.append(run("systemctl", "enable", EXPORTER_SERVICE))
    if fresh or counters is not None or change is not None or unit.get("active_state") != "active":
        actions.append(run("systemctl", "restart", EXPORTER_SERVICE))
    if not actions:
        version = installed[EXPORTER_PACKAGE]
        return noop("dcgm_exporter", EXPORTER_SERVICE, f"{EXPORTER_PACKAGE} {version} enabled and running")
    shown = change or (counters[1] if counters is not None else None)  # one diff a step: the drop-in's first
    return Step("dcgm_exporter", EXPORTER_SERVICE, tuple(actions), change=shown)


DCGM_DIAG = Operation("dcgm_diag", _diag_facts, _plan_diag, {"diag": False})
DCGM_EXPORTER = Operation("dcgm_exporter", _exporter_facts, _plan_exporter, {"exporter": False})
