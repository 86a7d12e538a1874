"""Issue #49 items 2-3: vLLM's multimodal limits and profile per release (a partial limit is not a zero)."""

from __future__ import annotations

import json

import pytest

from vllmctl.catalog.gpus import lookup_gpu
from vllmctl.catalog.loader import load_arch
from vllmctl.cli import main
from vllmctl.engine_flags import to_cli
from vllmctl.errors import PlanError
from vllmctl.planner import DeploymentRequest, plan_deployment
from vllmctl.planner.multimodal import default_limit, profiled_item, resolved_limits, takes_video

H100 = lookup_gpu("H100-80GB")
QWEN25_VL = "Qwen/Qwen2.5-VL-7B-Instruct"
QWEN3_VL = "Qwen/Qwen3-VL-30B-A3B-Instruct"


def test_an_unset_modality_gets_the_releases_default_not_zero() -> None:
    # vllm/config.py get_limit_per_prompt: `.get(modality, 1)` to 0.8.3; 999 on V1 from 0.8.4
    assert (
        default_limit((0, 8, 3)) == 1 and default_limit((0, 8, 4)) == 999 and default_limit((0, 23, 0)) == 999
    )
    arch = load_arch(QWEN25_VL)
    assert resolved_limits(arch, (0, 11, 0), {"image": 2}) == {"image": 2, "video": 999}
    assert resolved_limits(arch, (0, 8, 0), {"image": 2}) == {"image": 2, "video": 1}
    assert resolved_limits(load_arch("google/gemma-3-4b-it"), (0, 11, 0), {"image": 2}) == {"image": 2}


def test_video_capability_comes_from_each_releases_registry() -> None:
    assert takes_video(load_arch(QWEN25_VL), (0, 8, 5))
    assert not takes_video(load_arch("google/gemma-3-4b-it"), (0, 23, 0))
    qwen3 = load_arch(QWEN3_VL)
    assert not takes_video(qwen3, (0, 10, 2)) and takes_video(qwen3, (0, 11, 0))  # added to vLLM in 0.11.0


def test_the_profiled_modality_and_its_tokens_match_the_logged_budgets() -> None:
    qwen25, qwen3 = load_arch(QWEN25_VL), load_arch(QWEN3_VL)
    every = {"image": 999, "video": 999}
    # 0.23.0, max len 128000: 'budget of 114688 tokens, and profiled with 1 video items' (14 frames)
    video = profiled_item(qwen25, (0, 23, 0), every, 128000)
    assert video is not None and (video.modality, video.tokens) == ("video", 114688)
    old = profiled_item(qwen25, (0, 10, 2), every, 262144)  # 16 frames before 0.11.0
    assert old is not None and old.tokens == 8 * 16384
    short = profiled_item(qwen25, (0, 23, 0), every, 8192)  # one frame pair: a tie, the image wins
    assert short is not None and short.modality == "image"
    # 0.11.0: 'budget of 153600 tokens, and profiled with 1 video items' (soft tokens x 12.5)
    formatted = profiled_item(qwen3, (0, 11, 0), every, 65536)
    assert formatted is not None and (formatted.modality, formatted.tokens) == ("video", 153600)
    # 0.13.0: 'budget of 16384 tokens, and profiled with 1 image items' under the default limits
    image = profiled_item(qwen3, (0, 13, 0), every, 8192)
    assert image is not None and (image.modality, image.tokens) == ("image", 16384)


def test_a_partial_limit_on_a_video_model_plans_the_video_vllm_profiles() -> None:
    # {image: 2} leaves video at vLLM's 999: at 64K a video (8 frames, 65,536 tokens) outweighs an image
    arch = load_arch(QWEN25_VL)
    partial = {"limit_mm_per_prompt": {"image": 2}}
    with pytest.raises(PlanError) as caught:
        plan_deployment(arch, H100, 1, DeploymentRequest(max_model_len=65536, engine_args=partial))
    assert "video" in str(caught.value) and "video: 0" in caught.value.hint
    zero = {"limit_mm_per_prompt": {"image": 2, "video": 0}}
    images = plan_deployment(arch, H100, 1, DeploymentRequest(max_model_len=65536, engine_args=zero))
    accepted = plan_deployment(
        arch, H100, 1, DeploymentRequest(max_model_len=65536, engine_args=partial, tight_fit=True)
    )
    assert accepted.engine_args["limit_mm_per_prompt"] == {"image": 2, "video": 999}
    assert accepted.memory.available_kv_cache_gib < images.memory.available_kv_cache_gib - 1.0
    rendered = to_cli("vllm", "limit_mm_per_prompt", accepted.engine_args["limit_mm_per_prompt"])
    assert json.loads(rendered[1]) == {"image": 2, "video": 999}


def test_a_partial_limit_is_written_out_where_the_image_is_profiled() -> None:
    # Qwen3-VL from 0.13.0: a video's most tokens (12,288) stay under an image's, so vLLM profiles an image
    arch = load_arch(QWEN3_VL)
    request = DeploymentRequest(
        max_model_len=8192, engine_version="0.13.0", engine_args={"limit_mm_per_prompt": {"image": 2}}
    )
    plan = plan_deployment(arch, H100, 1, request)
    assert plan.engine_args["limit_mm_per_prompt"] == {"image": 2, "video": 999}
    decision = plan.reason_for("limit_mm_per_prompt")
    assert decision is not None
    reason = decision.reason
    assert "video not given: vLLM's default 999 written out" in reason and "image item" in reason


def test_estimate_answers_qwen3_vl_under_default_limits_from_0_13(capsys: pytest.CaptureFixture[str]) -> None:
    # search-index id 67592774702: 0.13.0, H100 NVL, max len 8192, no --limit-mm-per-prompt, 'profiled with
    # 1 image items', 'Available KV cache memory: 19.40 GiB' (cold compile)
    argv = ["estimate", "--model", QWEN3_VL, "--gpu", "H100 NVL", "--max-model-len", "8192"]
    argv += ["--dtype", "bfloat16", "--engine-version", "0.13.0", "--json"]
    assert main(argv) == 0
    kv = json.loads(capsys.readouterr().out)["available_kv_cache_gib"]
    assert abs(kv - 19.40) / 19.40 < 0.05
    assert main([*argv[:-3], "--engine-version", "0.11.0"]) == 2  # 0.11.0 profiles a formatted video
    assert "video" in capsys.readouterr().err
