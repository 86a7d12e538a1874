"""Llama 4 (issue #49) through the planner: its layers parsed from the stored Llama-4-Scout config.json as
vLLM's llama4.py builds them (which layers are MoE, chunked local vs global attention), the weights one TP
rank holds (text and vision tower), and the cited starts' replay."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from planner_accuracy import family_count, replay, replay_families  # noqa: E402
from startup_records import load_cases  # noqa: E402

from vllmctl.catalog.arch import parse_config  # noqa: E402
from vllmctl.catalog.gpus import GIB  # noqa: E402
from vllmctl.catalog.params import Linear, stage_linears  # noqa: E402
from vllmctl.planner.multimodal import encoder_params_per_rank  # noqa: E402
from vllmctl.planner.vllm_memory import vllm_memory  # noqa: E402
from vllmctl.planner.weights import rope_cache_tensors, stage_weight_bytes  # noqa: E402

PUBLIC = BENCHMARKS / "data" / "vllm_startup_public.jsonl"
SCOUT = BENCHMARKS / "data" / "configs" / "meta-llama__Llama-4-Scout-17B-16E-Instruct.json"
FAMILY = "Llama 4 (MoE + vision)"


def _scout() -> dict[str, Any]:
    return dict(json.loads(SCOUT.read_text())["config"])


def test_every_fourth_layer_is_global_and_the_rest_chunked_local() -> None:
    # the stored config's no_rope_layers is []: transformers' Llama4TextConfig makes every 4th layer NoPE
    # (global), the others RoPE with chunked local attention of attention_chunk_size tokens
    arch = parse_config(_scout(), "scout")
    assert arch.attention_chunk_size == 8192 and len(arch.layer_types) == 48
    globals_ = [i for i, kind in enumerate(arch.layer_types) if kind == "full_attention"]
    assert globals_ == list(range(3, 48, 4))
    assert arch.layer_types.count("chunked_attention") == 36
    # with the hybrid KV cache manager off, vLLM caches every layer as full attention
    assert set(arch.attention_kinds) == {"full"}
    text = _scout()["text_config"]
    given = parse_config({**_scout(), "text_config": {**text, "no_rope_layers": [0, 1] * 24}}, "given")
    assert given.layer_types[:2] == ("full_attention", "chunked_attention")


def test_interleave_moe_layer_step_picks_the_moe_layers() -> None:
    # Llama4DecoderLayer: MoE where (layer_idx + 1) % interleave_moe_layer_step == 0; Scout's step 1 makes
    # all 48 MoE (16 routed experts and one shared expert of intermediate_size 8192)
    arch = parse_config(_scout(), "scout")
    assert arch.num_experts == 16 and arch.experts_per_token == 1 and arch.num_shared_experts == 1
    assert arch.moe_intermediate_size == 8192 and all(arch.is_moe_layer(i) for i in range(48))
    # the same config with step 2 (as Maverick interleaves): odd layers MoE, even layers a dense MLP of
    # intermediate_size_mlp 16384
    text = {**_scout()["text_config"], "interleave_moe_layer_step": 2}
    step2 = parse_config({**_scout(), "text_config": text}, "step2")
    assert [i for i in range(6) if step2.is_moe_layer(i)] == [1, 3, 5]
    dense = stage_linears(step2, 8, 0, 1, False, False)
    assert Linear("mlp", 2 * 2048, 5120, layer=0) in dense and Linear("mlp", 5120, 2048, layer=0) in dense
    assert not any(p.kind == "expert" for p in dense)


def test_a_scout_layer_on_one_of_8_ranks() -> None:
    # llama4.py at TP 8: 40 / 8 q heads and the 8 KV heads one per rank (qkv 5 x 128 + 2 x 128), the router
    # replicated, each expert's 8192 split by 8 (1024), the shared expert (LlamaMLP) too; q/k norms carry no
    # weight (RMSNorm(has_weight=False))
    arch = parse_config(_scout(), "scout")
    layer = stage_linears(arch, 8, 0, 1, False, False)
    expected = {
        Linear("attn", 896, 5120, layer=0),
        Linear("attn", 5120, 640, layer=0),
        Linear("router", 16, 5120, layer=0),
        Linear("expert", 2048, 5120, count=16, layer=0),
        Linear("expert", 5120, 1024, count=16, layer=0),
        Linear("mlp", 2048, 5120, layer=0),
        Linear("mlp", 5120, 1024, layer=0),
        Linear("norm", 5120, 1, count=2, layer=0),
    }
    assert set(layer) == expected
    # expert parallel: 2 whole experts per rank instead of an eighth of each
    ep = stage_linears(arch, 8, 0, 1, False, False, True)
    assert Linear("expert", 16384, 5120, count=2, layer=0) in ep


def test_scout_weights_per_rank_at_tp_8() -> None:
    # text: 13,475,107,840 parameters per rank (48 layers, embedding and head split by 8); the rope cache of
    # 10,485,760 positions x 128 in bf16 (2.5 GiB); the vision tower split by TP as mllama4.py builds it:
    # 34 blocks (qkv 3 x 2 heads x 88 + bias, o_proj, fc1 704 + bias, fc2, two LayerNorms), patch embedding
    # 176 x 588, class token, 577 x 1408 positions, the adapter (512 x 5632, 4096 x 512) and the projector
    # 640 x 4096
    arch = parse_config(_scout(), "scout")
    assert stage_weight_bytes(arch, 8, 1) == (13_475_107_840 * 2,)
    assert rope_cache_tensors(arch) == (10_485_760 * 128 * 2,)
    assert arch.vision is not None and arch.vision.spatial_merge_size == 2
    assert encoder_params_per_rank(arch, 8) == 109_959_904


def test_the_cited_8x_h200_start_loads_within_1_percent() -> None:
    # search-index id 14030680623, 0.12.0, TP 8: 'Model loading took 27.8072 GiB', the encoder profiled with
    # 3 image items of the maximum feature size
    _, cases = load_cases(PUBLIC)
    (case,) = [c for c in cases if "14030680623" in str(c.record["source"])]
    assert case.settings.tp == 8 and case.settings.mm_items == 3
    memory = vllm_memory(case.arch, case.gpu, case.settings)
    assert abs(memory.weights_gib / 27.8072 - 1) <= 0.01, memory.weights_gib
    assert memory.fits


def test_the_bf16_scout_at_tp_2_on_h100_nvl_is_refused() -> None:
    # vllm#16712: a CUDA OOM while loading on 2x H100 NVL (93.02 GiB each): half of the 200.7 GiB of text
    # weights (shared experts included), the 2.5 GiB rope cache and half the vision tower, 103.8 GiB a card
    _, cases = load_cases(PUBLIC)
    (case,) = [c for c in cases if "issues/16712" in str(c.record["source"])]
    assert case.refused and case.settings.tp == 2
    memory = vllm_memory(case.arch, case.gpu, case.settings)
    assert 103.5 < memory.weights_gib < 104.0 and memory.weights_gib * GIB > case.gpu.cuda_bytes
    assert not memory.fits
    (*_, feasible), _ = replay([case])
    assert feasible.errors == [0.0]


def test_both_llama4_records_replay_in_their_family_within_its_targets() -> None:
    records, cases = load_cases(PUBLIC)
    line = family_count(FAMILY, records, cases)
    assert line.startswith("2 record(s): 2 replayed (2 named for the family, 0 classified"), line
    (weights, available, _, _, feasible), over = replay_families(cases)[FAMILY]
    assert len(weights.errors) == 1 and weights.median() <= 0.01
    assert feasible.errors == [0.0] and over == [] and not available.errors  # no KV figure is logged
