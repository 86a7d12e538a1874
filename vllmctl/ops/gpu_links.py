"""Warnings on a host's GPU links, pure: NVLink links down or counting errors, a fabric whose bandwidth is
Degraded, a PCIe link narrower or slower than the GPU can train. Reported beside the GPU health gate's
verdict, never a refusal: the host serves, with less bandwidth between its GPUs or to the host.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# the counters `nvidia-smi nvlink -e` has always printed; newer drivers add others (Rx/Tx, symbol errors)
# whose meaning per generation is not documented beside them, so they stay in the fact, unjudged
JUDGED_COUNTERS = ("replay", "recovery", "crc")
FABRIC_OK = "Completed"


def _where(gpu: Mapping[str, Any]) -> str:
    bus = gpu.get("pci_bus_id")
    return f"GPU {gpu.get('index')}" + (f" ({bus})" if bus else "")


def _warning(check: str, evidence: str, fix: str) -> str:
    return f"{check}: {evidence} (fix: {fix})"


def _listed(health: Mapping[str, Any]) -> dict[int, Mapping[str, Any]]:
    gpus = (health.get("smi") or {}).get("gpus") or []
    return {int(g["index"]): g for g in gpus if g.get("index") is not None}


def _link_state(record: Mapping[str, Any], gpu: Mapping[str, Any], joined: bool) -> list[str]:
    index, where = int(record["index"]), _where(gpu)
    links, inactive = int(record.get("links") or 0), list(record.get("inactive") or [])
    reset = f"reset the GPU (`nvidia-smi -r -i {index}` with its engines stopped) or reboot"
    xid = "Xid 74 in the kernel log names a failed link"
    if record.get("all_inactive") or (links and len(inactive) == links):
        if not joined or gpu.get("fabric_state") not in (None, FABRIC_OK):
            return []
        evidence = f"{where} has every NVLink link inactive (`nvidia-smi nvlink -s`) on a host whose GPUs"
        evidence += " are joined by NVLink: it reaches its peers over PCIe only"
        fix = f"{reset}; if the links stay down, reseat or replace the GPU (RMA) or its NVLink bridge; {xid}"
        return [_warning("nvlink", evidence, fix)]
    if not inactive:
        return []
    evidence = f"{where} has NVLink link {', '.join(map(str, inactive))} inactive, {links - len(inactive)} of"
    evidence += f" {links} up (`nvidia-smi nvlink -s`): its traffic to its peers runs on fewer links"
    fix = f"{reset}; if the link stays down, reseat or replace the GPU or its baseboard (RMA); {xid}"
    return [_warning("nvlink", evidence, fix)]


def _link_errors(record: Mapping[str, Any], gpu: Mapping[str, Any]) -> list[str]:
    judged = [
        e
        for e in record.get("errors") or []
        if any(word in str(e.get("counter", "")).lower() for word in JUDGED_COUNTERS)
    ]
    if not judged:
        return []
    counted = ", ".join(f"link {e['link']} {e['counter']} {e['count']}" for e in judged)
    evidence = f"{_where(gpu)} counted NVLink errors since its counters were last reset: {counted}"
    fix = (
        f"reset the counters (`nvidia-smi nvlink -re -i {record['index']}`) and read them again under "
        "load: counters that keep climbing mean a failing link; reseat or replace the GPU or its baseboard "
        "(RMA)"
    )
    return [_warning("nvlink errors", evidence + " (`nvidia-smi nvlink -e`)", fix)]


def nvlink_warnings(health: Mapping[str, Any]) -> list[str]:
    """Inactive links on a GPU whose other links are up; a GPU with every link inactive where its GPUs are
    joined by NVLink (NVSwitches, NVLink5, or a peer with a link up), unless its fabric is still coming up
    (the gate's fabric check refuses that); non-zero replay, recovery or CRC counters."""
    records = list(health.get("nvlink_links") or [])
    joined = bool(health.get("nvswitch") or health.get("nvlink5"))
    joined = joined or any(int(r.get("links") or 0) > len(r.get("inactive") or []) for r in records)
    gpus = _listed(health)
    found: list[str] = []
    for record in records:
        gpu = gpus.get(int(record["index"])) or {"index": record["index"]}
        found += _link_state(record, gpu, joined) + _link_errors(record, gpu)
    return found


def fabric_warnings(health: Mapping[str, Any]) -> list[str]:
    """A GPU whose fabric health reads `Bandwidth : Degraded` in `nvidia-smi -q` (drivers that print a
    Health subsection under Fabric)."""
    return [
        _warning(
            "fabric health",
            f"{_where(gpu)} fabric health Bandwidth Degraded (`nvidia-smi -q`, Fabric/Health): it reaches "
            "the NVLink fabric with fewer links than it should",
            "find its inactive links (`nvidia-smi nvlink -s`) and read Fabric Manager's log "
            "(/var/log/fabricmanager.log); reset the GPU or reboot, and reseat or replace the GPU or the "
            "NVSwitch tray whose links stay down",
        )
        for gpu in _listed(health).values()
        if str(gpu.get("fabric_bandwidth") or "").lower() == "degraded"
    ]


def pcie_warnings(health: Mapping[str, Any]) -> list[str]:
    """A link trained narrower than its maximum width, and a slot whose maximum generation (Host Max) is
    below the GPU's (Device Max). The current generation is not judged: NVIDIA documents that it drops when
    the GPU is not in use, and the gate runs before any engine does."""
    found: list[str] = []
    for gpu in _listed(health).values():
        pcie: Mapping[str, Any] = gpu.get("pcie") or {}
        width_max, width = pcie.get("width_max"), pcie.get("width_current")
        if width_max and width and width < width_max:
            found.append(
                _warning(
                    "pcie",
                    f"{_where(gpu)} PCIe link trained at x{width} of x{width_max} (`nvidia-smi -q`, GPU "
                    "Link Info): copies between host and GPU (model loading, KV cache offload) get a "
                    "fraction of the bandwidth",
                    "reseat the GPU and its riser, check the slot's lane bifurcation and link width in the "
                    "BIOS, and confirm under load with `lspci -vv` (LnkSta against LnkCap)",
                )
            )
        device, host = pcie.get("gen_device_max"), pcie.get("gen_host_max")
        if device and host and host < device:
            found.append(
                _warning(
                    "pcie",
                    f"{_where(gpu)} PCIe Host Max generation {host} below the GPU's Device Max {device} "
                    "(`nvidia-smi -q`, GPU Link Info): the slot or riser cannot train at the GPU's "
                    "generation",
                    f"set the slot's PCIe link speed to Auto or Gen{device} in the BIOS and check the riser "
                    f"and retimers; a platform whose slots top out at Gen{host} cannot do better",
                )
            )
    return found


def link_warnings(health: Mapping[str, Any] | None) -> list[str]:
    """Every link warning of the `gpu_health` fact: NVLink, fabric health, then PCIe."""
    if not health:
        return []
    return [*nvlink_warnings(health), *fabric_warnings(health), *pcie_warnings(health)]
