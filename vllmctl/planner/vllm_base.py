"""The starting settings of a vLLM plan: explicit engine_args as given, the profile's values where they are
not, and the choices that keep vLLM's rules (dtype before Ampere, sequences within the token budget).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.gpus import GpuModel
from vllmctl.catalog.quant import ONLINE_QUANTIZATION
from vllmctl.planner.lora import lora_settings, speculative_settings
from vllmctl.planner.rules.device import fp8_kv_supported
from vllmctl.planner.rules.model import ENGINE_RELEASE_FLAG
from vllmctl.planner.rules.quantized import ACT_DTYPES, effective_method
from vllmctl.planner.settings import DEFAULT_SWAP_SPACE_GIB, VllmSettings
from vllmctl.planner.tuning import Tuning
from vllmctl.planner.types import Decision, DeploymentRequest
from vllmctl.planner.versions import (
    V1_DEFAULT_SINCE,
    Version,
    default_gpu_memory_utilization,
    parse_version,
    v0_chunked_prefill,
)

SWAP_SPACE_UNTIL: Version = (0, 18, 0)  # CacheConfig.swap_space is gone in 0.18.0 (0.17.0 has it)


def with_explicit_quantization(arch: ModelArch, flag: Any) -> ModelArch:
    """An unquantized checkpoint that vLLM quantizes while loading (`quantization: fp8`) weighs what the
    quantized weights weigh; a checkpoint with its own quantization_config is read as it is."""
    if arch.quantization is not None or not isinstance(flag, str) or flag not in ONLINE_QUANTIZATION:
        return arch
    return replace(arch, quantization=ONLINE_QUANTIZATION[flag])


def explicit_flags(explicit: dict[str, Any], request: DeploymentRequest) -> frozenset[str]:
    """The flags the user set: engine_args, and max_model_len from the deployment itself."""
    given = set(explicit) | {ENGINE_RELEASE_FLAG}
    if request.max_model_len:
        given.add("max_model_len")
    if "kv_cache_memory_bytes" in given:
        given.add("gpu_memory_utilization")  # vLLM skips the profile: utilization no longer sizes KV
    return frozenset(given)


@dataclass(frozen=True)
class Start:
    """The base settings and the decisions made while resolving them (dtype, batch limits)."""

    settings: VllmSettings
    decisions: tuple[Decision, ...]


def _dtype(arch: ModelArch, gpu: GpuModel, explicit: dict[str, Any], cc: int) -> tuple[str, Decision | None]:
    if "dtype" in explicit:
        return str(explicit["dtype"]), None
    method = effective_method(arch.quantization, explicit.get("quantization"), cc)
    allowed = ACT_DTYPES.get(method or "")
    config = "float16" if arch.dtype in ("float16", "half") else "bfloat16"
    if allowed and config not in allowed and (allowed[0] != "bfloat16" or gpu.supports_bf16):
        why = f"{method} kernels compute in {allowed[0]} only; the checkpoint says {arch.dtype}"
        return allowed[0], Decision("dtype", allowed[0], why)
    if config == "bfloat16" and not gpu.supports_bf16:
        why = (
            f"{gpu.name} (compute {cc / 10:.1f}) has no bfloat16: the {arch.dtype} checkpoint runs in "
            "float16 (same bytes, so the memory plan is unchanged)"
        )
        return "float16", Decision("dtype", "float16", why)
    return "auto", None


def _whole_prompts(version: Version, explicit: dict[str, Any], max_model_len: int) -> bool:
    """The V0 engine without chunked prefill: every prompt must fit one step (batched-tokens rule)."""
    chunked = explicit.get("enable_chunked_prefill")
    return version < V1_DEFAULT_SINCE and not (
        v0_chunked_prefill(max_model_len) if chunked is None else chunked
    )


def base_settings(
    arch: ModelArch, gpu: GpuModel, version: Version, explicit: dict[str, Any], request: DeploymentRequest,
    tuning: Tuning, mm_items: int,
) -> Start:  # fmt: skip
    """Settings before parallelism is chosen: explicit values win; the planner's own never break a rule."""
    major, minor = gpu.compute_capability
    dtype, dtype_decision = _dtype(arch, gpu, explicit, major * 10 + minor)
    decisions = [dtype_decision] if dtype_decision else []
    tokens = int(explicit.get("max_num_batched_tokens", tuning.max_num_batched_tokens))
    seqs = int(explicit.get("max_num_seqs", tuning.max_num_seqs))
    wanted_len = int(explicit.get("max_model_len") or request.max_model_len or arch.max_position_embeddings)
    if (
        "max_num_batched_tokens" not in explicit
        and tokens < wanted_len
        and _whole_prompts(version, explicit, wanted_len)
    ):
        why = "V0 without chunked prefill schedules a whole prompt per step: at least max_model_len"
        decisions.append(Decision("max_num_batched_tokens", wanted_len, why))
        tokens = wanted_len
    if "max_num_seqs" not in explicit and seqs > tokens:
        decisions.append(Decision("max_num_seqs", tokens, f"at most max_num_batched_tokens ({tokens})"))
        seqs = tokens
    elif "max_num_batched_tokens" not in explicit and tokens < seqs:
        why = f"at least max_num_seqs ({seqs}): every scheduled sequence needs a token of the step"
        decisions.append(Decision("max_num_batched_tokens", seqs, why))
        tokens = seqs
    lora, lora_decisions = lora_settings(explicit, request)
    decisions += lora_decisions
    settings = VllmSettings(
        version=version,
        tp=int(explicit.get("tensor_parallel_size", 1)),
        pp=int(explicit.get("pipeline_parallel_size", 1)),
        gpu_memory_utilization=float(
            explicit.get("gpu_memory_utilization", default_gpu_memory_utilization(version))
        ),
        max_model_len=wanted_len,
        max_num_seqs=seqs,
        max_num_batched_tokens=tokens,
        kv_cache_dtype=str(explicit.get("kv_cache_dtype", "auto")),
        enforce_eager=bool(explicit.get("enforce_eager", False)),
        kv_cache_memory_bytes=explicit.get("kv_cache_memory_bytes"),
        block_size=int(explicit["block_size"]) if "block_size" in explicit else None,
        mm_items=mm_items,
        dtype=dtype,
        quantization=str(explicit["quantization"]) if "quantization" in explicit else None,
        dp=int(explicit.get("data_parallel_size", 1)),
        enable_eplb=bool(explicit.get("enable_eplb", False)),
        num_redundant_experts=int(explicit.get("num_redundant_experts", 0)),
        swap_space_gib=float(explicit.get("swap_space", DEFAULT_SWAP_SPACE_GIB)),
        enable_chunked_prefill=explicit.get("enable_chunked_prefill"),
        allow_long_max_model_len=request.allow_long_max_model_len,
        sampler=request.sampler,
        model_runner=request.model_runner,
        lora=lora,
        speculative=speculative_settings(explicit, request),
        mxfp4_backend=mxfp4_backend(request),
    )
    return Start(settings, tuple(decisions))


