"""What a transformers config class says of the keys the planner reads: its literal defaults, the sliding
pattern it derives and its sub-configs' model types (scripts/gen_config_defaults.py writes the table from it;
class_defaults.py asks it at run time for a model type the table lacks)."""

from __future__ import annotations

import inspect
from typing import Any

# What catalog/arch.py reads from a text or vision config; other keys do not change a plan.
KEYS = frozenset(
    (
        "hidden_size",
        "n_embd",
        "d_model",
        "num_hidden_layers",
        "n_layer",
        "num_layers",
        "num_attention_heads",
        "n_head",
        "vocab_size",
        "num_key_value_heads",
        "n_head_kv",
        "head_dim",
        "intermediate_size",
        "n_inner",
        "ffn_dim",
        "tie_word_embeddings",
        "max_position_embeddings",
        "n_positions",
        "max_seq_len",
        "seq_length",
        "max_target_positions",
        "max_sequence_length",
        "max_seq_length",
        "seq_len",
        "sliding_window",
        "use_sliding_window",
        "sliding_window_pattern",
        "attention_bias",
        "num_experts",
        "num_local_experts",
        "n_routed_experts",
        "num_experts_per_tok",
        "experts_per_token",
        "moe_topk",
        "moe_intermediate_size",
        "n_shared_experts",
        "shared_expert_intermediate_size",
        "first_k_dense_replace",
        "moe_layer_freq",
        "decoder_sparse_step",
        "kv_lora_rank",
        "q_lora_rank",
        "qk_rope_head_dim",
        "qk_nope_head_dim",
        "v_head_dim",
        "num_nextn_predict_layers",
        "depth",
        "embed_dim",
        "patch_size",
        "spatial_patch_size",
        "image_size",
        "num_heads",
        "out_hidden_size",
        "spatial_merge_size",
        "temporal_patch_size",
        "in_chans",
        "num_channels",
        "in_channels",
        "num_position_embeddings",
        "mm_tokens_per_image",
    )
)


def literal_defaults(cls: Any) -> dict[str, Any]:
    """The defaults the class declares; None means derived in __init__ from other values: left out."""
    found: dict[str, Any] = {}
    for name, param in inspect.signature(cls.__init__).parameters.items():
        value = param.default
        if name in KEYS and isinstance(value, bool | int | str):  # Parameter.empty is a class: not one
            found[name] = value
    pattern = sliding_pattern(cls)
    if pattern:
        found.setdefault("sliding_window_pattern", pattern)
    return found


def sliding_pattern(cls: Any) -> int:
    """Every how many layers a full-attention one comes when the class derives layer_types itself
    (Gemma 2: 2, Gemma 3: 6); 0 when it does not or the layers follow no such period."""
    try:
        kinds = getattr(cls(), "layer_types", None)
    except Exception:  # a class that needs arguments
        return 0
    if not isinstance(kinds, list) or "full_attention" not in kinds or "sliding_attention" not in kinds:
        return 0
    for period in range(2, len(kinds) + 1):
        expected = [
            "full_attention" if (i + 1) % period == 0 else "sliding_attention" for i in range(len(kinds))
        ]
        if kinds == expected:
            return period
    return 0


def sub_configs(cls: Any) -> dict[str, str]:
    """Each nested config's model_type when the config.json gives none (the class's default sub-config)."""
    subs = getattr(cls, "sub_configs", None) or {}
    if not subs:
        return {}
    try:
        instance = cls()
    except Exception:  # a composite class that needs arguments: no defaults to record
        return {}
    found = {}
    for key in sorted(subs):
        sub = getattr(instance, key, None)
        model_type = getattr(sub, "model_type", "")
        if model_type:
            found[key] = str(model_type)
    return found


def class_entry(cls: Any) -> dict[str, Any]:
    """The table's entry for one class: {"defaults": {...}, "sub_configs": {...}}, each when it has any."""
    entry: dict[str, Any] = {}
    defaults = literal_defaults(cls)
    if defaults:
        entry["defaults"] = dict(sorted(defaults.items()))
    subs = sub_configs(cls)
    if subs:
        entry["sub_configs"] = subs
    return entry
