"""Simulated GPUs for lab hosts: the `--gpus` spec, a small GPU/driver table and the per-host gpus.json.

Pure: parsing and document building only; the fake nvidia-smi reads what this writes.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from vllmctl.errors import InputError


@dataclass(frozen=True)
class GpuModel:
    key: str  # the inventory spelling, e.g. H100-80GB
    smi_name: str  # what nvidia-smi prints
    memory_mib: int
    compute_cap: str
    nvswitches: int = 0  # NVSwitch device nodes on an 8-GPU HGX baseboard: 6 (A100), 4 (H100/H200)
    # NVLink5 (HGX B200): no NVSwitch nodes; the switches are managed through ConnectX bridge functions whose
    # VPD says SMDL=SW_MNG (NVIDIA/gpu-operator#2781, siderolabs/extensions#893 shows four on an HGX B200)
    sw_mng_bridges: int = 0
    nvlink_links: int = 0  # NVLink links per GPU on an HGX baseboard: 12 (A100), 18 (H100/H200/B200)
    pcie_gen: int = 4  # the GPU's PCIe generation (nvidia-smi's Device Max)
    pcie_width: int = 16


# A small lab table; the full catalog lives in vllmctl/catalog.
GPU_MODELS: dict[str, GpuModel] = {
    m.key.upper(): m
    for m in (
        GpuModel("H100-80GB", "NVIDIA H100 80GB HBM3", 81559, "9.0", 4, nvlink_links=18, pcie_gen=5),
        GpuModel("H200", "NVIDIA H200", 143771, "9.0", 4, nvlink_links=18, pcie_gen=5),
        GpuModel("B200", "NVIDIA B200", 183359, "10.0", sw_mng_bridges=4, nvlink_links=18, pcie_gen=5),
        GpuModel("A100-80GB", "NVIDIA A100-SXM4-80GB", 81920, "8.0", 6, nvlink_links=12),
        GpuModel("A100-40GB", "NVIDIA A100-SXM4-40GB", 40960, "8.0", 6, nvlink_links=12),
        GpuModel("L40S", "NVIDIA L40S", 46068, "8.9"),
        GpuModel("L4", "NVIDIA L4", 23034, "8.9"),
        GpuModel("A10G", "NVIDIA A10G", 23028, "8.6"),
        GpuModel("RTX-4090", "NVIDIA GeForce RTX 4090", 24564, "8.9"),
    )
}


@dataclass(frozen=True)
class DriverRelease:
    branch: str
    version: str
    cuda_version: str


DRIVER_RELEASES: dict[str, DriverRelease] = {
    d.branch: d
    for d in (
        DriverRelease("580", "580.95.05", "13.0"),
        DriverRelease("570", "570.195.03", "12.8"),
        DriverRelease("550", "550.163.01", "12.4"),
        DriverRelease("535", "535.274.02", "12.2"),
    )
}


@dataclass(frozen=True)
class HostGpus:
    """What one lab host carries: `model` is None for a host without GPUs."""

    model: GpuModel | None
    count: int


NO_GPUS = HostGpus(None, 0)
HGX_GPUS = 8
_ITEM = re.compile(r"^(?:(?P<count>\d+)\s*[xX]\s*)?(?P<model>[A-Za-z0-9][A-Za-z0-9-]*)$")


def _known_models() -> str:
    return ", ".join(m.key for m in GPU_MODELS.values())


def parse_gpu_spec(spec: str) -> list[HostGpus]:
    """Parse `8xH100-80GB`, `2xL40S`, `none`, or a comma list cycled over the hosts."""
    items = [part.strip() for part in spec.split(",")]
    if not spec.strip() or any(not item for item in items):
        raise InputError(f"--gpus {spec!r} is empty or has an empty item", "write e.g. 8xH100-80GB or none")
    parsed: list[HostGpus] = []
    for item in items:
        if item.lower() == "none":
            parsed.append(NO_GPUS)
            continue
        match = _ITEM.match(item)
        if not match:
            raise InputError(
                f"--gpus item {item!r} is not COUNTxMODEL", "write e.g. 8xH100-80GB, 2xL40S or none"
            )
        model = GPU_MODELS.get(match["model"].upper())
        if model is None:
            raise InputError(f"unknown GPU model {match['model']!r} in --gpus", f"known: {_known_models()}")
        count = int(match["count"] or 1)
        if not 1 <= count <= 16:
            raise InputError(
                f"--gpus count {count} for {model.key} is out of range", "use 1 to 16 GPUs per host"
            )
        parsed.append(HostGpus(model, count))
    return parsed


def gpus_for_hosts(spec: str, host_count: int) -> list[HostGpus]:
    """One entry per host, cycling over the spec's items (host 1 gets item 1, host 2 item 2, ...)."""
    items = parse_gpu_spec(spec)
    return [items[i % len(items)] for i in range(host_count)]


