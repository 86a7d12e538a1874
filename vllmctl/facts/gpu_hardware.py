"""Hardware sections of the `gpu_health` fact's round trip: NVLink5 management devices (sysfs and lspci's
VPD), Secure Boot, kernel
and its headers, DCGM, IOMMU words, PCI bridges with ACS on, and the `nvidia-smi topo -p2p r` matrix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

NVLINK5_MARK = "@@nvlink5"
SECURE_BOOT_MARK = "@@secureboot"
KERNEL_MARK = "@@kernel"
DCGM_MARK = "@@dcgm"
CMDLINE_MARK = "@@cmdline"
LSPCI_MARK = "@@lspci"
P2P_MARK = "@@p2p"
HARDWARE_MARKS = frozenset(
    {NVLINK5_MARK, SECURE_BOOT_MARK, KERNEL_MARK, DCGM_MARK, CMDLINE_MARK, LSPCI_MARK, P2P_MARK}
)
HEADERS_WORD = "headers"

HARDWARE_COMMAND = (
    # NVLink5 boards (GB200/B200): the NVSwitches are managed over IB devices whose VPD says SW_MNG
    f"echo {NVLINK5_MARK}; grep -l SW_MNG /sys/class/infiniband/*/device/vpd 2>/dev/null; "
    f"echo {SECURE_BOOT_MARK}; mokutil --sb-state 2>&1 | head -n 3; "
    f'echo {KERNEL_MARK}; uname -r; [ -d "/lib/modules/$(uname -r)/build" ] && echo {HEADERS_WORD}; '
    f"echo {DCGM_MARK}; command -v dcgmi 2>/dev/null; "
    f"echo {CMDLINE_MARK}; cat /proc/cmdline 2>/dev/null; "
    # only each device's first line, its ACS control line and a VPD field naming NVLink5 switch management
    # (`SMDL=SW_MNG` on HGX B200/B300's ConnectX bridges): the full -vvv text runs to megabytes
    f"echo {LSPCI_MARK}; lspci -vvv 2>/dev/null | grep -E '^[0-9a-fA-F]|ACSCtl:|SW_MNG'; "
    f"echo {P2P_MARK}; nvidia-smi topo -p2p r 2>/dev/null; "
)

_IOMMU_WORD = re.compile(r"^(iommu|intel_iommu|amd_iommu)=")
_DEVICE = re.compile(r"^GPU(\d+)$")


def parse_secure_boot(lines: Sequence[str]) -> bool | None:
    """`mokutil --sb-state`: "SecureBoot enabled" / "SecureBoot disabled"; anything else (no mokutil, no EFI
    variables, a legacy-BIOS boot) is unknown."""
    for line in lines:
        words = line.split()
        if words[:1] == ["SecureBoot"] and len(words) >= 2 and words[1] in ("enabled", "disabled"):
            return words[1] == "enabled"
    return None


def parse_iommu(lines: Sequence[str]) -> str | None:
    words = [w for line in lines for w in line.split() if _IOMMU_WORD.match(w)]
    return " ".join(words) or None


def parse_nvidia_pci(lines: Sequence[str]) -> list[str]:
    """The PCI addresses of the NVIDIA GPUs (3D or VGA controllers) on the bus, as `lspci` prints them
    (`18:00.0`), whether the driver lists them or not: one fallen off the bus still shows, as `(rev ff)`."""
    found = []
    for line in lines:
        if line[:1] in (" ", "\t", "") or "NVIDIA" not in line:
            continue
        address, _, kind = line.partition(" ")
        if kind.startswith(("3D controller", "VGA compatible controller")):
            found.append(address.lower().removeprefix("0000:"))
    return sorted(found)


def parse_acs_bridges(lines: Sequence[str]) -> list[str]:
    """PCI bridges whose `ACSCtl:` has `SrcValid+` in `lspci -vvv` (grep'd to device lines and ACSCtl)."""
    found: list[str] = []
    device: str | None = None
    for line in lines:
        if line[:1] not in (" ", "\t", ""):
            device = line.split()[0] if "PCI bridge" in line else None
        elif device and "ACSCtl:" in line and "SrcValid+" in line.split("ACSCtl:", 1)[1]:
            found.append(device)
    return sorted(set(found))


def parse_sw_mng(lines: Sequence[str]) -> list[str]:
    """The devices whose Vital Product Data in `lspci -vvv` names NVLink5 switch management (`SW_MNG`): the
    ConnectX bridge functions an HGX B200/B300 manages its NVSwitches through (it has no NVSwitch node)."""
    found: list[str] = []
    device: str | None = None
    for line in lines:
        if line[:1] not in (" ", "\t", ""):
            device = line.split()[0]
        elif device and "SW_MNG" in line:
            found.append(device)
    return sorted(set(found))


def parse_p2p(lines: Sequence[str]) -> dict[str, Any] | None:
    """`nvidia-smi topo -p2p r`: a header of `GPU<n>` columns, one row per GPU, `X` on the diagonal, then a
    legend. None when nothing of the kind was printed (no nvidia-smi, no driver, an old tool)."""
    gpus: list[int] | None = None
    status: dict[str, str] = {}
    for line in lines:
        words = line.split()
        if not words or words[0].startswith("Legend"):
            if gpus is not None and status:
                break
            continue
        if gpus is None:
            if all(_DEVICE.match(w) for w in words):
                gpus = [int(w[3:]) for w in words]
            continue
        row = _DEVICE.match(words[0])
        if row is None or len(words) != len(gpus) + 1:
            continue
        for peer, cell in zip(gpus, words[1:], strict=True):
            if peer != int(row[1]):
                status[f"{row[1]},{peer}"] = cell
    return None if gpus is None else {"gpus": gpus, "status": status}


def parse_hardware(sections: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    kernel = [w.strip() for w in sections.get(KERNEL_MARK, []) if w.strip()]
    release = kernel[0] if kernel and kernel[0] != HEADERS_WORD else ""
    bridges = parse_sw_mng(sections.get(LSPCI_MARK, []))
    return {
        "nvlink5": any(w.strip() for w in sections.get(NVLINK5_MARK, [])) or bool(bridges),
        "nvlink5_bridges": bridges,
        "secure_boot": parse_secure_boot(sections.get(SECURE_BOOT_MARK, [])),
        "kernel_release": release,
        "kernel_headers": HEADERS_WORD in kernel,
        "dcgm": any(w.strip() for w in sections.get(DCGM_MARK, [])),
        "iommu": parse_iommu(sections.get(CMDLINE_MARK, [])),
        "acs_bridges": parse_acs_bridges(sections.get(LSPCI_MARK, [])),
        "nvidia_pci": parse_nvidia_pci(sections.get(LSPCI_MARK, [])),
        "p2p": parse_p2p(sections.get(P2P_MARK, [])),
    }
