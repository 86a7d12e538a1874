"""The GPU health fact: what decides whether a host may serve, read in one section of the facts script.

NVSwitch devices (the driver's `/proc/driver/nvidia-nvswitch/devices`, as NVIDIA's driver container checks,
and the `/dev/nvidia-nvswitch<N>` nodes), nouveau loaded, `NVRM: Xid` kernel lines since boot, the installed
`nvidia-*`/`libnvidia-*` packages and their holds, and per GPU from `nvidia-smi -q`: persistence mode, MIG
mode, the fabric state, status and health bandwidth, the PCIe link, uncorrectable ECC counts and pending page
retirement / row remapping; the hardware sections of `gpu_hardware` (P2P matrix, ACS, IOMMU, Secure Boot,
headers, DCGM) and the NVLink sections of `gpu_links` (link state, error counters) ride along.
"""

from __future__ import annotations

import re
from typing import Any

from vllmctl.facts.base import Fact, fixed, lines
from vllmctl.facts.gpu_hardware import HARDWARE_COMMAND, HARDWARE_MARKS, parse_hardware
from vllmctl.facts.gpu_links import LINKS_COMMAND, LINKS_MARKS, parse_links, pcie_link

NVSWITCH_MARK = "@@nvswitch"
NOUVEAU_MARK = "@@nouveau"
XID_MARK = "@@xid"
PACKAGES_MARK = "@@packages"
HOLDS_MARK = "@@holds"
SMI_MARK = "@@smi"
SMI_EXIT_MARK = "@@smi-exit"
# Every Xid since boot is judged, but a flapping GPU logs thousands of lines: the host sends one line per
# (GPU, Xid), the newest (Xid 154 states the recovery the driver requires now), with how often it was logged.
# POSIX awk: Debian's minimal images have mawk, not gawk.
XID_SUMMARY = (
    'awk \'{ k = $0; sub(/,.*/, "", k); sub(/.*NVRM: Xid /, "", k); n[k]++; last[k] = $0 } '
    'END { for (k in n) printf "%d\\t%s\\n", n[k], last[k] }\''
)

GPU_HEALTH_COMMAND = (
    f"echo {NVSWITCH_MARK}; ls -1 /proc/driver/nvidia-nvswitch/devices 2>/dev/null; "
    'for d in /dev/nvidia-nvswitch[0-9]*; do [ -e "$d" ] && echo "$d"; done; '
    f"echo {NOUVEAU_MARK}; if [ -d /sys/module/nouveau ]; then echo loaded; fi; "
    # kernel messages carry SYSLOG_IDENTIFIER=kernel in the journal; dmesg where there is no journald
    f"echo {XID_MARK}; {{ journalctl -b --no-pager -o cat -t kernel 2>/dev/null || dmesg 2>/dev/null; }} "
    f"| grep -F 'NVRM: Xid' | {XID_SUMMARY}; "
    f"echo {PACKAGES_MARK}; dpkg-query -W -f='${{Package}}\\t${{Version}}\\t${{db:Status-Abbrev}}\\n' "
    "'nvidia-*' 'libnvidia-*' 2>/dev/null; "
    f"echo {HOLDS_MARK}; apt-mark showhold 2>/dev/null; "
    f"{HARDWARE_COMMAND}"
    f"{LINKS_COMMAND}"
    f"echo {SMI_MARK}; if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -q 2>&1; "
    f'echo "{SMI_EXIT_MARK} $?"; else echo "{SMI_EXIT_MARK} 127"; fi; true'
)

_MISSING = {"N/A", "[N/A]", "[Not Supported]", "Not Supported", "Unknown Error", ""}
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[^)]*)\): (?P<xid>\d+)(?:,\s*(?P<text>.*))?$")
_GPU_HEADER = re.compile(r"^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")


def _text(value: str | None) -> str | None:
    return None if value is None or value.strip() in _MISSING else value.strip()


def _count(value: str | None) -> int | None:
    value = _text(value)
    return int(value) if value is not None and value.isdigit() else None


def _yes(value: str | None) -> bool | None:
    value = _text(value)
    return None if value is None else value.lower() == "yes"


def _tree(block: list[str]) -> dict[tuple[str, ...], str]:
    """`nvidia-smi -q` nests by indentation: each `Key : value` line keyed by the path of section titles
    above it (a title is a line without ` : `, or a `Key : value` line that has children)."""
    found: dict[tuple[str, ...], str] = {}
    stack: list[tuple[int, str]] = []
    for line in block:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        key, sep, value = line.strip().partition(":")
        key = key.strip()
        path = (*(name for _, name in stack), key)
        if sep:
            found[path] = value.strip()
        stack.append((indent, key))
    return found


def _uncorrectable(tree: dict[tuple[str, ...], str], scope: str) -> int | None:
    """The sum of every uncorrectable counter under `ECC Errors/<scope>`: SRAM/DRAM Uncorrectable (Ampere and
    newer, split into Parity and SEC-DED from Hopper) or `Double Bit/Total` (Volta and older)."""
    counts = [
        _count(value)
        for path, value in tree.items()
        if path[:2] == ("ECC Errors", scope)
        and ("Uncorrectable" in path[-1] or path[-2:] == ("Double Bit", "Total"))
    ]
    known = [c for c in counts if c is not None]
    return sum(known) if known else None


