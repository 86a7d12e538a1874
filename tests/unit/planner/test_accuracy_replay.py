"""Issue #16's accuracy replay over the repository's cited public startups, held as a regression guard: the
figures that meet their targets keep meeting them, and only the named records are set aside or over-predicted
by more than 5 %."""

from __future__ import annotations

import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from planner_accuracy import replay  # noqa: E402
from startup_records import load_cases  # noqa: E402

# RedHatAI/Qwen3-0.6B-quantized.w4a16 replays with the name rule's guessed quantization (no stored config).
SET_ASIDE_WEIGHTS = ("search-index id 54318626907",)


def test_medians_meet_the_issue_targets_and_every_go_no_go_is_right() -> None:
    (weights, available, tokens, end_to_end, feasible), over = replay(
        load_cases(BENCHMARKS / "data" / "vllm_startup_public.jsonl")[1]
    )
    assert len(available.errors) >= 35 and len(feasible.errors) >= 45
    assert weights.median() <= 0.01
    assert available.median() <= 0.02
    assert end_to_end.median() <= 0.02
    assert all(abs(error) <= 0.02 for error in tokens.errors)
    assert [case for case, error in zip(feasible.cases, feasible.errors, strict=True) if error] == []
    assert over == []  # no available KV over-predicted by more than 5 % (and vLLM's 0.08 GiB spread)
    # A call inside the error band counts as right (plan refuses it without tight_fit); it must stay rare.
    assert len([case for case in feasible.cases if "inside the error band" in case]) <= 3


def test_no_weights_figure_is_off_by_more_than_2_percent() -> None:
    records, cases = load_cases(BENCHMARKS / "data" / "vllm_startup_public.jsonl")
    (weights, *_), _ = replay(cases)
    assert max(abs(error) for error in weights.errors) <= 0.02, weights.cases
    set_aside = [r["source"] for r in records if "weights_gib" in (r.get("set_aside") or {})]
    assert set_aside and all(any(k in source for k in SET_ASIDE_WEIGHTS) for source in set_aside), set_aside


def test_the_older_upstream_load_of_the_named_checkpoint_is_predicted_within_half_a_percent() -> None:
    _, cases = load_cases(BENCHMARKS / "data" / "vllm_startup_public.jsonl")
    (weights, *_), _ = replay([case for case in cases if "search-index id 29633934917" in case.label])
    assert len(weights.errors) == 1 and abs(weights.errors[0]) <= 0.005


def test_the_018_019_starts_with_cuda_graphs_keep_the_sample_capture_residue_and_cold_compile_peak() -> None:
    # Warm starts lose only the sample capture's residue (0.17 GiB): the RTX 5090 Laptop and the A100 land
    # within 0.1 %. Cold ones also peak higher when they compile (model_runner.COLD_COMPILE_GIB): none is
    # over-predicted (before: an A10G AWQ start +4.2 % and 0.66 against 0.18 GiB); two cold ones show no such
    # peak, so the 4x L40S Qwen2.5-72B start is 18 % under, on the safe side.
    _, cases = load_cases(BENCHMARKS / "data" / "vllm_startup_public.jsonl")
    chosen = [
        c for c in cases if (0, 18, 0) <= c.settings.version < (0, 20, 0) and not c.settings.enforce_eager
    ]
    warm = [c for c in chosen if c.settings.compile_cache == "warm"]
    (_, available, *_), over = replay(chosen)
    assert len(available.errors) >= 8 and not over
    assert all(error <= 0.005 for error in available.errors), available.cases
    (_, warm_available, *_), _ = replay(warm)
    assert len(warm_available.errors) == 2 and all(abs(e) <= 0.001 for e in warm_available.errors)


def test_pre_021_loads_match_the_parameters_plus_the_allocators_whole_blocks() -> None:
    # Qwen2/2.5 7B, 14B and 72B (TP 4), Qwen3-32B (TP 2) and DeepSeek-R1-Distill-Qwen-7B logged 0.02-0.12 GiB
    # above their parameters; the blocks PyTorch's caching allocator counts explain each to 0.005 GiB.
    _, cases = load_cases(BENCHMARKS / "data" / "vllm_startup_public.jsonl")
    chosen = [
        c
        for c in cases
        if (0, 7, 0) <= c.settings.version < (0, 21, 0)
        and c.version_known
        and c.gpu is not None
        and c.gpu.vendor == "nvidia"  # ROCm's allocator is HIP's; its MI300X loads run 0.2-0.8 % above
        and c.arch.quantization is None
        and c.arch.model_type in ("qwen2", "qwen3", "llama")
    ]
    (weights, *_), _ = replay(chosen)
    assert len(weights.errors) >= 25
    assert all(abs(error) <= 0.0025 for error in weights.errors), weights.cases


def test_a_refusal_by_less_than_vllms_run_to_run_spread_is_the_only_call_at_the_line() -> None:
    (*_, feasible), _ = replay(load_cases(BENCHMARKS / "data" / "vllm_startup_public.jsonl")[1])
    at_line = [case for case in feasible.cases if "a call at the line" in case]
    # the two identical Qwen2.5-7B starts at utilization 0.65 on one RTX 3090: 0.49 GiB started, 0.41 refused
    pair = "Qwen2.5-7B-Instruct @ NVIDIA GeForce RTX 3090"
    assert len(at_line) == 2 and all(pair in case for case in at_line), at_line


def test_from_021_loads_keep_every_segment_of_20_mib_or_more() -> None:
    # vLLM 0.21 loads under max_split_size_mb 20: Qwen2.5-1.5B's 2.98 GiB on 0.28-0.30 (2.887 on 0.7-0.8) and
    # Qwen2.5-7B's 14.29 on 0.22 (14.25 before) are those unsplit segments; every CUDA load from 0.21 is
    # within 0.7 %, the fork's TP 2 one (1.50 GiB per rank, +1.3 %) aside.
    _, cases = load_cases(BENCHMARKS / "data" / "vllm_startup_public.jsonl")
    chosen = [
        c
        for c in cases
        if c.settings.version >= (0, 21, 0)
        and c.gpu.vendor == "nvidia"
        and not ("search-index id 67109588529" in c.label and c.settings.tp == 2)
    ]
    (weights, *_), _ = replay(chosen)
    assert len(weights.errors) >= 25
    assert all(abs(error) <= 0.007 for error in weights.errors), weights.cases
