"""Weight bytes per GPU, hand-computed for the tiny model (see conftest) per quantization and sharding."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.loader import load_arch
from vllmctl.catalog.params import padded_vocab, pipeline_stages, stage_linears, total_params
from vllmctl.catalog.quant import QuantConfig
from vllmctl.planner.weights import fp8_marlin, linear_bytes, stage_weight_bytes, weight_gib

# Per layer: qkv [1536 x 1024], o [1024 x 1024], gate_up [8192 x 1024], down [1024 x 4096], 2 norms of 1024.
LINEAR_PER_LAYER = 1536 * 1024 + 1024 * 1024 + 8192 * 1024 + 1024 * 4096  # 15,204,352
EMBED = 32000 * 1024
NORMS = 2 * 2048 + 1024  # two per layer, plus the final norm


def test_bf16_counts_every_parameter_twice(tiny: ModelArch) -> None:
    assert total_params(tiny) == 2 * LINEAR_PER_LAYER + 2 * EMBED + NORMS == 95_949_824
    assert stage_weight_bytes(tiny, 1, 1) == (2 * 95_949_824,)


def test_tied_embeddings_are_stored_once(make_arch: Callable[..., ModelArch]) -> None:
    tied = make_arch(tie_word_embeddings=True)
    assert stage_weight_bytes(tied, 1, 1) == (2 * (2 * LINEAR_PER_LAYER + EMBED + NORMS),)


def test_tied_embeddings_are_duplicated_on_the_last_pipeline_stage(
    make_arch: Callable[..., ModelArch],
) -> None:
    tied = make_arch(tie_word_embeddings=True)
    first, last = stage_weight_bytes(tied, 1, 2)
    assert first == 2 * (LINEAR_PER_LAYER + EMBED + 2048)
    assert last == 2 * (LINEAR_PER_LAYER + EMBED + 2048 + 1024)


def test_fp8_per_channel_keeps_embeddings_in_bf16(tiny: ModelArch) -> None:
    fp8 = replace(tiny, quantization=QuantConfig("fp8", 8))
    scales = 2 * (1536 + 1024 + 8192 + 1024) * 4  # one fp32 scale per output channel
    assert stage_weight_bytes(fp8, 1, 1) == (2 * LINEAR_PER_LAYER + scales + 2 * EMBED * 2 + NORMS * 2,)


def test_w8a8_int8_is_sized_like_fp8_per_channel(tiny: ModelArch) -> None:
    int8 = replace(tiny, quantization=QuantConfig("w8a8", 8))
    fp8 = replace(tiny, quantization=QuantConfig("fp8", 8))
    assert stage_weight_bytes(int8, 1, 1) == stage_weight_bytes(fp8, 1, 1) == (161_585_152,)


def test_fp8_block_scales_one_per_128x128_tile(tiny: ModelArch) -> None:
    block = replace(tiny, quantization=QuantConfig("fp8", 8, block=128))
    tiles = (12 * 8) + (8 * 8) + (64 * 8) + (8 * 32)  # per layer: qkv, o, gate_up, down
    expected = 2 * LINEAR_PER_LAYER + 2 * tiles * 4 + 2 * EMBED * 2 + NORMS * 2
    assert stage_weight_bytes(block, 1, 1) == (expected,)


def test_fp8_through_marlin_keeps_one_activation_dtype_scale_per_output_channel_and_128_inputs(
    tiny: ModelArch,
) -> None:
    # prepare_fp8_layer_for_marlin repeats each 128x128 block scale over its 128 output channels, in bf16
    block = replace(tiny, quantization=QuantConfig("fp8", 8, block=128))
    groups = (
        (8 * 1536) + (8 * 1024) + (8 * 8192) + (32 * 1024)
    )  # per layer: K/128 x N for qkv, o, gate_up, down
    expected = 2 * LINEAR_PER_LAYER + 2 * groups * 2 + 2 * EMBED * 2 + NORMS * 2
    assert stage_weight_bytes(block, 1, 1, marlin=True) == (expected,)
    # a per-tensor / per-channel checkpoint: one scale per output channel, in bf16 (fp32 natively)
    channel = replace(tiny, quantization=QuantConfig("fp8", 8))
    scales = 2 * (1536 + 1024 + 8192 + 1024) * 2
    assert stage_weight_bytes(channel, 1, 1, marlin=True) == (
        2 * LINEAR_PER_LAYER + scales + 4 * EMBED + 2 * NORMS,
    )


def test_fp8_runs_through_marlin_only_on_nvidia_gpus_without_fp8_compute(tiny: ModelArch) -> None:
    fp8 = replace(tiny, quantization=QuantConfig("fp8", 8, block=128))
    assert fp8_marlin(fp8, (8, 0)) and fp8_marlin(fp8, (8, 6))
    assert not fp8_marlin(fp8, (8, 9)) and not fp8_marlin(fp8, (9, 0))
    assert not fp8_marlin(fp8, (8, 0), vendor="amd") and not fp8_marlin(tiny, (8, 0))


def test_qwen3_30b_a3b_fp8_on_an_a100_loads_what_vllm_logged() -> None:
    # vllm#21428: 'Model loading took 29.4988 GiB' after the Marlin repack on an A100-SXM4-80GB (the block
    # scales expanded to bf16 add 1.56 % of the FP8 bytes: -1.54 % without them)
    arch = load_arch("Qwen/Qwen3-30B-A3B-FP8", online=False)
    marlin = max(stage_weight_bytes(arch, 1, 1, marlin=True)) / (1 << 30)
    assert abs(marlin / 29.4988 - 1) < 0.002
    assert weight_gib(arch) < marlin


def test_awq_int4_adds_fp16_scales_and_packed_zeros_per_group(tiny: ModelArch) -> None:
    awq = replace(tiny, quantization=QuantConfig("awq", 4, 128))
    groups_x_out = 8 * 1536 + 8 * 1024 + 8 * 8192 + 32 * 1024  # (in / 128) x out per linear
    expected = LINEAR_PER_LAYER + 2 * groups_x_out * 2.5 + 2 * EMBED * 2 + NORMS * 2
    assert stage_weight_bytes(awq, 1, 1) == (expected,) == (146_880_512,)


def test_gptq_int4_adds_only_fp16_scales(tiny: ModelArch) -> None:
    gptq = replace(tiny, quantization=QuantConfig("gptq", 4, 128))
    assert stage_weight_bytes(gptq, 1, 1) == (146_761_728,)


def test_tp2_splits_heads_mlp_and_vocab(tiny: ModelArch) -> None:
    per_layer = 768 * 1024 + 1024 * 512 + 4096 * 1024 + 1024 * 2048 + 2048
    assert stage_weight_bytes(tiny, 2, 1) == (2 * (2 * per_layer + 2 * 16000 * 1024 + 1024),)


def test_kv_heads_are_replicated_when_fewer_than_tp(tiny: ModelArch) -> None:
    # TP=4 with 2 KV heads: each rank still holds one whole KV head (q 256 + k 128 + v 128 rows).
    per_layer = 512 * 1024 + 1024 * 256 + 2048 * 1024 + 1024 * 1024 + 2048
    assert stage_weight_bytes(tiny, 4, 1) == (2 * (2 * per_layer + 2 * 8000 * 1024 + 1024),)


def test_vocab_is_padded_to_64_before_the_tp_split(make_arch: Callable[..., ModelArch]) -> None:
    odd = make_arch(vocab_size=32001)
    assert padded_vocab(odd, 1) == 32064
    assert padded_vocab(odd, 2) == 16032


def test_moe_experts_and_replicated_router(make_arch: Callable[..., ModelArch]) -> None:
    moe = make_arch(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=512, num_hidden_layers=1)
    per_layer = 1536 * 1024 + 1024 * 1024 + 4 * 1024 + 4 * (1024 * 1024 + 1024 * 512) + 2048
    assert total_params(moe) == per_layer + 2 * EMBED + 1024
    tp2_layer = 768 * 1024 + 1024 * 512 + 4 * 1024 + 4 * (512 * 1024 + 1024 * 256) + 2048
    assert stage_weight_bytes(moe, 2, 1) == (2 * (tp2_layer + 2 * 16000 * 1024 + 1024),)


def test_mxfp4_quantizes_only_experts(make_arch: Callable[..., ModelArch]) -> None:
    moe = make_arch(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=512, num_hidden_layers=1)
    mx = replace(moe, quantization=QuantConfig("mxfp4", 4, 32, attention_quantized=False, experts_only=True))
    experts = 4 * (1024 * 1024 + 1024 * 512)
    scales = 4 * (32 * 1024 + 16 * 1024)  # one byte per 32 input weights
    rest = total_params(moe) - experts
    assert stage_weight_bytes(mx, 1, 1) == (rest * 2 + experts / 2 + scales,)


def test_pipeline_stages_follow_vllm_remainder_rule() -> None:
    assert pipeline_stages(10, 4) == [(0, 2), (2, 5), (5, 8), (8, 10)]
    assert pipeline_stages(80, 2) == [(0, 40), (40, 80)]


@pytest.mark.parametrize(
    ("model", "tp", "logged"),
    [
        ("neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8", 1, 67.7229),
        ("Qwen/Qwen2.5-32B-Instruct", 1, 61.04),
        ("Qwen/Qwen2.5-7B-Instruct-AWQ", 1, 5.29),
        ("Qwen/Qwen2.5-0.5B-Instruct", 1, 0.93),
    ],
)
def test_catalog_models_match_logged_weights_within_2_percent(model: str, tp: int, logged: float) -> None:
    assert weight_gib(load_arch(model, online=False), tp) == pytest.approx(logged, rel=0.02)


def test_meta_fp8_405b_keeps_attention_and_edge_ffns_in_bf16() -> None:
    # Logged by vLLM 0.5.3 on 8x H100 (issue 6746): "Loading model weights took 57.7520 GB".
    arch = load_arch("meta-llama/Meta-Llama-3.1-405B-Instruct-FP8", online=False)
    assert weight_gib(arch, 8) == pytest.approx(57.752, rel=0.02)


def test_mla_absorbed_copies_cost_memory_only_when_kv_b_is_quantized() -> None:
    v25 = load_arch("deepseek-ai/DeepSeek-V2.5", online=False)
    assert v25.quantization is None
    assert stage_weight_bytes(v25, 1, 1) == (total_params(v25) * 2,)
    r1 = load_arch("deepseek-ai/DeepSeek-R1", online=False)
    parts = stage_linears(r1, 8, 0, 61, True, True)
    stored = sum(linear_bytes(p, r1.quantization, 2) for p in parts if p.kind != "mla_absorbed")
    kv_b_per_rank = 16 * (128 + 128) * 512  # 128 heads / TP 8 x (nope + v) x kv_lora_rank
    assert stage_weight_bytes(r1, 8, 1)[0] - stored == 61 * kv_b_per_rank * 2  # bf16 copy per layer


def test_mxfp4_experts_padded_for_marlin_as_logged() -> None:
    """vLLM pads MXFP4 expert shapes for its MoE kernel; Marlin (before Hopper, and on Hopper before 0.12)
    rounds the intermediate to 128 and the hidden size to 256 (quantization/mxfp4.py)."""
    from vllmctl.catalog.loader import load_arch
    from vllmctl.planner.weights import expert_padding, weight_gib

    big, small = load_arch("openai/gpt-oss-120b"), load_arch("openai/gpt-oss-20b")
    hopper, blackwell, ampere = (9, 0), (10, 0), (8, 0)
    marlin = expert_padding(big, hopper, (0, 11, 0))
    assert marlin == expert_padding(big, ampere, (0, 13, 0)) == (128, 256)
    assert expert_padding(big, hopper, (0, 12, 0)) == (64, 256)  # triton_kernels bundled: Triton, swizzled
    assert expert_padding(big, hopper, (0, 11, 0), "triton") == (64, 256)  # the image ships triton_kernels
    assert expert_padding(big, ampere, (0, 10, 1), "triton") == (64, 1)
    assert expert_padding(big, hopper, (0, 13, 0), "marlin") == (128, 256)
    assert expert_padding(big, blackwell, (0, 11, 0)) == (256, 256)
    assert expert_padding(load_arch("Qwen/Qwen3-30B-A3B"), hopper, (0, 11, 0)) == (1, 1)
    # vllm#23278: "Model loading took 65.9651 GiB" (H100, Marlin); gpt-oss-20b logs 13.72 GiB (Marlin)
    assert abs(weight_gib(big, expert_pad=marlin) / 65.9651 - 1) < 0.01
    assert abs(weight_gib(small, expert_pad=marlin) / 13.72 - 1) < 0.01
    # at TP 4 each rank's 720-wide expert slice becomes 768 x 3072: about 14 % more expert bytes
    padded, plain = weight_gib(big, 4, expert_pad=marlin), weight_gib(big, 4)
    assert 0.11 < padded / plain - 1 < 0.14
