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
Qwen3.5-9B on an L40S, 0.19.0, its float32 recurrent state (block 528, 20.27 GiB -> 165,792 tokens). The
planner's architecture (catalog/arch.py ModelArch) carries no linear-attention fields yet, so `vllm_memory`
does not use this layout and hybrid starts' available KV (their weights and profile peak) is not modelled.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from math import prod
from typing import Any

from vllmctl.planner.kv import KvLayout, cdiv

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}
BLOCK_MULTIPLE = 16  # attention backends take block sizes in multiples of 16 (config.py, the same function)
STATE_KIND = "mamba"  # kv.py: a layer kind whose request needs one page whatever its length


@dataclass(frozen=True)
class HybridShape:
    """What a config says about its hybrid layers: which layers attend, and the linear-attention state."""

    layer_types: tuple[str, ...]  # "full_attention" or "linear_attention", one per layer
    num_kv_heads: int
    head_dim: int
    num_k_heads: int
    num_v_heads: int
    head_k_dim: int
    head_v_dim: int
    conv_kernel: int
    dtype_bytes: int
    state_dtype_bytes: int

    @property
    def attention_layers(self) -> int:
        return sum(1 for t in self.layer_types if t == "full_attention")

    @property
    def state_layers(self) -> int:
        return len(self.layer_types) - self.attention_layers


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    nested = config.get("text_config")
    return nested if isinstance(nested, Mapping) else config


def is_hybrid(config: Mapping[str, Any]) -> bool:
    """A Gated DeltaNet hybrid (what this module lays out): linear-attention heads in the (text) config."""
    return "linear_num_value_heads" in _text_config(config)


def hybrid_shape(config: Mapping[str, Any]) -> HybridShape:
    """The config's hybrid shape; layer_types as transformers derives them (Qwen3NextConfig: every
    full_attention_interval-th layer attends, default 4, when the file lists none)."""
    text = _text_config(config)
    layers = int(text["num_hidden_layers"])
    types = text.get("layer_types")
    if not isinstance(types, list) or len(types) != layers:
        interval = int(text.get("full_attention_interval", 4))
        types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)]
    dtype = str(text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or "bfloat16")
    # the recurrent state's dtype: --mamba-ssm-cache-dtype when set, else the config's own (Qwen3.5 publishes
    # mamba_ssm_dtype float32: its 0.19.0 start aligns a 528-token block to it, 272 with a bf16 state)
    state_dtype = str(text.get("mamba_ssm_cache_dtype") or text.get("mamba_ssm_dtype") or dtype)
    return HybridShape(
        layer_types=tuple(str(t) for t in types),
        num_kv_heads=int(text.get("num_key_value_heads") or text["num_attention_heads"]),
        head_dim=int(text.get("head_dim") or int(text["hidden_size"]) // int(text["num_attention_heads"])),
        num_k_heads=int(text["linear_num_key_heads"]),
        num_v_heads=int(text["linear_num_value_heads"]),
        head_k_dim=int(text["linear_key_head_dim"]),
        head_v_dim=int(text["linear_value_head_dim"]),
        conv_kernel=int(text.get("linear_conv_kernel_dim", 4)),
        dtype_bytes=DTYPE_BYTES.get(dtype, 2),
        state_dtype_bytes=DTYPE_BYTES.get(state_dtype, 2),
    )


def state_page_bytes(shape: HybridShape, tp: int) -> int:
    """One linear-attention layer's state on one rank: conv state in the model dtype, recurrent state in the
    state dtype (MambaSpec.page_size_bytes sums each shape's elements times its dtype)."""
    conv_dim = shape.head_k_dim * shape.num_k_heads * 2 + shape.head_v_dim * shape.num_v_heads
    conv = prod((conv_dim // tp, shape.conv_kernel - 1)) * shape.dtype_bytes
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


def hybrid_layout(config: Mapping[str, Any], tp: int, kv_cache_dtype: str = "auto") -> KvLayout:
    """The KV layout of a hybrid model on one rank (no pipeline stages): every page the attention page at the
    aligned block, the state pages padded up to it."""
    shape = hybrid_shape(config)
    block = aligned_block_size(shape, tp, kv_cache_dtype)
    page = block * attention_bytes_per_token(shape, tp, kv_cache_dtype)
    kinds = (("full", shape.attention_layers), (STATE_KIND, shape.state_layers))
    return KvLayout(tuple((kind, count) for kind, count in kinds if count), page, block, 0)
