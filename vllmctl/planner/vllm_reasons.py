"""Turns the chosen vLLM settings into engine_args, replicas, a reason per flag and warnings."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.gpus import GIB, GpuModel
from vllmctl.planner.guesses import check_guesses
from vllmctl.planner.margin import Margin, margin
from vllmctl.planner.presets import sampling_plan
from vllmctl.planner.rules import Refusal
from vllmctl.planner.settings import DEFAULT_SWAP_SPACE_GIB, VllmSettings
from vllmctl.planner.tuning import Tuning
from vllmctl.planner.types import Decision, DeploymentPlan, DeploymentRequest, Replica
from vllmctl.planner.versions import CUDAGRAPH_PROFILING_SINCE, NCCL_OUTSIDE_BUDGET_SINCE
from vllmctl.planner.vllm_features import expert_decision, graph_decisions, multimodal_decision
from vllmctl.planner.vllm_guard import Guard
from vllmctl.planner.vllm_memory import (
    CUDA_CONTEXT_GIB,
    MemoryBreakdown,
    cudagraph_bytes,
    nccl_bytes,
    vllm_memory,
)

MEMORY_SAVER_CEILING = 0.80


@dataclass(frozen=True)
class Candidate:
    settings: VllmSettings
    memory: MemoryBreakdown
    refusals: tuple[Refusal, ...] = ()

    gpu_used_gib: float = 0.0

    @property
    def ok(self) -> bool:
        return self.memory.fits and self.memory.startup_headroom_ok and not self.refusals

    @property
    def margin(self) -> Margin:
        return margin(self.memory, self.gpu_used_gib)


def evaluate(arch: ModelArch, gpu: GpuModel, settings: VllmSettings, guard: Guard | None = None) -> Candidate:
    """The predicted startup for these settings and, given a guard, every rule of vLLM's it would break."""
    memory = vllm_memory(arch, gpu, settings)
    found = tuple(guard.refusals(settings, memory)) if guard is not None else ()
    used = (guard.host.gpu_used_gib or 0.0) if guard is not None else 0.0
    return Candidate(settings, memory, found, used)


def _outside_budget_gib(settings: VllmSettings, layers: int, gpu: GpuModel) -> float:
    outside = CUDA_CONTEXT_GIB * GIB
    if settings.version >= NCCL_OUTSIDE_BUDGET_SINCE:
        outside += nccl_bytes(settings.tp, settings.pp, gpu.interconnect)
    if settings.version < CUDAGRAPH_PROFILING_SINCE:
        outside += cudagraph_bytes(layers, settings)
    return outside / GIB