def _pending_retirement(tree: dict[tuple[str, ...], str]) -> bool | None:
    """`Retired Pages/Pending Page Blacklist` (or `Pending Page Retirement`, `Pending`); N/A from Ampere on,
    where row remapping replaced page retirement."""
    for path, value in tree.items():
        if path[:1] == ("Retired Pages",) and len(path) == 2 and path[1].startswith("Pending"):
            return _yes(value)
    return None


def parse_gpu(block: list[str], index: int) -> dict[str, Any]:
    header = block[0].strip()
    tree = _tree([line[4:] if line.startswith("    ") else line for line in block[1:]])
    return {
        "index": index,
        "pci_bus_id": header.split(" ", 1)[1],
        "name": _text(tree.get(("Product Name",))),
        "persistence_mode": _text(tree.get(("Persistence Mode",))),
        "mig_mode": _text(tree.get(("MIG Mode", "Current"))),
        "fabric_state": _text(tree.get(("Fabric", "State"))),
        "fabric_status": _text(tree.get(("Fabric", "Status"))),
        "fabric_bandwidth": _text(tree.get(("Fabric", "Health", "Bandwidth"))),
        "pcie": pcie_link(tree),
        "ecc_uncorrectable_volatile": _uncorrectable(tree, "Volatile"),
        "ecc_uncorrectable_aggregate": _uncorrectable(tree, "Aggregate"),
        "retired_pages_pending": _pending_retirement(tree),
        "remapped_rows_pending": _yes(tree.get(("Remapped Rows", "Pending"))),
        "remapping_failed": _yes(tree.get(("Remapped Rows", "Remapping Failure Occurred"))),
    }


def parse_smi_query(body: list[str], exit_code: int) -> dict[str, Any]:
    """`nvidia-smi -q`: the driver version and one record per `GPU <bus id>` block, in the tool's order."""
    if exit_code == 127:
        return {"status": "not-installed", "gpus": []}
    if exit_code != 0:
        first = next((line.strip() for line in body if line.strip()), "")
        status = "no-driver" if "couldn't communicate with the NVIDIA driver" in first else "error"
        return {"status": status, "gpus": [], "message": first, "exit_code": exit_code}
    blocks: list[list[str]] = []
    driver: str | None = None
    for line in body:
        if _GPU_HEADER.match(line.rstrip()):
            blocks.append([line])
        elif blocks:
            blocks[-1].append(line)
        elif line.startswith("Driver Version"):
            driver = _text(line.partition(":")[2])
    gpus = [parse_gpu(block, index) for index, block in enumerate(blocks)]
    return {"status": "ok", "driver_version": driver, "gpus": gpus}


def parse_xid(line: str) -> dict[str, Any] | None:
    """One summary line (`COUNT<TAB>newest line`; a bare kernel line counts once)."""
    count, tab, rest = line.partition("\t")
    times = int(count) if tab and count.strip().isdigit() else 1
    match = _XID.search(rest if tab and count.strip().isdigit() else line)
    if match is None:
        return None
    text = (match["text"] or "").strip()
    return {"xid": int(match["xid"]), "pci": match["pci"], "text": text, "count": times}


def parse_gpu_health(output: str, exit_code: int) -> dict[str, Any]:
    sections: dict[str, list[str]] = {}
    current: str | None = None
    smi_exit = 127
    marks = {NVSWITCH_MARK, NOUVEAU_MARK, XID_MARK, PACKAGES_MARK, HOLDS_MARK, SMI_MARK, *HARDWARE_MARKS}
    marks |= set(LINKS_MARKS)
    for line in output.splitlines():
        word = line.strip()
        if word in marks:
            current = word
            sections[current] = []
        elif current == SMI_MARK and word.startswith(SMI_EXIT_MARK + " "):
            code = word[len(SMI_EXIT_MARK) + 1 :]
            smi_exit = int(code) if code.isdigit() else -1
            current = None
        elif current is not None:
            sections[current].append(line)
    installed: dict[str, str] = {}
    for line in lines("\n".join(sections.get(PACKAGES_MARK, []))):
        fields = line.split("\t")
        if len(fields) == 3 and fields[2][1:2] == "i":  # installed (`ii`, `hi`), not `rc` leftovers
            installed[fields[0]] = fields[1]
    nvidia = re.compile(r"^(lib)?nvidia-")
    held = sorted(w.strip() for w in sections.get(HOLDS_MARK, []) if nvidia.match(w.strip()))
    xids = [x for x in (parse_xid(line) for line in sections.get(XID_MARK, [])) if x is not None]
    xids.sort(key=lambda x: (x["pci"], x["xid"]))
    switches = sorted({w.strip() for w in sections.get(NVSWITCH_MARK, []) if w.strip()})
    return {
        "nvswitch": switches,
        "nouveau_loaded": any(w.strip() == "loaded" for w in sections.get(NOUVEAU_MARK, [])),
        "xid": xids,
        "packages": dict(sorted(installed.items())),
        "held": held,
        "smi": parse_smi_query(sections.get(SMI_MARK, []), smi_exit),
        **parse_hardware(sections),
        **parse_links(sections),
    }


GPU_HEALTH = Fact("gpu_health", fixed(GPU_HEALTH_COMMAND), parse_gpu_health)
