"""KV page sizes per layer kind and vLLM's block, token and concurrency rounding, computed by hand."""

from __future__ import annotations

from collections.abc import Callable

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.loader import load_arch
from vllmctl.planner.kv import kv_layout

GIB = 1 << 30
HOPPER = (9, 0)
AMPERE = (8, 0)


def llama8b_like(make_arch: Callable[..., ModelArch]) -> ModelArch:
    return make_arch(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8)


def test_full_attention_gqa_page_and_bytes_per_token(make_arch: Callable[..., ModelArch]) -> None:
    layout = kv_layout(llama8b_like(make_arch), 1, (0, 32), "auto", HOPPER)
    assert layout.page_bytes == 2 * 16 * 8 * 128 * 2 == 65536
    assert layout.bytes_per_token == 131072


def test_tokens_and_concurrency_round_like_vllm(make_arch: Callable[..., ModelArch]) -> None:
    layout = kv_layout(llama8b_like(make_arch), 1, (0, 32), "auto", HOPPER)
    blocks = layout.num_blocks(10 * GIB)
    assert blocks == 10 * GIB // 65536 // 32 == 5120
    assert layout.tokens(blocks) == 81920
    assert layout.max_concurrency(blocks, 32768, 8192) == 5120 / 2048
    # 1000 tokens still take 63 whole blocks per request.
    assert layout.max_concurrency(blocks, 1000, 8192) == 5120 / 63
    assert layout.tokens(layout.num_blocks(10 * GIB - 1)) == 81904  # one byte short loses a block


def test_gqa_split_by_tp_and_never_below_one_head(make_arch: Callable[..., ModelArch]) -> None:
    arch = llama8b_like(make_arch)
    assert kv_layout(arch, 2, (0, 32), "auto", HOPPER).page_bytes == 32768
    assert kv_layout(arch, 8, (0, 32), "auto", HOPPER).page_bytes == 8192
    assert (
        kv_layout(arch, 16, (0, 32), "auto", HOPPER).page_bytes == 8192
    )  # 8 KV heads on 16 ranks: replicated


def test_fp8_kv_cache_halves_the_page(make_arch: Callable[..., ModelArch]) -> None:
    arch = llama8b_like(make_arch)
    assert kv_layout(arch, 1, (0, 32), "fp8", HOPPER).page_bytes == 32768


def test_mla_latent_is_576_wide_one_head_not_split_by_tp() -> None:
    r1 = load_arch("deepseek-ai/DeepSeek-R1", online=False)
    hopper = kv_layout(r1, 8, (0, 61), "auto", HOPPER)
    assert hopper.block_size == 64
    assert hopper.page_bytes == 64 * 576 * 2
    assert hopper.bytes_per_token == 576 * 2 * 61
    assert kv_layout(r1, 1, (0, 61), "auto", HOPPER).page_bytes == hopper.page_bytes
    assert kv_layout(r1, 8, (0, 61), "auto", AMPERE).block_size == 16
    assert kv_layout(r1, 8, (0, 61), "fp8", HOPPER).page_bytes == 64 * 576


def test_sliding_window_hybrid_groups_and_caps_usage() -> None:
    oss = load_arch("openai/gpt-oss-20b", online=False)
    layout = kv_layout(oss, 1, (0, 24), "auto", HOPPER)
    assert layout.kinds == (("sliding", 12), ("full", 12))
    assert layout.page_bytes == 2 * 16 * 8 * 64 * 2 == 32768
    assert layout.groups() == (12, 2)
    blocks = layout.num_blocks(12 * GIB)
    assert blocks == 12 * GIB // 32768 // 12 == 32768
    assert layout.tokens(blocks) == 32768 // 2 * 16
    # Sliding layers need at most cdiv(min(127 + 8192, L), 16) + 1 = 521 blocks; full ones cdiv(L, 16).
    assert layout.max_usage_bytes("sliding", 131072, 8192) == 521 * 32768
    assert layout.needed_bytes(131072, 8192) == 12 * 32768 * (8192 + 521)
    assert layout.max_concurrency(blocks, 131072, 8192) == 32768 / (8192 + 521)


def test_uneven_hybrid_uses_the_smaller_count_as_group_size(make_arch: Callable[..., ModelArch]) -> None:
    types = ["sliding_attention"] * 5 + ["full_attention"]
    arch = make_arch(num_hidden_layers=6, layer_types=types * 1, sliding_window=512)
    assert kv_layout(arch, 1, (0, 6), "auto", HOPPER).groups() == (1, 6)


def test_largest_len_that_fits_is_block_exact(make_arch: Callable[..., ModelArch]) -> None:
    layout = kv_layout(llama8b_like(make_arch), 1, (0, 32), "auto", HOPPER)
    available = 100 * 65536 * 32  # exactly 100 blocks of every layer
    assert layout.largest_len_that_fits(available, 131072, 8192) == 1600
    assert layout.largest_len_that_fits(available - 1, 131072, 8192) == 1584
