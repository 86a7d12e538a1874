"""Starting values per deployment profile and the parallel sizes a model allows; engine_args spelling."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.gpus import GpuModel
from vllmctl.planner.versions import default_batch_limits

ARG_ALIASES = {
    "tp": "tensor_parallel_size",
    "tp_size": "tensor_parallel_size",
    "pp": "pipeline_parallel_size",
}


def normalize_args(args: dict[str, Any]) -> dict[str, Any]:
    """engine_args keys as vLLM's snake_case flag names (`--max-model-len` → max_model_len)."""
    out = {}
    for key, value in args.items():
        name = key.lstrip("-").replace("-", "_")
        out[ARG_ALIASES.get(name, name)] = value
    return out


def valid_tp_sizes(arch: ModelArch, gpus_per_node: int) -> list[int]:
    sizes, tp = [], 1
    while tp <= gpus_per_node:
        if gpus_per_node % tp == 0 and arch.num_heads % tp == 0:
            sizes.append(tp)
        tp *= 2
    return sizes


@dataclass(frozen=True)
class Tuning:
    """Profile-dependent starting values; the reasons quote them."""

    max_num_batched_tokens: int
    max_num_seqs: int
    why_batch: str
    why_seqs: str


def profile_tuning(
    profile: str,
    version: tuple[int, int, int],
    gpu: GpuModel,
    max_model_len: int = 0,
    chunked_prefill: bool | None = None,
) -> Tuning:
    # V0 without chunked prefill defaults to max(max_model_len, 2048): the length must be known here
    default_tokens, default_seqs = default_batch_limits(
        version, gpu, max_model_len=max_model_len, chunked_prefill=chunked_prefill
    )
    large = default_tokens >= 8192
    if profile == "throughput":
        tokens = 16384 if large else 8192
        seqs = 1024 if large else 512
        return Tuning(
            tokens,
            seqs,
            f"throughput: {tokens} tokens per step favours prefill throughput and TTFT",
            f"throughput: up to {seqs} sequences batched per step; more concurrent decodes per weight read",
        )
    if profile == "latency":
        return Tuning(
            2048,
            64,
            "latency: a small 2048-token step budget keeps each step short, so prefills cannot stall decodes",
            "latency: at most 64 sequences per step (the guides' 16-64) so each decode step stays fast",
        )
    if profile == "memory-saver":
        return Tuning(
            2048,
            32,
            "memory-saver: 2048 tokens per step keeps the profile-run activation peak small",
            "memory-saver: 32 sequences bound the sampler's logits memory and the CUDA graphs captured",
        )
    return Tuning(
        default_tokens,
        default_seqs,
        f"balanced: vLLM's default for {gpu.name} ({default_tokens})",
        f"balanced: vLLM's default for {gpu.name} ({default_seqs})",
    )
