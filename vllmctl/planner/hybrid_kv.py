"""KV layout of hybrid attention / Gated DeltaNet models (Qwen3-Next, Qwen3.5) as vLLM V1 builds it, from the
model's config.json. The linear-attention layers keep a fixed state per request, not per token:

* the state per layer and rank: a conv state (conv_dim / TP, kernel - 1) and a recurrent state (value heads /
  TP, value dim, key dim), conv_dim = key dim x key heads x 2 + value dim x value heads
  (vllm/model_executor/layers/mamba/mamba_utils.py, MambaStateShapeCalculator.gated_delta_net_state_shape:
  mamba_utils.py:213 in 0.23.0), both in the model dtype unless mamba_ssm_cache_dtype says otherwise; an fp8
  KV cache does not shrink it (the 0.13.0 L40S start below aligns to a bf16 state);
* one page size for every layer: the attention block grows to 16 x cdiv(state page, 16 x attention bytes per
  token) tokens and the state page is padded to the attention page (models/config.py,
  HybridAttentionMambaModelConfig.verify_and_update_config: 'Setting attention block size to %d tokens',
  config.py:390 in 0.10.2, config.py:439 in 0.13.0);
* the layers grouped as for any hybrid manager (kv.py: groups of the smaller layer count), so
  tokens = available // page // group size // groups x block size ('GPU KV cache size').

Checked on three cited starts, block and tokens exact: Qwen3-Next-80B-A3B on 2x H200, bf16, 0.10.2 (block
544, 44.59 GiB -> 973,760 tokens) and on 2x L40S, fp8 KV, 0.13.0 (block 1072, 17.58 GiB -> 767,552 tokens);
Qwen3.5-9B on an L40S, 0.19.0, its float32 recurrent state (block 528, 20.27 GiB -> 165,792 tokens).
`layout_for` gives vllm_memory this layout for a hybrid architecture (catalog/hybrid_arch.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from math import prod
from typing import Any

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.hybrid_arch import HybridShape, hybrid_shape, is_hybrid
from vllmctl.planner.kv import KvLayout, cdiv, kv_layout

__all__ = ["HybridShape", "hybrid_layout", "hybrid_shape", "is_hybrid", "layout_for"]

BLOCK_MULTIPLE = 16  # attention backends take block sizes in multiples of 16 (config.py, the same function)
STATE_KIND = "mamba"  # kv.py: a layer kind whose request needs one page whatever its length


def state_page_bytes(shape: HybridShape, tp: int) -> int:
    """One linear-attention layer's state on one rank: conv state in the model dtype, recurrent state in the
    state dtype (MambaSpec.page_size_bytes sums each shape's elements times its dtype)."""
    conv = prod((shape.conv_dim // tp, shape.conv_kernel - 1)) * shape.dtype_bytes
    recurrent = prod((shape.num_v_heads // tp, shape.head_v_dim, shape.head_k_dim)) * shape.state_dtype_bytes
    return conv + recurrent


def attention_bytes_per_token(shape: HybridShape, tp: int, kv_cache_dtype: str) -> int:
    """K and V of one attention layer for one token on one rank (KV heads never below one per rank)."""
    dtype_bytes = 1 if kv_cache_dtype.startswith("fp8") else shape.dtype_bytes
    return 2 * max(shape.num_kv_heads // tp, 1) * shape.head_dim * dtype_bytes


def aligned_block_size(shape: HybridShape, tp: int, kv_cache_dtype: str) -> int:
    """The attention block vLLM sets so that an attention page holds at least one layer's state."""
    per_token = attention_bytes_per_token(shape, tp, kv_cache_dtype)
    return BLOCK_MULTIPLE * cdiv(state_page_bytes(shape, tp), BLOCK_MULTIPLE * per_token)


def shape_layout(
    shape: HybridShape, tp: int, kv_cache_dtype: str = "auto", layer_range: tuple[int, int] | None = None
) -> KvLayout:
    """The KV layout of the layers one rank holds (a pipeline stage's range, else all): every page the
    attention page at the aligned block, the state pages padded up to it."""
    block = aligned_block_size(shape, tp, kv_cache_dtype)
    page = block * attention_bytes_per_token(shape, tp, kv_cache_dtype)
    first, last = layer_range or (0, len(shape.layer_types))
    attends = sum(1 for layer in range(first, last) if shape.attends(layer))
    kinds = (("full", attends), (STATE_KIND, last - first - attends))
    return KvLayout(tuple((kind, count) for kind, count in kinds if count), page, block, 0)


def hybrid_layout(config: Mapping[str, Any], tp: int, kv_cache_dtype: str = "auto") -> KvLayout:
    """The KV layout of a hybrid model's config on one rank (no pipeline stages)."""
    return shape_layout(hybrid_shape(config), tp, kv_cache_dtype)


def layout_for(
    arch: ModelArch,
    tp: int,
    layer_range: tuple[int, int],
    kv_cache_dtype: str,
    compute_capability: tuple[int, int],
    block_size: int | None = None,
) -> KvLayout:
    """The KV layout vLLM builds for a stage: the hybrid one for a hybrid architecture (vLLM sets its block
    itself), kv.kv_layout otherwise."""
    if arch.hybrid is not None:
        return shape_layout(arch.hybrid, tp, kv_cache_dtype, layer_range)
    return kv_layout(arch, tp, layer_range, kv_cache_dtype, compute_capability, block_size)
