"""SGLang startup memory, per GPU: mem_fraction_static of the memory free before loading holds weights and
KV; tokens = rest // cell_size (MHA: 2·kv_heads·head_dim·layers·bytes; MLA: (kv_lora + rope)·layers·bytes).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.gpus import GIB, GpuModel
from vllmctl.catalog.params import kv_heads_per_rank, pipeline_stages
from vllmctl.planner.versions import Version, sglang_gpu_defaults, sglang_mem_fraction_static
from vllmctl.planner.vllm_memory import CUDA_CONTEXT_GIB, nccl_bytes
from vllmctl.planner.weights import stage_weight_bytes


@dataclass(frozen=True)
class SglangSettings:
    version: Version
    tp: int
    pp: int
    context_length: int
    mem_fraction_static: float | None = None
    chunked_prefill_size: int | None = None
    cuda_graph_max_bs: int | None = None
    max_running_requests: int | None = None
    kv_cache_dtype: str = "auto"
    expert_parallel: bool = False  # ep_size = tp_size: whole experts per GPU


@dataclass(frozen=True)
class SglangMemory:
    engine: str
    total_gib: float
    mem_fraction_static: float
    chunked_prefill_size: int
    cuda_graph_max_bs: int
    weights_gib: float
    available_kv_cache_gib: float
    cell_size_bytes: int
    kv_cache_tokens: int
    max_running_requests: int
    context_length: int
    max_concurrency: float
    fits: bool
    max_model_len_that_fits: int

    def to_json(self) -> dict[str, Any]:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def cell_size(arch: ModelArch, tp: int, layers: int, kv_cache_dtype: str) -> int:
    dtype_bytes = 1 if kv_cache_dtype.startswith("fp8") else arch.dtype_bytes
    if arch.is_mla:
        return (arch.kv_lora_rank + arch.qk_rope_head_dim) * layers * dtype_bytes
    return 2 * kv_heads_per_rank(arch, tp) * arch.head_dim * layers * dtype_bytes


@lru_cache(maxsize=16384)
def sglang_memory(arch: ModelArch, gpu: GpuModel, settings: SglangSettings) -> SglangMemory:
    total_mib = float(gpu.smi_mib)  # SGLang reads nvidia-smi memory.total, not the CUDA total
    chunked, graph_bs = sglang_gpu_defaults(total_mib, settings.tp)
    chunked = settings.chunked_prefill_size or chunked
    graph_bs = settings.cuda_graph_max_bs or graph_bs
    fraction = settings.mem_fraction_static or sglang_mem_fraction_static(
        settings.version, total_mib, settings.tp, settings.pp, chunked, graph_bs
    )
    # Free memory measured before loading: total minus the CUDA context and the NCCL communicators.
    pre_load = (
        gpu.cuda_bytes - CUDA_CONTEXT_GIB * GIB - nccl_bytes(settings.tp, settings.pp, gpu.interconnect)
    )
    stages = pipeline_stages(arch.num_layers, settings.pp)
    weights_per_stage = stage_weight_bytes(arch, settings.tp, settings.pp, settings.expert_parallel)
    tokens, rest, weights, cell = -1, 0.0, 0.0, 1
    for (first, last), stage_weights in zip(stages, weights_per_stage, strict=True):
        stage_rest = pre_load * fraction - stage_weights
        stage_cell = cell_size(arch, settings.tp, last - first, settings.kv_cache_dtype)
        stage_tokens = max(int(stage_rest) // stage_cell, 0)
        if tokens < 0 or stage_tokens < tokens:
            tokens, rest, weights, cell = stage_tokens, stage_rest, stage_weights, stage_cell
    default_requests = min(max(int(tokens / settings.context_length * 512), 2048), 4096)
    requests = settings.max_running_requests or default_requests
    return SglangMemory(
        engine="sglang",
        total_gib=gpu.cuda_gib,
        mem_fraction_static=fraction,
        chunked_prefill_size=chunked,
        cuda_graph_max_bs=graph_bs,
        weights_gib=weights / GIB,
        available_kv_cache_gib=rest / GIB,
        cell_size_bytes=cell,
        kv_cache_tokens=tokens,
        max_running_requests=requests,
        context_length=settings.context_length,
        max_concurrency=round(tokens / settings.context_length, 2),
        fits=tokens >= settings.context_length,
        max_model_len_that_fits=min(tokens, settings.context_length),
    )
