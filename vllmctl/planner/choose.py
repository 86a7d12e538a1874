"""Engine-flag choice for vLLM: parallelism, batch limits, utilization, context, KV dtype and graphs,
each with a one-line reason; explicit engine_args win and are only checked. No fit → PlanError.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.gpus import GpuModel
from vllmctl.errors import PlanError
from vllmctl.planner.infeasible import infeasible_error
from vllmctl.planner.settings import VllmSettings
from vllmctl.planner.tuning import normalize_args, profile_tuning, valid_tp_sizes
from vllmctl.planner.types import Decision, DeploymentPlan, DeploymentRequest
from vllmctl.planner.versions import default_gpu_memory_utilization, parse_version
from vllmctl.planner.vllm_features import expert_parallel, graph_modes
from vllmctl.planner.vllm_reasons import Candidate, evaluate, finish_plan

MAX_PIPELINE_NODES = 16


def _media_items(arch: ModelArch, request: DeploymentRequest, explicit: dict[str, Any]) -> int:
    if arch.vision is None:
        return 0
    limits = explicit.get("limit_mm_per_prompt")
    if isinstance(limits, dict):
        return sum(int(v) for v in limits.values() if isinstance(v, int) and not isinstance(v, bool))
    return request.images_per_prompt + request.videos_per_prompt


def plan_vllm(arch: ModelArch, gpu: GpuModel, gpu_count: int, request: DeploymentRequest) -> DeploymentPlan:
    version = parse_version(request.engine_version)
    explicit = normalize_args(request.engine_args)
    tuning = profile_tuning(request.profile, version, gpu)
    reasons: list[Decision] = []
    warnings: list[str] = []
    model_max = arch.max_position_embeddings
    wanted_len = int(explicit.get("max_model_len") or request.max_model_len or model_max)
    if wanted_len > model_max:
        if "max_model_len" not in explicit:
            raise PlanError(
                f"{arch.name}: max_model_len {wanted_len} is above the model's {model_max} positions",
                f"set max_model_len to at most {model_max}",
            )
        warnings.append(
            f"max_model_len {wanted_len} exceeds the model's {model_max}; vLLM refuses it unless "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"
        )
    default_util = default_gpu_memory_utilization(version)
    base = VllmSettings(
        version=version,
        tp=1,
        pp=1,
        gpu_memory_utilization=float(explicit.get("gpu_memory_utilization", default_util)),
        max_model_len=wanted_len,
        max_num_seqs=int(explicit.get("max_num_seqs", tuning.max_num_seqs)),
        max_num_batched_tokens=int(explicit.get("max_num_batched_tokens", tuning.max_num_batched_tokens)),
        kv_cache_dtype=str(explicit.get("kv_cache_dtype", "auto")),
        enforce_eager=bool(explicit.get("enforce_eager", False)),
        kv_cache_memory_bytes=explicit.get("kv_cache_memory_bytes"),
        mm_items=_media_items(arch, request, explicit),
    )
    target = request.concurrency or 1.0
    tp_sizes = valid_tp_sizes(arch, gpu_count)
    if not tp_sizes:
        raise PlanError(
            f"{arch.name}: no tensor-parallel size divides both {gpu_count} GPUs and "
            f"{arch.num_heads} attention heads",
            "use a power-of-two GPU count",
        )
    if "tensor_parallel_size" in explicit:
        tp_sizes = [int(explicit["tensor_parallel_size"])]
    elif request.profile == "latency":
        tp_sizes = tp_sizes[::-1]  # widest TP first: one replica, lowest inter-token latency
    pp_options = [int(explicit["pipeline_parallel_size"])] if "pipeline_parallel_size" in explicit else [1]
    kv_options = [base.kv_cache_dtype] if "kv_cache_dtype" in explicit else ["auto", "fp8"]
    modes = graph_modes(request.profile, explicit, base.max_num_seqs)

    def search(kv: str, pps: list[int], tps: list[int], need: float) -> Candidate | None:
        for pp in pps:
            for tp in tps:
                ep = expert_parallel(arch, tp, explicit)
                for eager, sizes in modes:
                    settings = replace(base, tp=tp, pp=pp, kv_cache_dtype=kv, enforce_eager=eager)
                    cand = evaluate(arch, gpu, replace(settings, capture_sizes=sizes, expert_parallel=ep))
                    if cand.ok and cand.memory.max_concurrency >= need:
                        return cand
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
    widest = replace(
        base,
        tp=max(tp_sizes),
        pp=pp_options[0],
        kv_cache_dtype=kv_options[0],
        capture_sizes=modes[0][1],
        expert_parallel=expert_parallel(arch, max(tp_sizes), explicit),
    )
    if chosen is None and request.allow_context_shrink and "max_model_len" not in explicit:
        best = evaluate(arch, gpu, widest).memory.max_model_len_that_fits
        shrunk = (best // 1024) * 1024 if best >= 2048 else best
        if shrunk > 0:
            cand = evaluate(arch, gpu, replace(widest, max_model_len=shrunk))
            if cand.ok:
                chosen = cand
                warnings.append(
                    f"max_model_len shrunk from {wanted_len} to {shrunk}: the largest that fits "
                    f"({cand.memory.available_kv_cache_gib:.2f} GiB KV per GPU at TP={cand.settings.tp})"
                )
    if chosen is None:
        raise infeasible_error(arch, gpu, gpu_count, widest, explicit)
    return finish_plan(arch, gpu, gpu_count, request, explicit, tuning, chosen, target, reasons, warnings)
