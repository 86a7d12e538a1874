"""The GPU links of the `gpu_health` fact: NVLink state and error counters (`nvidia-smi nvlink -s` and `-e`,
read in the fact's round trip) and each GPU's PCIe link as `nvidia-smi -q` prints it under `GPU Link Info`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

NVLINK_STATUS_MARK = "@@nvlink-status"
NVLINK_ERRORS_MARK = "@@nvlink-errors"
LINKS_MARKS = (NVLINK_STATUS_MARK, NVLINK_ERRORS_MARK)
# `-e` only where `-s` printed a link: a host without NVLink pays one `nvlink -s` (a GPU header each, or
# NVML's "all links are inActive" line), no second call. Its zero counters are dropped on the host: 8 GPUs
# of 18 links print ~20 KB of them, and a round trip's facts are kept to kilobytes
LINKS_COMMAND = (
    f"echo {NVLINK_STATUS_MARK}; if command -v nvidia-smi >/dev/null 2>&1; then "
    "links=$(nvidia-smi nvlink -s 2>/dev/null); printf '%s\\n' \"$links\"; "
    f"if printf '%s\\n' \"$links\" | grep -q 'Link [0-9]'; then echo {NVLINK_ERRORS_MARK}; "
    "nvidia-smi nvlink -e 2>/dev/null | grep -v -e ': 0$' -e '^[[:space:]]*$'; fi; fi; "
)

# `GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)`, then `\t Link 3: 26.562 GB/s` or `\t Link 3: <inactive>`;
# `-e` prints `\t Link 3: Replay Errors: 0` per counter (Replay, Recovery, CRC; newer drivers print more)
_GPU = re.compile(r"^GPU (\d+):")
_LINK = re.compile(r"^\s*Link (\d+):\s*(.*?)\s*$")
_COUNTER = re.compile(r"^\s*Link (\d+):\s*(.+?):\s*(\d+)\s*$")
ALL_INACTIVE = "all links are inactive"


def _by_gpu(lines: Sequence[str]) -> dict[int, list[str]]:
    found: dict[int, list[str]] = {}
    current: int | None = None
    for line in lines:
        gpu = _GPU.match(line)
        if gpu:
            current = int(gpu[1])
            found[current] = []
        elif current is not None and line.strip():
            found[current].append(line)
    return found


def parse_nvlink_status(lines: Sequence[str]) -> dict[int, dict[str, Any]]:
    """Per GPU index: its link count and the inactive links; a GPU with no link line is left out unless NVML
    said all its links are inactive (`all_inactive`)."""
    found: dict[int, dict[str, Any]] = {}
    for index, body in _by_gpu(lines).items():
        links = [m for m in (_LINK.match(line) for line in body) if m]
        all_inactive = any(ALL_INACTIVE in line.lower() for line in body)
        if not links and not all_inactive:
            continue
        inactive = sorted(int(m[1]) for m in links if "inactive" in m[2].lower())
        found[index] = {"links": len(links), "inactive": inactive, "all_inactive": all_inactive}
    return found


def parse_nvlink_errors(lines: Sequence[str]) -> dict[int, list[dict[str, Any]]]:
    """Per GPU index: its non-zero error counters, one record per (link, counter)."""
    found: dict[int, list[dict[str, Any]]] = {}
    for index, body in _by_gpu(lines).items():
        counters = [m for m in (_COUNTER.match(line) for line in body) if m and int(m[3])]
        if counters:
            found[index] = [{"link": int(m[1]), "counter": m[2], "count": int(m[3])} for m in counters]
    return found


def parse_links(sections: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """`nvlink_links`: a record per GPU with NVLink links, in index order; empty on a host without NVLink."""
    status = parse_nvlink_status(sections.get(NVLINK_STATUS_MARK, []))
    errors = parse_nvlink_errors(sections.get(NVLINK_ERRORS_MARK, []))
    return {
        "nvlink_links": [
            {"index": index, **status[index], "errors": errors.get(index, [])} for index in sorted(status)
        ]
    }


def _number(value: str | None) -> int | None:
    """`5`, `16x`; None for N/A and the like."""
    digits = (value or "").strip().rstrip("x")
    return int(digits) if digits.isdigit() else None


def pcie_link(tree: Mapping[tuple[str, ...], str]) -> dict[str, int | None] | None:
    """`PCI/GPU Link Info` of one GPU's `nvidia-smi -q` tree: Max is the lower of what the GPU (Device Max)
    and the slot (Host Max) can do; Current drops at idle to save power. None without the section."""
    gen = ("PCI", "GPU Link Info", "PCIe Generation")
    width = ("PCI", "GPU Link Info", "Link Width")
    fields = {
        "gen_max": (*gen, "Max"),
        "gen_current": (*gen, "Current"),
        "gen_device_max": (*gen, "Device Max"),
        "gen_host_max": (*gen, "Host Max"),
        "width_max": (*width, "Max"),
        "width_current": (*width, "Current"),
    }
    if not any(path in tree for path in fields.values()):
        return None
    return {name: _number(tree.get(path)) for name, path in fields.items()}
