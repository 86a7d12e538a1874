#!/usr/bin/python3
"""A stand-in `lspci` for lab hosts: `lspci -vvv`'s device lines and their `ACSCtl:` capability line, from
/etc/vllmctl-lab/gpus.json (a container sees no PCI devices of its own; the lab image has no pciutils).

Each GPU is a `3D controller` line at its bus id (`(rev ff)` for one gpus.json marks `lost`); each entry of
`pci_bridges` ({"address", "acs"}) is a PCI bridge whose ACSCtl reads `SrcValid+ ... ReqRedir+` (ACS on, P2P
redirected through the root complex) or all `-`. The lines follow real `lspci -vvv` output of a PLX PEX 8747
switch. An NVLink5 board's `sw_mng_bridges` are ConnectX-7 InfiniBand functions whose Vital Product Data
carries `SMDL=SW_MNG`, the field NVIDIA's NVSwitch management bridges are told apart by from the NICs of the
same device ID (a vfio helper's `detect_cx7_bridge_pfs` reads it from `lspci -vv`). Copied as /usr/bin/lspci;
standard library only.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

GPUS_JSON = os.environ.get("VLLMCTL_LAB_GPUS", "/etc/vllmctl-lab/gpus.json")
BRIDGE = (
    "PCI bridge: PLX Technology, Inc. PEX 8747 48-Lane, 5-Port PCI Express Gen 3 (8.0 GT/s) Switch (rev ca)"
)
ACS_ON = "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"
ACS_OFF = "SrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-"
CONNECTX7 = "Infiniband controller: Mellanox Technologies MT2910 Family [ConnectX-7]"


def _vpd(index: int) -> list[str]:
    return [
        "\tCapabilities: [48] Vital Product Data",
        "\t\tProduct Name: NVIDIA NVLink switch management bridge",
        "\t\tRead-only fields:",
        f"\t\t\t[SN] Serial number: MT2500{index:05d}",
        "\t\t\t[VA] Vendor specific: MLX:MN=MLNX:CSKU=V2:UUID=V3:PCI=V0:MODL=CX7:SMDL=SW_MNG",
        "\t\tEnd",
    ]


def devices(doc: dict[str, Any], verbose: bool) -> list[str]:
    shown: list[tuple[str, list[str]]] = []
    for bridge in doc.get("pci_bridges") or []:
        details = [f"\t\tACSCtl:\t{ACS_ON if bridge.get('acs') else ACS_OFF}"] if verbose else []
        shown.append((str(bridge["address"]), [f"{bridge['address']} {BRIDGE}", *details]))
    for index in range(int(doc.get("sw_mng_bridges") or 0)):
        address = f"{0xC1 + index:02x}:00.0"
        shown.append((address, [f"{address} {CONNECTX7}", *(_vpd(index) if verbose else [])]))
    for gpu in doc.get("gpus") or []:
        address = str(gpu.get("pci_bus_id", "")).lower().removeprefix("00000000:")
        # a GPU fallen off the bus reads all ones from its config space: lspci shows it as (rev ff)
        line = f"{address} 3D controller: NVIDIA Corporation {gpu.get('name', 'GPU')}"
        shown.append((address, [line + (" (rev ff)" if gpu.get("lost") else " (rev a1)")]))
    return [line for _, lines in sorted(shown) for line in lines]


def main(args: list[str]) -> int:
    try:
        with open(GPUS_JSON) as handle:
            doc: dict[str, Any] = json.load(handle)
    except FileNotFoundError:
        doc = {}
    verbose = any(arg.startswith("-v") for arg in args)
    for line in devices(doc, verbose):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
