"""The lab's tiny LoRA adapters for the tiny Llama: PEFT-format directories written with numpy and
safetensors.

Deterministic bytes per adapter name, cached under a content key beside the tiny model, built atomically.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

from vllmctl.lab import tinymodel

FORMAT_VERSION = 1
RANK = 8
TARGET_MODULES = ("q_proj", "v_proj")
CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
ADAPTER_FILES = (CONFIG_FILE, WEIGHTS_FILE)


def adapter_config(rank: int = RANK, target_modules: tuple[str, ...] = TARGET_MODULES) -> dict[str, Any]:
    """PEFT's `adapter_config.json` for a LoRA on the tiny model: what vLLM reads to load it."""
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": rank,
        "lora_alpha": 2 * rank,
        "lora_dropout": 0.0,
        "target_modules": list(target_modules),
        "bias": "none",
        "fan_in_fan_out": False,
        "modules_to_save": None,
        "use_rslora": False,
        "use_dora": False,
        "base_model_name_or_path": "tiny-llama",
    }


def _module_shape(config: dict[str, Any], module: str) -> tuple[int, int]:
    """(in, out) features of one projection of the tiny Llama, from its weight shape (out, in)."""
    out_features, in_features = tinymodel.weight_shapes(config)[f"model.layers.0.{_path(module)}.weight"]
    return in_features, out_features


def _path(module: str) -> str:
    return f"mlp.{module}" if module in ("gate_proj", "up_proj", "down_proj") else f"self_attn.{module}"


def adapter_weights(name: str, rank: int = RANK, modules: tuple[str, ...] = TARGET_MODULES) -> dict[str, Any]:
    """lora_A (r × in) and lora_B (out × r) per layer and module, seeded by the adapter's name."""
    config = tinymodel.tiny_config()
    rng = np.random.default_rng(int(hashlib.sha256(name.encode()).hexdigest()[:8], 16))
    weights: dict[str, Any] = {}
    for layer in range(int(config["num_hidden_layers"])):
        for module in modules:
            in_features, out_features = _module_shape(config, module)
            prefix = f"base_model.model.model.layers.{layer}.{_path(module)}"
            weights[f"{prefix}.lora_A.weight"] = rng.normal(0, 0.02, (rank, in_features)).astype(np.float32)
            weights[f"{prefix}.lora_B.weight"] = rng.normal(0, 0.02, (out_features, rank)).astype(np.float32)
    return dict(sorted(weights.items()))


def content_key(name: str) -> str:
    inputs = {
        "format": FORMAT_VERSION,
        "name": name,
        "config": adapter_config(),
        "model": tinymodel.content_key(),
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def write_tiny_adapter(target: Path, name: str) -> None:
    (target / CONFIG_FILE).write_text(json.dumps(adapter_config(), indent=2, sort_keys=True) + "\n")
    save_file(adapter_weights(name), str(target / WEIGHTS_FILE), metadata={"format": "pt"})


def ensure_tiny_adapter(name: str, cache_dir: Path | None = None) -> Path:
    """The directory of the tiny adapter `name`, built once under `cache_dir/tiny-lora-<name>-<key>`."""
    root = cache_dir if cache_dir is not None else tinymodel.default_models_dir()
    final = root / f"tiny-lora-{name}-{content_key(name)}"
    return tinymodel.build_once(final, ADAPTER_FILES, lambda at: write_tiny_adapter(at, name), "tiny adapter")
