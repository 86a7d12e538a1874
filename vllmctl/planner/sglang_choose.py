"""Engine-flag choice for SGLang: tp_size, mem_fraction_static, chunked_prefill_size, cuda_graph_max_bs,
max_running_requests and context_length, each with its reason; explicit engine_args win.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.gpus import GpuModel
from vllmctl.errors import PlanError
from vllmctl.planner.presets import sampling_plan
from vllmctl.planner.sglang_features import sglang_guide_decisions
from vllmctl.planner.sglang_memory import SglangSettings, sglang_memory
from vllmctl.planner.tuning import valid_tp_sizes
from vllmctl.planner.types import Decision, DeploymentPlan, DeploymentRequest, Replica
from vllmctl.planner.versions import parse_version

SGLANG_ALIASES = {
    "tensor_parallel_size": "tp_size",
    "tp": "tp_size",
    "max_model_len": "context_length",
    "pipeline_parallel_size": "pp_size",
}


def _normalize(args: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in args.items():
        name = key.lstrip("-").replace("-", "_")
        out[SGLANG_ALIASES.get(name, name)] = value
    return out


def _ep(arch: ModelArch, tp: int, explicit: dict[str, Any]) -> bool:
    if "ep_size" in explicit:
        return int(explicit["ep_size"]) > 1
    return arch.is_moe and tp > 1 and arch.num_experts > tp


def plan_sglang(arch: ModelArch, gpu: GpuModel, gpu_count: int, request: DeploymentRequest) -> DeploymentPlan:
    version = parse_version(request.engine_version)
    explicit = _normalize(request.engine_args)
    context = int(explicit.get("context_length") or request.max_model_len or arch.max_position_embeddings)
    base = SglangSettings(
        version=version,
        tp=1,
        pp=int(explicit.get("pp_size", 1)),
        context_length=context,
        mem_fraction_static=explicit.get("mem_fraction_static"),
        chunked_prefill_size=explicit.get("chunked_prefill_size"),
        cuda_graph_max_bs=explicit.get("cuda_graph_max_bs"),
        max_running_requests=explicit.get("max_running_requests"),
        kv_cache_dtype=str(explicit.get("kv_cache_dtype", "auto")),
    )
    if request.profile == "latency" and base.chunked_prefill_size is None:
        base = replace(base, chunked_prefill_size=2048)
    tp_sizes = [int(explicit["tp_size"])] if "tp_size" in explicit else valid_tp_sizes(arch, gpu_count)
    if request.profile == "latency" and "tp_size" not in explicit:
        tp_sizes = tp_sizes[::-1]
    kv_options = [base.kv_cache_dtype] if "kv_cache_dtype" in explicit else ["auto", "fp8_e4m3"]
    warnings: list[str] = []
    chosen = None
    for kv in kv_options:
        for tp in tp_sizes:
            settings = replace(base, tp=tp, kv_cache_dtype=kv, expert_parallel=_ep(arch, tp, explicit))
            memory = sglang_memory(arch, gpu, settings)
            if memory.fits:
                chosen = (settings, memory)
                break
        if chosen:
            break
    if chosen is None:
        tp = max(tp_sizes)
        w = sglang_memory(arch, gpu, replace(base, tp=tp))
        raise PlanError(
            f"{arch.name} does not fit on {gpu_count}x {gpu.name} with SGLang: at tp_size {tp} weights take "
            f"{w.weights_gib:.2f} GiB/GPU and mem_fraction_static {w.mem_fraction_static} leaves "
            f"{w.available_kv_cache_gib:.2f} GiB = {w.kv_cache_tokens} tokens for a {context}-token context",
            f"options: more GPUs, context_length <= {max(w.kv_cache_tokens, 0)}, fp8 KV, "
            "or a quantized variant",
        )
    settings, mem = chosen
    replicas = gpu_count // settings.tp if settings.pp == 1 else 1
    reasons = [
        Decision(
            "tp_size",
            settings.tp,
            f"{'explicit; ' if 'tp_size' in explicit else ''}tp {settings.tp}: weights {mem.weights_gib:.2f} "
            f"GiB/GPU leave {mem.kv_cache_tokens:,} KV tokens ({mem.max_concurrency:.2f}x the {context:,} "
            "context)",
        ),
        Decision(
            "mem_fraction_static",
            mem.mem_fraction_static,
            "explicit"
            if "mem_fraction_static" in explicit
            else f"SGLang {'.'.join(map(str, version))} default for {gpu.smi_mib} MiB and tp {settings.tp}",
        ),
        Decision(
            "chunked_prefill_size",
            mem.chunked_prefill_size,
            "explicit"
            if "chunked_prefill_size" in explicit
            else (
                "latency: small prefill chunks keep decode steps short"
                if request.profile == "latency"
                else f"SGLang default for a {gpu.cuda_gib:.0f} GiB GPU"
            ),
        ),
        Decision(
            "cuda_graph_max_bs",
            mem.cuda_graph_max_bs,
            "explicit" if "cuda_graph_max_bs" in explicit else "SGLang default by GPU memory and tp",
        ),
        Decision(
            "max_running_requests",
            mem.max_running_requests,
            "explicit"
            if "max_running_requests" in explicit
            else "SGLang default: tokens / context x 512, clamped to 2048..4096",
        ),
        Decision(
            "context_length",
            context,
            f"{'explicit; ' if 'context_length' in explicit else ''}one request needs {context:,} of "
            f"{mem.kv_cache_tokens:,} KV tokens",
        ),
        *sglang_guide_decisions(arch, request, explicit, settings.tp, replicas),
    ]
    sampling = sampling_plan("sglang", request.use_case, request.sampling, explicit)
    reasons += sampling.decisions
    warnings += sampling.warnings
    if settings.kv_cache_dtype != "auto":
        reasons.append(
            Decision(
                "kv_cache_dtype",
                settings.kv_cache_dtype,
                "explicit"
                if "kv_cache_dtype" in explicit
                else f"fp8 KV is the only way to fit context {context:,}",
            )
        )
    args = {d.flag: d.value for d in reasons}
    args.update(explicit)
    # dp_size workers share one server and port; SGLang balances requests across them.
    port_replicas = (Replica(0, tuple(range(settings.tp * int(args["dp_size"]))), request.base_port, 0),)
    return DeploymentPlan(
        arch.name,
        "sglang",
        request.engine_version,
        gpu.name,
        gpu_count,
        request.profile,
        args,
        port_replicas,
        mem,
        tuple(reasons),
        tuple(warnings),
    )
