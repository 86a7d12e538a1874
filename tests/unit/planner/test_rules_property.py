"""What the planner chooses by itself never breaks one of vLLM's startup rules: a property over the GPU
catalog x shipped architectures (and quantized variants) x profiles x GPU counts; and the issue's examples."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from plan_settings import settings_from_plan

from vllmctl.catalog.gpus import GPUS, lookup_gpu
from vllmctl.catalog.loader import catalog_entries, load_arch
from vllmctl.errors import InputError, PlanError
from vllmctl.planner import DeploymentRequest, plan_deployment
from vllmctl.planner.rules import refusals
from vllmctl.planner.rules.base import HostResources
from vllmctl.planner.types import PROFILES
from vllmctl.planner.vllm_guard import RefusedFlagsError
from vllmctl.planner.vllm_memory import vllm_memory

MODELS = sorted({entry["id"] for entry in catalog_entries().values()})
CUDA_GPUS = [gpu.name for gpu in GPUS if gpu.vendor == "nvidia"]
VERSIONS = ("0.10.2", "0.11.0", "0.13.0", "0.21.0")


def _check(model: str, gpu_name: str, count: int, profile: str, version: str, ram: float | None) -> None:
    arch = load_arch(model, online=False)
    gpu = lookup_gpu(gpu_name)
    request = DeploymentRequest(
        engine_version=version, profile=profile, max_model_len=min(arch.max_position_embeddings, 32768),  # type: ignore[arg-type]
        host=HostResources(ram_gib=ram),
    )  # fmt: skip
    try:
        plan = plan_deployment(arch, gpu, count, request)
    except RefusedFlagsError as exc:  # only the engine release was given: a model too new for it is refused
        assert all(r.flags == ("version",) for r in exc.refusals), exc.render()
        return
    except InputError as exc:  # nothing explicit was given: the user cannot be blamed
        pytest.fail(f"input error without explicit flags: {exc.render()}")
    except PlanError:
        return  # does not fit, or the GPU cannot run the model: refused, never planned
    chosen = settings_from_plan(plan, request)
    memory = vllm_memory(arch, gpu, chosen)
    found = refusals(arch, gpu, count, chosen, request.host, memory)
    assert found == [], "\n".join(r.render() for r in found)
    assert sum(len(r.gpu_indices) for r in plan.replicas) <= count


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    model=st.sampled_from(MODELS),
    gpu_name=st.sampled_from(CUDA_GPUS),
    count=st.sampled_from((1, 2, 4, 6, 8)),
    profile=st.sampled_from(PROFILES),
    version=st.sampled_from(VERSIONS),
    ram=st.sampled_from((None, 64.0, 2048.0)),
)
def test_planner_choices_pass_every_rule(
    model: str, gpu_name: str, count: int, profile: str, version: str, ram: float | None
) -> None:
    _check(model, gpu_name, count, profile, version, ram)


@pytest.mark.parametrize(
    ("model", "gpu", "count", "profile"),
    [
        ("microsoft/phi-4", "H100-80GB", 8, "latency"),
        ("Qwen/Qwen2.5-72B-Instruct-AWQ", "H100-80GB", 8, "latency"),
        ("Qwen/Qwen2.5-7B-Instruct-AWQ", "A100-80GB", 8, "latency"),
        ("Qwen/Qwen3-30B-A3B-FP8", "H100-80GB", 8, "latency"),
        ("Qwen/Qwen3-235B-A22B-FP8", "H200", 8, "latency"),
        ("meta-llama/Llama-3.1-8B-Instruct", "T4", 4, "balanced"),
        ("meta-llama/Llama-3.1-8B-Instruct", "A100-80GB", 1, "memory-saver"),
        ("deepseek-ai/DeepSeek-V2.5", "A100-80GB", 8, "throughput"),
    ],
)
def test_the_issues_examples_plan_only_what_vllm_starts(
    model: str, gpu: str, count: int, profile: str
) -> None:
    _check(model, gpu, count, profile, "0.11.0", None)


def test_latency_picks_the_widest_tp_that_vllm_accepts() -> None:
    def tp(model: str, profile: Any = "latency") -> int:
        plan = plan_deployment(load_arch(model), lookup_gpu("H100"), 8, DeploymentRequest(profile=profile))
        return int(plan.engine_args["tensor_parallel_size"])

    assert tp("microsoft/phi-4") == 2  # 10 KV heads: TP 4 and 8 are refused
    plan = plan_deployment(
        load_arch("Qwen/Qwen3-30B-A3B-FP8"), lookup_gpu("H100"), 8, DeploymentRequest(profile="latency")
    )
    assert plan.engine_args["tensor_parallel_size"] == 8
    assert plan.engine_args["enable_expert_parallel"] is True


@pytest.mark.parametrize("gpu", ["T4", "A10G", "RTX 3090", "A100-80GB", "V100-32GB"])
def test_fp8_kv_fallback_is_never_chosen_where_the_backend_cannot_run_it(gpu: str) -> None:
    arch = load_arch("Qwen/Qwen3-8B")
    request = DeploymentRequest(max_model_len=40960)
    try:
        plan = plan_deployment(arch, lookup_gpu(gpu), 1, request)
    except PlanError as exc:
        assert "kv_cache_dtype fp8" not in exc.hint  # not even offered as an option
        return
    assert plan.engine_args["kv_cache_dtype"] == "auto"


def test_fp8_kv_fallback_is_chosen_on_ada() -> None:
    request = DeploymentRequest(max_model_len=32768)
    plan = plan_deployment(load_arch("Qwen/Qwen3-8B"), lookup_gpu("L4"), 1, request)
    assert plan.engine_args["kv_cache_dtype"] == "fp8"


def test_pre_ampere_gets_float16_with_a_reason() -> None:
    plan = plan_deployment(
        load_arch("meta-llama/Llama-3.2-3B"), lookup_gpu("T4"), 1, DeploymentRequest(max_model_len=8192)
    )
    decision = plan.reason_for("dtype")
    assert plan.engine_args["dtype"] == "float16"
    assert decision is not None and "no bfloat16" in decision.reason
    short = DeploymentRequest(max_model_len=8192)
    ampere = plan_deployment(load_arch("meta-llama/Llama-3.2-3B"), lookup_gpu("A10G"), 1, short)
    assert "dtype" not in ampere.engine_args


def test_small_host_memory_lowers_swap_space_with_a_reason() -> None:
    request = DeploymentRequest(
        engine_args={"tensor_parallel_size": 8}, max_model_len=8192, host=HostResources(ram_gib=32)
    )
    plan = plan_deployment(load_arch("meta-llama/Llama-3.3-70B-Instruct"), lookup_gpu("H100"), 8, request)
    assert plan.engine_args["swap_space"] == 2.0
    decision = plan.reason_for("swap_space")
    assert decision is not None and "70 %" in decision.reason


def test_explicit_token_budget_keeps_the_profiles_sequences_within_it() -> None:
    request = DeploymentRequest(profile="throughput", engine_args={"max_num_batched_tokens": 512})
    plan = plan_deployment(load_arch("meta-llama/Llama-3.1-8B-Instruct"), lookup_gpu("H100"), 1, request)
    assert plan.engine_args["max_num_seqs"] == 512
    decision = plan.reason_for("max_num_seqs")
    assert decision is not None and "at most max_num_batched_tokens (512)" in decision.reason


def test_data_parallel_size_is_one_engine_not_multiplied_by_replicas() -> None:
    request = DeploymentRequest(engine_args={"tensor_parallel_size": 2, "data_parallel_size": 2})
    plan = plan_deployment(load_arch("meta-llama/Llama-3.1-8B-Instruct"), lookup_gpu("H100"), 8, request)
    assert [r.gpu_indices for r in plan.replicas] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert sum(len(r.gpu_indices) for r in plan.replicas) == 8
