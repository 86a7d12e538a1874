"""The GPU health gate, pure: whether a host's GPUs may serve, each failing check with its evidence and fix.

`gpu_findings` judges the `gpu_health` fact; the `gpu_health` operation runs it before any engine starts (its
own playbook phase, before `services`): a healthy host is a no-op, an unhealthy one gets a step that fails
with the evidence and the fix, so that host's engines are never started while the other hosts proceed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vllmctl.ops.base import Args, FactRequests, Facts, Operation, Step, noop, run

# Xids whose immediate action in NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors/
# analyzing-xid-catalog.html) is a GPU reset or a reboot (RESET_GPU, RESTART_BM, the Xid 48 workflow):
# seen since boot, the GPU has not been reset since and must not serve.
RESET_XIDS: Mapping[int, str] = {
    48: "double-bit (uncorrectable) ECC error",
    62: "internal micro-controller halt",
    64: "ECC page retirement or row remapping failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}
# Xid 154 states the recovery the driver now requires; these need a reset or a reboot
XID_154_RESET = ("Reset Required", "Reboot Required", "Drain and Reset")
FABRIC_OK = "Completed"


@dataclass(frozen=True)
class Finding:
    check: str
    evidence: str
    fix: str

    def render(self) -> str:
        return f"{self.check}: {self.evidence} (fix: {self.fix})"


def _gpu_word(gpu: Mapping[str, Any]) -> str:
    return f"GPU {gpu.get('index')} ({gpu.get('pci_bus_id')})"


def _xid_findings(xids: Iterable[Mapping[str, Any]]) -> list[Finding]:
    found: list[Finding] = []
    for xid in xids:
        code, text = int(xid["xid"]), str(xid.get("text", ""))
        now = text.rsplit(" to ", 1)[
            -1
        ]  # "recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
        reset_154 = code == 154 and any(words in now for words in XID_154_RESET)
        if code not in RESET_XIDS and not reset_154:
            continue
        what = RESET_XIDS.get(code, "GPU recovery action changed")
        found.append(
            Finding(
                "xid",
                f"NVRM: Xid {code} ({what}) on PCI {xid.get('pci')} since boot: {text}".rstrip(": "),
                "NVIDIA's Xid catalog asks for a GPU reset or reboot: drain the host, reboot it "
                "(or `nvidia-smi -r -i <gpu>`), and replace the GPU if the Xid comes back",
            )
        )
    return found


def _gpu_checks(gpu: Mapping[str, Any], nvswitch: bool, used: bool) -> list[Finding]:
    where = _gpu_word(gpu)
    found: list[Finding] = []
    state, status = gpu.get("fabric_state"), gpu.get("fabric_status")
    if nvswitch and (state != FABRIC_OK or status not in ("Success", None)):
        found.append(
            Finding(
                "fabric",
                f"{where} fabric state {state or 'unknown'}, status {status or 'unknown'} on an NVSwitch "
                "host (CUDA fails with error 802, system not yet initialized)",
                "install nvidia-fabricmanager at exactly the driver's version, `systemctl enable --now "
                "nvidia-fabricmanager`, and wait for fabric state Completed "
                "(`nvidia-smi -q | grep -A2 Fabric`)",
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


def gpu_findings(health: Mapping[str, Any], in_use: Sequence[int] | None) -> list[Finding]:
    """Every failed check; `in_use` is the GPU indices a model uses (None: all of them)."""
    smi: Mapping[str, Any] = health.get("smi") or {}
    if smi.get("status") != "ok":
        evidence = f"nvidia-smi -q: {smi.get('status', 'not run')}"
        if smi.get("message"):
            evidence += f": {smi['message']}"
        fix = "install and load the driver (driver.branch; a pending reboot with driver.reboot: true)"
        return [Finding("nvidia-smi", evidence, fix), *_xid_findings(health.get("xid", []))]
    nvswitch = bool(health.get("nvswitch"))
    found: list[Finding] = []
    for gpu in smi.get("gpus", []):
        used = in_use is None or gpu.get("index") in in_use
        found += _gpu_checks(gpu, nvswitch, used)
    return found + _xid_findings(health.get("xid", []))


def verdict(health: Mapping[str, Any] | None, in_use: Sequence[int] | None = None) -> str:
    """One line for `vllmctl facts`: healthy, or the failed checks."""
    if not health:
        return "-"
    if (health.get("smi") or {}).get("status") == "not-installed":
        return "no nvidia-smi here (a host with GPUs needs its driver: driver.branch)"
    found = gpu_findings(health, in_use)
    if not found:
        count = len((health.get("smi") or {}).get("gpus", []))
        fabric = ", fabric Completed" if health.get("nvswitch") else ""
        return f"healthy: {count} GPUs{fabric}"
    return "refused: " + "; ".join(f"{f.check}: {f.evidence}" for f in found)


def _facts(args: Args) -> FactRequests:
    return {"gpu_health": ()}


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
    in_use = args.get("in_use")
    found = gpu_findings(health, None if in_use is None else list(in_use))
    if not found:
        return noop(
            "gpu_health", "gpus", verdict(health, in_use) + f"; engines of {', '.join(models)} may start"
        )
    lines = [f"GPU health gate: engines of {', '.join(models)} not started", *(f.render() for f in found)]
    # the refusal is a step that fails with the evidence: the host stops before its services phase
    refuse = run("sh", "-c", 'printf "%s\\n" "$@" >&2; exit 1', "gpu-health", *lines, sudo=False)
    return Step("gpu_health", "gpus", (refuse,), warnings=tuple(lines[1:]))


GPU_HEALTH = Operation("gpu_health", _facts, _plan, {"in_use": None, "gpus_declared": True})
