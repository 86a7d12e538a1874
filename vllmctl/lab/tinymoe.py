"""The lab's tiny MoE checkpoint: a Mixtral with the tiny Llama's attention, tokenizer and vocabulary and four
experts per layer (two per token), built like the tiny Llama and cached under its own content key; vLLM's
expert parallel and its external data-parallel mode (refused for a dense model) need one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vllmctl.lab.tinymodel import (
    MODEL_FILES,
    build_once,
    content_key,
    default_models_dir,
    tiny_config,
    tiny_weights,
    weight_shapes,
    write_tiny_model,
)

EXPERTS = 4
EXPERTS_PER_TOKEN = 2


def tiny_moe_config() -> dict[str, Any]:
    """The tiny Llama's config as a MixtralForCausalLM (vLLM 0.32.0's CPU build serves it)."""
    return tiny_config() | {
        "architectures": ["MixtralForCausalLM"],
        "model_type": "mixtral",
        "num_local_experts": EXPERTS,
        "num_experts_per_tok": EXPERTS_PER_TOKEN,
        "router_aux_loss_coef": 0.0,
        "output_router_logits": False,
        "sliding_window": None,
    }


def moe_weight_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Tensor name → shape: the Llama's without its dense MLP, and per layer the router (experts, hidden)
    and each expert's w1 and w3 (inter, hidden) and w2 (hidden, inter), named as vLLM's Mixtral loader
    reads them."""
    hidden, inter = int(config["hidden_size"]), int(config["intermediate_size"])
    shapes = {name: shape for name, shape in weight_shapes(config).items() if ".mlp." not in name}
    for layer in range(int(config["num_hidden_layers"])):
        prefix = f"model.layers.{layer}.block_sparse_moe"
        shapes[f"{prefix}.gate.weight"] = (int(config["num_local_experts"]), hidden)
        for expert in range(int(config["num_local_experts"])):
            shapes[f"{prefix}.experts.{expert}.w1.weight"] = (inter, hidden)
            shapes[f"{prefix}.experts.{expert}.w3.weight"] = (inter, hidden)
            shapes[f"{prefix}.experts.{expert}.w2.weight"] = (hidden, inter)
    return shapes


def write_tiny_moe_model(target: Path) -> None:
    config = tiny_moe_config()
    write_tiny_model(target, config, tiny_weights(config, shapes=moe_weight_shapes(config)))


def ensure_tiny_moe_model(cache_dir: Path | None = None) -> Path:
    """Return the directory of the tiny MoE model, building it once under `cache_dir/tiny-moe-<key>`."""
    root = cache_dir if cache_dir is not None else default_models_dir()
    final = root / f"tiny-moe-{content_key(tiny_moe_config())}"
    return build_once(final, MODEL_FILES, write_tiny_moe_model, "tiny MoE model")
