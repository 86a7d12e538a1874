"""vLLM's startup accounting: budget, profile-run peak, version defaults, CUDA graphs, NCCL, and figures
reproduced from logged startups."""

from __future__ import annotations

from dataclasses import replace

import pytest

from vllmctl.catalog.gpus import lookup_gpu
from vllmctl.catalog.loader import load_arch
from vllmctl.planner.profile_run import activation_peak_bytes
from vllmctl.planner.settings import VllmSettings
from vllmctl.planner.versions import (
    cudagraph_capture_sizes,
    default_batch_limits,
    default_gpu_memory_utilization,
    parse_version,
)
from vllmctl.planner.vllm_memory import GRAPH_PROBE_RESIDUE_GIB, vllm_memory

GIB = 1 << 30
H100 = lookup_gpu("H100-80GB")
L4 = lookup_gpu("L4")


def settings(version: str = "0.11.0", **kw: object) -> VllmSettings:
    base = VllmSettings(parse_version(version), 1, 1, 0.9, 32768, 256, 2048)
    return replace(base, **kw)  # type: ignore[arg-type]


def test_default_utilization_moves_to_092_in_020() -> None:
    assert default_gpu_memory_utilization(parse_version("0.19.1")) == 0.90
    assert default_gpu_memory_utilization(parse_version("v0.20.0")) == 0.92


def test_default_batch_limits_by_gpu_and_context() -> None:
    v = parse_version("0.11.0")
    assert default_batch_limits(v, H100) == (8192, 1024)
    assert default_batch_limits(v, H100, offline=True) == (16384, 1024)
    assert default_batch_limits(v, lookup_gpu("A100-80GB")) == (2048, 256)  # A100 is excluded on purpose
    assert default_batch_limits(v, L4, offline=True) == (8192, 256)


def test_early_v1_defaults_follow_each_releases_arg_utils() -> None:
    a100, rtx4090 = lookup_gpu("A100-80GB"), lookup_gpu("RTX 4090")
    assert default_batch_limits((0, 8, 3), rtx4090) == (2048, 1024)  # 1024 seqs on every GPU until 0.8.3
    assert default_batch_limits((0, 8, 4), rtx4090) == (2048, 256)
    assert default_batch_limits((0, 8, 4), a100) == (2048, 256)  # by name (H100/H200) until 0.8.4
    assert default_batch_limits((0, 8, 5), a100) == (8192, 1024)  # >= 70 GiB in 0.8.5, A100 included
    assert default_batch_limits((0, 9, 0), a100) == (2048, 256)


def test_v1_before_0_9_1_counts_the_cuda_context_and_nccl_as_non_torch() -> None:
    from vllmctl.planner.vllm_memory import CUDA_CONTEXT_GIB, nccl_bytes, non_torch_bytes

    early = VllmSettings(
        (0, 9, 0),
        tp=4,
        pp=1,
        gpu_memory_utilization=0.9,
        max_model_len=4096,
        max_num_seqs=256,
        max_num_batched_tokens=2048,
    )
    later = replace(early, version=(0, 9, 1))
    extra = non_torch_bytes(early, "pcie") - non_torch_bytes(later, "pcie")
    assert extra == pytest.approx(CUDA_CONTEXT_GIB * (1 << 30) + nccl_bytes(4, 1, "pcie"))


def test_capture_sizes_follow_max_num_seqs() -> None:
    assert cudagraph_capture_sizes(256, 8192)[:5] == [1, 2, 4, 8, 16]
    assert cudagraph_capture_sizes(256, 8192)[-1] == 512
    assert len(cudagraph_capture_sizes(256, 8192)) == 3 + 31 + 17
    assert cudagraph_capture_sizes(4, 8192) == [1, 2, 4, 8]


