"""The engine arguments one vLLM start is planned or checked with, resolved where vLLM has a default."""

from __future__ import annotations

from dataclasses import dataclass

from vllmctl.catalog.arch import ModelArch
from vllmctl.planner.versions import Version

DEFAULT_SWAP_SPACE_GIB = 4.0  # CacheConfig.swap_space (vLLM 0.6–0.20)


@dataclass(frozen=True)
class LoraSettings:
    """--enable-lora as vLLM resolves it (LoRAConfig), with the declared adapters' ranks and targets."""

    max_loras: int = 1
    max_lora_rank: int = 16
    max_cpu_loras: int | None = None
    adapter_ranks: tuple[int, ...] = ()
    targets: tuple[str, ...] = ()  # empty: every linear module of the decoder layers


@dataclass(frozen=True)
class SpeculativeSettings:
    """--speculative-config as the planner reads it; `draft` is the draft model's (or head's) architecture."""

    method: str
    num_speculative_tokens: int
    draft_tp: int | None = None
    draft: ModelArch | None = None


@dataclass(frozen=True)
class VllmSettings:
    """What decides memory (the first group) and what vLLM's startup checks read (the rest)."""

    version: Version
    tp: int
    pp: int
    gpu_memory_utilization: float
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_cache_dtype: str = "auto"
    enforce_eager: bool = False
    kv_cache_memory_bytes: int | None = None
    block_size: int | None = None
    capture_sizes: tuple[int, ...] | None = None  # compilation_config cudagraph_capture_sizes; None: default
    expert_parallel: bool = False
    mm_items: int = 0  # images + videos per prompt the encoder is profiled with (vision-language models)
    mm_videos: int = 0  # the videos among them (limit_mm_per_prompt's video)
    dtype: str = "auto"  # --dtype as given; "auto" resolves from the checkpoint and the GPU
    quantization: str | None = None  # --quantization as given; None reads the checkpoint's
    dp: int = 1  # data_parallel_size inside one engine
    enable_eplb: bool = False
    num_redundant_experts: int = 0
    swap_space_gib: float = DEFAULT_SWAP_SPACE_GIB
    enable_chunked_prefill: bool | None = None  # None: vLLM's default for the version
    allow_long_max_model_len: bool = False  # VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 in the engine's environment
    sampler: str = "auto"  # "flashinfer" | "sort" (FlashInfer off: PyTorch sort, Triton from 0.17) | "auto"
    # MXFP4 MoE kernels: "marlin" | "triton" | "auto" (pip install: Triton on Hopper once vLLM bundles
    # triton_kernels; the vllm/vllm-openai images ship triton_kernels earlier)
    mxfp4_backend: str = "auto"
    model_runner: str = "auto"  # VLLM_USE_V2_MODEL_RUNNER in the engine's environment: "v1" | "v2"
    compile_cache: str = "cold"  # "warm": torch.compile's cache already holds this start's graphs
    lora: LoraSettings | None = None
    speculative: SpeculativeSettings | None = None
