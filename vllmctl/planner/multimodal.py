"""Vision encoder memory of a vision-language model: its weights per TP rank, the activation peak of vLLM's
encoder profile run with the largest images, and the encoder outputs kept for the decoder's profile run.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from vllmctl.catalog.arch import ModelArch
from vllmctl.errors import InputError
from vllmctl.planner.profile_run import ACT_BYTES

# Model types whose vLLM processor takes videos (get_supported_mm_limits has "video"); a video's most tokens
# exceed an image's, so with vLLM's default limits the encoder is profiled with videos
VIDEO_MODEL_TYPES = frozenset(
    {"qwen2_vl", "qwen2_5_vl", "qwen2_5_omni", "qwen3_vl", "qwen3_vl_moe", "qwen3_omni_moe", "glm4v",
     "glm4v_moe", "llava_onevision", "llava_next_video"}
)  # fmt: skip


@dataclass(frozen=True)
class EncoderMemory:
    weights: float = 0.0  # bytes per GPU
    activation: float = 0.0
    outputs: float = 0.0
    items_profiled: int = 0  # media items in the profile batch
    tokens_per_item: int = 0  # text-model tokens one largest image becomes


def encoder_params_per_rank(arch: ModelArch, tp: int) -> int:
    """ViT blocks (qkv, proj, MLP, norms; linears split by TP), patch embedding and projector."""
    vision = arch.vision
    if vision is None:
        return 0
    d, inner = vision.hidden_size, vision.intermediate_size
    mlp = (3 if vision.gated_mlp else 2) * d * inner + inner + d
    block = (4 * d * d + 4 * d + mlp) // tp + 4 * d
    patch_embed = vision.in_channels * vision.temporal_patch_size * vision.patch_size**2 * d
    patch_embed += vision.position_embeddings * d
    merged = d * vision.spatial_merge_size**2
    if vision.linear_projector:  # Gemma 3: pooled patches, a norm and one replicated matrix (a Parameter)
        return vision.depth * block + patch_embed + d * vision.out_hidden_size + d
    if vision.spatial_merge_size > 1:  # Qwen2-VL merger: norm, merged→merged, merged→text hidden
        projector = merged * merged + merged * vision.out_hidden_size + d
    else:  # LLaVA projector: vision hidden→text hidden→text hidden
        projector = d * vision.out_hidden_size + vision.out_hidden_size**2
    projector *= 1 + vision.deepstack  # Qwen3-VL: one more merger per deepstack layer
    return vision.depth * block + patch_embed + projector // tp


@lru_cache(maxsize=4096)
def encoder_memory(
    arch: ModelArch, tp: int, max_num_batched_tokens: int, max_num_seqs: int, items: int
) -> EncoderMemory:
    """vLLM profiles the encoder with as many of the largest items as its encoder budget
    (max(batched tokens, one item's tokens)) holds, but no more than the prompts could carry."""
    vision = arch.vision
    if vision is None:
        return EncoderMemory()
    weights = float(encoder_params_per_rank(arch, tp) * arch.dtype_bytes)
    tokens_per_item = max(vision.max_patches // vision.spatial_merge_size**2, 1)
    if items == 0:  # text-only: no encoder profile run
        return EncoderMemory(weights, tokens_per_item=tokens_per_item)
    budget = max(max_num_batched_tokens, tokens_per_item)
    profiled = max(1, min(items * max_num_seqs, budget // tokens_per_item))
    patches = profiled * vision.max_patches
    pixels = vision.in_channels * vision.temporal_patch_size * vision.patch_size**2
    inner = (3 if vision.gated_mlp else 2) * vision.intermediate_size // tp
    per_patch = 2 * vision.hidden_size + pixels + max(inner, 3 * vision.hidden_size // tp)
    activation = float(patches * per_patch * ACT_BYTES)
    # Qwen3-VL keeps the deepstack mergers' outputs beside the main one: out_hidden x (1 + deepstack) wide.
    outputs = float(profiled * tokens_per_item * vision.out_hidden_size * (1 + vision.deepstack) * ACT_BYTES)
    return EncoderMemory(weights, activation, outputs, profiled, tokens_per_item)


def default_limits_unmodelled(arch: ModelArch) -> InputError | None:
    """vLLM's default limit_mm_per_prompt on a video model: V1 profiles the modality with the most tokens
    per item (MultiModalBudget.get_modality_with_max_tokens), videos of the most tokens: not modelled."""
    # a composite config's text model type names the family: qwen3_vl_moe_text
    if arch.vision is None or arch.model_type.removesuffix("_text") not in VIDEO_MODEL_TYPES:
        return None
    return InputError(
        f"{arch.name} with vLLM's default limit_mm_per_prompt: vLLM profiles its encoder with the modality "
        "of the most tokens per item, here videos of the maximum feature size ('profiled with 1 video items "
        "of the maximum feature size'), which the planner does not model (a 0.11.0 Qwen3-VL-30B-A3B start at "
        "TP 4 on RTX 3090s logged 2.31 GiB of KV where an image profile predicts 4.77)",
        "give the limits vLLM will run with: --images-per-prompt N --videos-per-prompt 0 here, and "
        '--limit-mm-per-prompt \'{"image": N, "video": 0}\' on vllm serve (vllmctl plan renders it)',
    )
