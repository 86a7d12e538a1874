"""LoRA slots and speculative drafts in the memory model, and max_loras / max_lora_rank chosen from adapters.

vLLM's V1 runner loads the LoRA slot buffers and the drafter inside the same memory profiler as the weights
(vllm/v1/worker/gpu_model_runner.py:2631-2653, "Model loading took ... GiB"), so both are weights to the KV
budget; the profile run's dummy adapters (lora_model_runner_mixin.py, maybe_dummy_run_with_lora) are built on
the CPU (lora/models.py, create_dummy_lora) and copied into those slots, so they add no GPU memory.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from vllmctl.catalog.adapters import AdapterConfig, parse_adapter_config
from vllmctl.catalog.gpus import lookup_gpu
from vllmctl.catalog.loader import load_arch
from vllmctl.lab import tinylora
from vllmctl.planner import DeploymentRequest, plan_deployment
from vllmctl.planner.lora import choose_lora, lora_request
from vllmctl.planner.lora_memory import draft_weight_bytes, lora_slot_bytes, module_shapes, mtp_weight_bytes
from vllmctl.planner.settings import LoraSettings, SpeculativeSettings, VllmSettings
from vllmctl.planner.types import LoraRequest
from vllmctl.planner.versions import parse_version
from vllmctl.planner.vllm_memory import vllm_memory

GIB = 1 << 30
H100 = lookup_gpu("H100-80GB")
LLAMA_8B = load_arch("meta-llama/Llama-3.1-8B", online=False)


def _settings(**kw: object) -> VllmSettings:
    base = VllmSettings(parse_version("0.11.0"), 1, 1, 0.9, 8192, 256, 8192)
    return replace(base, **kw)  # type: ignore[arg-type]


def test_slots_are_max_loras_x_rank_over_every_lora_capable_layer() -> None:
    # vllm#8559 serves Llama-3-8B with --enable-lora --max-lora-rank=64 --max-loras=60. Per layer the seven
    # projections have in + out = 8192 (q) + 5120 (k) + 5120 (v) + 8192 (o) + 3 x 18432 (gate, up, down)
    # = 81920 features; A (rank x in) and B (out x rank) in bf16 for 60 slots over 32 layers: 18.75 GiB.
    assert sum(i + o for i, o in module_shapes(LLAMA_8B).values()) == 81920
    layers = 81920 * 64 * 32
    # Llama also has embedding and logits slots: 256 extra rows x 4096, A (128256 + 256) x 64, B 4096 x 64;
    # logits A 64 x 4096 and B 128256 (a multiple of 256) x 64
    embedding = 256 * 4096 + 128512 * 64 + 4096 * 64 + 64 * 4096 + 128256 * 64
    slots = lora_slot_bytes(LLAMA_8B, LoraSettings(max_loras=60, max_lora_rank=64), 2)
    assert slots == (layers + embedding) * 60 * 2
    assert slots / GIB == pytest.approx(20.76, abs=0.01)
    # the adapters' targets do not narrow the slots: every supported module gets one
    assert lora_slot_bytes(LLAMA_8B, LoraSettings(1, 8, targets=("q_proj",)), 2) == lora_slot_bytes(
        LLAMA_8B, LoraSettings(1, 8), 2
    )
    # Qwen3's vLLM class lists no LoRA embedding modules: projections only
    qwen = load_arch("Qwen/Qwen3-8B", online=False)
    projections = sum(i + o for i, o in module_shapes(qwen).values()) * 16 * qwen.num_layers * 2
    assert lora_slot_bytes(qwen, LoraSettings(1, 16), 2) == projections


def test_tp_splits_the_parallel_side_of_each_slot() -> None:
    lora = LoraSettings(max_loras=4, max_lora_rank=16)
    whole, split = lora_slot_bytes(LLAMA_8B, lora, 2), lora_slot_bytes(LLAMA_8B, lora, 2, tp=2)
    assert whole / 2 < split < whole


def test_lora_takes_its_slots_from_the_kv_cache_and_nothing_more_in_the_profile_run() -> None:
    plain = vllm_memory(LLAMA_8B, H100, _settings())
    lora = LoraSettings(max_loras=8, max_lora_rank=64)
    slots = lora_slot_bytes(LLAMA_8B, lora, 2) / GIB
    served = vllm_memory(LLAMA_8B, H100, _settings(lora=lora))
    assert served.weights_gib - plain.weights_gib == pytest.approx(slots)
    assert served.activation_peak_gib == pytest.approx(plain.activation_peak_gib)
    assert plain.available_kv_cache_gib - served.available_kv_cache_gib == pytest.approx(slots)


def test_from_012_the_embedding_slots_hold_no_extra_vocabulary() -> None:
    lora = LoraSettings(max_loras=1, max_lora_rank=16)
    before, after = (lora_slot_bytes(LLAMA_8B, lora, 2, version=v) for v in ((0, 11, 0), (0, 12, 0)))
    # 256 extra rows x 4096 hidden + 256 x 16 in the embedding A; the logits' vocabulary is already a
    # multiple of 256 for Llama-3 (128,256)
    assert before - after == (256 * 4096 + 256 * 16) * 2


def test_a_draft_adds_its_weights_and_shares_the_kv_blocks() -> None:
    # vllm#14067 (and vllm#9995): a draft's weights sit beside the target's; Qwen2.5-Coder-3B with the 1.5B
    # as draft on one RTX 4090, --max-model-len 4096 --max-num-seqs 8 --gpu-memory-utilization 0.9.
    target, draft = load_arch("Qwen/Qwen2.5-3B", online=False), load_arch("Qwen/Qwen2.5-1.5B", online=False)
    gpu = lookup_gpu("RTX-4090")
    base = replace(_settings(), max_model_len=4096, max_num_seqs=8, max_num_batched_tokens=4096)
    spec = SpeculativeSettings("draft_model", 4, None, draft)
    plain, speculative = (
        vllm_memory(target, gpu, base),
        vllm_memory(target, gpu, replace(base, speculative=spec)),
    )
    drafted = draft_weight_bytes(spec, 1) / GIB
    assert drafted == pytest.approx(2.88, rel=0.03)  # Qwen2.5-1.5B in bf16: 1.54 B parameters
    assert speculative.weights_gib - plain.weights_gib == pytest.approx(drafted)
    # both models cache KV per token in the same blocks: 36 target layers x 2 KV heads and 28 draft layers
    # x 2 KV heads of 128, so the target keeps 36 / 64 of what is left
    left = plain.available_kv_cache_gib - drafted
    assert speculative.kv_cache_tokens == pytest.approx(
        plain.kv_cache_tokens * left / plain.available_kv_cache_gib * 36 / 64, rel=0.01
    )


def test_ngram_needs_no_memory() -> None:
    ngram = SpeculativeSettings("ngram", 4)
    assert vllm_memory(LLAMA_8B, H100, _settings(speculative=ngram)) == vllm_memory(
        LLAMA_8B, H100, _settings()
    )


def test_rank_and_slots_are_chosen_from_the_adapters() -> None:
    choice = choose_lora([8, 16, 40])
    assert (choice.max_loras, choice.max_lora_rank) == (3, 64)
    assert "largest adapter rank is 40; 64 is the smallest" in choice.reasons["max_lora_rank"]
    assert choice.engine_args({"max_loras": 1}) == {"max_lora_rank": 64}
    unknown = lora_request([AdapterConfig(8, ("q_proj",)), None])
    assert unknown == LoraRequest((8, 16), (), 1)  # an unreadable config counts at vLLM's default rank
    assert (
        "1 adapter config(s) unreadable here count at vLLM's default 16"
        in choose_lora((8, 16), 1).reasons["max_lora_rank"]
    )


def test_the_plan_states_why_and_counts_the_slots() -> None:
    request = DeploymentRequest(max_model_len=8192, lora=LoraRequest((8, 32), ("q_proj", "v_proj")))
    plan = plan_deployment(LLAMA_8B, H100, 1, request)
    assert (plan.engine_args["max_loras"], plan.engine_args["max_lora_rank"]) == (2, 32)
    reasons = {d.flag: d.reason for d in plan.reasons}
    assert reasons["max_loras"].startswith("2 declared adapter(s)")
    assert "2 slot(s) of rank 32 take 0.35 GiB per GPU from the KV cache" in reasons["max_loras"]
    bare = plan_deployment(LLAMA_8B, H100, 1, DeploymentRequest(max_model_len=8192))
    assert plan.memory.weights_gib > bare.memory.weights_gib


def test_the_lab_adapter_is_a_rank_8_peft_lora() -> None:
    config = parse_adapter_config(__import__("json").dumps(tinylora.adapter_config()), "tiny")
    assert config == AdapterConfig(8, ("q_proj", "v_proj"))
    weights = tinylora.adapter_weights("alpha")
    assert weights["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"].shape == (8, 256)
    assert weights["base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight"].shape == (128, 8)
    assert (
        tinylora.adapter_weights("alpha")["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"]
        != tinylora.adapter_weights("beta")["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"]
    ).any()


def test_mtp_loads_the_models_own_next_token_layer_its_head_and_one_more_kv_layer() -> None:
    r1 = load_arch("deepseek-ai/DeepSeek-R1", online=False)
    assert r1.mtp_layers == 1  # num_nextn_predict_layers
    # At TP 8: the MTP block's routed experts in FP8 (256 x 3 x 7168 x 2048 B / 8) 1.3125 GiB, its own LM head
    # in bf16 (129,280 x 7168 x 2 B / 8) 0.2158 GiB, eh_proj whole on every rank (2 x 7168 x 7168 x 2 B)
    # 0.1914 GiB; MLA attention, the shared expert, router, norms and scales add about 0.05 GiB.
    mtp = mtp_weight_bytes(r1, 8) / GIB
    assert 1.3125 + 0.2158 + 0.1914 < mtp < 1.3125 + 0.2158 + 0.1914 + 0.06
    # from 0.16 the MTP layer computes its logits with the target's LM head (eagle.py shares it)
    shared = mtp_weight_bytes(r1, 8, version=(0, 16, 0)) / GIB
    assert mtp - shared == pytest.approx(129280 * 7168 * 2 / 8 / GIB, rel=0.001)
    assert mtp_weight_bytes(LLAMA_8B, 1) == 0.0  # no MTP layers
    h200 = lookup_gpu("H200")
    base = VllmSettings(parse_version("0.11.0"), 8, 1, 0.9, 32768, 256, 8192)
    plain = vllm_memory(r1, h200, base)
    served = vllm_memory(r1, h200, replace(base, speculative=SpeculativeSettings("mtp", 1)))
    assert served.weights_gib - plain.weights_gib == pytest.approx(mtp)
    # one more MLA layer beside the 61 caches KV in the same blocks: the model keeps 61/62 of the bytes
    share = served.kv_cache_tokens / plain.kv_cache_tokens
    kept = served.available_kv_cache_gib / plain.available_kv_cache_gib
    assert share == pytest.approx(kept * 61 / 62, rel=0.001)


def test_plan_states_what_the_mtp_module_costs() -> None:
    r1 = load_arch("deepseek-ai/DeepSeek-R1", online=False)
    spec = {"method": "mtp", "num_speculative_tokens": 1}
    plan = plan_deployment(
        r1, lookup_gpu("H200"), 8, DeploymentRequest(engine_args={"speculative_config": spec})
    )
    reason = next(d.reason for d in plan.reasons if d.flag == "speculative_config")
    assert reason.endswith("the model's 1 MTP layer(s) take 1.77 GiB per GPU and one more KV layer each")
