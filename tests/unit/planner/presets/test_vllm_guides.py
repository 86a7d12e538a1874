"""vLLM decisions from the guides: explicit flags say so, profiles, CUDA-graph capture sizes before eager,
expert parallel for MoE models and the vision encoder of multimodal models."""

from __future__ import annotations

from dataclasses import replace

import pytest

from vllmctl.catalog.gpus import lookup_gpu
from vllmctl.catalog.loader import load_arch
from vllmctl.errors import PlanError
from vllmctl.planner import DeploymentRequest, plan_deployment
from vllmctl.planner.multimodal import encoder_memory, encoder_params_per_rank
from vllmctl.planner.settings import VllmSettings
from vllmctl.planner.versions import parse_version
from vllmctl.planner.vllm_features import graph_modes
from vllmctl.planner.vllm_memory import MemoryBreakdown, cudagraph_bytes, vllm_memory
from vllmctl.planner.weights import stage_weight_bytes

H100 = lookup_gpu("H100-80GB")
L4 = lookup_gpu("L4")


def _reason(plan: object, flag: str) -> str:
    decision = plan.reason_for(flag)  # type: ignore[attr-defined]
    assert decision is not None, flag
    return str(decision.reason)


def test_every_explicit_flag_reason_says_explicit() -> None:
    explicit = {
        "tensor_parallel_size": 8,
        "max_num_seqs": 64,
        "max_num_batched_tokens": 4096,
        "gpu_memory_utilization": 0.9,
        "max_model_len": 8192,
        "enable_prefix_caching": False,
        "enable_chunked_prefill": True,
        "enforce_eager": False,
        "kv_cache_dtype": "auto",
        "enable_expert_parallel": False,
    }
    plan = plan_deployment(load_arch("Qwen/Qwen3-30B-A3B"), H100, 8, DeploymentRequest(engine_args=explicit))
    for flag in explicit:
        assert _reason(plan, flag).startswith("explicit"), flag
        assert plan.engine_args[flag] == explicit[flag]
    assert _reason(plan, "tensor_parallel_size").startswith("explicit; TP=8: weights ")
    chosen = plan_deployment(load_arch("Qwen/Qwen3-8B"), H100, 8, DeploymentRequest(profile="latency"))
    assert not _reason(chosen, "tensor_parallel_size").startswith("explicit")


def test_profiles_follow_the_guides() -> None:
    arch = load_arch("meta-llama/Llama-3.1-8B")
    latency = plan_deployment(arch, H100, 1, DeploymentRequest(profile="latency", max_model_len=8192))
    assert (latency.engine_args["max_num_seqs"], latency.engine_args["max_num_batched_tokens"]) == (64, 2048)
    assert "16-64" in _reason(latency, "max_num_seqs")
    throughput = plan_deployment(arch, H100, 1, DeploymentRequest(profile="throughput", max_model_len=8192))
    assert 0.90 <= throughput.engine_args["gpu_memory_utilization"] <= 0.95
    assert throughput.engine_args["max_num_seqs"] == 1024
    assert not [w for w in throughput.warnings if "max_model_len is not set" in w]
    saver = plan_deployment(arch, H100, 1, DeploymentRequest(profile="memory-saver"))
    assert saver.engine_args["gpu_memory_utilization"] <= 0.80
    assert saver.engine_args["max_num_seqs"] == 32
    assert saver.engine_args["compilation_config"] == {"cudagraph_capture_sizes": [1, 2, 4, 8, 16, 32]}
    assert _reason(saver, "compilation_config").startswith("memory-saver: capture 6 sizes up to 32")
    assert [w for w in saver.warnings if w.startswith("memory-saver: max_model_len is not set")]


def test_memory_saver_goes_above_its_ceiling_only_when_one_request_needs_it() -> None:
    arch = load_arch("Qwen/Qwen3-8B")  # 15.3 GiB weights on a 22 GiB L4: 0.80 leaves no KV
    plan = plan_deployment(arch, L4, 1, DeploymentRequest(profile="memory-saver", max_model_len=16384))
    util = plan.engine_args["gpu_memory_utilization"]
    assert 0.80 < util <= 0.90
    assert "0.8 cannot hold one request" in _reason(plan, "gpu_memory_utilization")
    short = plan_deployment(arch, L4, 1, DeploymentRequest(profile="memory-saver", max_model_len=4096))
    assert short.engine_args["gpu_memory_utilization"] == 0.78  # 15.51 GiB non-KV + 2 × 0.56 GiB + 2%