def test_activation_peak_is_max_of_forward_and_sampler() -> None:
    llama = load_arch("meta-llama/Llama-3.1-8B", online=False)
    forward = 2 * 2048 * 4096 * 2 + 2048 * 3 * 14336 * 2
    sorting_sampler = 2048 * 4096 * 2 + 256 * 128256 * 38.5
    light_sampler = 2048 * 4096 * 2 + 256 * 128256 * 8
    assert activation_peak_bytes(llama, 1, 2048, 256, (0, 11, 0)) == max(forward, sorting_sampler)
    assert activation_peak_bytes(llama, 1, 2048, 256, (0, 27, 0)) == max(forward, light_sampler)
    # 0.13-0.16 still sort natively (FlashInfer is opt-in there); FlashInfer, when used, does not sort;
    # from 0.17 the native path masks top-k/top-p in place with Triton (FlashInfer off or not)
    triton_sampler = 2048 * 4096 * 2 + 256 * 128256 * 14
    assert activation_peak_bytes(llama, 1, 2048, 256, (0, 13, 0)) == max(forward, sorting_sampler)
    assert activation_peak_bytes(llama, 1, 2048, 256, (0, 11, 0), sampler="flashinfer") == max(
        forward, light_sampler
    )
    assert activation_peak_bytes(llama, 1, 2048, 256, (0, 27, 0), sampler="sort") == max(
        forward, triton_sampler
    )
    big_forward = 2 * 16384 * 4096 * 2 + 16384 * 3 * 14336 * 2
    assert activation_peak_bytes(llama, 1, 16384, 16, (0, 27, 0)) == big_forward


def test_available_is_requested_minus_weights_activation_non_torch() -> None:
    llama = load_arch("meta-llama/Llama-3.1-8B", online=False)
    mem = vllm_memory(llama, H100, settings())
    assert mem.requested_gib == pytest.approx(79.19 * 0.9)
    expected = mem.requested_gib - mem.weights_gib - mem.activation_peak_gib - mem.non_torch_gib
    assert mem.available_kv_cache_gib == pytest.approx(expected)
    assert not mem.cudagraph_in_budget


def test_cudagraph_estimate_subtracted_only_from_020_and_only_with_graphs() -> None:
    llama = load_arch("meta-llama/Llama-3.1-8B", online=False)
    old = vllm_memory(llama, H100, settings("0.17.1", sampler="flashinfer"))
    new = vllm_memory(llama, H100, settings("0.21.0", sampler="flashinfer", compile_cache="warm"))
    eager = vllm_memory(llama, H100, settings("0.21.0", enforce_eager=True, sampler="flashinfer"))
    assert new.cudagraph_in_budget and not old.cudagraph_in_budget
    assert new.cudagraph_gib > 0
    assert old.available_kv_cache_gib - new.available_kv_cache_gib == pytest.approx(new.cudagraph_gib)
    assert eager.cudagraph_gib == 0 and eager.available_kv_cache_gib == old.available_kv_cache_gib


def test_the_sample_capture_of_018_019_leaves_its_residue_in_the_budget_and_captures_outside() -> None:
    # 0.18.0 moved profile_cudagraph_memory() inside memory_profiling() with the estimate still off
    llama = load_arch("meta-llama/Llama-3.1-8B", online=False)
    before = vllm_memory(llama, H100, settings("0.17.1", sampler="flashinfer"))
    probed = vllm_memory(llama, H100, settings("0.19.1", sampler="flashinfer", compile_cache="warm"))
    eager = vllm_memory(llama, H100, settings("0.19.1", enforce_eager=True, sampler="flashinfer"))
    estimated = vllm_memory(llama, H100, settings("0.21.0", sampler="flashinfer"))
    assert probed.graph_probe_gib == GRAPH_PROBE_RESIDUE_GIB
    assert before.graph_probe_gib == eager.graph_probe_gib == estimated.graph_probe_gib == 0
    assert not probed.cudagraph_in_budget  # captured after the KV allocation: headroom still checked
    taken = before.available_kv_cache_gib - probed.available_kv_cache_gib
    assert taken == pytest.approx(GRAPH_PROBE_RESIDUE_GIB)
    assert eager.available_kv_cache_gib == before.available_kv_cache_gib


def test_kv_cache_memory_skips_the_budget() -> None:
    llama = load_arch("meta-llama/Llama-3.1-8B", online=False)
    mem = vllm_memory(llama, H100, settings(kv_cache_memory_bytes=10 * GIB))
    assert mem.available_kv_cache_gib == 10
    assert mem.kv_cache_tokens == 81920