def mxfp4_backend(request: DeploymentRequest) -> str:
    """Triton where the host's venv of this release has triton_kernels (facts); else the version's default."""
    version = parse_version(request.engine_version)
    return "triton" if any(parse_version(v) == version for v in request.host.triton_kernels) else "auto"


def planned_swap_space(settings: VllmSettings, explicit: dict[str, Any], ram_gib: float | None) -> float:
    """vLLM pins swap_space per GPU of the TP group and refuses more than 70 % of host memory: the planner
    lowers it (V1 recomputes preempted requests instead of swapping them) when the host is known."""
    if "swap_space" in explicit or ram_gib is None or settings.version >= SWAP_SPACE_UNTIL:
        return settings.swap_space_gib
    most = 0.7 * ram_gib / settings.tp
    if most >= DEFAULT_SWAP_SPACE_GIB:
        return DEFAULT_SWAP_SPACE_GIB
    return float(int(most))


def kv_fallbacks(arch: ModelArch, gpu: GpuModel, version: Version, explicit: dict[str, Any]) -> list[str]:
    """KV-cache dtypes to try in order: only the explicit one, else the model's then fp8 where the backend
    vLLM picks for this GPU runs it natively (Ada, Hopper, Blackwell; MLA on Hopper and Blackwell)."""
    if "kv_cache_dtype" in explicit:
        return [str(explicit["kv_cache_dtype"])]
    supported, _ = fp8_kv_supported(arch, gpu, version)
    native = gpu.native_fp8 and (not arch.is_mla or gpu.compute_capability[0] in (9, 10))
    return ["auto", "fp8"] if supported and native else ["auto"]