def test_graph_memory_scales_with_the_number_of_captured_sizes() -> None:
    settings = VllmSettings(parse_version("0.21.0"), 1, 1, 0.92, 8192, 256, 2048)
    default = cudagraph_bytes(36, settings)
    six = cudagraph_bytes(36, replace(settings, capture_sizes=(1, 2, 4, 8, 16, 32)))
    assert six == pytest.approx(default * 6 / 51)
    assert cudagraph_bytes(36, replace(settings, enforce_eager=True)) == 0


def test_graph_mode_order_and_explicit_compilation_config() -> None:
    assert graph_modes("balanced", {}, 256) == [(False, None), (False, (1, 2, 4, 8, 16, 32)), (True, None)]
    assert graph_modes("memory-saver", {}, 8) == [(False, (1, 2, 4, 8)), (True, None)]
    explicit = {"compilation_config": {"cudagraph_capture_sizes": [4, 1, 2]}}
    assert graph_modes("balanced", explicit, 256) == [(False, (1, 2, 4)), (True, None)]
    assert graph_modes("balanced", {"enforce_eager": True}, 256) == [(True, None)]
    arch = load_arch("Qwen/Qwen3-8B")
    plan = plan_deployment(arch, H100, 1, DeploymentRequest(engine_version="0.21.0", engine_args=explicit))
    assert plan.engine_args["compilation_config"] == {"cudagraph_capture_sizes": [4, 1, 2]}
    full = cudagraph_bytes(36, VllmSettings(parse_version("0.21.0"), 1, 1, 0.92, 8192, 1024, 8192))
    assert isinstance(plan.memory, MemoryBreakdown)
    assert plan.memory.cudagraph_gib * (1 << 30) < full / 10


def test_expert_parallel_when_experts_outnumber_the_tp_gpus() -> None:
    qwen_moe = load_arch("Qwen/Qwen3-30B-A3B")
    plan = plan_deployment(qwen_moe, H100, 2, DeploymentRequest(engine_args={"tensor_parallel_size": 2}))
    assert plan.engine_args["enable_expert_parallel"] is True
    assert "128 experts over TP=2: each GPU holds 64 whole experts" in _reason(plan, "enable_expert_parallel")
    mixtral = load_arch("mistralai/Mixtral-8x7B-v0.1")
    plan = plan_deployment(mixtral, H100, 8, DeploymentRequest(engine_args={"tensor_parallel_size": 8}))
    assert plan.engine_args["enable_expert_parallel"] is False
    assert _reason(plan, "enable_expert_parallel").startswith("8 experts do not outnumber the 8 GPUs")
    single = plan_deployment(qwen_moe, H100, 1, DeploymentRequest())
    assert single.engine_args["enable_expert_parallel"] is False
    dense = plan_deployment(load_arch("Qwen/Qwen3-8B"), H100, 2, DeploymentRequest())
    assert "enable_expert_parallel" not in dense.engine_args


def test_expert_parallel_weights_equal_when_divisible_and_round_up_otherwise() -> None:
    qwen_moe = load_arch("Qwen/Qwen3-30B-A3B")
    assert stage_weight_bytes(qwen_moe, 4, 1, True) == stage_weight_bytes(qwen_moe, 4, 1, False)
    odd = replace(qwen_moe, num_experts=6)  # 6 experts over 4 GPUs: two GPUs hold 2 experts
    per_layer_expert = 3 * qwen_moe.moe_intermediate_size * qwen_moe.hidden_size * 2
    extra = stage_weight_bytes(odd, 4, 1, True)[0] - stage_weight_bytes(odd, 4, 1, False)[0]
    assert extra == pytest.approx(qwen_moe.num_layers * per_layer_expert * (2 - 6 / 4))


