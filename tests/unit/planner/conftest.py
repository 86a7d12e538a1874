"""Small synthetic architectures whose weights and KV sizes are computed by hand in the tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from vllmctl.catalog.arch import ModelArch, parse_config

TINY: dict[str, Any] = {
    "model_type": "llama",
    "hidden_size": 1024,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "intermediate_size": 4096,
    "vocab_size": 32000,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 8192,
}


@pytest.fixture
def make_arch() -> Callable[..., ModelArch]:
    """tiny arch: 2 layers, hidden 1024, 8 heads / 2 KV heads of 128, MLP 4096, vocab 32000, untied."""

    def build(**overrides: Any) -> ModelArch:
        return parse_config({**TINY, **overrides}, "tiny")

    return build


@pytest.fixture
def tiny(make_arch: Callable[..., ModelArch]) -> ModelArch:
    return make_arch()
