#!/usr/bin/python3
"""The lab's Fabric Manager stand-in, run by `nvidia-fabricmanager.service` from the dummy package.

`fabricmanager.py VERSION`: as the real one, it refuses to start when the driver is not exactly VERSION
("fabric manager NVIDIA driver interface version ... don't match with driver version ...",
NVIDIA/gpu-operator#544), or when the host has no NVSwitch; otherwise it marks the fabric Completed in
/etc/vllmctl-lab/gpus.json and runs until stopped. `--stopped` (ExecStopPost) marks it Not Started again.
Standard library only: it runs on the host's python3.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from typing import Any

GPUS_JSON = os.environ.get("VLLMCTL_LAB_GPUS", "/etc/vllmctl-lab/gpus.json")
NOT_STARTED = {"state": "Not Started", "status": "N/A"}
COMPLETED = {"state": "Completed", "status": "Success"}


def load() -> dict[str, Any]:
    with open(GPUS_JSON) as handle:
        loaded: dict[str, Any] = json.load(handle)
    return loaded


def set_fabric(fabric: dict[str, str]) -> None:
    doc = load()
    doc["fabric"] = fabric
    with open(GPUS_JSON + ".tmp", "w") as handle:
        json.dump(doc, handle, indent=2)
    os.replace(GPUS_JSON + ".tmp", GPUS_JSON)


def notify_ready() -> None:
    """sd_notify READY=1 (the unit is Type=notify): `systemctl restart` returns once the fabric is up, and
    fails when this exits first, as a refused Fabric Manager does."""
    address = os.environ.get("NOTIFY_SOCKET", "")
    if not address:
        return
    if address.startswith("@"):
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.connect(address)
        sock.sendall(b"READY=1")


def main(args: list[str]) -> int:
    if args == ["--stopped"]:
        set_fabric(NOT_STARTED)
        return 0
    (version,) = args
    doc = load()
    if not doc.get("nvswitches"):
        print("fabric manager: no NVSwitch devices found on this system", flush=True)
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
    notify_ready()
    print(
        f"Successfully configured all the available NVSwitches to route GPU NVLink traffic ({version})",
        flush=True,
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
