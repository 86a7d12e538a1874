"""Issue #49's non-hybrid thin families: the cited public starts each family row replays, and the family
count line, whose parts (replayed, cited but not replayed) add up to the records it names."""

from __future__ import annotations

import re
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from planner_accuracy import FAMILIES, family_count, family_of, replay  # noqa: E402
from startup_records import load_cases  # noqa: E402

from vllmctl.planner.rules import refusals  # noqa: E402

PUBLIC = BENCHMARKS / "data" / "vllm_startup_public.jsonl"


def test_the_family_count_line_adds_up() -> None:
    # it read "vision-language MoE: 3 replayed record(s); 3 cited for #49 (3 not replayed ...)": the three
    # replayed were classified by architecture, the three cited others not replayed, six in all
    records, cases = load_cases(PUBLIC)
    for family, _ in FAMILIES:
        line = family_count(family, records, cases)
        total, replayed, named, classified, cited = (int(n) for n in re.findall(r"\d+", line))
        members = [c for c in cases if family_of(c) == family]
        assert (replayed, total) == (len(members), replayed + cited), (family, line)
        assert named + classified == replayed, (family, line)
        naming = [r for r in records if r.get("family") == family and not r.get("excluded")]
        assert named + cited == len(naming), (family, line)
    line = family_count("vision-language MoE", records, cases)
    assert line.startswith("6 record(s): 3 replayed (0 named for the family, 3 classified"), line


def test_the_480b_coder_refusals_replay_on_the_h20_their_two_utilizations_imply() -> None:
    # recipes#12: the same DP 8 + EP command refused at 0.9 (48.66 GiB of KV) and 0.95 (55.65 GiB); only the
    # budget differs, so 0.05 x total = 6.99 GiB: a 139.8 GiB card, the 141 GB H20 (the 96 GB one gives 4.75)
    records, cases = load_cases(PUBLIC)
    coder = [c for c in cases if "recipes/pull/12 (description" in c.label]
    assert len(coder) == 2 and all(family_of(c) == "MoE coder at long context" for c in coder)
    low, high = sorted(coder, key=lambda c: c.settings.gpu_memory_utilization)
    implied = (high.record["available_kv_cache_gib"] - low.record["available_kv_cache_gib"]) / 0.05
    assert abs(implied - 139.8) <= 0.2 and all(abs(c.gpu.cuda_gib - 139.8) < 0.01 for c in coder)
    assert all(c.arch.num_experts == 160 and c.settings.dp == 8 and c.settings.expert_parallel for c in coder)
    (*_, feasible), over = replay(coder)
    assert feasible.errors == [0.0, 0.0] and over == []  # both refused for want of KV, as logged
    # the first copies of the same two refusals (no family) are excluded as duplicates, not replayed twice
    duplicates = [r for r in records if r.get("source") == "https://github.com/vllm-project/recipes/pull/12"]
    assert len(duplicates) == 2
    assert all(str(r.get("excluded", "")).startswith("duplicate") for r in duplicates)


def test_the_480b_fp8_block_refusal_at_tp_8_is_predicted_from_the_stored_config() -> None:
    # the recipe's TP 8 start: moe_intermediate_size 2560 / 8 = 320 is no multiple of the 128 block
    _, cases = load_cases(PUBLIC)
    (case,) = [c for c in cases if "Qwen3-Coder-480B-A35B.md" in c.record["source"]]
    assert case.refused and case.settings.tp == 8 and case.arch.moe_intermediate_size == 2560
    found = refusals(case.arch, case.gpu, 8, case.settings)
    assert found, "the FP8 block rule refuses TP 8"


def test_dp_8_expert_parallel_gathers_every_ranks_tokens_into_the_fused_moe_profile() -> None:
    # vLLM 0.10's naive dispatch (fused_moe/layer.py do_naive_dispatch_combine, all2all.py naive_multicast):
    # each rank's MoE runs 8 x 8,192 gathered tokens, its workspaces one 32,768-token chunk (fused_moe.py)
    from vllmctl.planner.profile_run import activation_peak_bytes, dp_dispatch_moe_bytes
    from vllmctl.planner.vllm_memory import vllm_memory

    gib = float(1 << 30)
    _, cases = load_cases(PUBLIC)
    case = next(c for c in cases if "recipes/pull/12 (description" in c.label)
    arch, s = case.arch, case.settings
    assert (s.dp, s.expert_parallel, s.version, s.max_num_batched_tokens) == (8, True, (0, 10, 1), 8192)
    # gathered hidden 0.750 + logits 0.020 + top-k 0.006, cache13 3.000 + cache2 1.250 (bf16), FP8 input
    # 0.193 + two chunks' FP8 intermediate 2 x 0.645: 6.51 GiB
    assert abs(dp_dispatch_moe_bytes(arch, 8192, 8, 2560) / gib - 6.510) < 0.005
    args = (arch, s.tp, s.max_num_batched_tokens, s.max_num_seqs, s.version)
    gathered = activation_peak_bytes(*args, expert_parallel=True, data_parallel=8)
    assert abs(gathered / gib - 6.698) < 0.005  # + the residual stream: above the 5.67 GiB sampler peak
    # no data parallel, no expert parallel, or another release: the sampler's peak, as before
    alone = activation_peak_bytes(*args, expert_parallel=True)
    assert abs(alone / gib - 5.672) < 0.005
    assert activation_peak_bytes(*args, expert_parallel=False, data_parallel=8) == alone
    later = (arch, s.tp, s.max_num_batched_tokens, s.max_num_seqs, (0, 11, 0))
    assert activation_peak_bytes(*later, expert_parallel=True, data_parallel=8) == activation_peak_bytes(
        *later, expert_parallel=True
    )
    # the replayed start: 52.47 GiB predicted before, 51.45 now, 48.66 logged (+5.7 %: still set aside)
    memory = vllm_memory(arch, case.gpu, s)
    assert abs(memory.available_kv_cache_gib - 51.45) < 0.01
    assert abs(memory.available_kv_cache_gib + memory.activation_peak_gib - 5.672 - 52.47) < 0.01
