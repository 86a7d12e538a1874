"""Lab host machines: an overlay root with its own identity, booted by systemd-nspawn under a relaunch loop.

Each host's launcher lives in its own cgroup subtree (needed by `--keep-unit`); that is how it is stopped,
and, where the CPU controller allows, how the fleet is weighted below the controller's own processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

from vllmctl.lab import fake_lspci, fake_modprobe, fake_nvidia_smi
from vllmctl.lab.base import OPS_USER
from vllmctl.lab.layout import FleetLayout, LabHost
from vllmctl.lab.sh import run, try_run

OPS_UID = 1000
REBOOT_EXIT = 133
CPU_V1 = Path("/sys/fs/cgroup/cpu")
# On a real fleet the controller has its own machine; here the hosts share its cores, and an engine under load
# runs dozens of busy threads that would each get the CPU share of a controller process. The whole fleet
# weighs as a quarter of one controller process (1024) when both want the CPU, and takes all of it otherwise.
FLEET_CPU_SHARES = 256


def cgroup_roots() -> list[Path]:
    """The hierarchies a launcher joins: hybrid hosts have two (plus the v1 CPU controller, for the fleet's
    weight), pure cgroup v2 hosts one."""
    hybrid = [Path("/sys/fs/cgroup/systemd"), Path("/sys/fs/cgroup/unified")]
    present = [root for root in hybrid if (root / "cgroup.procs").exists()]
    if present and (CPU_V1 / "cpu.shares").exists():
        present.append(CPU_V1)
    return present or [Path("/sys/fs/cgroup")]


def host_cgroups(layout: FleetLayout, host: LabHost) -> list[Path]:
    return [root / layout.cgroup / host.name for root in cgroup_roots()]


def mount_overlay(base_root: Path, host_dir: Path) -> Path:
    upper, work, merged = host_dir / "upper", host_dir / "work", host_dir / "merged"
    for folder in (upper, work, merged):
        folder.mkdir(parents=True, exist_ok=True)
    options = f"lowerdir={base_root},upperdir={upper},workdir={work}"
    run(["mount", "-t", "overlay", f"vllmctl-lab-{host_dir.name}", "-o", options, str(merged)])
    return merged


DEVICES_UNIT = "lab-gpu-devices.service"
DEVICES_UNIT_TEXT = """[Unit]
Description=vllmctl lab: the simulated board's device files (HGX NVSwitch nodes, modules-load.d modules)
# as systemd-modules-load and the driver's device nodes, done before Fabric Manager's precheck looks
Before=nvidia-fabricmanager.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/bin/nvidia-smi --lab-make-devices
ExecStart=/usr/sbin/modprobe --lab-boot

