"""vLLM decisions from the tuning guides: CUDA-graph capture sizes before enforce_eager, expert parallel for
MoE models, and multimodal limits for vision-language models; each with its memory reason.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.gpus import GIB
from vllmctl.planner.multimodal import default_limit, encoder_memory, resolved_limits
from vllmctl.planner.settings import VllmSettings
from vllmctl.planner.tuning import normalize_args
from vllmctl.planner.types import Decision, DeploymentRequest
from vllmctl.planner.versions import cudagraph_capture_sizes
from vllmctl.planner.vllm_memory import MemoryBreakdown, cudagraph_bytes
from vllmctl.planner.weights import stage_weight_bytes

REDUCED_CAPTURE_SIZES = (1, 2, 4, 8, 16, 32)
GraphMode = tuple[bool, tuple[int, ...] | None]  # (enforce_eager, cudagraph_capture_sizes or the default)


def explicit_capture_sizes(explicit: dict[str, Any]) -> tuple[int, ...] | None:
    config = explicit.get("compilation_config")
    sizes = config.get("cudagraph_capture_sizes") if isinstance(config, dict) else None
    if isinstance(sizes, list) and sizes and all(isinstance(s, int) for s in sizes):
        return tuple(sorted(sizes))
    return None


def reduced_sizes(max_num_seqs: int) -> tuple[int, ...]:
    return tuple(s for s in REDUCED_CAPTURE_SIZES if s <= max(max_num_seqs, 1))


def graph_modes(profile: str, explicit: dict[str, Any], max_num_seqs: int) -> list[GraphMode]:
    """The order graphs are tried in: all default sizes, fewer sizes, then eager (explicit flags fix it)."""
    if "enforce_eager" in explicit:
        return [(bool(explicit["enforce_eager"]), explicit_capture_sizes(explicit))]
    if "compilation_config" in explicit:  # ours would be overwritten by it; keep its sizes or the default
        return [(False, explicit_capture_sizes(explicit)), (True, None)]
    fewer = reduced_sizes(max_num_seqs)
    if profile == "memory-saver":
        return [(False, fewer), (True, None)]
    return [(False, None), (False, fewer), (True, None)]


def expert_parallel(arch: ModelArch, tp: int, explicit: dict[str, Any]) -> bool:
    if "enable_expert_parallel" in explicit:
        return bool(explicit["enable_expert_parallel"])
    return arch.is_moe and tp > 1 and arch.num_experts > tp


def _graph_gib(layers: int, settings: VllmSettings, sizes: tuple[int, ...] | None) -> float:
    return cudagraph_bytes(layers, replace(settings, enforce_eager=False, capture_sizes=sizes)) / GIB


def graph_decisions(
    arch: ModelArch, profile: str, explicit: dict[str, Any], s: VllmSettings, mem: MemoryBreakdown
) -> list[Decision]:
    layers = math.ceil(arch.num_layers / s.pp)
    default = cudagraph_capture_sizes(s.max_num_seqs, s.max_num_batched_tokens)
    fewer = reduced_sizes(s.max_num_seqs)
    full_gib, fewer_gib = _graph_gib(layers, s, None), _graph_gib(layers, s, fewer)
    full = f"graphs for all {len(default)} default batch sizes need {full_gib:.2f} GiB"
    decisions: list[Decision] = []
    if "compilation_config" not in explicit and s.capture_sizes and not s.enforce_eager:
        why = (
            f"memory-saver: capture {len(fewer)} sizes up to {fewer[-1]} ({fewer_gib:.2f} GiB) instead of "
            f"{len(default)} ({full_gib:.2f} GiB)"
            if profile == "memory-saver"
            else f"{full} and do not fit; {len(fewer)} sizes up to {fewer[-1]} need {fewer_gib:.2f} GiB"
        )
        why += f"; decode batches above {fewer[-1]} run without graphs"
        decisions.append(Decision("compilation_config", {"cudagraph_capture_sizes": list(fewer)}, why))
    if "enforce_eager" in explicit:
        eager_why = "explicit"
    elif s.enforce_eager:
        eager_why = (
            f"{full} and even {len(fewer)} sizes ({fewer_gib:.2f} GiB) do not fit the memory left; "
            "eager mode trades some decode speed for starting at all"
        )
    elif s.capture_sizes:
        eager_why = f"CUDA graphs for {len(s.capture_sizes)} sizes fit ({mem.cudagraph_gib:.2f} GiB)"
    else:
        eager_why = f"CUDA graphs fit ({mem.cudagraph_gib:.2f} GiB); they speed up decode"
    decisions.append(Decision("enforce_eager", s.enforce_eager, eager_why))
    return decisions


def expert_decision(arch: ModelArch, s: VllmSettings, explicit: dict[str, Any]) -> Decision | None:
    if not arch.is_moe:
        return None
    flag = "enable_expert_parallel"
    sharded = max(stage_weight_bytes(arch, s.tp, s.pp, False)) / GIB
    split = max(stage_weight_bytes(arch, s.tp, s.pp, True)) / GIB
    weights = f"weights {split:.2f} GiB/GPU with EP vs {sharded:.2f} GiB/GPU with every expert TP-sharded"
    if flag in explicit:
        return Decision(flag, s.expert_parallel, f"explicit; {weights}")
    if s.expert_parallel:
        per_gpu = -(-arch.num_experts // s.tp)
        why = (
            f"{arch.num_experts} experts over TP={s.tp}: each GPU holds {per_gpu} whole experts instead of a "
            f"1/{s.tp} slice of all {arch.num_experts}, so expert GEMMs stay large and MoE layers exchange "
            f"tokens (all-to-all) instead of all-reducing partial sums; attention stays TP; {weights}"
        )
    elif s.tp == 1:
        why = "one GPU per replica: no expert group to split experts across"
    else:
        why = (
            f"{arch.num_experts} experts do not outnumber the {s.tp} GPUs: whole experts per GPU would leave "
            "a hot expert's GPU as the bottleneck, so each expert is TP-sharded"
        )
    return Decision(flag, s.expert_parallel, why)


def multimodal_decision(
    arch: ModelArch, request: DeploymentRequest, s: VllmSettings, explicit: dict[str, Any]
) -> tuple[Decision | None, list[str]]:
    asked = (request.images_per_prompt, request.videos_per_prompt) != (1, 0)
    if arch.vision is None:
        note = f"multimodal is set but {arch.name} has no vision encoder; ignored"
        return None, [note] if asked else []
    limits = {"image": request.images_per_prompt, "video": request.videos_per_prompt}
    enc = encoder_memory(
        arch, s.tp, s.max_num_batched_tokens, s.max_num_seqs, s.mm_items, s.mm_videos, s.version,
        s.max_model_len,
    )  # fmt: skip
    memory = (
        f"vision encoder {enc.weights / GIB:.2f} GiB weights + {enc.activation / GIB:.2f} GiB profile "
        f"activation ({enc.items_profiled} largest {enc.modality} item(s) of {enc.tokens_per_item:,} "
        f"tokens) + {enc.outputs / GIB:.2f} GiB kept embeddings"
    )
    if "limit_mm_per_prompt" in explicit:
        given = normalize_args(request.engine_args).get(
            "limit_mm_per_prompt", explicit["limit_mm_per_prompt"]
        )
        return _explicit_limits(arch, s, given, f"explicit; {memory}"), []
    source = "multimodal" if asked else "default: 1 image, no video (set multimodal: to allow more)"
    return Decision("limit_mm_per_prompt", limits, f"{source}; {memory}"), []


def _explicit_limits(arch: ModelArch, s: VllmSettings, given: Any, why: str) -> Decision:
    """The user's limit_mm_per_prompt with every modality it leaves out written at the release's default,
    which vLLM would give it anyway (999 on V1, not 0): what runs is what was planned."""
    if not isinstance(given, dict):
        return Decision("limit_mm_per_prompt", given, why)
    filled = resolved_limits(arch, s.version, given)
    added = sorted(set(filled) - set(given))
    if added:
        why += f"; {', '.join(added)} not given: vLLM's default {default_limit(s.version)} written out"
    return Decision("limit_mm_per_prompt", filled, why)
