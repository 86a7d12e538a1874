"""The fields of a text config that neither the config nor a known config class gives (catalog/arch.py then
guesses them): named in estimates and plans, refused where another value moves memory (planner/guesses.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vllmctl.catalog.class_defaults import class_entry_for

# The keys vLLM's _get_and_verify_max_len reads a context length from (config/model.py, 0.11.0).
LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "max_target_positions",
               "max_sequence_length", "max_seq_length", "seq_len")  # fmt: skip
# The planner's field -> the keys a config may give it under; a field none of them sets is guessed.
GUESSABLE: dict[str, tuple[str, ...]] = {
    "num_key_value_heads": ("num_key_value_heads", "n_head_kv"),
    "intermediate_size": ("intermediate_size", "n_inner", "ffn_dim"),
    "moe_intermediate_size": ("moe_intermediate_size",),
    "max_position_embeddings": (*LENGTH_KEYS, "model_max_length"),
}
# How each guess is made, for the reasons.
HOW = {
    "num_key_value_heads": "num_attention_heads: one KV head per query head",
    "intermediate_size": "4 x hidden_size",
    "moe_intermediate_size": "intermediate_size",
    "max_position_embeddings": "vLLM's own fallback when a config names no length",
}


def _has(config: Mapping[str, Any], keys: tuple[str, ...]) -> bool:
    return any(isinstance(config.get(k), int) and not isinstance(config.get(k), bool) for k in keys)


def guessed_fields(config: Mapping[str, Any], used: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    """(field, the value used) for each field in `used` the text config leaves out, when its model_type has
    no config class the table or the installed transformers knows (a known class's own derivation is no
    guess: its defaults are already filled in)."""
    if class_entry_for(str(config.get("model_type") or "")) is not None:
        return ()
    return tuple(
        (field, used[field]) for field, keys in GUESSABLE.items() if field in used and not _has(config, keys)
    )
