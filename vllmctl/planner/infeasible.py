"""The PlanError raised when nothing fits: the numbers of the closest configuration and concrete options."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.gpus import GIB, GpuModel
from vllmctl.catalog.quant import QuantConfig
from vllmctl.errors import PlanError
from vllmctl.planner.rules import valid_tp_sizes
from vllmctl.planner.rules.device import fp8_kv_supported
from vllmctl.planner.settings import VllmSettings
from vllmctl.planner.vllm_guard import Guard
from vllmctl.planner.vllm_memory import vllm_memory
from vllmctl.planner.vllm_reasons import Candidate

MAX_SEARCH_TP = 64


def _fits(arch: ModelArch, gpu: GpuModel, settings: VllmSettings) -> bool:
    memory = vllm_memory(arch, gpu, settings)
    return memory.fits and memory.startup_headroom_ok


def gpus_needed(arch: ModelArch, gpu: GpuModel, settings: VllmSettings) -> int | None:
    """The fewest GPUs of this kind (a power of two) whose TP passes vLLM's shape rules and fits."""
    tp = 1
    while tp <= MAX_SEARCH_TP:
        wider = replace(settings, tp=tp, pp=1, dp=1)
        shapes_ok = tp in valid_tp_sizes(arch, gpu, tp, wider)
        if shapes_ok and _fits(arch, gpu, wider):
            return tp
        tp *= 2
    return None


def infeasible_error(
    arch: ModelArch,
    gpu: GpuModel,
    gpu_count: int,
    settings: VllmSettings,
    explicit: dict[str, Any],
    guard: Guard | None = None,
) -> PlanError:
    """The closest configuration's numbers, vLLM's own refusal for it, and concrete options."""
    memory = vllm_memory(arch, gpu, settings)
    where = f"{gpu_count}x {gpu.name} ({gpu.cuda_gib:.2f} GiB each)"
    if memory.available_kv_cache_gib <= 0:
        detail = (
            f"at TP={settings.tp} weights {memory.weights_gib:.2f} GiB + activations "
            f"{memory.activation_peak_gib:.2f} GiB + other {memory.non_torch_gib:.2f} GiB exceed the "
            f"{memory.requested_gib:.2f} GiB budget "
            f"(gpu_memory_utilization {settings.gpu_memory_utilization})"
        )
    elif not memory.fits:
        detail = (
            f"at TP={settings.tp} weights take {memory.weights_gib:.2f} GiB/GPU and "
            f"{memory.available_kv_cache_gib:.2f} GiB is left for KV cache, but one request at max_model_len "
            f"{settings.max_model_len} needs {memory.needed_kv_gib:.2f} GiB"
        )
    else:
        detail = (
            f"at TP={settings.tp} the {1 - settings.gpu_memory_utilization:.2f} share left outside "
            "gpu_memory_utilization cannot hold the CUDA context, NCCL buffers and CUDA graphs"
        )
    options: list[str] = []
    needed = gpus_needed(arch, gpu, settings)
    if needed and needed > gpu_count:
        stages = needed // gpu_count
        across = (
            f", or pipeline_parallel_size {stages} over {stages} nodes" if needed % gpu_count == 0 else ""
        )
        options.append(f"use {needed} GPUs (tensor_parallel_size {needed}{across})")
    elif needed is None:
        options.append(f"no single node of {gpu.name} up to {MAX_SEARCH_TP} GPUs holds it; use a larger GPU")
    if memory.max_model_len_that_fits > 0 and "max_model_len" not in explicit:
        options.append(
            f"set max_model_len <= {memory.max_model_len_that_fits} (or allow_context_shrink: true)"
        )
    if settings.kv_cache_dtype == "auto" and fp8_kv_supported(arch, gpu, settings.version)[0]:
        fp8 = vllm_memory(arch, gpu, replace(settings, kv_cache_dtype="fp8"))
        if fp8.fits:
            options.append(f"kv_cache_dtype fp8 fits max_model_len {settings.max_model_len}")
        elif fp8.max_model_len_that_fits > 0:
            options.append(f"kv_cache_dtype fp8 fits max_model_len up to {fp8.max_model_len_that_fits}")
    if arch.quantization is None:
        for label, quant in (("fp8", QuantConfig("fp8", 8)), ("4-bit AWQ/GPTQ", QuantConfig("awq", 4, 128))):
            variant = vllm_memory(replace(arch, quantization=quant), gpu, settings)
            verdict = "fits" if variant.fits else "still does not fit"
            options.append(f"a {label} variant needs {variant.weights_gib:.2f} GiB/GPU ({verdict})")
    if not memory.startup_headroom_ok and memory.fits:
        options.append("lower gpu_memory_utilization or set enforce_eager: true")
    refused = guard.memory_refusals(settings, memory) if guard is not None else []
    said = f"; vLLM would refuse it ({refused[0].rule}): {refused[0].message}" if refused else ""
    return PlanError(f"{arch.name} does not fit on {where}: {detail}{said}", "options: " + "; ".join(options))


def tight_fit_error(arch: ModelArch, gpu: GpuModel, gpu_count: int, candidate: Candidate) -> PlanError:
    """The best start fits only if the prediction errs on the optimistic side: refuse, saying by how much."""
    s, mem = candidate.settings, candidate.memory
    band = candidate.margin
    options = ["tight_fit: true to accept it as predicted (vLLM may still refuse it)"]
    if band.kv_left_gib < 0 and mem.kv_bytes_per_token:
        spare = mem.available_kv_cache_gib - band.band_gib
        safe_len = min(int(spare * GIB / mem.kv_bytes_per_token) // 1024 * 1024, s.max_model_len)
        if safe_len > 0:
            options.append(f"max_model_len <= {safe_len} keeps one request clear of the band")
    if band.start_left_gib < 0:
        options.append("a lower gpu_memory_utilization")
    options.append("more GPUs, or fp8 KV cache where the GPU runs it")
    return PlanError(
        f"{arch.name} on {gpu_count}x {gpu.name} fits only at the optimistic edge of the prediction "
        f"(TP={s.tp}, max_model_len {s.max_model_len}): {band.describe()}",
        "options: " + "; ".join(options),
    )
