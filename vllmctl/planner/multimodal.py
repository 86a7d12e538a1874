"""Vision encoder memory of a vision-language model: its weights per TP rank, the activation peak of vLLM's
encoder profile run with the largest images, and the encoder outputs kept for the decoder's profile run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.llama4_arch import vision_params_per_rank
from vllmctl.errors import InputError
from vllmctl.planner.mm_video_archs import VIDEO_ARCHS_BY_RELEASE
from vllmctl.planner.mm_video_peak import forward_peak_bytes, held_input_bytes, video_peak_modelled
from vllmctl.planner.profile_run import ACT_BYTES
from vllmctl.planner.versions import Version, format_version

# MultiModalConfig.get_limit_per_prompt: an unset modality gets 1 until 0.8.3 (vllm/config.py
# `self.limit_per_prompt.get(modality, 1)`), and from 0.8.4 `999 if envs.VLLM_USE_V1 else 1`
# (get_default_limit_per_prompt; vllm/config/multimodal.py from 0.11, plain 999 from 0.11.2).
DEFAULT_LIMIT_999_SINCE: Version = (0, 8, 4)
V1_DEFAULT_LIMIT = 999
# The registry asks the processor for each enabled modality's most tokens with one item of each
# (registry.get_max_tokens_per_item_by_modality: `{modality: 1 for ... if limit > 0}`) from 0.8.5; before,
# with the limits themselves (999 videos share the context): Qwen2-VL's video profile is modelled from 0.8.5.
MM_COUNTS_ONE_SINCE: Version = (0, 8, 5)
# Qwen2-VL / Qwen2.5-VL (qwen2_vl.py _MAX_FRAMES_PER_VIDEO): 16 frames until 0.10.2, 14 from 0.11.0
QWEN2_VL_FRAMES = (((0, 8, 5), 16), ((0, 11, 0), 14))
QWEN2_VL_ARCHS = frozenset({"Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration"})
# Qwen3-VL (qwen3_vl.py, 0.11.0-0.12.0): get_max_video_tokens returns the video's soft tokens x 12.5
# (the "<t seconds>" text around each), the video's pixels capped by the video processor's
# size.longest_edge (25165824 in Qwen3-VL's video_preprocessor_config.json); from 0.13.0 it returns the
# soft tokens alone (at most the image's 16384), so the image is profiled.
QWEN3_VL_ARCHS = frozenset({"Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration"})
QWEN3_VL_FORMATTED = ((0, 11, 0), (0, 13, 0))
QWEN3_VL_VIDEO_MAX_PIXELS = 25165824
QWEN3_VL_FORMAT_FACTOR = 12.5


def default_limit(version: Version) -> int:
    """Items per prompt vLLM allows a modality limit_mm_per_prompt does not name."""
    return V1_DEFAULT_LIMIT if version >= DEFAULT_LIMIT_999_SINCE else 1


def takes_video(arch: ModelArch, version: Version) -> bool:
    """The release's processor for this architecture declares a "video" modality (generated table)."""
    if arch.vision is None:
        return False
    archs: frozenset[str] = VIDEO_ARCHS_BY_RELEASE[0][1]
    for since, names in VIDEO_ARCHS_BY_RELEASE:
        if version >= since:
            archs = names
    return arch.architecture in archs


def modalities(arch: ModelArch, version: Version) -> tuple[str, ...]:
    if arch.vision is None:
        return ()
    return ("image", "video") if takes_video(arch, version) else ("image",)


def resolved_limits(arch: ModelArch, version: Version, given: Mapping[str, int] | None) -> dict[str, int]:
    """Every modality's limit as vLLM will run it: the given ones, the release's default for the rest
    (given None: vLLM's defaults for all). A modality the processor does not take is kept as given."""
    given = dict(given or {})
    limits = {m: given.pop(m, default_limit(version)) for m in modalities(arch, version)}
    return limits | given


@dataclass(frozen=True)
class MediaItem:
    """The largest item of one modality as vLLM's profiler sizes it."""

    modality: str
    tokens: int  # the item's tokens in the encoder budget (get_mm_max_tokens_per_item)
    patches: int  # patches the encoder runs for it
    outputs: int  # encoder output rows the profile keeps for it (the budget's rows when expanded to it)


