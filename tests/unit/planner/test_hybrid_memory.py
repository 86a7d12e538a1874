"""Hybrid attention / Gated DeltaNet models (Qwen3-Next, Qwen3.5) through the planner's memory model: their
layers parsed from config.json, weights counted per TP rank as vLLM's qwen3_next.py builds them, the hybrid KV
layout in vllm_memory, and the cited starts' available KV within issue #49's targets."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from planner_accuracy import family_verdicts, replay, replay_families  # noqa: E402
from startup_records import load_cases  # noqa: E402

from vllmctl.catalog.arch import parse_config  # noqa: E402
from vllmctl.catalog.gpus import GIB, find_gpu  # noqa: E402
from vllmctl.catalog.params import Linear, stage_linears  # noqa: E402
from vllmctl.catalog.quant import parse_quantization  # noqa: E402
from vllmctl.planner.settings import VllmSettings  # noqa: E402
from vllmctl.planner.vllm_memory import vllm_memory  # noqa: E402
from vllmctl.planner.weights import linear_tensors, rope_cache_tensors  # noqa: E402

PUBLIC = BENCHMARKS / "data" / "vllm_startup_public.jsonl"
CONFIGS = BENCHMARKS / "data" / "configs"
HYBRID = "hybrid attention/Mamba"


def _config(name: str) -> dict[str, Any]:
    return dict(json.loads((CONFIGS / f"{name}.json").read_text())["config"])


def test_a_hybrid_config_parses_into_attention_and_state_layers() -> None:
    arch = parse_config(_config("Qwen__Qwen3-Next-80B-A3B-Instruct"), "qwen3-next")
    assert arch.hybrid is not None and arch.is_moe
    kinds = arch.attention_kinds
    assert (kinds.count("full"), kinds.count("mamba")) == (12, 36) and kinds[3] == "full"
    qwen35 = parse_config(_config("Qwen__Qwen3.5-9B"), "qwen3.5")
    assert qwen35.hybrid is not None and qwen35.hybrid.state_dtype_bytes == 4 and qwen35.vision is not None


def test_a_gated_deltanet_layer_holds_its_projections_conv_and_decay_per_rank() -> None:
    # qwen3_next.py Qwen3NextGatedDeltaNet at TP 2: in_proj_qkvz (2 x 2048 + 2 x 4096) / 2 outputs, in_proj_ba
    # 2 x 32 / 2, conv1d (2 x 2048 + 4096) / 2 x 4 taps, dt_bias and A_log 16 each, a 128-wide gated norm,
    # out_proj 4096 / 2 inputs; the attention layer's q projection doubled by its output gate
    arch = parse_config(_config("Qwen__Qwen3-Next-80B-A3B-Instruct"), "qwen3-next")
    linear = [p for p in stage_linears(arch, 2, 0, 1, False, False) if p.kind != "expert"]
    shapes = {(p.kind, p.out, p.inp, p.count) for p in linear}
    assert {("attn", 6144, 2048, 1), ("attn", 32, 2048, 1), ("state", 4096, 4, 1)} <= shapes
    assert {("state", 16, 1, 2), ("norm", 128, 1, 1), ("attn", 2048, 2048, 1)} <= shapes
    attention = stage_linears(arch, 2, 3, 4, False, False)
    assert Linear("attn", 2 * 8 * 256 + 2 * 256, 2048, layer=3) in attention  # 8 q heads + gate, 1 KV head


def test_the_linear_attention_state_parameters_stay_unquantized() -> None:
    # vLLM builds conv1d with no quant_config (qwen3_next.py), and dt_bias / A_log are plain parameters
    fp8 = parse_quantization({"quant_method": "fp8", "weight_block_size": [128, 128]})
    assert linear_tensors(Linear("state", 4096, 4), fp8, 2) == (4096 * 4 * 2,)
    assert len(linear_tensors(Linear("attn", 4096, 2048), fp8, 2)) == 2  # a projection is quantized


def test_a_partial_rotary_factor_caches_only_the_rotated_dims() -> None:
    # get_rope rotates head_dim x partial_rotary_factor = 64 of Qwen3-Next's 256 dims over 262,144 positions:
    # 32 MiB in bf16 (128 MiB for the whole head), which makes the 0.10.2 load 74.2812 GiB exact
    arch = parse_config(_config("Qwen__Qwen3-Next-80B-A3B-Instruct"), "qwen3-next")
    assert arch.rotary_factor == 0.25 and rope_cache_tensors(arch) == (262144 * 64 * 2.0,)
    qwen35 = parse_config(_config("Qwen__Qwen3.5-9B"), "qwen3.5")  # rope_parameters carry it there
    assert qwen35.rotary_factor == 0.25


def test_vllm_memory_lays_out_a_hybrid_with_the_aligned_block() -> None:
    arch = parse_config(_config("Qwen__Qwen3-Next-80B-A3B-Instruct"), "qwen3-next")
    gpu = find_gpu("H200")
    assert gpu is not None
    settings = VllmSettings(
        version=(0, 10, 2), tp=2, pp=1, gpu_memory_utilization=0.9, max_model_len=262144, max_num_seqs=1024,
        max_num_batched_tokens=8192,
    )  # fmt: skip
    held = vllm_memory(arch, gpu, replace(settings, kv_cache_memory_bytes=int(44.59 * GIB)))
    # 'Setting attention block size to 544 tokens'; 'GPU KV cache size: 973,760 tokens' (0.10.2, 2x H200)
    assert held.block_size == 544 and held.kv_cache_tokens == 973_760
    assert abs(vllm_memory(arch, gpu, settings).weights_gib / 74.2812 - 1) < 0.001


def test_a_pipeline_stage_of_a_hybrid_counts_its_own_layers() -> None:
    from vllmctl.planner.hybrid_kv import layout_for

    arch = parse_config(_config("Qwen__Qwen3-Next-80B-A3B-Instruct"), "qwen3-next")
    layout = layout_for(arch, 2, (0, 24), "auto", (9, 0))
    assert layout.kinds == (("full", 6), ("mamba", 18)) and layout.block_size == 544


def test_the_cited_hybrid_starts_replay_within_the_issue_targets() -> None:
    # Qwen3-Next-80B-A3B on 2x H200 (0.10.2, search-index id 7292846353) and Qwen3.5-9B on an L40S (0.19.0, id
    # 51781852921): weights and available KV scored, every go/no-go right
    _, cases = load_cases(PUBLIC)
    hybrid = [c for c in cases if c.arch.hybrid is not None]
    assert {c.arch.name for c in hybrid} >= {"Qwen/Qwen3-Next-80B-A3B-Instruct", "Qwen/Qwen3.5-9B"}
    (weights, available, tokens, _, feasible), over = replay(hybrid)
    assert len(available.errors) >= 2 and all(-0.02 <= e <= 0.03 for e in available.errors), available.cases
    assert all(abs(e) <= 0.01 for e in weights.errors) and not over
    assert not any(feasible.errors) and not any(tokens.errors)
    rows, family_over = replay_families(cases)[HYBRID]
    assert not [line for line in family_verdicts(rows, family_over) if not line.startswith("PASS")]
