"""The VllmSettings a plan's engine_args start vLLM with, read back independently of the planner's search."""

from __future__ import annotations

from typing import Any

from vllmctl.planner import DeploymentPlan, DeploymentRequest
from vllmctl.planner.settings import DEFAULT_SWAP_SPACE_GIB, LoraSettings, SpeculativeSettings, VllmSettings
from vllmctl.planner.tuning import normalize_args
from vllmctl.planner.versions import parse_version


def settings_from_plan(plan: DeploymentPlan, request: DeploymentRequest) -> VllmSettings:
    args: dict[str, Any] = normalize_args(plan.engine_args)
    config = args.get("compilation_config")
    sizes = config.get("cudagraph_capture_sizes") if isinstance(config, dict) else None
    limits = args.get("limit_mm_per_prompt")
    media = sum(limits.values()) if isinstance(limits, dict) else 0
    return VllmSettings(
        version=parse_version(request.engine_version),
        tp=int(args["tensor_parallel_size"]),
        pp=int(args.get("pipeline_parallel_size", 1)),
        gpu_memory_utilization=float(args["gpu_memory_utilization"]),
        max_model_len=int(args["max_model_len"]),
        max_num_seqs=int(args["max_num_seqs"]),
        max_num_batched_tokens=int(args["max_num_batched_tokens"]),
        kv_cache_dtype=str(args["kv_cache_dtype"]),
        enforce_eager=bool(args.get("enforce_eager", False)),
        block_size=args.get("block_size"),
        capture_sizes=tuple(sizes) if sizes else None,
        mm_items=media,
        expert_parallel=bool(args.get("enable_expert_parallel", False)),
        dtype=str(args.get("dtype", "auto")),
        quantization=args.get("quantization"),
        dp=int(args.get("data_parallel_size", 1)),
        enable_eplb=bool(args.get("enable_eplb", False)),
        num_redundant_experts=int(args.get("num_redundant_experts", 0)),
        swap_space_gib=float(args.get("swap_space", DEFAULT_SWAP_SPACE_GIB)),
        enable_chunked_prefill=args.get("enable_chunked_prefill"),
        allow_long_max_model_len=request.allow_long_max_model_len,
        lora=_lora(args, request),
        speculative=_speculative(args, request),
    )


def _lora(args: dict[str, Any], request: DeploymentRequest) -> LoraSettings | None:
    if not args.get("enable_lora") and request.lora is None:
        return None
    cpu = args.get("max_cpu_loras")
    return LoraSettings(
        max_loras=int(args.get("max_loras", 1)),
        max_lora_rank=int(args.get("max_lora_rank", 16)),
        max_cpu_loras=int(cpu) if cpu is not None else None,
        adapter_ranks=request.lora.ranks if request.lora else (),
    )


def _speculative(args: dict[str, Any], request: DeploymentRequest) -> SpeculativeSettings | None:
    config = args.get("speculative_config")
    if not isinstance(config, dict):
        return None
    draft_tp = config.get("draft_tensor_parallel_size")
    return SpeculativeSettings(
        str(config["method"]),
        int(config["num_speculative_tokens"]),
        int(draft_tp) if draft_tp is not None else None,
        request.draft,
    )
