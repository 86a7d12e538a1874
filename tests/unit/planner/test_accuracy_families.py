"""Issue #49's thin families in the accuracy replay: each is its own row with its own targets (available KV
median <= 2 %, none over-predicted by > 5 %, every go/no-go right), asserted where a cited start scores them;
the hybrid KV layout is held exact on the cited Qwen3-Next starts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from planner_accuracy import (  # noqa: E402
    FAMILIES,
    family_of,
    family_verdicts,
    hybrid_tokens,
    replay,
    replay_families,
)
from startup_records import load_cases, settings_for  # noqa: E402

from vllmctl.catalog.gpus import GIB  # noqa: E402
from vllmctl.planner.hybrid_kv import aligned_block_size, hybrid_layout, hybrid_shape, state_page_bytes  # noqa: E402

PUBLIC = BENCHMARKS / "data" / "vllm_startup_public.jsonl"
CONFIGS = BENCHMARKS / "data" / "configs"
QWEN3_NEXT = json.loads((CONFIGS / "Qwen__Qwen3-Next-80B-A3B-Instruct.json").read_text())["config"]


def test_every_record_cited_for_the_issue_names_a_family_of_the_replay_and_quotes_its_log() -> None:
    records, _ = load_cases(PUBLIC)
    cited = [r for r in records if r.get("family")]
    names = {name for name, _ in FAMILIES}
    assert len(cited) >= 21
    # every family of the issue but dense TP 8 with FP8 KV has a cited start
    assert {r["family"] for r in cited} == names - {"dense at TP 8, FP8 KV"}
    assert all(r["family"] in names for r in cited), [r["family"] for r in cited]
    assert all(r.get("source") and r.get("quote") and r.get("vllm_version") for r in cited)


def test_families_that_cited_starts_score_meet_the_issue_targets() -> None:
    _, cases = load_cases(PUBLIC)
    families = replay_families(cases)
    scored = {name for name, (rows, _) in families.items() if rows[1].errors}
    # MoE at TP 8 with FP8 (the dev set's 8x L40S start joins it in the full replay), vision-language MoE
    assert {"vision-language MoE"} <= scored
    for name, (rows, over) in families.items():
        lines = family_verdicts(rows, over)
        assert not [line for line in lines if line.startswith("MISS")], (name, lines, rows[1].cases)


def test_the_vision_moe_start_replays_with_the_image_profile_its_log_names() -> None:
    # vLLM 0.13.0 profiled 'one image item of the maximum feature size' with no --limit-mm-per-prompt: read
    # from the log, the H100 NVL Qwen3-VL-30B-A3B start is +1.9 % (it was +3.2 % with the encoder left out)
    _, cases = load_cases(PUBLIC)
    (case,) = [c for c in cases if "search-index id 67592774702" in c.label]
    assert case.settings.mm_items == 1
    (_, available, *_), over = replay([case])
    assert over == [] and 0 < available.errors[0] <= 0.02


def test_the_tokens_a_logged_kv_holds_are_scored_on_records_that_name_no_gpu() -> None:
    # the TP 8 expert-parallel Qwen3-235B-A22B-2507-FP8 notes give no GPU: 256,800 tokens in 11.51 GiB (one KV
    # head per rank: the 4 heads replicated over 8 ranks) is still checked, exactly
    _, cases = load_cases(PUBLIC)
    (case,) = [c for c in cases if "search-index id 39402830789" in c.label]
    assert not case.known_gpu and case.settings.tp == 8 and case.settings.expert_parallel
    assert family_of(case) == "MoE at TP 8, FP8"
    (_, _, tokens, *_), _ = replay([case])
    assert tokens.errors == [0.0]


def test_gemma_3_27b_loads_and_groups_its_sliding_layers_as_the_cited_starts_log() -> None:
    # 51.7891 GiB (ROCm, 0.11.0rc2) and 51.45 GiB (A100 80GB, 0.19.0); 'Add 8 padding layers': 52 sliding
    # layers in groups of 10 beside the 10 global ones, so 109.86 GiB holds 205,696 tokens
    _, cases = load_cases(PUBLIC)
    gemma = [c for c in cases if family_of(c) == "Gemma 3 27B on V1"]
    assert len(gemma) == 2
    (weights, _, tokens, _, feasible), _ = replay(gemma)
    assert len(weights.errors) == 2 and all(abs(e) <= 0.007 for e in weights.errors), weights.cases
    assert tokens.errors == [0.0]
    assert feasible.errors == [0.0]  # the A100 start served at 32,768 tokens ('reached RUNNING')


def test_hybrid_state_pages_align_the_attention_block_as_vllm_logs_it() -> None:
    shape = hybrid_shape(QWEN3_NEXT)
    assert (shape.attention_layers, shape.state_layers) == (12, 36)  # full_attention_interval 4 of 48 layers
    # conv (8,192 / 2 x 3) + recurrent (32 / 2 x 128 x 128), bf16: 548,864 bytes per layer and rank at TP 2
    assert state_page_bytes(shape, 2) == 548_864
    # 'Setting attention block size to 544 tokens' (0.10.2, 2x H200); 1072 with fp8 KV (0.13.0, 2x L40S)
    assert aligned_block_size(shape, 2, "auto") == 544
    assert aligned_block_size(shape, 2, "fp8") == 1072
    layout = hybrid_layout(QWEN3_NEXT, 2, "auto")
    assert layout.groups() == (12, 4) and layout.page_bytes == 544 * 1024  # the state page padded by 1.49 %
    assert layout.tokens(layout.num_blocks(int(44.59 * GIB))) == 973_760
    # a state layer needs one page per request whatever its length; attention pages grow with it
    assert layout.max_usage_bytes("mamba", 262_144, 8192) == layout.page_bytes


def test_qwen3_5_keeps_its_recurrent_state_in_float32_as_its_config_says() -> None:
    # Qwen3.5-9B publishes mamba_ssm_dtype float32: 0.19.0 on an L40S aligns a 528-token block (a bf16 state
    # would give 272) and 20.27 GiB holds 165,792 tokens (8 attention + 24 linear layers: 4 groups of 8)
    config = json.loads((CONFIGS / "Qwen__Qwen3.5-9B.json").read_text())["config"]
    shape = hybrid_shape(config)
    assert shape.state_dtype_bytes == 4 and (shape.attention_layers, shape.state_layers) == (8, 24)
    layout = hybrid_layout(config, 1)
    assert layout.block_size == 528 and layout.groups() == (8, 4)
    assert layout.tokens(layout.num_blocks(int(20.27 * GIB))) == 165_792


def test_the_hybrid_kv_layout_is_exact_on_every_cited_hybrid_start_with_a_stored_config() -> None:
    records, _ = load_cases(PUBLIC)
    figure = hybrid_tokens(records, CONFIGS)
    assert len(figure.errors) >= 6 and all(error == 0.0 for error in figure.errors), figure.cases


def test_a_kv_figure_set_aside_for_an_unknown_utilization_still_checks_the_tokens_it_holds() -> None:
    # vllm#21428 (Qwen3-30B-A3B FP8 through Marlin on an A100): the utilization is not in the log, so the KV
    # figure and the tokens end to end are set aside; 368,256 tokens in 33.71 GiB and the weights still count
    _, cases = load_cases(PUBLIC)
    (case,) = [c for c in cases if "vllm/pull/21428" in c.label]
    assert family_of(case) == "FP8 on Ampere (Marlin)"
    (weights, available, tokens, end_to_end, feasible), _ = replay([case])
    assert not available.errors and not end_to_end.errors
    assert tokens.errors == [0.0] and feasible.errors == [0.0]
    assert abs(weights.errors[0]) < 0.002


def test_a_logged_image_profile_stands_for_the_default_limits_and_a_given_limit_wins() -> None:
    record = {"quote": "profiled with 1 image items of the maximum feature size."}
    _, cases = load_cases(PUBLIC)
    (case,) = [c for c in cases if "search-index id 67592774702" in c.label]
    assert settings_for(record, case.arch, case.gpu).mm_items == 1
    given = {"quote": "'limit_mm_per_prompt': {'image': 2}\nprofiled with 31 image items"}
    assert settings_for(given, case.arch, case.gpu).mm_items == 2
    assert settings_for({"quote": "profiled with 1 video items"}, case.arch, case.gpu).mm_items == 0
