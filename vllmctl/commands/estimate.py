"""`vllmctl estimate`: predict vLLM's (or SGLang's) startup memory for one model on one GPU, with reasons,
and refuse, as vLLM would at startup, flags that break one of its checks (exit 2; the model on that GPU or
a start that does not fit: exit 1, figures still shown).
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from rich.table import Table

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.gpus import GIB, GpuModel, custom_gpu, lookup_gpu, parse_compute_capability
from vllmctl.catalog.loader import load_arch, with_quantization
from vllmctl.catalog.params import total_params
from vllmctl.commands import _options as options
from vllmctl.console import Ui
from vllmctl.engine_flags import DTYPES
from vllmctl.errors import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, InputError
from vllmctl.planner.estimate import Estimate, sglang_estimate, vllm_estimate
from vllmctl.planner.multimodal import (
    default_limits_unmodelled,
    profiled_item,
    resolved_limits,
    video_unmodelled,
)
from vllmctl.planner.rules.base import HostResources
from vllmctl.planner.rules.model import ENGINE_RELEASE_FLAG
from vllmctl.planner.settings import DEFAULT_SWAP_SPACE_GIB, VllmSettings
from vllmctl.planner.sglang_memory import SglangSettings
from vllmctl.planner.versions import (
    Version,
    default_batch_limits,
    default_gpu_memory_utilization,
    parse_version,
)
from vllmctl.planner.weights import checkpoint_gib

DEFAULT_VERSIONS = {"vllm": "0.11.0", "sglang": "0.5.2"}
KV_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(b|bytes|kib|mib|gib|kb|mb|gb|k|m|g)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "bytes": 1, "kib": 1 << 10, "kb": 1 << 10, "k": 1 << 10}
_UNITS.update({"mib": 1 << 20, "mb": 1 << 20, "m": 1 << 20, "gib": GIB, "gb": GIB, "g": GIB})
# Flags whose argparse default means "not given" (vLLM's own default applies).
_UNSET: dict[str, Any] = {"tp": 1, "pp": 1, "data_parallel_size": 1, "quantization": "auto", "dtype": "auto",
                          "kv_cache_dtype": "auto", "enforce_eager": False, "enable_expert_parallel": False,
                          "enable_eplb": False, "num_redundant_experts": 0}  # fmt: skip
_FLAG_NAMES = {"tp": "tensor_parallel_size", "pp": "pipeline_parallel_size", "swap_space": "swap_space"}


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
    gpu.add_argument(
        "--gpu-memory", help="GPU total as CUDA reports it, e.g. 79.19GiB (see --compute-capability)"
    )
    parser.add_argument(
        "--compute-capability", help="with --gpu-memory: the GPU's compute capability, e.g. 8.6 (default 9.0)"
    )
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel size")
    parser.add_argument("--pp", type=int, default=1, help="pipeline-parallel size")
    parser.add_argument("--data-parallel-size", type=int, default=1, help="data-parallel ranks in the engine")
    parser.add_argument(
        "--quantization",
        default="auto",
        help="vLLM's --quantization (fp8, awq_marlin, ...); auto reads the checkpoint's, none ignores it",
    )
    parser.add_argument("--dtype", default="auto", choices=DTYPES, help="activation dtype (vLLM's --dtype)")
    parser.add_argument("--kv-cache-dtype", default="auto", choices=KV_DTYPES)
    parser.add_argument("--gpu-memory-utilization", type=float, help="default: the engine version's default")
    parser.add_argument("--max-model-len", type=int, help="default: the model's maximum")
    parser.add_argument("--max-num-seqs", type=int)
    parser.add_argument("--max-num-batched-tokens", type=int)
    parser.add_argument("--block-size", type=int, help="KV block size (vLLM's default when unset)")
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--enable-expert-parallel", action="store_true")
    parser.add_argument("--enable-eplb", action="store_true")
    parser.add_argument("--num-redundant-experts", type=int, default=0)
    parser.add_argument(
        "--enable-chunked-prefill", action=argparse.BooleanOptionalAction, help="V0 engines only (before 0.8)"
    )
    parser.add_argument(
        "--swap-space", type=float, help=f"GiB of host memory per GPU (default {DEFAULT_SWAP_SPACE_GIB:g})"
    )
    parser.add_argument("--host-memory", help="the host's memory, e.g. 512GiB (vLLM's swap-space check)")
    parser.add_argument(
        "--gpu-memory-used", help="memory other processes already hold on each GPU, e.g. 2GiB"
    )
    parser.add_argument(
        "--images-per-prompt",
        type=int,
        help="vision models: images the encoder is profiled with (vLLM's --limit-mm-per-prompt; default 1, "
        "but video models need it or --videos-per-prompt: vLLM's default limits profile a video)",
    )
    parser.add_argument("--videos-per-prompt", type=int, help="vision models: videos per prompt")
    parser.add_argument(
        "--allow-long-max-model-len", action="store_true", help="as VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"
    )
    parser.add_argument(
        "--model-runner",
        choices=["auto", "v1", "v2"],
        default="auto",
        help="as VLLM_USE_V2_MODEL_RUNNER=0/1 (default: the runner vLLM picks for the model and version)",
    )
    parser.add_argument(
        "--compile-cache",
        choices=["cold", "warm"],
        default="cold",
        help="cold: the first start compiles its graphs (the default, what a new release meets); warm: a "
        "restart that loads them from torch.compile's cache",
    )
    parser.add_argument(
        "--mxfp4-backend",
        choices=["auto", "marlin", "triton"],
        default="auto",
        help="the MXFP4 MoE kernels (gpt-oss): triton where triton_kernels is importable in the engine's "
        "venv (the vllm/vllm-openai images), marlin where not (a pip install before 0.12); auto: by version",
    )
    parser.add_argument("--kv-cache-memory", help="KV cache size in bytes or with a unit (skips profiling)")
    parser.add_argument("--engine", default="vllm", choices=["vllm", "sglang"])
    parser.add_argument("--engine-version", help="e.g. 0.11.0 (vLLM default) or 0.5.2 (SGLang default)")
    options.add_json(parser)
    parser.set_defaults(func=run)


def _check_numbers(args: argparse.Namespace) -> None:
    for flag in ("tp", "pp", "data_parallel_size"):
        if getattr(args, flag) < 1:
            raise InputError(f"--{flag.replace('_', '-')} must be at least 1", "e.g. --tp 2")
    for flag in ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise InputError(f"--{flag.replace('_', '-')} must be at least 1", "give a positive integer")


def _gpu(args: argparse.Namespace) -> GpuModel:
    if args.gpu:
        return lookup_gpu(args.gpu)
    capability = parse_compute_capability(args.compute_capability) if args.compute_capability else (9, 0)
    return custom_gpu(round(parse_size(args.gpu_memory, "gib", "--gpu-memory") / GIB, 2), capability)


def given_flags(args: argparse.Namespace) -> frozenset[str]:
    """vLLM flag names the user set on the command line (the GPU's description is not a flag)."""
    names = {k for k, v in vars(args).items() if v is not None and _UNSET.get(k) != v}
    names -= {"compute_capability", "gpu", "gpu_memory", "model", "engine", "engine_version", "json", "func"}
    names -= {"mxfp4_backend"}  # the venv's kernels, not a vLLM flag
    return frozenset(_FLAG_NAMES.get(name, name) for name in names) | {ENGINE_RELEASE_FLAG}


def _media(
    arch: ModelArch, args: argparse.Namespace, version: Version, max_model_len: int
) -> tuple[int, int]:
    """(items, videos) per prompt the encoder is profiled with: the flags', else vLLM's default limits, whose
    profile is the modality of the most tokens per item (a video where the release's processor makes one
    larger than an image); refused where that video is not modelled."""
    if arch.vision is None:
        return 0, 0
    if args.images_per_prompt is None and args.videos_per_prompt is None:
        unmodelled = default_limits_unmodelled(arch, version, max_model_len)
        if unmodelled:
            raise unmodelled
        item = profiled_item(arch, version, resolved_limits(arch, version, None), max_model_len)
        return (2, 1) if item is not None and item.modality == "video" else (1, 0)
    images = 1 if args.images_per_prompt is None else args.images_per_prompt
    videos = args.videos_per_prompt or 0
    why = video_unmodelled(arch, version, {"image": images, "video": videos}, max_model_len)
    if why:
        raise InputError(
            why, "give --videos-per-prompt 0 (and video: 0 in --limit-mm-per-prompt on vllm serve)"
        )
    return images + videos, videos


def _vllm(args: argparse.Namespace, arch: ModelArch, gpu: GpuModel, version_text: str) -> Estimate:
    version = parse_version(version_text)
    max_model_len = args.max_model_len or arch.max_position_embeddings
    tokens, seqs = default_batch_limits(
        version, gpu, max_model_len=max_model_len, chunked_prefill=args.enable_chunked_prefill
    )
    if args.max_num_batched_tokens is not None and args.max_num_seqs is None:
        seqs = min(seqs, args.max_num_batched_tokens)  # vLLM's own default (arg_utils._set_default_args)
    kv_bytes = parse_size(args.kv_cache_memory, "b", "--kv-cache-memory") if args.kv_cache_memory else None
    media, videos = _media(arch, args, version, max_model_len)
    quant = None if args.quantization in ("auto", "none") else args.quantization
    settings = VllmSettings(
        version=version, tp=args.tp, pp=args.pp,
        gpu_memory_utilization=args.gpu_memory_utilization or default_gpu_memory_utilization(version),
        max_model_len=max_model_len,
        max_num_seqs=args.max_num_seqs or seqs, max_num_batched_tokens=args.max_num_batched_tokens or tokens,
        kv_cache_dtype=args.kv_cache_dtype, enforce_eager=args.enforce_eager,
        kv_cache_memory_bytes=int(kv_bytes) if kv_bytes else None, block_size=args.block_size,
        expert_parallel=args.enable_expert_parallel, mm_items=media, mm_videos=videos, dtype=args.dtype,
        quantization=quant, dp=args.data_parallel_size, enable_eplb=args.enable_eplb,
        num_redundant_experts=args.num_redundant_experts,
        swap_space_gib=DEFAULT_SWAP_SPACE_GIB if args.swap_space is None else args.swap_space,
        enable_chunked_prefill=args.enable_chunked_prefill,
        allow_long_max_model_len=args.allow_long_max_model_len, model_runner=args.model_runner,
        compile_cache=args.compile_cache, mxfp4_backend=args.mxfp4_backend,
    )  # fmt: skip
    host = HostResources(
        ram_gib=parse_size(args.host_memory, "gib", "--host-memory") / GIB if args.host_memory else None,
        gpu_used_gib=parse_size(args.gpu_memory_used, "gib", "--gpu-memory-used") / GIB
        if args.gpu_memory_used
        else None,
    )
    return vllm_estimate(arch, gpu, settings, given_flags(args), host)


def _sglang(args: argparse.Namespace, arch: ModelArch, gpu: GpuModel, version_text: str) -> Estimate:
    settings = SglangSettings(
        version=parse_version(version_text),
        tp=args.tp,
        pp=args.pp,
        context_length=args.max_model_len or arch.max_position_embeddings,
        mem_fraction_static=args.gpu_memory_utilization,
        chunked_prefill_size=args.max_num_batched_tokens,
        max_running_requests=args.max_num_seqs,
        kv_cache_dtype="fp8_e4m3" if args.kv_cache_dtype.startswith("fp8") else "auto",
    )
    return sglang_estimate(arch, gpu, settings)


def run(args: argparse.Namespace, ui: Ui) -> int:
    arch = load_arch(args.model)
    if args.quantization == "none":
        arch = with_quantization(arch, "none")
    _check_numbers(args)
    gpu = _gpu(args)
    version = args.engine_version or DEFAULT_VERSIONS[args.engine]
    estimate = _vllm(args, arch, gpu, version) if args.engine == "vllm" else _sglang(args, arch, gpu, version)
    if estimate.flag_refusals:
        users = estimate.flag_refusals
        raise InputError(
            "\n".join(f"vLLM refuses to start ({r.rule}): {r.message}" for r in users),
            "\n  ".join(f"{r.reason}; fix: {r.fix}" for r in users),
        )
    figures = estimate.figures
    figures.update(model=arch.name, gpu=gpu.name, engine=args.engine, engine_version=version,
                   checkpoint_gib=round(checkpoint_gib(arch), 4), param_count=total_params(arch))  # fmt: skip
    if not figures["fits"]:
        figures["max_model_len_that_fits"] = figures.get("max_model_len_that_fits", 0)
    refused = [*estimate.model_refusals, *estimate.memory_refusals]
    if args.json:
        ui.json(figures)
    else:
        _show(ui, arch, gpu, args, version, figures)
    for warning in estimate.warnings:
        ui.warn(warning)
    for refusal in refused:
        ui.error(refusal.render())
    if not figures["fits"] and not refused:
        length = figures.get("max_model_len", figures.get("context_length"))
        ui.warn(
            f"does not fit at max_model_len {length}; largest that fits: {figures['max_model_len_that_fits']}"
        )
    return EXIT_FAILURE if refused or not figures["fits"] else EXIT_OK


def _show(
    ui: Ui, arch: ModelArch, gpu: GpuModel, args: argparse.Namespace, version: str, figures: dict[str, Any]
) -> None:
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


__all__ = ["EXIT_USAGE", "parse_size", "register", "run"]
