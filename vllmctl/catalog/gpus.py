"""GPU specifications for planning without facts, lenient name lookup, and nvidia-smi → CUDA memory.

`smi_mib` is what `nvidia-smi --query-gpu=memory.total` reports; `cuda_gib` is what CUDA's
cudaMemGetInfo reports as total (what vLLM multiplies by gpu_memory_utilization).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import lru_cache

from vllmctl.errors import InputError

GIB = 1 << 30


@dataclass(frozen=True)
class GpuModel:
    name: str
    smi_name: str
    smi_mib: int
    cuda_gib: float
    bandwidth_gbs: float
    bf16_tflops: float
    interconnect: str  # "nvlink" | "pcie" | "xgmi"
    compute_capability: tuple[int, int]
    aliases: tuple[str, ...] = ()

    @property
    def cuda_bytes(self) -> int:
        return int(self.cuda_gib * GIB)

    @property
    def vendor(self) -> str:
        return "amd" if self.smi_name.startswith("AMD") else "nvidia"

    @property
    def supports_bf16(self) -> bool:
        """Ampere (8.0) and newer; vLLM casts bf16 checkpoints to float16 below it."""
        return self.vendor != "nvidia" or self.compute_capability >= (8, 0)

    @property
    def native_fp8(self) -> bool:
        """FP8 tensor cores (Ada 8.9, Hopper 9.0 and newer); Ampere runs FP8 weights through Marlin."""
        return self.vendor != "nvidia" or self.compute_capability >= (8, 9)

    @property
    def native_fp4(self) -> bool:
        """FP4 tensor cores (Blackwell, 10.0 and newer)."""
        return self.vendor == "nvidia" and self.compute_capability >= (10, 0)


GPUS: tuple[GpuModel, ...] = (
    GpuModel("B200", "NVIDIA B200", 183359, 178.36, 8000, 2250, "nvlink", (10, 0)),
    GpuModel("H200", "NVIDIA H200", 143771, 139.81, 4800, 989, "nvlink", (9, 0), ("h200-141gb", "h200 sxm")),
    # same nvidia-smi total as the SXM card, less for CUDA: 139.72 GiB on h200_nvl nodes (search-index id
    # 69479871691, 2026-09)
    GpuModel("H200-NVL", "NVIDIA H200 NVL", 143771, 139.72, 4800, 835, "nvlink", (9, 0), ("h200 nvl",)),
    # 93.00 in a named H100 NVL's out-of-memory report (ali-vilab/VACE#56, 2025-05); 93.09 in others
    GpuModel("H100-NVL", "NVIDIA H100 NVL", 95830, 93.00, 3900, 835, "nvlink", (9, 0), ("h100-94gb",)),
    GpuModel(
        "H100-80GB",
        "NVIDIA H100 80GB HBM3",
        81559,
        79.19,
        3350,
        989,
        "nvlink",
        (9, 0),
        ("h100", "h100-sxm", "h100-sxm5", "h100-80gb-sxm", "h100 80gb hbm3"),
    ),
    GpuModel("H100-PCIe", "NVIDIA H100 PCIe", 81559, 79.19, 2000, 756, "pcie", (9, 0), ("h100-80gb-pcie",)),
    GpuModel(
        "A100-80GB",
        "NVIDIA A100-SXM4-80GB",
        81920,
        79.15,
        2039,
        312,
        "nvlink",
        (8, 0),
        ("a100-sxm4-80gb", "a100 80gb pcie", "a100-80gb-pcie", "a100-pcie-80gb"),
    ),
    GpuModel(
        "A100-40GB",
        "NVIDIA A100-SXM4-40GB",
        40960,
        39.39,
        1555,
        312,
        "nvlink",
        (8, 0),
        ("a100", "a100-sxm4-40gb", "a100-pcie-40gb"),
    ),
    GpuModel("L40S", "NVIDIA L40S", 46068, 44.42, 864, 362, "pcie", (8, 9)),
    GpuModel("L40", "NVIDIA L40", 46068, 44.42, 864, 181, "pcie", (8, 9)),
    # Current drivers keep more of these cards than older ones did (A10G: 22.20 GiB in 2023 PyTorch
    # reports); the totals are what vLLM's own "Free memory on device (x/TOTAL GiB)" lines print today:
    # A10 22.06 (search-index id 59085660774), L4 22.03 (69519424968, 69659197413; an L4 on 0.28 budgets
    # 9.92 GiB at 0.45), T4 14.56 (59008053197, 56752191968, 70877300827), RTX 3090 23.54 (TheBuccaneer's
    # 0.17.1 logs).
    GpuModel("A10G", "NVIDIA A10G", 23028, 22.06, 600, 125, "pcie", (8, 6)),
    GpuModel("A10", "NVIDIA A10", 23028, 22.06, 600, 125, "pcie", (8, 6)),
    GpuModel("L4", "NVIDIA L4", 23034, 22.03, 300, 121, "pcie", (8, 9)),
    # Linux: 23.64 (RTX 4090 out-of-memory reports on driver 550, search-index id 70153872234; 8x 4090 on
    # torch cu128, 49432745913); 23.99 is what Windows/WSL2 (WDDM) reports
    GpuModel("RTX 4090", "NVIDIA GeForce RTX 4090", 24564, 23.64, 1008, 165, "pcie", (8, 9), ("4090",)),
    GpuModel("RTX 3090", "NVIDIA GeForce RTX 3090", 24576, 23.54, 936, 71, "pcie", (8, 6), ("3090",)),
    GpuModel("T4", "Tesla T4", 15360, 14.56, 320, 65, "pcie", (7, 5), ("nvidia t4",)),
    # Beyond the planning set: totals from typical CUDA out-of-memory reports, accurate to ~0.1 GiB.
    GpuModel("H20", "NVIDIA H20", 97871, 95.0, 4000, 148, "nvlink", (9, 0)),
    GpuModel("GH200", "NVIDIA GH200 480GB", 97871, 94.5, 4000, 989, "nvlink", (9, 0), ("gh200-96gb",)),
    GpuModel("A40", "NVIDIA A40", 46068, 44.35, 696, 150, "pcie", (8, 6)),
    GpuModel("RTX A6000", "NVIDIA RTX A6000", 49140, 47.54, 768, 155, "pcie", (8, 6), ("a6000",)),
    # 47.37 beside vLLM on a named RTX 6000 Ada (search-index id 53811563544, 2026-04)
    GpuModel("RTX 6000 Ada", "NVIDIA RTX 6000 Ada Generation", 49140, 47.37, 960, 364, "pcie", (8, 9)),
    GpuModel("RTX 5090", "NVIDIA GeForce RTX 5090", 32607, 31.36, 1792, 210, "pcie", (12, 0), ("5090",)),
    GpuModel(
        "V100-32GB", "Tesla V100-SXM2-32GB", 32768, 31.75, 900, 125, "nvlink", (7, 0), ("v100-sxm2-32gb",)
    ),
    GpuModel("V100-16GB", "Tesla V100-SXM2-16GB", 16384, 15.78, 900, 125, "nvlink", (7, 0), ("v100",)),
    GpuModel("MI300X", "AMD Instinct MI300X", 196592, 191.98, 5300, 1307, "xgmi", (9, 4), ("mi300",)),
)


def _key(text: str) -> str:
    text = (
        text.lower()
        .replace("nvidia", "")
        .replace("geforce", "")
        .replace("tesla", "")
        .replace("amd instinct", "")
    )
    return re.sub(r"[^a-z0-9]", "", text)


def _index() -> dict[str, GpuModel]:
    index: dict[str, GpuModel] = {}
    for gpu in GPUS:
        for label in (gpu.name, gpu.smi_name, *gpu.aliases):
            index.setdefault(_key(label), gpu)
    return index


_INDEX = _index()


@lru_cache(maxsize=1024)
def find_gpu(name: str) -> GpuModel | None:
    return _INDEX.get(_key(name))


def lookup_gpu(name: str) -> GpuModel:
    """The catalog entry for a user's or nvidia-smi's GPU name; InputError with a did-you-mean otherwise."""
    found = find_gpu(name)
    if found:
        return found
    names = [gpu.name for gpu in GPUS]
    keys = difflib.get_close_matches(_key(name), list(_INDEX), n=6, cutoff=0.5)
    close = list(dict.fromkeys(_INDEX[key].name for key in keys))[:3]
    suggestion = f"did you mean {', '.join(close)}? " if close else ""
    raise InputError(
        f"unknown GPU {name!r}",
        f"{suggestion}known GPUs: {', '.join(names)}; or give --gpu-memory with the total CUDA reports",
    )


def smi_mib_to_cuda_gib(smi_mib: int, name: str | None = None) -> float:
    """CUDA-visible total for an nvidia-smi memory.total; the driver reserves a card-dependent slice."""
    gpu = find_gpu(name) if name else None
    if gpu is None:
        same_size = [g for g in GPUS if g.smi_mib == smi_mib]
        gpu = same_size[0] if same_size else None
    if gpu is not None and gpu.smi_mib == smi_mib:
        return gpu.cuda_gib
    if gpu is not None:
        # the same card with ECC on (an RTX 6000 Ada: 46068 MiB, 44.43 GiB) keeps its own reserve ratio
        return round(gpu.cuda_gib * smi_mib / gpu.smi_mib, 2)
    # Typical datacenter reserve (H100: 81559 MiB → 79.19 GiB) when the card is not in the catalog.
    return round(smi_mib / 1024 * 0.99426, 2)


def custom_gpu(cuda_gib: float, compute_capability: tuple[int, int] = (9, 0)) -> GpuModel:
    """A GPU known only by its CUDA total (estimate --gpu-memory); Hopper-class and PCIe unless told."""
    return GpuModel(
        f"custom-{cuda_gib:g}GiB",
        "custom",
        int(cuda_gib * 1024 / 0.99426),
        cuda_gib,
        0,
        0,
        "pcie",
        compute_capability,
    )


def parse_compute_capability(text: str) -> tuple[int, int]:
    """'8.6' (as nvidia-smi --query-gpu=compute_cap prints it) to (8, 6)."""
    match = re.fullmatch(r"\s*(\d+)\.(\d)\s*", text)
    if not match:
        raise InputError(
            f"cannot read compute capability {text!r}", "give it as nvidia-smi prints it, e.g. 8.6"
        )
    return int(match[1]), int(match[2])