[Install]
WantedBy=multi-user.target
"""


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def personalise(
    root: Path, layout: FleetLayout, host: LabHost, controller_pubkey: str, gpus: dict[str, Any]
) -> str:
    """Give one host its identity and lab wiring; returns its public ed25519 host key line."""
    _write(root / "etc/hostname", f"{host.name}\n")
    _write(root / "etc/hosts", f"127.0.0.1 localhost\n127.0.1.1 {host.name}\n{host.address} {host.name}\n")
    _write(root / "etc/machine-id", f"{uuid.uuid4().hex}\n", 0o444)
    key = root / "etc/ssh/ssh_host_ed25519_key"
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{host.name}", "-f", str(key)])
    ssh_dir = root / "home" / OPS_USER / ".ssh"
    _write(ssh_dir / "authorized_keys", controller_pubkey, 0o600)
    ssh_dir.chmod(0o700)
    for path in (ssh_dir, ssh_dir / "authorized_keys"):
        os.chown(path, OPS_UID, OPS_UID)
    _write(root / "etc/vllmctl-lab/gpus.json", json.dumps(gpus, indent=2) + "\n")
    _write(root / "usr/bin/nvidia-smi", Path(fake_nvidia_smi.__file__).read_text(), 0o755)
    _write(root / "usr/bin/lspci", Path(fake_lspci.__file__).read_text(), 0o755)
    _write(root / "usr/sbin/modprobe", Path(fake_modprobe.__file__).read_text(), 0o755)
    # /dev is a fresh tmpfs at every boot: a boot unit makes the HGX profile's NVSwitch device files
    _write(root / f"etc/systemd/system/{DEVICES_UNIT}", DEVICES_UNIT_TEXT)
    wants = root / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    (wants / DEVICES_UNIT).unlink(missing_ok=True)
    (wants / DEVICES_UNIT).symlink_to(f"/etc/systemd/system/{DEVICES_UNIT}")
    # a container runs the controller's kernel and builds no module: it has that kernel's headers as far as
    # `kernel_modules` can tell (/lib/modules/<release>/build), so the driver's DKMS prerequisite is met
    (root / "lib/modules" / os.uname().release / "build").mkdir(parents=True, exist_ok=True)
    _write(root / "etc/apt/sources.list", f"deb [trusted=yes] {layout.debian_url} ./\n")
    _write(
        root / "etc/pip.conf",
        f"[global]\nindex-url = {layout.index_url}\ntrusted-host = {layout.bridge_address}\n",
    )
    key_type, key_data = key.with_suffix(".pub").read_text().split()[:2]
    return f"{key_type} {key_data}"


def nspawn_argv(host: LabHost, root: Path) -> list[str]:
    return [
        "systemd-nspawn",
        "--quiet",
        "-D",
        str(root),
        "-M",
        host.name,
        "--boot",
        "--register=no",
        "--keep-unit",
        "--console=read-only",
        "--link-journal=no",
        "--resolv-conf=off",
        "--timezone=off",
        f"--network-namespace-path=/run/netns/{host.netns}",
        # root on a real host may add addresses (keepalived's virtual IP); here only in the host's own netns
        "--capability=CAP_NET_ADMIN",
    ]


def launch(layout: FleetLayout, host: LabHost, host_dir: Path) -> int:
    """Start the host's relaunch loop detached; `systemctl reboot` inside exits 133 and boots again."""
    cgroups = host_cgroups(layout, host)
    for cgroup in cgroups:
        cgroup.mkdir(parents=True, exist_ok=True)
    if CPU_V1 in cgroup_roots():
        (CPU_V1 / layout.cgroup / "cpu.shares").write_text(f"{FLEET_CPU_SHARES}\n")
    stop_file = host_dir / "stop"
    stop_file.unlink(missing_ok=True)
    join = "; ".join(f"echo $$ > {shlex.quote(str(c / 'cgroup.procs'))}" for c in cgroups)
    nspawn = shlex.join(nspawn_argv(host, host_dir / "merged"))
    script = (
        f"{join}; while :; do [ -e {shlex.quote(str(stop_file))} ] && exit 0; {nspawn}; rc=$?; "
        f'echo "vllmctl-lab: systemd-nspawn exited $rc"; [ $rc -eq {REBOOT_EXIT} ] || exit $rc; done'
    )
    with open(host_dir / "console.log", "ab") as log:
        process = subprocess.Popen(
            ["sh", "-c", script], stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
        )
    return process.pid


def _pids_in(cgroup: Path) -> list[int]:
    """Every pid in the cgroup subtree; os.walk skips folders that vanish while a host shuts down."""
    pids: list[int] = []
    for folder, _, _ in os.walk(cgroup):
        try:
            pids += [int(line) for line in Path(folder, "cgroup.procs").read_text().split()]
        except OSError:
            continue
    return pids


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def running_pids(layout: FleetLayout, host: LabHost) -> list[int]:
    return sorted({pid for cgroup in host_cgroups(layout, host) for pid in _pids_in(cgroup)})


def _signal(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def request_stop(layout: FleetLayout, host: LabHost, host_dir: Path) -> None:
    """Ask for an orderly shutdown: nspawn turns SIGTERM into SIGRTMIN+3 for the container's systemd."""
    if host_dir.is_dir():
        (host_dir / "stop").touch()
    nspawns = [pid for pid in running_pids(layout, host) if _comm(pid) == "systemd-nspawn"]
    _signal(nspawns, signal.SIGTERM)


def finish_stop(layout: FleetLayout, host: LabHost, deadline: float) -> None:
    """Wait for the host's processes to go until `deadline`, then kill what is left and drop its cgroups."""
    while running_pids(layout, host) and time.monotonic() < deadline:
        time.sleep(0.05)
    for _ in range(50):
        pids = running_pids(layout, host)
        if not pids:
            break
        _signal(pids, signal.SIGKILL)
        time.sleep(0.1)
    for cgroup in host_cgroups(layout, host):
        remove_cgroup_tree(cgroup)


def remove_cgroup_tree(cgroup: Path) -> None:
    for folder, _, _ in os.walk(cgroup, topdown=False):
        with contextlib.suppress(OSError):
            os.rmdir(folder)


def unmount(host_dir: Path) -> None:
    merged = host_dir / "merged"
    if merged.is_mount() and not try_run(["umount", str(merged)]):
        try_run(["umount", "--lazy", str(merged)])
