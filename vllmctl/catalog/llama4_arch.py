"""What a Llama 4 config.json says as vLLM's llama4.py / mllama4.py build the model: interleaved dense and MoE
layers (routed experts + one shared expert), chunked local and global attention layers, the vision tower with
its pixel-shuffle adapter, and that tower's weights per tensor-parallel rank.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vllmctl.catalog.vision_arch import PixelShuffle, VisionConfig

LLAMA4_TYPES = frozenset({"llama4", "llama4_text"})
# transformers' Llama4TextConfig / Llama4VisionConfig defaults (5.24.0) for the keys the defaults table lacks
TEXT_DEFAULTS: dict[str, Any] = {
    "intermediate_size_mlp": 16384,
    "interleave_moe_layer_step": 1,
    "attention_chunk_size": 8192,
    "no_rope_layer_interval": 4,
}
VISION_DEFAULTS: dict[str, Any] = {
    "vision_output_dim": 7680,
    "pixel_shuffle_ratio": 0.5,
    "projector_input_dim": 4096,
    "projector_output_dim": 4096,
    "multi_modal_projector_bias": False,
}
# Llama4ImageProcessor's max_patches (preprocessor_config.json, not config.json): the tiles of the largest
# image vLLM profiles (Mllama4ProcessingInfo.get_image_size_with_most_features: 16 tiles x 1), plus its
# global tile (patches_per_image = 1 + r_h x r_w).
MAX_TILES = 16


def is_llama4(config: Mapping[str, Any]) -> bool:
    return str(config.get("model_type", "")) in LLAMA4_TYPES


def layer_types(text: Mapping[str, Any]) -> tuple[str, ...]:
    """One per layer, as transformers' Llama4TextConfig derives them: a no_rope_layers entry of 1 is a RoPE
    layer with chunked local attention (when attention_chunk_size is set), 0 a global NoPE layer; an empty
    no_rope_layers makes every no_rope_layer_interval-th layer global (llama4.py Llama4Attention:
    `self.nope = config.no_rope_layers[self.layer_idx] == 0`)."""
    text = {**TEXT_DEFAULTS, **text}
    layers = int(text["num_hidden_layers"])
    interval = int(text["no_rope_layer_interval"])
    rope = list(text.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(layers)])
    chunked = bool(text.get("attention_chunk_size"))
    return tuple("chunked_attention" if r and chunked else "full_attention" for r in rope[:layers])


def text_fields(text: Mapping[str, Any]) -> dict[str, Any]:
    """ModelArch fields of a Llama 4 text config: a layer is MoE when interleave_moe_layer_step divides its
    number (Llama4DecoderLayer: `(layer_idx + 1) % interleave_moe_layer_step == 0`); a MoE layer holds
    num_local_experts routed experts and one shared expert, both of intermediate_size (Llama4MoE), a dense
    layer an MLP of intermediate_size_mlp."""
    text = {**TEXT_DEFAULTS, **text}
    step = int(text["interleave_moe_layer_step"])
    moe = step > 0 and int(text.get("num_local_experts") or 0) > 0
    return {
        "intermediate_size": int(text["intermediate_size_mlp"]),
        "moe_intermediate_size": int(text["intermediate_size"]) if moe else 0,
        "num_experts": int(text["num_local_experts"]) if moe else 0,
        "experts_per_token": int(text.get("num_experts_per_tok") or 1) if moe else 0,
        "num_shared_experts": 1 if moe else 0,
        "moe_layer_freq": max(step, 1),
        "layer_types": layer_types(text),
        "attention_chunk_size": int(text.get("attention_chunk_size") or 0),
    }


def llama4_vision(config: Mapping[str, Any]) -> VisionConfig | None:
    """The vision tower of a Llama4ForConditionalGeneration config (mllama4.py Llama4VisionModel): CLIP-like
    blocks over (image_size / patch_size)^2 patches plus a class token per tile, merged 1 / ratio per side by
    the pixel shuffle."""
    raw, text = config.get("vision_config"), config.get("text_config")
    if not isinstance(raw, Mapping) or not isinstance(text, Mapping):
        return None
    raw = {**VISION_DEFAULTS, **raw}
    patch = int(raw["patch_size"])
    per_tile = (int(raw["image_size"]) // patch) ** 2 + 1
    return VisionConfig(
        depth=int(raw["num_hidden_layers"]),
        hidden_size=int(raw["hidden_size"]),
        intermediate_size=int(raw["intermediate_size"]),
        num_heads=int(raw["num_attention_heads"]),
        patch_size=patch,
        out_hidden_size=int(text["hidden_size"]),
        spatial_merge_size=round(1 / float(raw["pixel_shuffle_ratio"])),
        in_channels=int(raw.get("num_channels", 3)),
        max_patches=(MAX_TILES + 1) * per_tile,
        position_embeddings=per_tile,
        pixel_shuffle=PixelShuffle(
            int(raw["projector_input_dim"]),
            int(raw["projector_output_dim"]),
            int(raw["vision_output_dim"]),
            bool(raw["multi_modal_projector_bias"]),
        ),
    )


def vision_params_per_rank(vision: VisionConfig, tp: int) -> int:
    """Llama 4's vision tower and projector on one rank, split by TP (mm encoder TP mode "weights"), as
    mllama4.py builds them: the patch embedding and each block's qkv / fc1 column-parallel, o_proj / fc2
    row-parallel (their biases whole), LayerNorms, the class token and positional embedding replicated; the
    adapter MLP (fc1 column-, fc2 row-parallel) and the projector (column-parallel, gathered)."""
    shuffle = vision.pixel_shuffle
    assert shuffle is not None
    d, inner = vision.hidden_size, vision.intermediate_size // tp
    heads = vision.num_heads // tp * (d // vision.num_heads)
    block = 3 * heads * (d + 1) + (d * heads + d) + inner * (d + 1) + (d * inner + d) + 4 * d
    patch = d // tp * vision.in_channels * vision.patch_size**2
    embeddings = d + vision.position_embeddings * d + 4 * d
    hidden = shuffle.input_dim // tp
    adapter = hidden * vision.intermediate_size + shuffle.output_dim * hidden
    if shuffle.bias:
        adapter += hidden + shuffle.output_dim
    projector = vision.out_hidden_size // tp * shuffle.vision_output_dim
    return vision.depth * block + patch + embeddings + adapter + projector
