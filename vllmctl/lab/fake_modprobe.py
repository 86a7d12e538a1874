#!/usr/bin/python3
"""A stand-in `modprobe` for lab hosts: a container loads no kernel module (the lab image has no kmod), so
`modprobe ib_umad` makes the `/dev/infiniband/umad<N>` nodes the module creates for each InfiniBand port, one
per NVLink5 switch bridge in /etc/vllmctl-lab/gpus.json; any other module is not found, as on a kernel
without it. `modprobe --lab-boot` loads what /etc/modules-load.d lists, as systemd-modules-load does at boot.
Copied as /usr/sbin/modprobe; standard library only.
"""

from __future__ import annotations

import glob
import json
import os
import sys
from typing import Any

GPUS_JSON = os.environ.get("VLLMCTL_LAB_GPUS", "/etc/vllmctl-lab/gpus.json")
DEV = os.environ.get("VLLMCTL_LAB_DEV", "/dev")
MODULES_LOAD = os.environ.get("VLLMCTL_LAB_MODULES_LOAD", "/etc/modules-load.d")


def _doc() -> dict[str, Any]:
    try:
        with open(GPUS_JSON) as handle:
            loaded: dict[str, Any] = json.load(handle)
            return loaded
    except FileNotFoundError:
        return {}


def ib_umad() -> None:
    os.makedirs(f"{DEV}/infiniband", exist_ok=True)
    for port in range(int(_doc().get("sw_mng_bridges") or 0)):
        for node in (f"umad{port}", f"issm{port}"):
            with open(f"{DEV}/infiniband/{node}", "a"):
                pass


KNOWN = {"ib_umad": ib_umad}


def load(name: str) -> int:
    module = name.replace("-", "_")
    if module not in KNOWN:
        release = os.uname().release
        print(
            f"modprobe: FATAL: Module {name} not found in directory /lib/modules/{release}", file=sys.stderr
        )
        return 1
    KNOWN[module]()
    return 0


def boot() -> int:
    """Every module named in /etc/modules-load.d/*.conf; systemd-modules-load logs and skips unknown ones."""
    for path in sorted(glob.glob(f"{MODULES_LOAD}/*.conf")):
        try:  # Debian's modules.conf links to /etc/modules, which a minimal image lacks
            with open(path) as handle:
                lines = handle.read().splitlines()
        except OSError:
            continue
        for line in lines:
            name = line.split("#", 1)[0].strip()
            if name and name.replace("-", "_") in KNOWN:
                load(name)
    return 0


def main(args: list[str]) -> int:
    if args == ["--lab-boot"]:
        return boot()
    names = [a for a in args if not a.startswith("-")]
    if not names:
        print("modprobe: FATAL: Module name not given", file=sys.stderr)
        return 1
    return load(names[0])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