def driver_release(branch: str) -> DriverRelease:
    release = DRIVER_RELEASES.get(branch)
    if release is None:
        raise InputError(f"unknown driver branch {branch!r}", f"known: {', '.join(DRIVER_RELEASES)}")
    return release


def driver_fields(release: DriverRelease | None) -> dict[str, str] | None:
    if release is None:
        return None
    return {"branch": release.branch, "version": release.version, "cuda_version": release.cuda_version}


def _unregistered(model: GpuModel) -> dict[str, str]:
    state = "In Progress" if model.sw_mng_bridges else "Not Started"
    return {"state": state, "status": "N/A"}


def _pcie(model: GpuModel) -> dict[str, int]:
    """Trained at what the GPU can do; a test narrows `width_current` or lowers `host_gen_max`."""
    gen, width = model.pcie_gen, model.pcie_width
    return {
        "gen_max": gen,
        "gen_current": gen,
        "host_gen_max": gen,
        "width_max": width,
        "width_current": width,
    }


def gpus_document(host: str, gpus: HostGpus, driver: DriverRelease | None) -> dict[str, Any]:
    """The per-host /etc/vllmctl-lab/gpus.json the fake nvidia-smi answers from."""
    devices = []
    if gpus.model is not None:
        for index in range(gpus.count):
            digest = hashlib.sha256(f"{host}/{index}".encode()).hexdigest()
            uuid = f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
            devices.append(
                {
                    "index": index,
                    "name": gpus.model.smi_name,
                    "memory_total_mib": gpus.model.memory_mib,
                    "memory_used_mib": 0,
                    "pci_bus_id": f"00000000:{(0x18 + 0x10 * index) % 0x100:02X}:00.0",
                    "uuid": uuid,
                    "compute_cap": gpus.model.compute_cap,
                    # NVLink links only on an HGX baseboard, as its NVSwitches; PCIe cards have none
                    "nvlink_links": gpus.model.nvlink_links if gpus.count == HGX_GPUS else 0,
                    "pcie": _pcie(gpus.model),
                }
            )
    # an HGX profile: eight SXM GPUs on NVSwitches, whose Fabric section the fake nvidia-smi -q shows
    hgx = gpus.model is not None and gpus.count == HGX_GPUS
    return {
        "product": gpus.model.key if gpus.model else None,
        "driver": driver_fields(driver) if gpus.model else None,
        "nvswitches": gpus.model.nvswitches if hgx and gpus.model else 0,
        "sw_mng_bridges": gpus.model.sw_mng_bridges if hgx and gpus.model else 0,
        # Completed only while a Fabric Manager of the driver's exact version runs (lab/gpu_daemons.py); an
        # NVLink5 GPU waits In Progress for it (the Fabric Manager user guide, siderolabs/extensions#717)
        "fabric": _unregistered(gpus.model) if hgx and gpus.model else None,
        "gpus": devices,
    }
