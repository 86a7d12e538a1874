"""The GPU health gate, pure: whether a host's GPUs may serve, each failing check with its evidence and fix.

`gpu_findings` judges the `gpu_health` fact; the `gpu_health` operation runs it before any engine starts (its
own playbook phase, before `services`): a healthy host is a no-op, an unhealthy one gets a step that fails
with the evidence and the fix, so that host's engines are never started while the other hosts proceed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vllmctl.ops.base import Args, FactRequests, Facts, Operation, Step, noop, run
from vllmctl.ops.gpu_findings import RESET_XIDS, Finding, xid_findings
from vllmctl.ops.gpu_links import link_warnings

__all__ = ["RESET_XIDS", "Finding", "fabric_host", "gpu_findings", "tp_warnings", "verdict", "xid_findings"]

FABRIC_OK = "Completed"
# `nvidia-smi topo -p2p r` legend; GNS (a GPU without P2P, e.g. GeForce) is no fault of the host: NCCL goes
# through host memory there and no setting brings P2P back, so it is not refused
P2P_STATES = {
    "CNS": "chipset not supported",
    "TNS": "topology not supported",
    "NS": "not supported",
    "DR": "disabled by regkey",
    "U": "unknown",
}
P2P_FIX = (
    "turn PCI ACS off on the bridges between them (BIOS, or `setpci -s <bridge> ECAP_ACS+0x6.w=0000` at "
    "each boot) and boot with IOMMU passthrough (`iommu=pt` on the kernel command line), as NVIDIA's NCCL "
    "troubleshooting guide (PCI Access Control Services) says; or give the replica GPUs whose P2P is OK"
)


def _gpu_word(gpu: Mapping[str, Any]) -> str:
    return f"GPU {gpu.get('index')} ({gpu.get('pci_bus_id')})"


def fabric_host(health: Mapping[str, Any]) -> bool:
    """GPUs joined by an NVLink fabric: NVSwitch device nodes (HGX A100/H100/H200), NVLink5 switch management
    devices (HGX B200/B300, which have no NVSwitch nodes), or any GPU that reports a fabric state at all
    (`nvidia-smi -q` prints N/A for a GPU outside a fabric): their CUDA waits on the fabric."""
    if health.get("nvswitch") or health.get("nvlink5"):
        return True
    return any(g.get("fabric_state") for g in (health.get("smi") or {}).get("gpus") or [])


def _fabric_fix(health: Mapping[str, Any]) -> str:
    nvlsm = "install and hold nvlsm, `modprobe ib_umad`, " if health.get("nvlink5") else ""
    return (
        f"{nvlsm}install nvidia-fabricmanager at exactly the driver's version, `systemctl enable --now "
        "nvidia-fabricmanager`, and wait for fabric state Completed (`nvidia-smi -q | grep -A2 Fabric`)"
    )


def _gpu_checks(gpu: Mapping[str, Any], health: Mapping[str, Any], used: bool) -> list[Finding]:
    where = _gpu_word(gpu)
    found: list[Finding] = []
    state, status = gpu.get("fabric_state"), gpu.get("fabric_status")
    if fabric_host(health) and (state != FABRIC_OK or status not in ("Success", None)):
        kind = (
            "an NVLink5" if health.get("nvlink5") else "an NVSwitch" if health.get("nvswitch") else "a fabric"
        )
        found.append(
            Finding(
                "fabric",
                f"{where} fabric state {state or 'unknown'}, status {status or 'unknown'} on {kind} host "
                "(CUDA fails with error 802, system not yet initialized)",
                _fabric_fix(health),
            )
        )
    if gpu.get("persistence_mode") != "Enabled":
        found.append(
            Finding(
                "persistence",
                f"{where} persistence mode is {gpu.get('persistence_mode') or 'unknown'}",
                "`systemctl enable --now nvidia-persistenced` (or `nvidia-smi -pm 1`)",
            )
        )
    if used and gpu.get("mig_mode") == "Enabled":
        found.append(
            Finding(
                "mig",
                f"{where} has MIG mode Enabled and a model uses it (vLLM does not run on MIG slices)",
                f"`nvidia-smi -i {gpu.get('index')} -mig 0`, then reset the GPU or reboot",
            )
        )
    if gpu.get("retired_pages_pending") or gpu.get("remapped_rows_pending"):
        found.append(
            Finding(
                "retirement",
                f"{where} has a page retirement or row remapping pending",
                "reset the GPU (`nvidia-smi -r -i <gpu>`) or reboot so the retirement takes effect",
            )
        )
    if gpu.get("remapping_failed"):
        found.append(
            Finding("retirement", f"{where} reports a row remapping failure", "replace the GPU (RMA)")
        )
    if gpu.get("ecc_uncorrectable_volatile"):
        found.append(
            Finding(
                "ecc",
                f"{where} counted {gpu['ecc_uncorrectable_volatile']} uncorrectable ECC errors since the "
                "last reset",
                "drain the host and reset the GPU or reboot; replace it if the errors come back",
            )
        )
    return found


Groups = Sequence[Sequence[int] | None]


def _group_pairs(gpus: Sequence[int], groups: Groups | None) -> list[tuple[int, int]]:
    """Each pair of GPUs one tensor-parallel group spans; a group of None (or no groups) is all the GPUs."""
    pairs: set[tuple[int, int]] = set()
    for group in groups if groups is not None else [None]:
        members = sorted(gpus if group is None else {g for g in group if g in gpus})
        pairs |= {(a, b) for a in members for b in members if a < b}
    return sorted(pairs)


def p2p_findings(health: Mapping[str, Any], groups: Groups | None) -> list[Finding]:
    """A pair of GPUs of one tensor-parallel group whose P2P read is not OK, either way."""
    p2p: Mapping[str, Any] = health.get("p2p") or {}
    status: Mapping[str, str] = p2p.get("status") or {}
    found: list[Finding] = []
    for a, b in _group_pairs(list(p2p.get("gpus") or []), groups):
        cells = [status.get(f"{a},{b}"), status.get(f"{b},{a}")]
        bad = next((c for c in cells if c in P2P_STATES), None)
        if bad is None:
            continue
        bridges = health.get("acs_bridges") or []
        acs = f"; ACS on at PCI bridges {', '.join(bridges)}" if bridges else ""
        iommu = f"; kernel command line {health['iommu']}" if health.get("iommu") else ""
        evidence = (
            f"GPU {a} -> GPU {b} P2P read {bad} ({P2P_STATES[bad]}) in `nvidia-smi topo -p2p r`, and one "
            f"tensor-parallel group spans both{acs}{iommu}"
        )
        found.append(Finding("p2p", evidence, P2P_FIX))
    return found


def tp_warnings(
    health: Mapping[str, Any], topology: Mapping[str, Any] | None, groups: Groups | None
) -> list[str]:
    """A tensor-parallel group whose GPUs reach each other over PCIe only (no NVLink in `nvidia-smi topo -m`,
    no NVSwitch) on a host with ACS on: served, but its all-reduces go through the root complex."""
    bridges = list(health.get("acs_bridges") or [])
    if not bridges or not topology or health.get("nvswitch") or health.get("nvlink5"):
        return []
    links: Mapping[str, Mapping[str, str]] = topology.get("links") or {}
    gpus = [int(name[3:]) for name in topology.get("gpus") or []]
    found: list[str] = []
    for group in groups if groups is not None else [None]:
        pairs = _group_pairs(gpus, [group])
        seen = [(a, b, (links.get(f"GPU{a}") or {}).get(f"GPU{b}")) for a, b in pairs]
        if not seen or any(link is None or link.startswith("NV") for _, _, link in seen):
            continue
        members = sorted({g for a, b, _ in seen for g in (a, b)})
        kinds = ", ".join(sorted({str(link) for _, _, link in seen}))
        which = ", ".join(map(str, members))
        found.append(
            f"GPUs {which} of one tensor-parallel group reach each other over PCIe only "
            f"(`nvidia-smi topo -m`: {kinds}, no NVLink) with ACS on at PCI bridges {', '.join(bridges)}: "
            "vLLM's distributed serving guide advises pipeline parallelism for GPUs without NVLink "
            f"(engine_args: tensor_parallel_size: 1, pipeline_parallel_size: {len(members)}), or turn ACS "
            "off (NVIDIA's NCCL troubleshooting guide)"
        )
    return found


def count_findings(health: Mapping[str, Any], expected: int | None) -> list[Finding]:
    """Fewer GPUs listed by nvidia-smi than the inventory declares: a server that lost one is refused, not
    planned on what is left, naming the GPUs still on the PCI bus that the driver does not list."""
    listed = (health.get("smi") or {}).get("gpus") or []
    if not expected or len(listed) >= expected:
        return []
    seen = {str(g.get("pci_bus_id", "")).lower().split(":", 1)[-1] for g in listed}
    missing = [a for a in health.get("nvidia_pci") or [] if a not in seen]
    where = (
        f"on the PCI bus but not listed: {', '.join(missing)}"
        if missing
        else "the missing GPU is not on the PCI bus either"
    )
    return [
        Finding(
            "gpu count",
            f"nvidia-smi lists {len(listed)} GPUs, the inventory declares {expected}; {where}",
            "a GPU fallen off the bus (Xid 79) needs a reset or a reboot, and a hardware check if it stays "
            "missing; or declare the GPUs this host has (gpus)",
        )
    ]


def gpu_findings(
    health: Mapping[str, Any],
    in_use: Sequence[int] | None,
    groups: Groups | None = None,
    expected: int | None = None,
) -> list[Finding]:
    """Every failed check; `in_use` is the GPU indices a model uses (None: all of them), `groups` the GPUs of
    each tensor-parallel group, whose P2P is judged (None, or a group of None: all of them), `expected` the
    number of GPUs the inventory declares."""
    smi: Mapping[str, Any] = health.get("smi") or {}
    if smi.get("status") != "ok":
        evidence = f"nvidia-smi -q: {smi.get('status', 'not run')}"
        if smi.get("message"):
            evidence += f": {smi['message']}"
        fix = "install and load the driver (driver.branch; a pending reboot with driver.reboot: true)"
        return [Finding("nvidia-smi", evidence, fix), *xid_findings(health.get("xid", []))]
    found: list[Finding] = []
    for gpu in smi.get("gpus", []):
        used = in_use is None or gpu.get("index") in in_use
        found += _gpu_checks(gpu, health, used)
    found += count_findings(health, expected)
    return found + p2p_findings(health, groups) + xid_findings(health.get("xid", []))


def verdict(
    health: Mapping[str, Any] | None,
    in_use: Sequence[int] | None = None,
    groups: Groups | None = None,
    expected: int | None = None,
) -> str:
    """One line for `vllmctl facts`: healthy, or the failed checks."""
    if not health:
        return "-"
    if (health.get("smi") or {}).get("status") == "not-installed":
        return "no nvidia-smi here (a host with GPUs needs its driver: driver.branch)"
    found = gpu_findings(health, in_use, groups, expected)
    if not found:
        count = len((health.get("smi") or {}).get("gpus", []))
        fabric = ", fabric Completed" if fabric_host(health) else ""
        return f"healthy: {count} GPUs{fabric}"
    return "refused: " + "; ".join(f"{f.check}: {f.evidence}" for f in found)


def _facts(args: Args) -> FactRequests:
    return {"gpu_health": (), "gpu_topology": ()}


def _plan(args: Args, facts: Facts) -> Step:
    models = list(args.get("models") or [])
    if not models:
        return noop("gpu_health", "gpus", "no engine on this host")
    health: Facts = facts.get("gpu_health") or {}
    smi = health.get("smi") or {}
    if smi.get("status") in ("not-installed", "no-driver") and not args.get("gpus_declared"):
        # a CPU host: no GPU in the inventory and no driver answering
        return noop(
            "gpu_health", "gpus", f"no NVIDIA GPU here (nvidia-smi: {smi['status']}, none in the inventory)"
        )
    in_use, groups, expected = args.get("in_use"), args.get("tp_groups"), args.get("gpus_expected")
    found = gpu_findings(health, None if in_use is None else list(in_use), groups, expected)
    if not found:
        reason = verdict(health, in_use, groups, expected) + f"; engines of {', '.join(models)} may start"
        warned = (*tp_warnings(health, facts.get("gpu_topology"), groups), *link_warnings(health))
        return Step("gpu_health", "gpus", noop=reason, warnings=warned)
    lines = [f"GPU health gate: engines of {', '.join(models)} not started", *(f.render() for f in found)]
    # the refusal is a step that fails with the evidence: the host stops before its services phase
    refuse = run("sh", "-c", 'printf "%s\\n" "$@" >&2; exit 1', "gpu-health", *lines, sudo=False)
    return Step("gpu_health", "gpus", (refuse,), warnings=(*lines[1:], *link_warnings(health)))


GPU_HEALTH = Operation(
    "gpu_health",
    _facts,
    _plan,
    {"in_use": None, "tp_groups": None, "gpus_declared": True, "gpus_expected": None},
)
