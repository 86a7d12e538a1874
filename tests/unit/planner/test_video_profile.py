"""Issue #49 item 2: the vision tower's live tensors when vLLM profiles a video, against the cited starts."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from startup_records import Case, load_cases  # noqa: E402

from vllmctl.catalog.loader import load_arch  # noqa: E402
from vllmctl.planner.mm_video_peak import forward_peak_bytes, held_input_bytes  # noqa: E402
from vllmctl.planner.multimodal import encoder_memory  # noqa: E402
from vllmctl.planner.vllm_memory import vllm_memory  # noqa: E402

GIB = 1 << 30
# vLLM's default limits: 999 images and 999 videos per prompt (the starts gave no --limit-mm-per-prompt)
DEFAULT_ITEMS, DEFAULT_VIDEOS = 1998, 999


def _case(search_id: str) -> Case:
    cases = load_cases(BENCHMARKS / "data" / "vllm_startup_public.jsonl")[1]
    return next(c for c in cases if search_id in str(c.record.get("source")))


def _video_kv(case: Case) -> float:
    settings = replace(case.settings, mm_items=DEFAULT_ITEMS, mm_videos=DEFAULT_VIDEOS)
    return vllm_memory(case.arch, case.gpu, settings).available_kv_cache_gib


@pytest.mark.parametrize(
    ("search_id", "logged"),
    [("42514581982", 2.31), ("54765285989", 8.04), ("55021192520", -14.28)],
)
def test_the_cited_video_starts_replay_within_5_percent(search_id: str, logged: float) -> None:
    # 0.11.0 Qwen3-VL-30B-A3B (TP 4 on RTX 3090s; one A100, refused) and the 0.23.0 Qwen2.5-VL-7B refusal
    error = (_video_kv(_case(search_id)) - logged) / abs(logged)
    assert -0.05 <= error <= 0.05


def test_the_qwen25_vl_video_block_peaks_in_its_attention_copies() -> None:
    # 0.23.0: 458,752 patches (7 x 256 x 256); the block input, norm1, qkv, the q||k copy, its rotation,
    # the attention output and its contiguous copy: 11 x 1280 bf16 per patch, above the SwiGLU's
    # 2 x 1280 + 3 x 3420
    vision = load_arch("Qwen/Qwen2.5-VL-7B-Instruct").vision
    assert vision is not None
    patches = 7 * 256 * 256
    rope = 2 * 40 * 4  # the fp32 rotary cos and sin
    assert forward_peak_bytes(vision, patches, 1, (0, 23, 0)) == patches * (11 * 1280 * 2 + rope)
    assert held_input_bytes(vision, patches) == patches * 1176 * 4  # float32 pixel values


def test_qwen3_vl_0_11_all_gathers_qkv_under_tp() -> None:
    # all_gather_interleave: the local qkv, the gathered list and its concatenation (full width on every rank)
    vision = load_arch("Qwen/Qwen3-VL-30B-A3B-Instruct").vision
    assert vision is not None
    patches = 12288 * 4  # 24,576 frames of 32 x 32 pixels, two per temporal patch
    tp4 = forward_peak_bytes(vision, patches, 4, (0, 11, 0))
    tp1 = forward_peak_bytes(vision, patches, 1, (0, 11, 0))
    d = 1152
    assert tp4 > patches * (2 * d + 6 * d) * 2  # more than the gathered qkv and its cat alone
    assert tp1 > tp4  # at TP 1 the fp32 rotary copies of q||k dominate (16 x d per patch)


def test_video_profile_keeps_pixels_and_the_unexpanded_output() -> None:
    # 0.11.0 profile_run: batched_dummy_mm_inputs (float32 pixels) and the loop variable `output` (a view of
    # the 12,288 x 8,192 encoder output) stay bound while the decoder's dummy run and sampler run
    arch = load_arch("Qwen/Qwen3-VL-30B-A3B-Instruct")
    memory = encoder_memory(arch, 4, 2048, 256, DEFAULT_ITEMS, DEFAULT_VIDEOS, (0, 11, 0), 65536)
    expanded = 153600 * 2048 * 4 * 2
    pixels = 49152 * 1536 * 4
    unexpanded = 12288 * 2048 * 4 * 2
    assert memory.outputs == expanded + pixels + unexpanded
