"""vLLM's startup checks as data: every rule the planner consults for each candidate and for every explicit
flag, with vLLM's message, the versions it applies to and the nearest valid choices (docs/planner.md lists
them). `plan`, `estimate`, `apply` and `plan --from-status` all go through `refusals`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.gpus import GpuModel
from vllmctl.planner.rules import adapters, device, memory, model, parallel, quantized, scheduler
from vllmctl.planner.rules.base import HostResources, Refusal, Rule, RuleInput
from vllmctl.planner.settings import VllmSettings
from vllmctl.planner.versions import V1_DEFAULT_SINCE
from vllmctl.planner.vllm_memory import MemoryBreakdown

TP = "tensor_parallel_size"
RULES: tuple[Rule, ...] = (
    Rule("architecture-in-registry", "the model's architecture is in the release's model registry",
         "vllm/model_executor/models/registry.py (_ModelRegistry._raise_for_unsupported)",
         (model.ENGINE_RELEASE_FLAG,),
         model.architecture_in_registry, version_note="the class's first release is in rules/model.py"),
    Rule("attention-heads-divisible-by-tp", "attention heads divide by tensor_parallel_size",
         "vllm/config/model.py:1046-1052 (ModelConfig.verify_with_parallel_config)", (TP,),
         parallel.heads_divisible),
    Rule("kv-heads-divisible-or-replicated", "KV heads divide by TP, or TP by KV heads (replication)",
         "vllm/model_executor/layers/linear.py:900-908 (QKVParallelLinear); models/llama.py:130-136",
         (TP,), parallel.kv_heads_divisible_or_replicated),
    Rule("mlp-shapes-divisible-by-tp", "MLP and expert intermediate sizes divide by TP",
         "vllm/model_executor/layers/linear.py:452; fused_moe/layer.py:1065", (TP, "enable_expert_parallel"),
         parallel.mlp_shapes_divisible),
    Rule("pipeline-stages-within-layers", "pipeline_parallel_size at most the number of layers",
         "vllm/distributed/utils.py (get_pp_indices)", ("pipeline_parallel_size",),
         parallel.pipeline_within_layers),
    Rule("engine-within-node", "tensor_parallel_size x data_parallel_size within the node's GPUs",
         "vllm/config/parallel.py:455-463 (ParallelConfig.__post_init__: Ray for a world beyond the node)",
         (TP, "data_parallel_size"), parallel.engine_within_node),
    Rule("expert-parallel-needs-moe", "enable_expert_parallel only for MoE models",
         "vllm/config/model.py:1001-1016 (ModelConfig._verify_with_expert_parallelism)",
         ("enable_expert_parallel",), parallel.expert_parallel_needs_moe, since=(0, 8, 0)),
    Rule("eplb-even-experts", "EPLB needs expert parallel, an EP group above 1 and experts (+ redundant) "
         "divisible by the EP size", "vllm/config/parallel.py:420-446; fused_moe/layer.py:1018-1021",
         ("enable_eplb", "num_redundant_experts", TP, "data_parallel_size"), parallel.eplb_config,
         since=(0, 9, 0)),
    Rule("quantization-known", "quantization is one of vLLM's methods, and one that can quantize an "
         "unquantized checkpoint while loading", "vllm/config/model.py:960-964; "
         "model_executor/model_loader/weight_utils.py:284-289", ("quantization",), quantized.known_method),
    Rule("quantization-matches-checkpoint", "an explicit quantization equals the checkpoint's method",
         "vllm/config/model.py:950-958 (ModelConfig._verify_quantization)", ("quantization",),
         quantized.matches_checkpoint),
    Rule("quantization-min-capability", "the quantization method's minimum compute capability",
         "vllm/config/__init__.py:257-266 (VllmConfig._get_quantization_config); quantization/fp8.py:114, "
         "awq.py:60, awq_marlin.py:90, mxfp4.py:121, modelopt.py:85", ("quantization",),
         quantized.min_capability),
    Rule("quantization-activation-dtype", "the activation dtypes a quantization supports (mxfp4 bf16, "
         "AWQ/GPTQ without Marlin fp16)", "vllm/config/__init__.py:267-272; mxfp4.py:129-130, awq.py:56-57",
         ("dtype", "quantization"), quantized.activation_dtype),
    Rule("fp8-block-alignment", "FP8 block-quantized shapes stay multiples of the block after TP",
         "vllm/model_executor/layers/quantization/utils/fp8_utils.py:760-782; quantization/fp8.py:504-519",
         (TP, "enable_expert_parallel"), quantized.fp8_block_alignment, since=(0, 7, 0)),
    Rule("quantization-group-alignment", "AWQ/GPTQ inputs per rank stay multiples of the group size",
         "vllm/model_executor/layers/quantization/awq.py:145-149, gptq.py:209-213, awq_marlin.py:136-142",
         (TP,), quantized.group_alignment),
    Rule("bfloat16-needs-compute-8.0", "bfloat16 needs compute capability 8.0",
         "vllm/platforms/cuda.py:497-515 (check_if_supports_dtype), v1/worker/gpu_worker.py:163",
         ("dtype",), device.bfloat16_capability),
    Rule("fp8-kv-cache-backend", "an FP8 KV cache only where the attention backend for the GPU has one",
         "vllm/platforms/cuda.py:358-373; v1/attention/backends/flex_attention.py:703-705; "
         "mla/triton_mla.py:68-70; vllm#26431", ("kv_cache_dtype",), device.fp8_kv_backend,
         version_note="0.11.x refuses below 8.9 except Hopper and Blackwell (before 0.11 the V0 engine takes "
         "over; from 0.12 FlashInfer, now installed, serves 7.5 and newer); MLA models refuse off Hopper and "
         "Blackwell from 0.10 to before 0.21"),
    Rule("fp8-e5m2-kv-with-fp8-checkpoint", "fp8_e5m2 KV cache not with an FP8 checkpoint",
         "vllm/attention/layer.py:165-175", ("kv_cache_dtype",), device.fp8_e5m2_with_fp8_checkpoint),
    Rule("block-size-multiple-of-16", "block_size a multiple of 16 on the flash and Triton backends",
         "vllm/v1/attention/backends/flash_attn.py:85-86, triton_attn.py:176-177", ("block_size",),
         device.block_size_multiple_of_16),
    Rule("max-num-seqs-within-batched-tokens", "max_num_seqs at most max_num_batched_tokens",
         "vllm/config/scheduler.py:245-249 (SchedulerConfig._verify_args)",
         ("max_num_seqs", "max_num_batched_tokens"), scheduler.seqs_within_batched_tokens),
    Rule("batched-tokens-cover-max-model-len", "without chunked prefill (V0 engine), max_num_batched_tokens "
         "at least max_model_len", "vllm/config/scheduler.py:236-244",
         ("max_num_batched_tokens", "max_model_len", "enable_chunked_prefill"),
         scheduler.batched_tokens_cover_context, version_note="V1 (0.8 and later) always chunks prefill"),
    Rule("gpu-memory-utilization-range", "gpu_memory_utilization in (0, 1]",
         "vllm/config/cache.py:168-171 (CacheConfig._verify_args)", ("gpu_memory_utilization",),
         scheduler.utilization_in_range),
    Rule("swap-space-within-host-memory", "swap_space x TP at most 70 % of host memory",
         "vllm/config/cache.py:204-218 (CacheConfig.verify_with_parallel_config)", ("swap_space", TP),
         scheduler.swap_space_within_host_memory, until=(0, 18, 0), needs_host="ram_gib"),
    Rule("max-model-len-within-derived", "max_model_len at most the model's derived length, unless "
         "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1", "vllm/config/model.py:1867-1911 (_get_and_verify_max_len)",
         ("max_model_len",), scheduler.max_model_len_within_derived),
    Rule("lora-rank-supported", "max_lora_rank is one of the ranks vLLM's LoRA kernels support",
         "vllm/config/lora.py:104-109 (LoRAConfig.__post_init__)", ("max_lora_rank",),
         adapters.lora_rank_supported),
    Rule("lora-adapters-within-max-rank", "every declared adapter's rank at most max_lora_rank",
         "vllm/lora/peft_helper.py:113-122 (PEFTHelper.validate_legal)", ("max_lora_rank",),
         adapters.adapters_within_rank),
    Rule("lora-slots", "max_loras at least 1 and max_cpu_loras at least max_loras",
         "vllm/config/lora.py:114-121 (LoRAConfig.__post_init__)", ("max_loras", "max_cpu_loras"),
         adapters.cpu_loras_cover_gpu_loras),
    Rule("speculative-draft-model-method", "a separate draft model (method draft_model) is not run by the V1 "
         "engine", "vllm/config/speculative.py:345-353 (SpeculativeConfig.__post_init__)",
         ("speculative_config",), adapters.draft_model_method_runs, since=V1_DEFAULT_SINCE,
         version_note="the V0 engine ran draft models until it was removed"),
    Rule("speculative-mtp-targets", "method mtp only for models with MTP layers vLLM loads (DeepSeek-V3, "
         "MiMo, GLM-4 MoE, ERNIE 4.5 MoE, Qwen3-Next, LongCat-Flash)",
         "vllm/config/speculative.py:148-200 (hf_config_override), 345-353 (the draft-model fallback)",
         ("speculative_config",), adapters.mtp_target_has_mtp_layers, since=V1_DEFAULT_SINCE),
    Rule("speculative-draft-tp", "the draft's tensor_parallel_size is 1 or the target's",
         "vllm/config/speculative.py:464-490 (_verify_and_get_draft_tp)", ("speculative_config", TP),
         adapters.draft_tp_one_or_target),
    Rule("speculative-eagle3-targets", "EAGLE-3 only for Llama, Qwen, MiniCPM and gpt-oss targets",
         "vllm/config/speculative.py:540-547 (SpeculativeConfig._verify_args)", ("speculative_config",),
         adapters.eagle3_target_supported, since=(0, 10, 0)),
    Rule("speculative-draft-vocab", "the draft (or draft head) has the target's vocabulary",
         "vllm/v1/spec_decode/eagle.py:860-880 (the head's embedding and lm_head are the target's or load in "
         "its shape); V0 spec_decode/spec_decode_worker.py (_vocab_size asserts equal sizes)",
         ("speculative_config",), adapters.draft_vocab_matches),
    Rule("kv-cache-has-memory", "memory left for KV blocks after weights, activations and the rest",
         "vllm/v1/core/kv_cache_utils.py:697-701 (check_enough_kv_cache_memory)",
         ("gpu_memory_utilization", TP), memory.kv_has_memory, needs_memory=True),
    Rule("kv-cache-holds-one-request", "the KV cache holds one request of max_model_len",
         "vllm/v1/core/kv_cache_utils.py:703-724 (check_enough_kv_cache_memory)",
         ("max_model_len", "gpu_memory_utilization", "kv_cache_dtype", TP), memory.kv_holds_one_request,
         needs_memory=True, version_note="V0 (before 0.8): worker/worker.py raise_if_cache_size_invalid"),
    Rule("free-memory-at-start", "free memory at start at least gpu_memory_utilization x total",
         "vllm/v1/worker/gpu_worker.py:181-194 (Worker.init_device)", ("gpu_memory_utilization",),
         memory.free_memory_at_start, since=(0, 9, 1), needs_memory=True),
    Rule("cuda-graphs-fit-headroom", "before v0.20, CUDA graphs captured after the KV cache fit what the "
         "budget leaves", "vllm/v1/worker/gpu_model_runner.py (capture_model; an out-of-memory error)",
         ("gpu_memory_utilization", "enforce_eager", "compilation_config"), memory.graphs_fit_headroom,
         until=(0, 20, 0), needs_memory=True),
)  # fmt: skip


def refusals(
    arch: ModelArch,
    gpu: GpuModel,
    gpu_count: int,
    settings: VllmSettings,
    host: HostResources | None = None,
    memory_breakdown: MemoryBreakdown | None = None,
    nodes: int = 1,
) -> list[Refusal]:
    """Every rule this start breaks (memory rules only when a breakdown is given), TP fixes made concrete."""
    given = RuleInput(arch, gpu, gpu_count, settings, host or HostResources(), memory_breakdown, nodes)
    found = [refusal for rule in RULES if (refusal := rule.run(given)) is not None]
    if any(TP in refusal.flags and refusal.rule in TP_RULES for refusal in found):
        sizes = valid_tp_sizes(arch, gpu, gpu_count, settings)
        listed = ", ".join(map(str, sizes)) or "none"
        found = [
            replace(r, fix=f"{r.fix}; valid tensor_parallel_size on {gpu_count} GPUs: {listed}")
            if r.rule in TP_RULES
            else r
            for r in found
        ]
    return found


HOST_FIGURES = {"ram_gib": "host memory", "gpu_used_gib": "GPU memory other processes hold"}


def unchecked_warnings(settings: VllmSettings, host: HostResources, given: frozenset[str]) -> list[str]:
    """A rule that applies to a flag the user set (its first) but reads a host figure no facts gave."""
    return [
        f"{rule.name} could not be checked: {HOST_FIGURES[rule.needs_host]} unknown (no facts gathered); "
        f"vLLM checks {rule.summary} ({rule.source}); gather facts (plan without --offline, or estimate "
        "--host-memory) to check it"
        for rule in RULES
        if rule.flags[0] in given and rule.unchecked(settings.version, host)
    ]


TP_RULES = frozenset(
    {"attention-heads-divisible-by-tp", "kv-heads-divisible-or-replicated", "mlp-shapes-divisible-by-tp",
     "fp8-block-alignment", "quantization-group-alignment"}
)  # fmt: skip


def valid_tp_sizes(
    arch: ModelArch,
    gpu: GpuModel,
    gpu_count: int,
    settings: VllmSettings,
    expert_parallel: Callable[[int], bool] | None = None,
) -> list[int]:
    """Tensor-parallel sizes that divide the node's GPUs and pass every shape rule (any divisor, not only
    powers of two); `expert_parallel(tp)` is the expert-parallel choice that goes with each size."""
    shape_rules = [rule for rule in RULES if rule.name in TP_RULES]
    sizes = []
    for tp in range(1, gpu_count + 1):
        if gpu_count % tp:
            continue
        ep = expert_parallel(tp) if expert_parallel else settings.expert_parallel
        given = RuleInput(arch, gpu, gpu_count, replace(settings, tp=tp, expert_parallel=ep))
        if all(rule.run(given) is None for rule in shape_rules):
            sizes.append(tp)
    return sizes


__all__ = ["RULES", "HostResources", "Refusal", "Rule", "refusals", "unchecked_warnings", "valid_tp_sizes"]