def finish_plan(
    arch: ModelArch,
    gpu: GpuModel,
    gpu_count: int,
    request: DeploymentRequest,
    explicit: dict[str, Any],
    tuning: Tuning,
    chosen: Candidate,
    target: float,
    reasons: list[Decision],
    warnings: list[str],
    guard: Guard,
) -> DeploymentPlan:
    s, mem = chosen.settings, chosen.memory
    check_guesses(arch, gpu, s, bool(request.max_model_len) or "max_model_len" in explicit)
    settled = {d.flag: d for d in reasons}  # decisions made while resolving the base settings
    reasons = [d for d in reasons if d.flag not in ("max_num_seqs", "max_num_batched_tokens")]
    util = s.gpu_memory_utilization
    layers = math.ceil(arch.num_layers / s.pp)
    if "gpu_memory_utilization" not in explicit:
        outside = _outside_budget_gib(s, layers, gpu)
        if request.profile == "throughput":
            raised = math.floor((1 - (outside + 1.0) / gpu.cuda_gib) * 100) / 100
            util = max(util, min(0.95, raised))
            why = (
                f"throughput: {util:.2f} of {gpu.cuda_gib:.2f} GiB leaves "
                f"{gpu.cuda_gib * (1 - util):.2f} GiB "
                f"for the CUDA context, NCCL and graphs ({outside:.2f} GiB) plus 1 GiB margin"
            )
        elif request.profile == "memory-saver":
            non_kv = mem.requested_gib - mem.available_kv_cache_gib
            needed = math.ceil(((non_kv + 2 * mem.needed_kv_gib) / gpu.cuda_gib + 0.02) * 100) / 100
            util = min(util, needed, MEMORY_SAVER_CEILING)
            why = (
                f"memory-saver: the lower of {MEMORY_SAVER_CEILING} (the guides' ceiling, headroom for "
                f"fragmentation and neighbours) and {non_kv:.2f} GiB non-KV + 2 full-length requests "
                f"({2 * mem.needed_kv_gib:.2f} GiB KV) + 2% of {gpu.cuda_gib:.2f} GiB"
            )
            lowered = evaluate(arch, gpu, replace(s, gpu_memory_utilization=util), guard)
            if util < needed and not lowered.ok:
                util = min(s.gpu_memory_utilization, needed)
                why = f"{why}; {MEMORY_SAVER_CEILING} cannot hold one request, so {util}"
        else:
            version = ".".join(map(str, s.version))
            why = f"vLLM {version} default; leaves {outside:.2f} GiB needed outside the budget"
        if util != s.gpu_memory_utilization:
            refined = evaluate(arch, gpu, replace(s, gpu_memory_utilization=util), guard)
            if refined.ok:
                s, mem = refined.settings, refined.memory
            else:
                why = f"kept at {s.gpu_memory_utilization}: {util} would not fit ({why})"
                util = s.gpu_memory_utilization
        reasons.append(Decision("gpu_memory_utilization", util, why))
    else:
        reasons.append(
            Decision("gpu_memory_utilization", util, f"explicit; {mem.requested_gib:.2f} GiB requested")
        )
    replicas_count = gpu_count // (s.tp * s.dp) if s.pp == 1 else 1
    tp_why = (
        f"TP={s.tp}: weights {mem.weights_gib:.2f} GiB/GPU leave {mem.available_kv_cache_gib:.2f} GiB KV = "
        f"{mem.kv_cache_tokens:,} tokens, {mem.max_concurrency:.2f}x requests of {s.max_model_len:,}"
    )
    if "tensor_parallel_size" in explicit:
        tp_why = f"explicit; {tp_why}"
    elif s.tp > 1 and request.profile != "latency":
        tp_why += f"; TP={s.tp // 2} could not hold {target:g} request(s) at that length"
    elif request.profile == "latency":
        tp_why += "; latency profile spreads one replica over the widest TP to cut inter-token latency"
    reasons.append(Decision("tensor_parallel_size", s.tp, tp_why))
    if s.pp > 1:
        reasons.append(
            Decision(
                "pipeline_parallel_size",
                s.pp,
                "explicit"
                if "pipeline_parallel_size" in explicit
                else f"one node of {gpu_count} GPUs cannot hold the model; {s.pp} stages across nodes",
            )
        )
    per_replica = s.tp * s.dp
    dp_note = f" x DP {s.dp} (data_parallel_size inside each engine)" if s.dp > 1 else ""
    reasons.append(
        Decision(
            "data_parallel_replicas",
            replicas_count,
            f"{gpu_count} GPUs / (TP {s.tp}{dp_note}) = {replicas_count} independent replicas "
            "(replicas scale throughput better than wider TP when the model fits)"
            if per_replica <= gpu_count
            else f"one engine of TP {s.tp} x DP {s.dp}",
        )
    )
    reasons.append(
        Decision(
            "max_model_len",
            s.max_model_len,
            f"{'explicit' if 'max_model_len' in explicit else 'model/deployment limit'}; "
            f"one request needs {mem.needed_kv_gib:.2f} GiB KV of {mem.available_kv_cache_gib:.2f}",
        )
    )
    seqs_why = "explicit" if "max_num_seqs" in explicit else tuning.why_seqs
    if "max_num_seqs" in settled:
        seqs_why = f"{tuning.why_seqs}, but {settled['max_num_seqs'].reason}"
    reasons.append(Decision("max_num_seqs", s.max_num_seqs, seqs_why))
    batch_why = (
        "explicit"
        if "max_num_batched_tokens" in explicit
        else f"{tuning.why_batch}; activation peak {mem.activation_peak_gib:.2f} GiB"
    )
    if "max_num_batched_tokens" in settled:
        batch_why = settled["max_num_batched_tokens"].reason
        batch_why += f"; activation peak {mem.activation_peak_gib:.2f} GiB"
    reasons.append(Decision("max_num_batched_tokens", s.max_num_batched_tokens, batch_why))
    if s.swap_space_gib != DEFAULT_SWAP_SPACE_GIB and "swap_space" not in explicit:
        reasons.append(
            Decision(
                "swap_space",
                s.swap_space_gib,
                f"vLLM pins swap_space per GPU and refuses more than 70 % of host memory: {s.tp} x "
                f"{DEFAULT_SWAP_SPACE_GIB:g} GiB would exceed 70 % of the host's "
                f"{request.host.ram_gib or 0:.0f} GiB (V1 recomputes preempted requests instead)",
            )
        )
    reasons.append(
        Decision(
            "enable_prefix_caching",
            explicit.get("enable_prefix_caching", True),
            _explicit(
                "enable_prefix_caching",
                explicit,
                "reuses KV of shared prompt prefixes (system prompts, chat history) at no memory cost"
                + ("; workload shared_prefix" if request.workload == "shared_prefix" else ""),
            ),
        )
    )
    reasons.append(
        Decision(
            "enable_chunked_prefill",
            explicit.get("enable_chunked_prefill", True),
            _explicit(
                "enable_chunked_prefill",
                explicit,
                "splits long prompts so decodes keep running; bounded by max_num_batched_tokens",
            ),
        )
    )
    reasons += graph_decisions(arch, request.profile, explicit, s, mem)
    experts = expert_decision(arch, s, explicit)
    if experts:
        reasons.append(experts)
    media, media_notes = multimodal_decision(arch, request, s, explicit)
    if media:
        reasons.append(media)
    warnings += media_notes
    if s.kv_cache_dtype != "auto" and "kv_cache_dtype" not in explicit:
        reasons.append(
            Decision(
                "kv_cache_dtype",
                s.kv_cache_dtype,
                f"fp8 KV halves bytes per token; the only way "
                f"to fit max_model_len {s.max_model_len:,} on this hardware",
            )
        )
        warnings.append("fp8 KV cache may cost a little accuracy")
    else:
        reasons.append(
            Decision(
                "kv_cache_dtype",
                s.kv_cache_dtype,
                "explicit"
                if "kv_cache_dtype" in explicit
                else f"model dtype; {mem.kv_bytes_per_token:,.0f} bytes/token/GPU fit",
            )
        )
    sampling = sampling_plan("vllm", request.use_case, request.sampling, explicit)
    reasons += sampling.decisions
    warnings += sampling.warnings
    warnings += _check_explicit(explicit, mem, request.profile, target)
    if (
        request.profile in ("throughput", "memory-saver")
        and not request.max_model_len
        and ("max_model_len" not in explicit)
    ):
        warnings.append(
            f"{request.profile}: max_model_len is not set, so the model's full {s.max_model_len:,} tokens "
            "are planned; set the smallest context your requests need, every token of it costs KV cache"
        )
    args: dict[str, Any] = {d.flag: d.value for d in reasons if d.flag != "data_parallel_replicas"}
    if s.pp == 1:
        args.pop("pipeline_parallel_size", None)
    args.update(explicit)
    replicas = _replicas(replicas_count, s.tp * s.dp, s.pp, request.base_port)
    return DeploymentPlan(
        arch.name,
        "vllm",
        request.engine_version,
        gpu.name,
        gpu_count,
        request.profile,
        args,
        replicas,
        mem,
        tuple(reasons),
        tuple(warnings),
    )


