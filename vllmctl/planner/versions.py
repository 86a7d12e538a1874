"""Engine version parsing and the defaults vLLM and SGLang pick by version and GPU."""

from __future__ import annotations

import re

from vllmctl.catalog.gpus import GpuModel
from vllmctl.errors import InputError

Version = tuple[int, int, int]

CUDAGRAPH_PROFILING_SINCE: Version = (0, 20, 0)  # PR #38284: estimate subtracted, util 0.92 (0.20.0 wheel)
# the sample graph capture runs inside memory_profiling() from 0.18.0 (v1/worker/gpu_worker.py; not in 0.17.1)
GRAPHS_PROFILED_SINCE: Version = (0, 18, 0)
NCCL_OUTSIDE_BUDGET_SINCE: Version = (0, 11, 0)  # PR #25359: NCCL initialised before the memory snapshot
V1_DEFAULT_SINCE: Version = (0, 8, 0)  # the V1 engine (always chunked prefill) is the default from 0.8.0


def format_version(version: Version) -> str:
    return ".".join(map(str, version))


def parse_version(text: str) -> Version:
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not match:
        raise InputError(f"cannot read engine version {text!r}", "give a version such as 0.11.0")
    return int(match[1]), int(match[2]), int(match[3] or 0)


def default_gpu_memory_utilization(version: Version) -> float:
    return 0.92 if version >= CUDAGRAPH_PROFILING_SINCE else 0.90


def v0_chunked_prefill(max_model_len: int) -> bool:
    """The V0 engine (before 0.8) turns chunked prefill on by itself only beyond 32K tokens
    (engine/arg_utils.py, EngineArgs.create_engine_config, 0.6.4)."""
    return max_model_len > 32768


def default_batch_limits(
    version: Version,
    gpu: GpuModel,
    offline: bool = False,
    max_model_len: int = 0,
    chunked_prefill: bool | None = None,
) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) vLLM picks when the user sets neither.

    `offline` is the LLM class (vllm bench, scripts); `vllm serve` is the API-server context. Before 0.8
    (V0) a step without chunked prefill holds a whole prompt: max(max_model_len, 2048); with it, 512.
    """
    if version < V1_DEFAULT_SINCE:
        chunked = v0_chunked_prefill(max_model_len) if chunked_prefill is None else chunked_prefill
        return (512 if chunked else max(max_model_len, 2048)), 256
    # engine/arg_utils.py _set_default_args_v1 of each release: the "large GPU" test was the device name
    # (H100/H200) until 0.8.4, total memory >= 70 GiB in 0.8.5, and >= 70 GiB but not an A100 from 0.9.0;
    # max_num_seqs was 1024 on every GPU until 0.8.3 and follows the same test from 0.8.4.
    name = gpu.smi_name.lower()
    if version >= (0, 9, 0):
        large = gpu.cuda_gib >= 70 and "a100" not in name
    elif version >= (0, 8, 5):
        large = gpu.cuda_gib >= 70
    else:
        large = "h100" in name or "h200" in name
    seqs = 1024 if large or version < (0, 8, 4) else 256
    if large:
        return (16384 if offline else 8192), seqs
    return (8192 if offline else 2048), seqs


def cudagraph_capture_sizes(max_num_seqs: int, max_num_batched_tokens: int) -> list[int]:
    """vLLM's default decode batch sizes captured as CUDA graphs."""
    largest = min(max_num_seqs * 2, 512, max_num_batched_tokens)
    sizes = [s for s in (1, 2, 4) if s <= largest]
    sizes += list(range(8, min(largest + 1, 256), 8))
    sizes += list(range(256, largest + 1, 16))
    return sizes


def sglang_gpu_defaults(gpu_mib: float, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) from SGLang's _handle_gpu_memory_settings."""
    gib = gpu_mib / 1024
    small_tp = tp < 4
    if gib < 20:
        return 2048, 8
    if gib < 35:
        return 2048, 24 if small_tp else 80
    if gib < 60:
        return 4096, 32 if small_tp else 160
    if gib < 160:
        return 8192, 256 if small_tp else 512
    return 16384, 512


def sglang_mem_fraction_static(
    version: Version, gpu_mib: float, tp: int, pp: int, chunked: int, graph_bs: int
) -> float:
    if version < (0, 5, 0):
        return 0.80 if tp >= 8 else 0.82 if tp >= 4 else 0.85 if tp >= 2 else 0.90
    reserved = 512 + max(chunked, 2048) * 1.5 + graph_bs * 2 + tp * pp / 8 * 1024
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((gpu_mib - reserved) / gpu_mib, 3)