def _image_item(arch: ModelArch) -> MediaItem:
    vision = arch.vision
    assert vision is not None
    tokens = max(vision.max_patches // vision.spatial_merge_size**2, 1)
    return MediaItem("image", tokens, vision.max_patches, tokens)


def _video_item(arch: ModelArch, version: Version, max_model_len: int) -> MediaItem | None:
    """The largest video vLLM profiles for this release, or None where the planner does not model it."""
    vision = arch.vision
    assert vision is not None
    image = _image_item(arch)
    merge = vision.spatial_merge_size**2
    if arch.architecture in QWEN2_VL_ARCHS and version >= MM_COUNTS_ONE_SINCE:
        # get_num_frames_with_most_features: the most frames whose tokens fit max_model_len (at least 1),
        # capped at _MAX_FRAMES_PER_VIDEO; frames pad to temporal_patch_size, each pair one grid step.
        cap = max(frames for since, frames in QWEN2_VL_FRAMES if version >= since)
        step = max(vision.temporal_patch_size, 1)
        grids = max_model_len // image.tokens
        frames = min(grids * step if grids else 1, cap)
        grid_t = max(-(-frames // step), 1)
        tokens = grid_t * image.tokens
        return MediaItem("video", tokens, grid_t * vision.max_patches, tokens)
    if arch.architecture in QWEN3_VL_ARCHS:
        first, until = QWEN3_VL_FORMATTED
        step = max(vision.temporal_patch_size, 1)
        soft = QWEN3_VL_VIDEO_MAX_PIXELS // (vision.patch_size**2 * step * merge)
        if version >= until:
            return MediaItem("video", soft, soft * merge, soft)
        if version >= first and max_model_len >= soft:
            # the profile's output (soft tokens) is expanded to the budget's rows (gpu_model_runner
            # profile_run: `output.new_zeros((encoder_budget, hidden))`) and kept for the decoder's run
            tokens = int(soft * QWEN3_VL_FORMAT_FACTOR)
            return MediaItem("video", tokens, soft * merge, tokens)
    return None


def profiled_item(
    arch: ModelArch, version: Version, limits: Mapping[str, int], max_model_len: int
) -> MediaItem | None:
    """The modality vLLM profiles (MultiModalBudget.get_modality_with_max_tokens: the most tokens per
    item, the first on a tie, image before video) and its item; None: a video the planner does not model."""
    if arch.vision is None:
        return None
    image = _image_item(arch)
    if limits.get("video", 0) <= 0 or not takes_video(arch, version):
        return image
    video = _video_item(arch, version, max_model_len)
    if video is None:
        return None
    if limits.get("image", 0) <= 0 or video.tokens > image.tokens:
        return video
    return image


# The video profiles the planner sizes, checked against cited starts (docs/planner.md): with the vision
# tower's live tensors (mm_video_peak) the 0.11.0 Qwen3-VL-30B-A3B starts replay -4.5 % and -0.3 %, the
# 0.23.0 Qwen2.5-VL-7B refusal +4.3 %, but the last two only through the encoder peak and the later outputs
# summed (+10.8 % and +9.7 % counted where they coexist). Until that is settled a profile that runs a video
# is refused (plan: unless tight_fit, which then takes the sized video's estimate).
VIDEO_PROFILE_CHECKED = False


def video_unmodelled(
    arch: ModelArch, version: Version, limits: Mapping[str, int], max_model_len: int
) -> str | None:
    """Why the planner cannot promise this start's encoder profile (vLLM profiles a video), or None."""
    if arch.vision is None or limits.get("video", 0) <= 0 or not takes_video(arch, version):
        return None
    item = profiled_item(arch, version, limits, max_model_len)
    if item is not None and (item.modality == "image" or VIDEO_PROFILE_CHECKED):
        return None
    release = format_version(version)
    if item is None:
        return (
            f"{arch.name} ({arch.architecture}) takes videos in vLLM {release}, whose profile then runs the "
            "modality of the most tokens per item; the planner does not model that release's video for it"
        )
    return (
        f"{arch.name} in vLLM {release} with {limits.get('video')} video(s) per prompt: vLLM profiles its "
        f"encoder with a video ({item.tokens:,} tokens, more than an image's), and the planner's video "
        "estimate is not yet settled within 5 % of cited starts (two of three match only through a sum of "
        "the encoder peak and the outputs made after it)"
    )


@dataclass(frozen=True)
class EncoderMemory:
    weights: float = 0.0  # bytes per GPU
    activation: float = 0.0
    outputs: float = 0.0
    items_profiled: int = 0  # media items in the profile batch
    tokens_per_item: int = 0  # text-model tokens one largest item becomes
    modality: str = "image"  # the modality vLLM profiles


def encoder_params_per_rank(arch: ModelArch, tp: int) -> int:
    """ViT blocks (qkv, proj, MLP, norms; linears split by TP), patch embedding and projector."""
    vision = arch.vision
    if vision is None:
        return 0
    if vision.pixel_shuffle is not None:  # Llama 4: its own blocks, adapter and projector
        return vision_params_per_rank(vision, tp)
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
    arch: ModelArch,
    tp: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    items: int,
    videos: int = 0,
    version: Version | None = None,
    max_model_len: int = 0,
) -> EncoderMemory:
    """vLLM profiles the encoder with as many of the largest items of one modality as its encoder budget
    (max(batched tokens, the most tokens of an item)) holds, but no more than the prompts could carry
    (MultiModalBudget.get_max_items). `items` counts every item per prompt, `videos` the videos among them;
    without a version only images are profiled."""
    vision = arch.vision
    if vision is None:
        return EncoderMemory()
    weights = float(encoder_params_per_rank(arch, tp) * arch.dtype_bytes)
    image = _image_item(arch)
    if items == 0:  # text-only: no encoder profile run
        return EncoderMemory(weights, tokens_per_item=image.tokens)
    item = image
    budget_tokens = image.tokens
    if videos > 0 and version is not None:
        limits = {"image": items - videos, "video": videos}
        item = profiled_item(arch, version, limits, max_model_len) or image
        budget_tokens = max(item.tokens, image.tokens if limits["image"] > 0 else 0)
    budget = max(max_num_batched_tokens, budget_tokens)
    per_prompt = items - videos if item.modality == "image" and version is not None else items
    if item.modality == "video":
        per_prompt = videos
    if max_model_len and videos > 0:  # max_items_per_prompt = max(1, min(limit, max_model_len // tokens))
        per_prompt = max(1, min(per_prompt, max_model_len // item.tokens))
    profiled = max(1, min(per_prompt * max_num_seqs, budget // item.tokens))
    patches = profiled * item.patches
    pixels = vision.in_channels * vision.temporal_patch_size * vision.patch_size**2
    inner = (3 if vision.gated_mlp else 2) * vision.intermediate_size // tp
    per_patch = 2 * vision.hidden_size + pixels + max(inner, 3 * vision.hidden_size // tp)
    activation = float(patches * per_patch * ACT_BYTES)
    # Qwen3-VL keeps the deepstack mergers' outputs beside the main one: out_hidden x (1 + deepstack) wide.
    width = vision.out_hidden_size * (1 + vision.deepstack) * ACT_BYTES
    outputs = float(profiled * item.outputs * width)
    if item.modality == "video" and version is not None and video_peak_modelled(arch.architecture, version):
        activation = forward_peak_bytes(vision, patches, tp, version)
        outputs += held_input_bytes(vision, patches)
        soft = item.patches // max(vision.spatial_merge_size**2, 1)
        if item.outputs > soft:  # profile_run's loop variable `output` still binds the unexpanded output
            outputs += float(profiled * soft * width)
    return EncoderMemory(weights, activation, outputs, profiled, item.tokens, item.modality)


def default_limits_unmodelled(arch: ModelArch, version: Version, max_model_len: int) -> InputError | None:
    """vLLM's default limit_mm_per_prompt (every modality 999 on V1) on a model whose processor takes
    videos: the profile runs the modality with the most tokens per item; refused where that video is not
    modelled for the release."""
    limits = resolved_limits(arch, version, None)
    why = video_unmodelled(arch, version, limits, max_model_len)
    if why is None:
        return None
    return InputError(
        f"{why} (vLLM's default limit_mm_per_prompt allows {limits.get('video')} videos per prompt, and it "
        "profiles its encoder with the modality of the most tokens per item)",
        "give the limits vLLM will run with: --images-per-prompt N --videos-per-prompt 0 here, and "
        '--limit-mm-per-prompt \'{"image": N, "video": 0}\' on vllm serve (vllmctl plan renders it)',
    )
