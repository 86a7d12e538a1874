#!/usr/bin/python3
"""The lab's stand-ins for the two NVIDIA daemons that change GPU state, run by the dummy packages' units.

`gpu_daemons.py fabricmanager VERSION`: as Fabric Manager, it refuses to start when the driver is not exactly
VERSION ("fabric manager NVIDIA driver interface version ... don't match with driver version ...",
NVIDIA/gpu-operator#544), when the host has neither NVSwitch nodes nor NVLink5 switch bridges
(NV_WARN_NOTHING_TO_DO), and on an NVLink5 board (HGX B200) when NVLSM is not installed or ib_umad not loaded
(its nvlsm error, siderolabs/docs#581); otherwise it marks the fabric Completed in
/etc/vllmctl-lab/gpus.json and runs until stopped. `fabricmanager --stopped` marks it unregistered again.

`gpu_daemons.py persistenced [--user U] [--no-persistence-mode] [--verbose]`: as nvidia-persistenced, it
sets every GPU's persistence mode Enabled while it runs, Disabled under `--no-persistence-mode` (the flag
Ubuntu's packaged unit passes); `persistenced --stopped` sets it Disabled, as the daemon does on exit.
Standard library only: it runs on the host's python3.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any

GPUS_JSON = os.environ.get("VLLMCTL_LAB_GPUS", "/etc/vllmctl-lab/gpus.json")
NOT_STARTED = {"state": "Not Started", "status": "N/A"}
IN_PROGRESS = {"state": "In Progress", "status": "N/A"}  # an NVLink5 GPU waiting for Fabric Manager
NVLSM_BINARY = os.environ.get("VLLMCTL_LAB_NVLSM", "/opt/nvidia/nvlsm/sbin/nvlsm")
UMAD = os.environ.get("VLLMCTL_LAB_UMAD", "/dev/infiniband/umad0")
COMPLETED = {"state": "Completed", "status": "Success"}


def load() -> dict[str, Any]:
    with open(GPUS_JSON) as handle:
        loaded: dict[str, Any] = json.load(handle)
    return loaded


def update(change: Callable[[dict[str, Any]], None]) -> None:
    """Read, change and replace gpus.json under a lock: both daemons may start at once at boot."""
    with open(GPUS_JSON + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        doc = load()
        change(doc)
        with open(GPUS_JSON + ".tmp", "w") as handle:
            json.dump(doc, handle, indent=2)
        os.replace(GPUS_JSON + ".tmp", GPUS_JSON)


def set_fabric(fabric: dict[str, str]) -> None:
    update(lambda doc: doc.__setitem__("fabric", fabric))


def set_persistence(mode: str) -> None:
    def change(doc: dict[str, Any]) -> None:
        for gpu in doc.get("gpus") or []:
            gpu["persistence_mode"] = mode

    update(change)


def notify_ready() -> None:
    """sd_notify READY=1 (the units are Type=notify): `systemctl restart` returns once the state is written,
    and fails when this exits first, as a refused Fabric Manager does."""
    address = os.environ.get("NOTIFY_SOCKET", "")
    if not address:
        return
    if address.startswith("@"):
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.connect(address)
        sock.sendall(b"READY=1")


def run_until_stopped() -> int:
    # SIGTERM blocked, then waited for: a stop that lands before the wait starts is still seen (a handler
    # plus signal.pause() misses one arriving between the two and then sleeps forever)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    notify_ready()
    signal.sigwait({signal.SIGTERM})
    return 0


def _nvlink5_refusal() -> str | None:
    """What stops Fabric Manager on an NVLink5 board: its start script runs NVLSM first, needing ib_umad."""
    if not os.path.exists(NVLSM_BINARY):
        return f"Detected NVL5+ system; {NVLSM_BINARY} not found: install nvlsm"
    if not os.path.exists(UMAD):
        return (
            "nvlsm: ibwarn: [15] umad_init: can't read ABI version from "
            "/sys/class/infiniband_mad/abi_version (No such file or directory): is ib_umad module loaded?"
        )
    return None


def fabricmanager(args: list[str]) -> int:
    if args == ["--stopped"]:
        set_fabric(IN_PROGRESS if load().get("sw_mng_bridges") else NOT_STARTED)
        return 0
    (version,) = args
    doc = load()
    refused = _nvlink5_refusal() if doc.get("sw_mng_bridges") else None
    if not doc.get("nvswitches") and not doc.get("sw_mng_bridges"):
        refused = (
            "request to query NVSwitch device information from NVSwitch driver failed with error:WARNING "
            "Nothing to do [NV_WARN_NOTHING_TO_DO]"
        )
    if refused:
        print(refused, flush=True)
        return 1
    driver = (doc.get("driver") or {}).get("version")
    if driver != version:
        print(
            f"fabric manager NVIDIA driver interface version {version} don't match with driver version "
            f"{driver}. Please update with matching NVIDIA driver package.",
            flush=True,
        )
        return 1
    set_fabric(COMPLETED)
    print(
        f"Successfully configured all the available NVSwitches to route GPU NVLink traffic ({version})",
        flush=True,
    )
    return run_until_stopped()


def persistenced(args: list[str]) -> int:
    if args == ["--stopped"]:
        set_persistence("Disabled")
        return 0
    mode = "Disabled" if "--no-persistence-mode" in args else "Enabled"
    set_persistence(mode)
    print(f"nvidia-persistenced (vllmctl lab stand-in): persistence mode {mode}", flush=True)
    return run_until_stopped()


def main(args: list[str]) -> int:
    daemons = {"fabricmanager": fabricmanager, "persistenced": persistenced}
    if not args or args[0] not in daemons:
        print(f"usage: gpu_daemons.py {{{','.join(daemons)}}} ARGS...", file=sys.stderr)
        return 2
    return daemons[args[0]](args[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
