"""`vllmctl estimate`: predict vLLM's (or SGLang's) startup memory for one model on one GPU, with reasons."""

from __future__ import annotations

import argparse
import re
from typing import Any

from rich.table import Table

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.gpus import GIB, GpuModel, custom_gpu, lookup_gpu
from vllmctl.catalog.loader import load_arch, with_quantization
from vllmctl.console import Ui
from vllmctl.errors import InputError
from vllmctl.planner.settings import VllmSettings
from vllmctl.planner.sglang_memory import SglangSettings, sglang_memory
from vllmctl.planner.versions import default_batch_limits, default_gpu_memory_utilization, parse_version
from vllmctl.planner.vllm_memory import vllm_memory
from vllmctl.planner.weights import checkpoint_gib

DEFAULT_VERSIONS = {"vllm": "0.11.0", "sglang": "0.5.2"}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(b|bytes|kib|mib|gib|kb|mb|gb|k|m|g)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "bytes": 1, "kib": 1 << 10, "kb": 1 << 10, "k": 1 << 10}
_UNITS.update({"mib": 1 << 20, "mb": 1 << 20, "m": 1 << 20, "gib": GIB, "gb": GIB, "g": GIB})


def parse_size(text: str, default_unit: str, flag: str) -> float:
    """Bytes for '79.19GiB', '81559 MiB' or a bare number in `default_unit` ('GB' in vLLM logs is GiB)."""
    match = _SIZE.match(text)
    if not match:
        raise InputError(f"{flag}: cannot read {text!r} as a size", "give a number with GiB, MiB or bytes")
    unit = (match[2] or default_unit).lower()
    value = float(match[1]) * _UNITS[unit]
    if value <= 0:
        raise InputError(f"{flag}: {text!r} must be positive", "give a size above zero")
    return value


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("estimate", help="predict vLLM's memory for one model on one GPU")
    parser.add_argument("--model", required=True, help="hub id, local model directory, or config.json path")
    gpu = parser.add_mutually_exclusive_group(required=True)
    gpu.add_argument("--gpu", help="GPU name, e.g. H100-80GB, L40S, 'NVIDIA GeForce RTX 4090'")
    gpu.add_argument("--gpu-memory", help="GPU total as CUDA reports it, e.g. 79.19GiB")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel size")
    parser.add_argument("--pp", type=int, default=1, help="pipeline-parallel size")
    parser.add_argument(
        "--quantization", default="auto", choices=["auto", "none", "fp8", "w8a8", "awq", "gptq"]
    )
    parser.add_argument("--kv-cache-dtype", default="auto", choices=["auto", "fp8"])
    parser.add_argument("--gpu-memory-utilization", type=float, help="default: the engine version's default")
    parser.add_argument("--max-model-len", type=int, help="default: the model's maximum")
    parser.add_argument("--max-num-seqs", type=int)
    parser.add_argument("--max-num-batched-tokens", type=int)
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--kv-cache-memory", help="KV cache size in bytes or with a unit (skips profiling)")
    parser.add_argument("--engine", default="vllm", choices=["vllm", "sglang"])
    parser.add_argument("--engine-version", help="e.g. 0.11.0 (vLLM default) or 0.5.2 (SGLang default)")
    parser.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    parser.set_defaults(func=run)


