"""What a vision-language config.json says about its image encoder (ViT blocks, patches, the projector into
the text model), as vLLM's model classes read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllmctl.catalog.config_fields import first_int, text_config


@dataclass(frozen=True)
class PixelShuffle:
    """Llama 4's vision adapter (mllama4.py Llama4VisionPixelShuffleMLP): after the pixel shuffle, an MLP of
    the encoder's intermediate size -> projector_input_dim -> projector_output_dim, then the projector
    (Llama4MultiModalProjector) vision_output_dim -> the text model's hidden size."""

    input_dim: int  # projector_input_dim
    output_dim: int  # projector_output_dim
    vision_output_dim: int
    bias: bool = False  # multi_modal_projector_bias


@dataclass(frozen=True)
class VisionConfig:
    """A vision-language model's image encoder (ViT blocks + a merger/projector into the text model)."""

    depth: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    patch_size: int
    out_hidden_size: int  # the text model's hidden size the projector maps into
    spatial_merge_size: int = 1  # patches merged into one text token (Qwen2-VL: 2×2)
    temporal_patch_size: int = 1
    in_channels: int = 3
    gated_mlp: bool = False  # SwiGLU blocks (Qwen2.5-VL) rather than fc1/fc2 (CLIP, SigLIP)
    max_patches: int = 576  # patches of the largest image the processor emits
    deepstack: int = 0  # Qwen3-VL: extra mergers whose outputs travel with the main one into the decoder
    position_embeddings: int = 0  # learned patch position embeddings (Qwen3-VL, SigLIP)
    linear_projector: bool = False  # Gemma 3: one vision hidden → text hidden matrix (and a norm), not split
    pixel_shuffle: PixelShuffle | None = None  # Llama 4: the adapter MLP after the pixel shuffle


# Qwen2-VL / Qwen2.5-VL processors accept images up to max_pixels = 12845056 (3584²) by default.
QWEN_VL_MAX_PIXELS = 12845056
QWEN3_VL_MAX_PIXELS = 16777216


def vision_of(config: dict[str, Any]) -> VisionConfig | None:
    """The image encoder a vision-language config describes; None for a text-only model."""
    raw = config.get("vision_config")
    if not isinstance(raw, dict):
        return None
    hidden = first_int(raw, "hidden_size", "embed_dim")
    patch = first_int(raw, "patch_size", "spatial_patch_size", default=14)
    text = text_config(config)
    model_type = str(config.get("model_type", ""))
    if model_type.startswith("qwen2"):
        max_patches = QWEN_VL_MAX_PIXELS // (patch * patch)
        gated = model_type == "qwen2_5_vl"
    elif model_type.startswith(("qwen3_vl", "qwen3_5", "qwen3_omni")):
        # Qwen3-VL's processor takes images up to size.longest_edge = 16777216 pixels; vLLM profiles the
        # encoder with that largest image (qwen3_vl.py, _get_vision_info with image_processor.size).
        max_patches, gated = QWEN3_VL_MAX_PIXELS // (patch * patch), False
    else:
        side = first_int(raw, "image_size", default=336) // patch
        siglip = str(raw.get("model_type", "")).startswith("siglip")
        max_patches, gated = side * side + (0 if siglip else 1), False  # one size (+ CLIP's class token)
    gemma3 = model_type == "gemma3"
    # Gemma 3 pools the patches to mm_tokens_per_image tokens: a merge of (patches / tokens) ** 0.5 per side.
    tokens = first_int(config, "mm_tokens_per_image") if gemma3 else 0
    merge = (
        round((max_patches / tokens) ** 0.5) if tokens else first_int(raw, "spatial_merge_size", default=1)
    )
    positions = first_int(raw, "num_position_embeddings", default=max_patches if gemma3 else 0)
    return VisionConfig(
        depth=first_int(raw, "depth", "num_hidden_layers"),
        hidden_size=hidden,
        intermediate_size=first_int(raw, "intermediate_size", default=4 * hidden),
        num_heads=first_int(raw, "num_heads", "num_attention_heads", default=16),
        patch_size=patch,
        out_hidden_size=first_int(raw, "out_hidden_size", default=first_int(text, "hidden_size")),
        spatial_merge_size=merge,
        temporal_patch_size=first_int(raw, "temporal_patch_size", default=1),
        in_channels=first_int(raw, "in_chans", "num_channels", "in_channels", default=3),
        gated_mlp=gated,
        max_patches=max_patches,
        deepstack=len(raw.get("deepstack_visual_indexes") or ()),
        position_embeddings=positions,
        linear_projector=gemma3,
    )
