"""Model architectures and GPU specifications shipped for offline planning."""

from vllmctl.catalog.arch import ModelArch, parse_config
from vllmctl.catalog.gpus import GPUS, GpuModel, lookup_gpu, smi_mib_to_cuda_gib
from vllmctl.catalog.loader import load_arch, resolve_catalog, with_quantization
from vllmctl.catalog.quant import QuantConfig

__all__ = [
    "GPUS",
    "GpuModel",
    "ModelArch",
    "QuantConfig",
    "load_arch",
    "lookup_gpu",
    "parse_config",
    "resolve_catalog",
    "smi_mib_to_cuda_gib",
    "with_quantization",
]
