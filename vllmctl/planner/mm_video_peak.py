"""What the Qwen2.5-VL / Qwen3-VL vision tower holds live while vLLM's profile run encodes a video, per
release read: the largest block's tensors on the video's patches, and the inputs profile_run keeps."""

from __future__ import annotations

from vllmctl.catalog.vision_arch import VisionConfig
from vllmctl.planner.versions import Version

QWEN_VIT_VIDEO_ARCHS = frozenset(
    {
        "Qwen2_5_VLForConditionalGeneration",
        "Qwen3VLForConditionalGeneration",
        "Qwen3VLMoeForConditionalGeneration",
    }
)
# Qwen2_5_VisionAttention as read: 0.11.0 all-gathers the fused QKV under TP and rotates q‖k in fp32
# (qwen2_vl.apply_rotary_pos_emb_vision: `t_ = t.float()`); 0.15.0-0.34.0 rotate a bf16 copy of q‖k
# (`qk_reshaped.contiguous()`, ApplyRotaryEmb). 0.11.1-0.14.x were not read: the per-patch estimate
# stays there.
GATHER_RELEASE: tuple[Version, Version] = ((0, 11, 0), (0, 11, 1))
QK_COPY_SINCE: Version = (0, 15, 0)
FP32_BYTES = 4
ACT_BYTES = 2


def video_peak_modelled(architecture: str, version: Version) -> bool:
    """The releases whose vision-tower forward was read for this architecture."""
    first, until = GATHER_RELEASE
    in_release = first <= version < until or version >= QK_COPY_SINCE
    return architecture in QWEN_VIT_VIDEO_ARCHS and in_release


def _patch_values(vision: VisionConfig) -> int:
    """Pixel values per patch: channels x frames of a temporal patch x the patch's area."""
    return vision.in_channels * vision.temporal_patch_size * vision.patch_size**2


def _block_elements(vision: VisionConfig, tp: int, version: Version) -> int:
    """Elements per patch live at the peak of one vision block (bf16), TP-split linears per rank."""
    d, inner = vision.hidden_size, vision.intermediate_size
    # the block input and norm1's output stay bound (the caller's x, the argument) through the attention
    held = 2 * d
    # MLP: linear_fc1 (or gate_up) output and the activation's output beside x and the norm
    mlp = held + (3 if vision.gated_mlp else 2) * inner // tp
    if version < GATHER_RELEASE[1]:
        # qkv, the contiguous q, k, v, torch.cat([q, k]), its fp32 copy and the fp32 rotary result
        rotary = 16 * d // tp
        # all_gather_interleave: the local qkv, the gathered list and the torch.cat of it (TP > 1 only)
        gather = 3 * d // tp + 6 * d if tp > 1 else 0
        return max(held + max(rotary, gather), mlp)
    # qkv, the q‖k copy and its rotated copy stay bound to the end; then the attention output and its
    # contiguous rearrangement, or that and the proj output
    attention = held + 7 * d // tp + max(2 * d // tp, d // tp + d)
    return max(attention, mlp)


def forward_peak_bytes(vision: VisionConfig, patches: int, tp: int, version: Version) -> float:
    """The vision tower's peak over the video's patches: the largest block, plus what its forward keeps
    bound beside it (0.11.0: the bf16 cast of the pixels in _process_video_input, the position embeddings,
    the deepstack mergers' outputs and the fp32 rotary table; later: the fp32 rotary cos and sin)."""
    head_dim = vision.hidden_size // max(vision.num_heads, 1)
    pixels = _patch_values(vision)
    elements = _block_elements(vision, tp, version)
    if version < GATHER_RELEASE[1]:
        deepstack = vision.deepstack * vision.out_hidden_size // max(vision.spatial_merge_size**2, 1)
        positions = vision.hidden_size if vision.position_embeddings else 0
        extra = pixels * ACT_BYTES + (positions + deepstack) * ACT_BYTES + head_dim // 2 * FP32_BYTES
    else:
        extra = 2 * (head_dim // 2) * FP32_BYTES
    return float(patches * (elements * ACT_BYTES + extra))


def held_input_bytes(vision: VisionConfig, patches: int) -> float:
    """The dummy video's pixel values, float32 as the HF processor returns them, moved to the device by
    _get_mm_dummy_batch and bound to profile_run's batched_dummy_mm_inputs until it returns."""
    pixels = _patch_values(vision)
    return float(patches * pixels * FP32_BYTES)
