"""Typed model architecture parsed from a Hugging Face `config.json`, and its parameter count.

Covers dense GQA (Llama, Qwen, Mistral, Seed-OSS, Gemma 3), MoE (Qwen3-MoE, DeepSeek, gpt-oss, Llama 4), MLA
and sliding window; what a config leaves out takes its transformers class's default (class_defaults.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from vllmctl.catalog.class_defaults import with_class_defaults
from vllmctl.catalog.config_fields import DTYPE_BYTES, first_int
from vllmctl.catalog.guessed import LENGTH_KEYS, guessed_fields
from vllmctl.catalog.hybrid_arch import HybridShape, hybrid_of
from vllmctl.catalog.llama4_arch import is_llama4, llama4_vision, text_fields
from vllmctl.catalog.quant import QuantConfig, parse_quantization
from vllmctl.catalog.vision_arch import VisionConfig, vision_of
from vllmctl.errors import InputError


@dataclass(frozen=True)
class ModelArch:
    name: str
    model_type: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    intermediate_size: int
    tie_embeddings: bool = False
    dtype: str = "bfloat16"
    max_position_embeddings: int = 4096
    quantization: QuantConfig | None = None
    qkv_bias: bool = False
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    num_shared_experts: int = 0
    shared_expert_intermediate_size: int = 0
    first_k_dense: int = 0
    moe_layer_freq: int = 1
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    sliding_window: int = 0
    layer_types: tuple[str, ...] = ()
    vision: VisionConfig | None = None
    architecture: str = ""  # the config's first `architectures` entry, e.g. LlamaForCausalLM
    mtp_layers: int = 0  # num_nextn_predict_layers: the multi-token-prediction layers `method: mtp` loads
    # Positions of each rotary cos/sin cache where the model builds more than one or sizes it otherwise than
    # max_position_embeddings (Gemma 3: a local and a global rope, the global one x its linear factor).
    rope_positions: tuple[int, ...] = ()
    hybrid: HybridShape | None = None  # Gated DeltaNet hybrids (Qwen3-Next, Qwen3.5): which layers attend
    rotary_factor: float = 1.0  # partial_rotary_factor: the share of head_dim get_rope rotates (and caches)
    attention_chunk_size: int = 0  # Llama 4: its "chunked_attention" layers attend within chunks this long
    # (field, value) the config left out and no known config class fills: guessed (catalog/guessed.py)
    guessed: tuple[tuple[str, int], ...] = ()

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES.get(self.dtype, 2)

    def is_moe_layer(self, index: int) -> bool:
        if not self.is_moe or index < self.first_k_dense:
            return False
        return (index + 1) % max(self.moe_layer_freq, 1) == 0

    @property
    def attention_kinds(self) -> tuple[str, ...]:
        """One entry per layer: 'full', 'sliding', 'mla' or 'mamba' (a hybrid's state layer). Llama 4's
        chunked layers cache as 'full': with the hybrid KV cache manager off (VllmConfig turns it off for a
        model with attention_chunk_size unless VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE),
        kv_cache_utils' unify_hybrid_kv_cache_specs turns their chunked specs into FullAttentionSpec."""
        if self.is_mla:
            return ("mla",) * self.num_layers
        if self.hybrid is not None:
            return tuple("full" if self.hybrid.attends(i) else "mamba" for i in range(self.num_layers))
        if self.layer_types:
            return tuple("sliding" if "sliding" in t else "full" for t in self.layer_types)
        return (("sliding" if self.sliding_window else "full"),) * self.num_layers


def _architecture(config: dict[str, Any]) -> str:
    names = config.get("architectures")
    return str(names[0]) if isinstance(names, list) and names else ""


def _derived_max_len(config: dict[str, Any]) -> int:
    """vLLM's _get_and_verify_max_len (config/model.py, 0.11.0): the smallest of the length keys, then rope
    scaling stretches it (yarn from its original length) except su/longrope/llama3 and Gemma 3."""
    lengths = [first_int(config, key) for key in LENGTH_KEYS if first_int(config, key)]
    length = first_int(config, "model_max_length") or (min(lengths) if lengths else 2048)
    scaling = config.get("rope_scaling")
    if isinstance(scaling, dict) and "gemma3" not in str(config.get("model_type", "")):
        rope_type = scaling.get("rope_type") or scaling.get("type")
        factor = scaling.get("factor", 1.0)
        if rope_type not in ("su", "longrope", "llama3", "mrope") and isinstance(factor, int | float):
            if rope_type == "yarn":
                length = int(scaling.get("original_max_position_embeddings", length))
            length = int(length * factor)
    return length


def _layer_types(config: dict[str, Any], layers: int) -> tuple[str, ...]:
    """The config's layer_types, else the ones its class derives from sliding_window_pattern (Gemma 2/3:
    every pattern-th layer full, the rest sliding)."""
    layer_types = tuple(str(t) for t in config.get("layer_types") or ())
    pattern = first_int(config, "sliding_window_pattern")
    if not layer_types and pattern > 1 and config.get("sliding_window"):
        layer_types = tuple(
            "full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(layers)
        )
    return layer_types if len(layer_types) == layers else ()


def _rope_positions(config: dict[str, Any]) -> tuple[int, ...]:
    """vLLM's gemma3.py builds a local rope (rope_local_base_freq, unscaled) and a global one (rope_theta,
    rope_scaling); a linear scaling's cache holds max_position_embeddings x factor positions."""
    if not str(config.get("model_type", "")).startswith("gemma3"):
        return ()
    positions = first_int(config, "max_position_embeddings", default=131072)
    scaling = config.get("rope_scaling")
    factor = 1.0
    if isinstance(scaling, dict) and (scaling.get("rope_type") or scaling.get("type")) == "linear":
        factor = float(scaling.get("factor", 1.0))
    return (positions, int(positions * factor))


def _rope_field(config: dict[str, Any], key: str) -> Any:
    """A rope setting at the top level or, as transformers 5 writes it, in rope_parameters / rope_scaling."""
    for place in (config, config.get("rope_parameters"), config.get("rope_scaling")):
        if isinstance(place, dict) and place.get(key) is not None:
            return place[key]
    return None


def parse_config(config: dict[str, Any], name: str = "model") -> ModelArch:
    """Turns a config.json mapping into a ModelArch; raises InputError naming what is missing."""
    config = with_class_defaults(config)
    vision = llama4_vision(config) if is_llama4(config) else vision_of(config)
    hybrid = hybrid_of(config)
    architecture = _architecture(config)
    if isinstance(config.get("text_config"), dict):
        config = {**config["text_config"], **{k: v for k, v in config.items() if k == "quantization_config"}}
    hidden = first_int(config, "hidden_size", "n_embd", "d_model")
    layers = first_int(config, "num_hidden_layers", "n_layer", "num_layers")
    heads = first_int(config, "num_attention_heads", "n_head")
    vocab = first_int(config, "vocab_size")
    if not (hidden and layers and heads and vocab):
        raise InputError(
            f"{name}: config.json lacks hidden_size, num_hidden_layers, num_attention_heads or vocab_size",
            "pass a decoder-only language model's config.json (architectures like LlamaForCausalLM)",
        )
    kv_heads = first_int(config, "num_key_value_heads", "n_head_kv", default=heads)
    head_dim = first_int(config, "head_dim", default=hidden // heads)
    experts = first_int(config, "num_experts", "num_local_experts", "n_routed_experts")
    shared_size = first_int(config, "shared_expert_intermediate_size")
    sliding = 0
    if config.get("sliding_window") and config.get("use_sliding_window", True):
        sliding = first_int(config, "sliding_window")
    layer_types = _layer_types(config, layers)
    arch = ModelArch(
        name=name,
        model_type=str(config.get("model_type", "unknown")),
        num_layers=layers,
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=vocab,
        intermediate_size=first_int(config, "intermediate_size", "n_inner", "ffn_dim", default=4 * hidden),
        tie_embeddings=bool(config.get("tie_word_embeddings", False)),
        dtype=str(config.get("torch_dtype") or config.get("dtype") or "bfloat16"),
        max_position_embeddings=_derived_max_len(config),
        quantization=parse_quantization(config.get("quantization_config")),
        qkv_bias=bool(
            config.get("attention_bias", config.get("model_type") in ("qwen2", "qwen2_moe", "qwen2_5_vl"))
        ),
        num_experts=experts,
        experts_per_token=first_int(config, "num_experts_per_tok", "experts_per_token", "moe_topk")
        if experts
        else 0,
        moe_intermediate_size=first_int(
            config, "moe_intermediate_size", default=first_int(config, "intermediate_size")
        )
        if experts
        else 0,
        num_shared_experts=first_int(config, "n_shared_experts", default=1 if shared_size else 0),
        shared_expert_intermediate_size=shared_size,
        first_k_dense=first_int(config, "first_k_dense_replace"),
        moe_layer_freq=first_int(config, "moe_layer_freq", "decoder_sparse_step", default=1),
        kv_lora_rank=first_int(config, "kv_lora_rank"),
        q_lora_rank=first_int(config, "q_lora_rank"),
        qk_rope_head_dim=first_int(config, "qk_rope_head_dim"),
        qk_nope_head_dim=first_int(config, "qk_nope_head_dim"),
        v_head_dim=first_int(config, "v_head_dim"),
        sliding_window=sliding,
        layer_types=layer_types,
        vision=vision,
        architecture=architecture,
        mtp_layers=first_int(config, "num_nextn_predict_layers"),
        rope_positions=_rope_positions(config),
        hybrid=hybrid,
        rotary_factor=float(_rope_field(config, "partial_rotary_factor") or 1.0),
    )
    if is_llama4(config):
        arch = replace(arch, **text_fields(config))
    used = {"num_key_value_heads": arch.num_kv_heads, "intermediate_size": arch.intermediate_size,
            "max_position_embeddings": arch.max_position_embeddings}  # fmt: skip
    if arch.is_moe:
        used["moe_intermediate_size"] = arch.moe_intermediate_size
    return replace(arch, guessed=guessed_fields(config, used))


def parse_config_text(text: str, name: str) -> ModelArch:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{name}: not valid JSON ({exc.msg} at line {exc.lineno})", "pass a config.json"
        ) from exc
    if not isinstance(data, dict):
        raise InputError(f"{name}: config.json must be a JSON object", "pass a model's config.json")
    return parse_config(data, name)