def test_nccl_in_budget_before_011_and_outside_after() -> None:
    llama = load_arch("meta-llama/Llama-3.1-8B", online=False)
    assert vllm_memory(llama, H100, settings("0.10.2", tp=2)).nccl_in_budget
    after = vllm_memory(llama, H100, settings("0.11.0", tp=2))
    assert not after.nccl_in_budget and after.nccl_gib > 0
    assert vllm_memory(llama, H100, settings("0.11.0", tp=1)).nccl_gib == 0


def test_startup_check_fails_when_util_leaves_no_room_for_nccl() -> None:
    llama = load_arch("meta-llama/Llama-3.1-8B", online=False)
    assert vllm_memory(llama, H100, settings(tp=8, gpu_memory_utilization=0.9)).startup_headroom_ok
    assert not vllm_memory(llama, H100, settings(tp=8, gpu_memory_utilization=0.99)).startup_headroom_ok


def test_needed_and_largest_fitting_length_when_too_long() -> None:
    qwen = load_arch("Qwen/Qwen3-8B", online=False)
    mem = vllm_memory(qwen, L4, settings(max_model_len=40960))
    assert mem.needed_kv_gib == pytest.approx(40960 * 147456 / GIB)
    assert not mem.fits
    assert 0 < mem.max_model_len_that_fits < 40960
    assert mem.max_model_len_that_fits * 147456 <= mem.available_kv_cache_gib * GIB


@pytest.mark.parametrize(
    ("model", "tp", "pp", "kv_gib", "max_len", "tokens", "concurrency"),
    [
        ("Qwen/Qwen3-14B", 1, 1, 6.51, 32768, 42656, 1.30),  # LMCache issue 1739
        ("Qwen/Qwen2.5-7B-Instruct-AWQ", 1, 1, 7.9955, 32768, 149712, 4.57),  # logged 8.0 (rounded)
        ("Qwen/Qwen3-30B-A3B", 4, 1, 23.7387, 32768, 1037152, 31.65),  # 4 KV heads on TP4: one per rank
        ("Qwen/Qwen3-14B-AWQ", 1, 2, 14.0385, 40960, 184000, 4.49),  # pipeline stage of 20 layers
    ],
)
def test_logged_tokens_and_concurrency_from_vllms_own_kv_figure(
    model: str, tp: int, pp: int, kv_gib: float, max_len: int, tokens: int, concurrency: float
) -> None:
    arch = load_arch(model, online=False)
    mem = vllm_memory(arch, H100, settings(tp=tp, pp=pp, max_model_len=max_len,
                                          kv_cache_memory_bytes=int(kv_gib * GIB)))  # fmt: skip
    assert mem.kv_cache_tokens == tokens
    assert mem.max_concurrency == concurrency


def test_l4_tp2_startup_within_5_percent_of_log() -> None:
    arch = load_arch("Qwen/Qwen3-14B-AWQ", online=False)
    mem = vllm_memory(arch, L4, settings("0.28.0", tp=2, gpu_memory_utilization=0.92, max_model_len=40960))
    assert mem.available_kv_cache_gib == pytest.approx(14.38, rel=0.05)


def test_only_the_last_pipeline_stage_runs_the_sampler() -> None:
    llama = load_arch("meta-llama/Llama-3.1-8B", online=False)
    forward = 2 * 2048 * 4096 * 2 + 2048 * 3 * 14336 * 2
    assert activation_peak_bytes(llama, 1, 2048, 256, (0, 11, 0), last_stage=False) == forward
    assert activation_peak_bytes(llama, 1, 2048, 256, (0, 11, 0), last_stage=True) > forward


def test_the_sampler_vllm_picks_sets_the_bytes_per_logit() -> None:
    from vllmctl.planner.profile_run import sampler_bytes_per_logit

    sort, triton, light = 38.5, 14, 8
    assert sampler_bytes_per_logit("auto", (0, 16, 0), 256) == sort  # no Triton top-k/top-p before 0.17
    assert sampler_bytes_per_logit("auto", (0, 17, 0), 256) == triton
    assert sampler_bytes_per_logit("auto", (0, 17, 1), 4) == sort  # fewer than 8 rows take the PyTorch sort
    assert sampler_bytes_per_logit("sort", (0, 19, 0), 256) == triton  # FlashInfer off still runs Triton
    assert sampler_bytes_per_logit("auto", (0, 21, 0), 256) == light  # FlashInfer by default
    assert sampler_bytes_per_logit("flashinfer", (0, 12, 0), 256) == light
