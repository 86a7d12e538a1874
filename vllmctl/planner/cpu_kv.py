"""vLLM's CPU backend KV cache, predicted: it takes a fixed `VLLM_CPU_KVCACHE_SPACE` GiB (or
`kv_cache_memory_bytes`) instead of measuring free memory, so tokens and concurrency follow from the model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.gpus import GIB
from vllmctl.planner.kv import kv_layout

SPACE_ENV = "VLLM_CPU_KVCACHE_SPACE"
# vllm/platforms/cpu.py (0.32): block_size 128 unless the user sets one; the CPU MLA kernel needs 16.
CPU_BLOCK_SIZE = 128
CPU_MLA_BLOCK_SIZE = 16
# vllm/config/model.py _resolve_auto_dtype: a float32 checkpoint runs in the platform's first supported
# dtype, bfloat16 on x86, ARM Linux, POWER and RISC-V CPUs.
CPU_DOWNCAST_DTYPE = "bfloat16"
FLOAT32 = ("float32", "float")


@dataclass(frozen=True)
class CpuKvPrediction:
    """What vLLM-CPU will log at startup: `CPU KV cache size: N tokens, Maximum concurrency ...: Cx`."""

    kv_tokens: int
    max_concurrency: float
    max_model_len: int
    num_blocks: int
    block_size: int
    kv_bytes_per_token: float
    space_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {
            "kv_tokens": self.kv_tokens,
            "max_concurrency": self.max_concurrency,
            "max_model_len": self.max_model_len,
            "num_blocks": self.num_blocks,
            "block_size": self.block_size,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "space_bytes": self.space_bytes,
            "source": f"{SPACE_ENV} / KV bytes per token, whole blocks",
        }


def cpu_kv_space_bytes(env: Mapping[str, str], engine_args: Mapping[str, Any]) -> int | None:
    """The bytes vLLM-CPU gives its KV cache; None when it sizes from free memory (not predictable).

    The environment variable wins over the engine arg (cpu.py overwrites kv_cache_memory_bytes with it),
    and vLLM reads it with int(): "1.5" makes vLLM exit, so it predicts nothing here either.
    """
    space = str(env.get(SPACE_ENV, "")).strip()
    if space:
        return int(space) * GIB if space.isdigit() else None
    explicit = engine_args.get("kv_cache_memory_bytes")
    return int(explicit) if isinstance(explicit, int) and not isinstance(explicit, bool) else None


def _kv_dtype(arch: ModelArch, engine_args: Mapping[str, Any]) -> str:
    cache_dtype = str(engine_args.get("kv_cache_dtype", "auto"))
    if cache_dtype != "auto":
        return cache_dtype
    dtype = str(engine_args.get("dtype", "auto"))
    if dtype == "auto":
        return CPU_DOWNCAST_DTYPE if arch.dtype in FLOAT32 else arch.dtype
    return dtype


def predict_cpu_kv(
    arch: ModelArch,
    env: Mapping[str, str],
    engine_args: Mapping[str, Any],
    max_model_len: int | None = None,
) -> CpuKvPrediction | None:
    """Tokens = space // bytes per block, in whole blocks, for one process (vLLM-CPU runs no TP here).

    None when the space is not fixed or the model mixes attention kinds (sliding or hybrid layers are
    grouped by rules this small model does not follow).
    """
    space = cpu_kv_space_bytes(env, engine_args)
    if space is None or len(set(arch.attention_kinds)) != 1 or "sliding" in arch.attention_kinds:
        return None
    length = int(engine_args.get("max_model_len") or max_model_len or arch.max_position_embeddings)
    dtype = _kv_dtype(arch, engine_args)
    block = int(engine_args.get("block_size") or (CPU_MLA_BLOCK_SIZE if arch.is_mla else CPU_BLOCK_SIZE))
    sized = replace(arch, dtype=CPU_DOWNCAST_DTYPE if dtype.startswith("fp8") else dtype)
    layout = kv_layout(sized, 1, (0, arch.num_layers), dtype, (0, 0), block_size=block)
    blocks = layout.num_blocks(space)
    concurrency = layout.max_concurrency(blocks, length, length)
    # vLLM (0.32) logs the token capacity as concurrency x max_model_len: whole blocks per request.
    return CpuKvPrediction(
        kv_tokens=int(concurrency * length),
        max_concurrency=round(concurrency, 2),
        max_model_len=length,
        num_blocks=blocks,
        block_size=block,
        kv_bytes_per_token=layout.bytes_per_token,
        space_bytes=space,
    )
