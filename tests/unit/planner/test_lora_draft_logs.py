"""LoRA and draft-model memory checked against public vLLM startup logs (issue #21).

Each case quotes the logged line, runs `vllm_memory` on the logged configuration and compares the figure.
Both logs print only "Model loading took", which in the V1 runner includes the LoRA slot buffers and the
drafter (they load inside the same memory profiler as the weights, vllm/v1/worker/gpu_model_runner.py);
neither shows a KV figure, so the draft's KV share is not checked against a log here.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from vllmctl.catalog.gpus import lookup_gpu
from vllmctl.catalog.loader import load_arch
from vllmctl.planner.lora_memory import draft_weight_bytes, lora_slot_bytes
from vllmctl.planner.settings import LoraSettings, SpeculativeSettings, VllmSettings
from vllmctl.planner.versions import parse_version
from vllmctl.planner.vllm_memory import vllm_memory

GIB = 1 << 30

# Stored GitHub file, search-index id 59369620059 (find_string hit; repo/path not returned): an Unsloth GRPO
# run on "AMD Instinct MI300X VF. Num GPUs = 1", vLLM 0.19.1+rocm721, offline LLM(...), TP 1:
#   INFO 04-21 12:32:10 [utils.py:233] non-default args: {'dtype': torch.bfloat16, 'max_model_len': 3072,
#     'enable_prefix_caching': True, 'gpu_memory_utilization': 0.6488409887512226,
#     'max_num_batched_tokens': 8192, 'max_num_seqs': 256, ..., 'enforce_eager': True, 'enable_lora': True,
#     ..., 'model': 'unsloth/Qwen2.5-7B-Instruct'}
#   INFO 04-21 12:32:11 [core.py:105] Initializing a V1 LLM engine (v0.19.1) with config:
#     model='unsloth/Qwen2.5-7B-Instruct', ... dtype=torch.bfloat16, max_seq_len=3072, ...
#     tensor_parallel_size=1, pipeline_parallel_size=1, ...
#   INFO 04-21 12:32:18 [punica_selector.py:20] Using PunicaWrapperGPU.
#   INFO 04-21 12:32:18 [gpu_model_runner.py:4820] Model loading took 14.43 GiB memory and 5.603437 seconds
# max_loras and max_lora_rank are not among the non-default args: vLLM's defaults, 1 slot of rank 16.
LORA_LOGGED_GIB = 14.43
# The same model without LoRA, same log line (gpu_model_runner.py:4820, so the same vLLM build line):
# benchmarks/data/vllm_startup_public.jsonl, search-index id 68717046901 (and id 53128951888, vLLM 0.18.0):
#   [gpu_model_runner.py:4820] Model loading took 14.25 GiB memory and 13.038451 seconds
PLAIN_LOGGED_GIB = 14.25


def _lora_run(lora: LoraSettings | None) -> float:
    arch = load_arch("Qwen/Qwen2.5-7B-Instruct", online=False)
    settings = VllmSettings(
        parse_version("0.19.1"), 1, 1, 0.6488409887512226, 3072, 256, 8192, enforce_eager=True, lora=lora
    )
    return vllm_memory(arch, lookup_gpu("MI300X"), settings).weights_gib


def test_lora_loading_figure_within_2_percent_of_the_log() -> None:
    # weights + slots: the planner's 14.185 GiB of bf16 weights + 0.075 GiB of slots = 14.26 GiB against
    # the logged 14.43 GiB (-1.2 %); the base weights alone are 14.185 against 14.25 logged without LoRA
    predicted = _lora_run(LoraSettings(max_loras=1, max_lora_rank=16))
    assert predicted == pytest.approx(14.26, abs=0.005)
    assert predicted == pytest.approx(LORA_LOGGED_GIB, rel=0.02)
    assert _lora_run(None) == pytest.approx(PLAIN_LOGGED_GIB, rel=0.01)


@pytest.mark.xfail(
    strict=True,
    reason="LoRA slot term: planner 0.075 GiB (1 slot of rank 16 over Qwen2.5-7B's 28 x 7 projections, "
    "bf16) vs 0.18 +/- 0.01 GiB logged (14.43 with --enable-lora minus 14.25 without, vLLM 0.19.1 ROCm on "
    "MI300X): 2.4x under. Unexplained by the slot shapes alone; not modelled (ROCm build, Unsloth-patched "
    "engine, or buffers beyond the A/B stacks)",
)
def test_lora_slot_term_matches_the_logged_difference() -> None:
    arch = load_arch("Qwen/Qwen2.5-7B-Instruct", online=False)
    slots = lora_slot_bytes(arch, LoraSettings(max_loras=1, max_lora_rank=16), 2) / GIB
    assert slots == pytest.approx(0.0752, abs=0.0001)
    assert _lora_run(LoraSettings(1, 16)) - _lora_run(None) == pytest.approx(slots)
    assert slots == pytest.approx(LORA_LOGGED_GIB - PLAIN_LOGGED_GIB, abs=0.015)


# Stored GitHub file, search-index id 26052775130 (find_string hit; repo/path not returned): "Reproduction
# Report: NeMo-RL v0.5.0 + vLLM Speculative Decoding with Draft Models", 2026-02-10, 8x NVIDIA H20, vLLM at
# the merge commit of vllm-project/vllm#24322 (0.14.0rc2.dev156+g4a5299c93). Generation config: model
# Qwen/Qwen3-4B, tensor_parallel_size 1, gpu_memory_utilization 0.85, max_model_len 2048,
# speculative_config {method: draft_model, model: Qwen/Qwen3-0.6B, num_speculative_tokens: 5,
# draft_tensor_parallel_size: 1}. The report quotes:
#   Initializing a V1 LLM engine (v0.14.0rc2.dev156+g4a5299c93.d20260210)
#     speculative_config=SpeculativeConfig(method='draft_model', model='Qwen/Qwen3-0.6B', num_spec_tokens=5)
#   Loading drafter model...
#   Starting to load draft model Qwen/Qwen3-0.6B. TP=1, rank=0
#   Model loading took 8.67 GiB memory
DRAFT_LOGGED_GIB = 8.67
# Qwen3-0.6B served alone logs 1.12 GiB (benchmarks/data/vllm_startup_public.jsonl: llm-d-benchmark's
# empirical notes, vLLM ~0.11, and search-index id 62458215816, vLLM 0.19.0).
DRAFT_ALONE_LOGGED_GIB = 1.12


def test_draft_model_loading_figure_within_2_percent_of_the_log() -> None:
    target, draft = load_arch("Qwen/Qwen3-4B", online=False), load_arch("Qwen/Qwen3-0.6B", online=False)
    spec = SpeculativeSettings("draft_model", 5, draft_tp=1, draft=draft)
    base = VllmSettings(parse_version("0.14.0rc2.dev156+g4a5299c93"), 1, 1, 0.85, 2048, 256, 8192)
    plain = vllm_memory(target, lookup_gpu("H20"), base)
    served = vllm_memory(target, lookup_gpu("H20"), replace(base, speculative=spec))
    # draft weights term: Qwen3-0.6B in bf16 (tied embeddings), 1.11 GiB, against 1.12 logged alone
    drafted = draft_weight_bytes(spec, 1) / GIB
    assert drafted == pytest.approx(DRAFT_ALONE_LOGGED_GIB, rel=0.02)
    assert served.weights_gib - plain.weights_gib == pytest.approx(drafted)
    # target 7.49 + draft 1.11 = 8.60 GiB against the logged 8.67 GiB (-0.8 %)
    assert served.weights_gib == pytest.approx(8.60, abs=0.005)
    assert served.weights_gib == pytest.approx(DRAFT_LOGGED_GIB, rel=0.02)
