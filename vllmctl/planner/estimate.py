"""One memory question without an inventory: vLLM's (or SGLang's) startup figures for given flags, the
reasons behind each figure, and every startup check of vLLM's those flags break.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.gpus import GpuModel
from vllmctl.catalog.params import total_params
from vllmctl.planner.guesses import check_guesses, guess_reasons
from vllmctl.planner.model_runner import runner_reason
from vllmctl.planner.rules import Refusal, unchecked_warnings
from vllmctl.planner.rules.base import HostResources
from vllmctl.planner.settings import VllmSettings
from vllmctl.planner.sglang_memory import SglangSettings, sglang_memory
from vllmctl.planner.vllm_base import with_explicit_quantization
from vllmctl.planner.vllm_guard import MEMORY_RULES, Guard
from vllmctl.planner.vllm_memory import vllm_memory
from vllmctl.planner.weights import expert_padding


@dataclass(frozen=True)
class Estimate:
    """The figures (JSON-able), the refusals of flags the user gave (exit 2), of the model on the GPU (exit 1)
    and of memory (exit 1, figures still shown)."""

    figures: dict[str, Any]
    flag_refusals: tuple[Refusal, ...] = ()
    model_refusals: tuple[Refusal, ...] = ()
    memory_refusals: tuple[Refusal, ...] = ()
    warnings: tuple[str, ...] = ()  # rules the flags meet that could not be checked (a host figure unknown)


def vllm_estimate(
    arch: ModelArch, gpu: GpuModel, settings: VllmSettings, given: frozenset[str], host: HostResources
) -> Estimate:
    """vLLM's startup for exactly these settings; `given` names the flags the user set."""
    arch = with_explicit_quantization(arch, settings.quantization)
    check_guesses(arch, gpu, settings, "max_model_len" in given)
    guard = Guard(arch, gpu, max(settings.tp * settings.dp, 1), given, host, chosen=frozenset())
    static = guard.refusals(settings)
    mem = vllm_memory(arch, gpu, settings)
    memory = [r for r in guard.refusals(settings, mem) if r.rule in MEMORY_RULES]
    out = mem.to_json()
    out.update(gpu_memory_utilization=settings.gpu_memory_utilization, max_num_seqs=settings.max_num_seqs,
               max_num_batched_tokens=settings.max_num_batched_tokens, tensor_parallel_size=settings.tp,
               pipeline_parallel_size=settings.pp, kv_cache_dtype=settings.kv_cache_dtype,
               dtype=settings.dtype)  # fmt: skip
    out["quantization"] = arch.quantization.vllm_method if arch.quantization else None
    out["fits"] = mem.fits and not memory
    out["refusals"] = [r.to_json() for r in [*static, *memory]]
    if mem.cudagraph_in_budget:
        graphs = "subtracted (CUDA-graph memory profiling, default since v0.20)"
    elif mem.graph_probe_gib:
        residue = f"{mem.graph_probe_gib:.2f} GiB"
        graphs = (
            "captured after the KV allocation, out of the headroom; the profiler's sample capture "
            f"(v0.18-v0.19) leaves {residue} in the budget, counted in non-torch above"
        )
    else:
        graphs = "not subtracted: captured after the KV allocation, out of the headroom"
    quant = arch.quantization.method if arch.quantization else arch.dtype
    out["reasons"] = [
        f"requested = {mem.total_gib:.2f} GiB x {settings.gpu_memory_utilization} "
        f"= {mem.requested_gib:.2f} GiB",
        f"weights: {total_params(arch) / 1e9:.2f}B parameters as {quant}, TP={settings.tp} PP={settings.pp} "
        f"-> {mem.weights_gib:.2f} GiB per GPU"
        + (
            f" ({mem.allocator_blocks_gib:.2f} GiB of it the CUDA caching allocator's block rounding)"
            if mem.allocator_blocks_gib
            else ""
        ),
        f"activation peak: profile run over {settings.max_num_batched_tokens} tokens and a sampler over "
        f"{min(settings.max_num_seqs, settings.max_num_batched_tokens)} sequences "
        f"-> {mem.activation_peak_gib:.2f} GiB",
        runner_reason(arch, settings),
        f"non-torch: {mem.non_torch_gib:.2f} GiB; NCCL {mem.nccl_gib:.2f} GiB "
        + ("inside the budget (before v0.11, PR #25359)" if mem.nccl_in_budget else "outside the budget"),
        f"CUDA graphs {mem.cudagraph_gib:.2f} GiB {graphs}",
        f"KV: {mem.kv_bytes_per_token:,.0f} bytes/token/GPU, block {mem.block_size}: {mem.num_blocks:,} "
        f"blocks = {mem.kv_cache_tokens:,} tokens, {mem.max_concurrency:.2f}x requests of "
        f"{mem.max_model_len:,}",
    ]
    pad = expert_padding(arch, gpu.compute_capability, settings.version, settings.mxfp4_backend)
    if pad != (1, 1):
        kernels = {(128, 256): "Marlin", (256, 256): "FlashInfer"}.get(pad, "Triton (triton_kernels)")
        out["reasons"].append(
            f"MXFP4 experts padded to {pad} for the {kernels} MoE kernels (backend {settings.mxfp4_backend})"
        )
    if settings.kv_cache_memory_bytes:
        out["reasons"].append("--kv-cache-memory given: vLLM skips the memory budget and uses it as is")
    out["reasons"] += guess_reasons(arch)
    out["guessed"] = dict(arch.guessed)
    users = tuple(r for r in static if set(r.flags) & given)
    model = tuple(r for r in static if not set(r.flags) & given)
    warnings = tuple(unchecked_warnings(settings, host, given))
    out["warnings"] = list(warnings)
    return Estimate(out, users, model, tuple(memory), warnings)


def sglang_estimate(arch: ModelArch, gpu: GpuModel, settings: SglangSettings) -> Estimate:
    mem = sglang_memory(arch, gpu, settings)
    out = mem.to_json()
    reserved = mem.total_gib * (1 - mem.mem_fraction_static)
    out.update(
        activation_peak_gib=None, non_torch_gib=None, cudagraph_gib=None, reserved_gib=round(reserved, 4)
    )
    out["reasons"] = [
        f"mem_fraction_static {mem.mem_fraction_static}: {reserved:.2f} GiB reserved for activations "
        "and graphs",
        f"weights {mem.weights_gib:.2f} GiB per GPU; KV {mem.available_kv_cache_gib:.2f} GiB / cell "
        f"{mem.cell_size_bytes:,} bytes = {mem.kv_cache_tokens:,} tokens",
        *guess_reasons(arch),
    ]
    out["guessed"] = dict(arch.guessed)
    return Estimate(out)