def _explicit(flag: str, explicit: dict[str, Any], why: str) -> str:
    return "explicit" if flag in explicit else why


def _check_explicit(explicit: dict[str, Any], mem: MemoryBreakdown, profile: str, target: float) -> list[str]:
    notes = []
    if mem.max_concurrency < target:
        notes.append(
            f"only {mem.max_concurrency:.2f}x full-length requests fit (wanted {target:g}); expect preemption"
        )
    if not mem.startup_headroom_ok:
        notes.append("gpu_memory_utilization leaves too little for the CUDA context, NCCL and graphs")
    if profile == "latency" and int(explicit.get("max_num_batched_tokens", 0)) > 8192:
        notes.append(
            "max_num_batched_tokens above 8192 lengthens decode steps; latency profile prefers ~2048"
        )
    if float(explicit.get("gpu_memory_utilization", 0)) > 0.95:
        notes.append("gpu_memory_utilization above 0.95 risks out-of-memory during CUDA graph capture")
    return notes


def _replicas(count: int, tp: int, pp: int, base_port: int) -> tuple[Replica, ...]:
    if pp > 1:
        return (Replica(0, tuple(range(tp)), base_port, 0, tuple(range(pp))),)
    return tuple(Replica(i, tuple(range(i * tp, (i + 1) * tp)), base_port + i, i) for i in range(count))