def _check_numbers(args: argparse.Namespace, arch: ModelArch) -> None:
    if args.tp < 1 or args.pp < 1:
        raise InputError("--tp and --pp must be at least 1", "e.g. --tp 2")
    if arch.num_heads % args.tp:
        raise InputError(
            f"--tp {args.tp} does not divide the model's {arch.num_heads} attention heads",
            "use a tensor-parallel size that divides the head count (1, 2, 4, 8)",
        )
    if args.pp > arch.num_layers:
        raise InputError(f"--pp {args.pp} exceeds the model's {arch.num_layers} layers", "use fewer stages")
    limit = arch.max_position_embeddings
    if args.max_model_len and args.max_model_len > limit:
        raise InputError(
            f"--max-model-len {args.max_model_len} exceeds the model's {limit} positions",
            f"use at most {limit} (vLLM refuses more unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)",
        )
    util = args.gpu_memory_utilization
    if util is not None and not 0 < util <= 1:
        raise InputError(f"--gpu-memory-utilization {util} must be in (0, 1]", "e.g. 0.9")
    for flag in ("max_model_len", "max_num_seqs", "max_num_batched_tokens"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise InputError(f"--{flag.replace('_', '-')} must be at least 1", "give a positive integer")


def _gpu(args: argparse.Namespace) -> GpuModel:
    if args.gpu:
        return lookup_gpu(args.gpu)
    return custom_gpu(round(parse_size(args.gpu_memory, "gib", "--gpu-memory") / GIB, 2))


def _vllm(args: argparse.Namespace, arch: ModelArch, gpu: GpuModel, version_text: str) -> dict[str, Any]:
    version = parse_version(version_text)
    tokens, seqs = default_batch_limits(version, gpu)
    kv_bytes = parse_size(args.kv_cache_memory, "b", "--kv-cache-memory") if args.kv_cache_memory else None
    settings = VllmSettings(
        version=version,
        tp=args.tp,
        pp=args.pp,
        gpu_memory_utilization=args.gpu_memory_utilization or default_gpu_memory_utilization(version),
        max_model_len=args.max_model_len or arch.max_position_embeddings,
        max_num_seqs=args.max_num_seqs or seqs,
        max_num_batched_tokens=args.max_num_batched_tokens or tokens,
        kv_cache_dtype=args.kv_cache_dtype,
        enforce_eager=args.enforce_eager,
        kv_cache_memory_bytes=int(kv_bytes) if kv_bytes else None,
    )
    mem = vllm_memory(arch, gpu, settings)
    out = mem.to_json()
    out.update(gpu_memory_utilization=settings.gpu_memory_utilization, max_num_seqs=settings.max_num_seqs,
               max_num_batched_tokens=settings.max_num_batched_tokens, tensor_parallel_size=settings.tp,
               pipeline_parallel_size=settings.pp, kv_cache_dtype=settings.kv_cache_dtype)  # fmt: skip
    graphs = (
        "subtracted (CUDA-graph memory profiling, default since v0.21)"
        if mem.cudagraph_in_budget
        else "not subtracted: captured after the KV allocation, out of the headroom"
    )
    quant = arch.quantization.method if arch.quantization else arch.dtype
    out["reasons"] = [
        f"requested = {mem.total_gib:.2f} GiB x {settings.gpu_memory_utilization} "
        f"= {mem.requested_gib:.2f} GiB",
        f"weights: {arch.param_count / 1e9:.2f}B parameters as {quant}, TP={settings.tp} PP={settings.pp} "
        f"-> {mem.weights_gib:.2f} GiB per GPU",
        f"activation peak: profile run over {settings.max_num_batched_tokens} tokens and a sampler over "
        f"{min(settings.max_num_seqs, settings.max_num_batched_tokens)} sequences "
        f"-> {mem.activation_peak_gib:.2f} GiB",
        f"non-torch: {mem.non_torch_gib:.2f} GiB; NCCL {mem.nccl_gib:.2f} GiB "
        + ("inside the budget (before v0.11, PR #25359)" if mem.nccl_in_budget else "outside the budget"),
        f"CUDA graphs {mem.cudagraph_gib:.2f} GiB {graphs}",
        f"KV: {mem.kv_bytes_per_token:,.0f} bytes/token/GPU, block {mem.block_size}: "
        f"{mem.num_blocks:,} blocks = "
        f"{mem.kv_cache_tokens:,} tokens, {mem.max_concurrency:.2f}x requests of {mem.max_model_len:,}",
    ]
    if settings.kv_cache_memory_bytes:
        out["reasons"].append("--kv-cache-memory given: vLLM skips the memory budget and uses it as is")
    return out


def _sglang(args: argparse.Namespace, arch: ModelArch, gpu: GpuModel, version_text: str) -> dict[str, Any]:
    settings = SglangSettings(
        version=parse_version(version_text),
        tp=args.tp,
        pp=args.pp,
        context_length=args.max_model_len or arch.max_position_embeddings,
        mem_fraction_static=args.gpu_memory_utilization,
        chunked_prefill_size=args.max_num_batched_tokens,
        max_running_requests=args.max_num_seqs,
        kv_cache_dtype="fp8_e4m3" if args.kv_cache_dtype == "fp8" else "auto",
    )
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
    ]
    return out


def run(args: argparse.Namespace, ui: Ui) -> int:
    arch = with_quantization(load_arch(args.model), args.quantization)
    _check_numbers(args, arch)
    gpu = _gpu(args)
    version = args.engine_version or DEFAULT_VERSIONS[args.engine]
    figures = _vllm(args, arch, gpu, version) if args.engine == "vllm" else _sglang(args, arch, gpu, version)
    figures.update(model=arch.name, gpu=gpu.name, engine=args.engine, engine_version=version,
                   checkpoint_gib=round(checkpoint_gib(arch), 4), param_count=arch.param_count)  # fmt: skip
    if not figures["fits"]:
        figures["max_model_len_that_fits"] = figures.get("max_model_len_that_fits", 0)
    if args.json:
        ui.json(figures)
        return 0
    table = Table(title=f"{arch.name} on {gpu.name} ({args.engine} {version})")
    table.add_column("figure")
    table.add_column("value", justify="right")
    keys = ["total_gib", "requested_gib", "weights_gib", "activation_peak_gib", "non_torch_gib"]
    keys += ["cudagraph_gib", "available_kv_cache_gib", "kv_cache_tokens", "max_concurrency", "fits"]
    for key in keys:
        value = figures.get(key)
        if value is not None:
            table.add_row(key, f"{value:,.2f}" if isinstance(value, float) else str(value))
    if not figures["fits"]:
        table.add_row("max_model_len_that_fits", str(figures["max_model_len_that_fits"]))
    ui.table(table)
    for reason in figures["reasons"]:
        ui.data(f"- {reason}")
    if not figures["fits"]:
        length = figures.get("max_model_len", figures.get("context_length"))
        ui.warn(
            f"does not fit at max_model_len {length}; largest that fits: {figures['max_model_len_that_fits']}"
        )
    return 0
