"""What a hybrid attention / linear-attention config.json says about its layers (Qwen3-Next, Qwen3.5 Gated
DeltaNet): which layers attend, the linear-attention heads and state dtype, as vLLM's model classes read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vllmctl.catalog.config_fields import DTYPE_BYTES, text_config


@dataclass(frozen=True)
class HybridShape:
    """Which layers attend, and the linear-attention (Gated DeltaNet) heads and state of the others."""

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
    attn_output_gate: bool = True  # the attention layers' q projection also emits a gate per head

    @property
    def attention_layers(self) -> int:
        return sum(1 for t in self.layer_types if t == "full_attention")

    @property
    def state_layers(self) -> int:
        return len(self.layer_types) - self.attention_layers

    @property
    def key_dim(self) -> int:
        return self.head_k_dim * self.num_k_heads

    @property
    def value_dim(self) -> int:
        return self.head_v_dim * self.num_v_heads

    @property
    def conv_dim(self) -> int:
        """The causal conv's channels: q, k and v (qwen3_next.py Qwen3NextGatedDeltaNet: key_dim x 2 +
        value_dim)."""
        return self.key_dim * 2 + self.value_dim

    def attends(self, layer: int) -> bool:
        return self.layer_types[layer] == "full_attention"


def is_hybrid(config: Mapping[str, Any]) -> bool:
    """A Gated DeltaNet hybrid: linear-attention heads in the (text) config."""
    return "linear_num_value_heads" in text_config(config)


def hybrid_shape(config: Mapping[str, Any]) -> HybridShape:
    """The config's hybrid shape; layer_types as transformers derives them (Qwen3NextConfig: every
    full_attention_interval-th layer attends, default 4, when the file lists none)."""
    text = text_config(config)
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
        attn_output_gate=bool(text.get("attn_output_gate", True)),
    )


def hybrid_of(config: Mapping[str, Any]) -> HybridShape | None:
    return hybrid_shape(config) if is_hybrid(config) else None
