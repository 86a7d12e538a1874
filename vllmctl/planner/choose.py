"""Engine-flag choice for vLLM: parallelism, batch limits, utilization, context, KV dtype and graphs, each
with a one-line reason. Explicit engine_args win and are checked against vLLM's startup rules; every
candidate the planner searches passes them too. No fit → PlanError; a flag vLLM refuses → InputError.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.gpus import GpuModel
from vllmctl.errors import PlanError
from vllmctl.planner.infeasible import infeasible_error, tight_fit_error
from vllmctl.planner.lora import with_side_memory_reasons
from vllmctl.planner.multimodal import resolved_limits, video_unmodelled
from vllmctl.planner.rules import unchecked_warnings, valid_tp_sizes
from vllmctl.planner.settings import VllmSettings
from vllmctl.planner.tuning import normalize_args, profile_tuning
from vllmctl.planner.types import Decision, DeploymentPlan, DeploymentRequest
from vllmctl.planner.versions import Version, parse_version
from vllmctl.planner.vllm_base import (
    base_settings,
    explicit_flags,
    kv_fallbacks,
    planned_swap_space,
    with_explicit_quantization,
)
from vllmctl.planner.vllm_features import expert_parallel, graph_modes
from vllmctl.planner.vllm_guard import Guard, RefusedFlagsError
from vllmctl.planner.vllm_reasons import Candidate, evaluate, finish_plan

MAX_PIPELINE_NODES = 16


def _media_limits(
    arch: ModelArch, request: DeploymentRequest, explicit: dict[str, Any], version: Version
) -> dict[str, int]:
    """Items per prompt by modality vLLM runs with: limit_mm_per_prompt, a modality it does not name at the
    release's default (999 on V1, not 0), else the request's."""
    if arch.vision is None:
        return {}
    limits = explicit.get("limit_mm_per_prompt")
    if isinstance(limits, dict):
        given = {str(k): int(v) for k, v in limits.items() if isinstance(v, int) and not isinstance(v, bool)}
        return resolved_limits(arch, version, given)
    return {"image": request.images_per_prompt, "video": request.videos_per_prompt}


def _video_unmodelled(arch: ModelArch, why: str) -> PlanError:
    return PlanError(
        f"{why}, so it cannot promise this fits",
        "options: videos_per_prompt: 0 (images only; with limit_mm_per_prompt, give video: 0); or "
        "tight_fit: true to accept the image-based estimate (vLLM may still refuse it)",
    )


def plan_vllm(arch: ModelArch, gpu: GpuModel, gpu_count: int, request: DeploymentRequest) -> DeploymentPlan:
    version = parse_version(request.engine_version)
    explicit = normalize_args(request.engine_args)
    arch = with_explicit_quantization(arch, explicit.get("quantization"))
    limits = _media_limits(arch, request, explicit, version)
    if isinstance(explicit.get("limit_mm_per_prompt"), dict):  # rendered with every modality vLLM runs
        explicit = {**explicit, "limit_mm_per_prompt": limits}
    wanted_len = int(explicit.get("max_model_len") or request.max_model_len or arch.max_position_embeddings)
    unmodelled = video_unmodelled(arch, version, limits, wanted_len)
    if unmodelled and not request.tight_fit:
        raise _video_unmodelled(arch, unmodelled)
    chunked = explicit.get("enable_chunked_prefill")
    chunked_flag = None if chunked is None else bool(chunked)
    tuning = profile_tuning(request.profile, version, gpu, wanted_len, chunked_flag)
    media = sum(limits.values())
    start = base_settings(arch, gpu, version, explicit, request, tuning, media)
    if limits.get("video"):  # sized where the release's video is known (tight_fit takes it unchecked)
        start = replace(start, settings=replace(start.settings, mm_videos=limits["video"]))
    reasons: list[Decision] = list(start.decisions)
    warnings: list[str] = []
    guard = Guard(arch, gpu, gpu_count, explicit_flags(explicit, request), request.host, request.nodes)

    def shaped(settings: VllmSettings) -> VllmSettings:
        """The planner's own choices that follow from TP: expert parallel and swap space."""
        ep = expert_parallel(arch, settings.tp, explicit)
        swap = planned_swap_space(settings, explicit, request.host.ram_gib)
        return replace(settings, expert_parallel=ep, swap_space_gib=swap)

    base = shaped(start.settings)
    guard.check_flags(base)
    if "tensor_parallel_size" in explicit:
        tp_sizes = [base.tp]
    else:
        tp_sizes = valid_tp_sizes(arch, gpu, gpu_count, base, lambda tp: expert_parallel(arch, tp, explicit))
        tp_sizes = [tp for tp in tp_sizes if guard.static_ok(shaped(replace(base, tp=tp)))]
        if not tp_sizes:
            raise _no_valid_tp(guard, base, gpu_count, shaped)
        if request.profile == "latency":
            tp_sizes = tp_sizes[::-1]  # widest TP first: one replica, lowest inter-token latency
    pp_options = [base.pp]
    kv_options = kv_fallbacks(arch, gpu, version, explicit)
    modes = graph_modes(request.profile, explicit, base.max_num_seqs)
    target = request.concurrency or 1.0

    tight: list[Candidate] = []  # fits only at the optimistic edge of the prediction's error band

    def search(kv: str, pps: list[int], tps: list[int], need: float) -> Candidate | None:
        for pp in pps:
            for tp in tps:
                for eager, sizes in modes:
                    settings = shaped(replace(base, tp=tp, pp=pp, kv_cache_dtype=kv, enforce_eager=eager))
                    cand = evaluate(arch, gpu, replace(settings, capture_sizes=sizes), guard)
                    if cand.ok and cand.memory.max_concurrency >= need:
                        if cand.margin.safe or request.tight_fit:
                            return cand
                        tight.append(cand)
        return None

    chosen = search(kv_options[0], pp_options, tp_sizes, target) or search(
        kv_options[0], pp_options, tp_sizes, 1.0
    )
    if chosen is None and len(kv_options) > 1:
        chosen = search("fp8", pp_options, tp_sizes, 1.0)
    if chosen is None and request.nodes > 1 and "pipeline_parallel_size" not in explicit:
        multi = list(range(2, min(request.nodes, arch.num_layers, MAX_PIPELINE_NODES) + 1))
        chosen = search(kv_options[0], multi, tp_sizes[-1:], 1.0)
        if chosen is None and len(kv_options) > 1:
            chosen = search("fp8", multi, tp_sizes[-1:], 1.0)
    widest = shaped(replace(base, tp=max(tp_sizes), kv_cache_dtype=kv_options[0], capture_sizes=modes[0][1]))
    if chosen is None and request.allow_context_shrink and "max_model_len" not in guard.explicit:
        best = evaluate(arch, gpu, widest, guard).memory.max_model_len_that_fits
        shrunk = (best // 1024) * 1024 if best >= 2048 else best
        if shrunk > 0:
            cand = evaluate(arch, gpu, replace(widest, max_model_len=shrunk), guard)
            if cand.ok:
                chosen = cand
                warnings.append(
                    f"max_model_len shrunk from {base.max_model_len} to {shrunk}: the largest that fits "
                    f"({cand.memory.available_kv_cache_gib:.2f} GiB KV per GPU at TP={cand.settings.tp})"
                )
    if chosen is None and tight:
        raise tight_fit_error(arch, gpu, gpu_count, tight[0])
    if chosen is not None and not chosen.margin.safe:
        warnings.append(f"tight fit accepted (tight_fit: true): {chosen.margin.describe()}")
    if chosen is None:
        raise infeasible_error(arch, gpu, gpu_count, widest, explicit, guard)
    warnings += unchecked_warnings(chosen.settings, request.host, guard.explicit)
    plan = finish_plan(
        arch, gpu, gpu_count, request, explicit, tuning, chosen, target, reasons, warnings, guard
    )
    return with_side_memory_reasons(plan, arch, chosen.settings)


def _no_valid_tp(guard: Guard, base: VllmSettings, gpu_count: int, shaped: Any) -> PlanError:
    """Every TP the shapes allow breaks another rule: the user's flags, or the model on this GPU."""
    sizes = valid_tp_sizes(guard.arch, guard.gpu, gpu_count, base)
    found = {r.rule: r for tp in sizes for r in guard.refusals(shaped(replace(base, tp=tp)))}
    users = [r for r in found.values() if set(r.flags) & guard.explicit]
    if users:
        raise RefusedFlagsError(guard.arch.name, users)
    detail = "; ".join(f"{r.rule}: {r.message}" for r in found.values())
    return PlanError(
        f"{guard.arch.name}: no tensor_parallel_size on {gpu_count}x {guard.gpu.name} passes vLLM's checks "
        f"({detail or 'no size divides the GPUs and the model'})",
        "; ".join(r.fix for r in found.values()) or "use a GPU count the model's heads divide",
    )