def test_expert_parallel_widens_the_fused_moe_workspace() -> None:
    arch = load_arch("Qwen/Qwen3-30B-A3B")
    base = VllmSettings(parse_version("0.11.0"), 4, 1, 0.9, 8192, 1024, 8192)
    tp_only = vllm_memory(arch, H100, base)
    with_ep = vllm_memory(arch, H100, replace(base, expert_parallel=True))
    assert with_ep.weights_gib == pytest.approx(tp_only.weights_gib)
    assert with_ep.activation_peak_gib >= tp_only.activation_peak_gib


def test_vision_model_limits_media_and_accounts_its_encoder() -> None:
    arch = load_arch("Qwen/Qwen2.5-VL-7B-Instruct")
    assert arch.vision is not None and arch.vision.max_patches == 65536
    assert encoder_params_per_rank(arch, 1) == pytest.approx(676.5e6, rel=0.01)
    plan = plan_deployment(arch, H100, 1, DeploymentRequest(max_model_len=32768))
    assert plan.engine_args["limit_mm_per_prompt"] == {"image": 1, "video": 0}
    assert "vision encoder 1.26 GiB weights" in _reason(plan, "limit_mm_per_prompt")
    text_only = replace(arch, vision=None)
    plain = plan_deployment(text_only, H100, 1, DeploymentRequest(max_model_len=32768))
    assert plan.memory.weights_gib - plain.memory.weights_gib == pytest.approx(1.26, abs=0.01)
    assert plan.memory.available_kv_cache_gib < plain.memory.available_kv_cache_gib - 1.2
    many = plan_deployment(arch, H100, 1, DeploymentRequest(max_model_len=32768, images_per_prompt=4))
    assert many.engine_args["limit_mm_per_prompt"] == {"image": 4, "video": 0}
    explicit = {"limit_mm_per_prompt": {"image": 0, "video": 0}}
    text = plan_deployment(arch, H100, 1, DeploymentRequest(max_model_len=32768, engine_args=explicit))
    assert _reason(text, "limit_mm_per_prompt").startswith(
        "explicit; vision encoder 1.26 GiB weights + 0.00 GiB"
    )


def test_encoder_profile_batch_is_bounded_by_budget_and_prompts() -> None:
    arch = load_arch("Qwen/Qwen2.5-VL-7B-Instruct")
    one = encoder_memory(arch, 1, 8192, 256, 1)
    assert (one.items_profiled, one.tokens_per_item) == (1, 16384)  # one largest image fills the budget
    assert encoder_memory(arch, 1, 8192, 256, 0).activation == 0
    assert arch.vision is not None
    small = replace(arch, vision=replace(arch.vision, max_patches=4096))  # 1024-token images
    assert encoder_memory(small, 1, 8192, 256, 3).items_profiled == 8
    assert encoder_memory(small, 1, 8192, 2, 1).items_profiled == 2


def test_multimodal_on_a_text_model_warns() -> None:
    plan = plan_deployment(load_arch("Qwen/Qwen3-8B"), H100, 1, DeploymentRequest(images_per_prompt=2))
    assert "limit_mm_per_prompt" not in plan.engine_args
    assert "multimodal is set but Qwen/Qwen3-8B has no vision encoder; ignored" in plan.warnings


def test_videos_are_not_promised_a_fit_without_tight_fit() -> None:
    arch = load_arch("Qwen/Qwen2.5-VL-7B-Instruct")
    with pytest.raises(PlanError) as caught:
        plan_deployment(arch, H100, 1, DeploymentRequest(max_model_len=32768, videos_per_prompt=1))
    assert "profiles its encoder with a video" in str(caught.value)
    assert "videos_per_prompt: 0" in caught.value.hint
    explicit = {"limit_mm_per_prompt": {"image": 1, "video": 2}}
    with pytest.raises(PlanError):
        plan_deployment(arch, H100, 1, DeploymentRequest(max_model_len=32768, engine_args=explicit))
    accepted = plan_deployment(
        arch, H100, 1, DeploymentRequest(max_model_len=32768, videos_per_prompt=1, tight_fit=True)
    )
    assert accepted.engine_args["limit_mm_per_prompt"] == {"image": 1, "video": 1}
    images = plan_deployment(arch, H100, 1, DeploymentRequest(max_model_len=32768, images_per_prompt=2))
    assert images.engine_args["limit_mm_per_prompt"] == {"image": 2, "video": 0}
