"""Parameter choice per profile: TP, replicas, explicit args, fp8-KV and eager fallbacks, the infeasible
error, SGLang plans, and whole-inventory planning."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from vllmctl.catalog.gpus import lookup_gpu
from vllmctl.catalog.loader import load_arch
from vllmctl.errors import InputError, PlanError
from vllmctl.inventory.model import (
    DriverSpec,
    EngineSpec,
    GpuSpec,
    Host,
    Inventory,
    ModelDeployment,
    SshSettings,
)
from vllmctl.planner import DeploymentRequest, plan_deployment
from vllmctl.planner.inventory_plan import plan_inventory
from vllmctl.planner.settings import VllmSettings
from vllmctl.planner.versions import parse_version
from vllmctl.planner.vllm_memory import vllm_memory
from vllmctl.runner.fleet.hosts import host_resources_from

H100 = lookup_gpu("H100-80GB")
L4 = lookup_gpu("L4")


def test_throughput_on_eight_gpus_runs_eight_replicas_of_a_small_model() -> None:
    plan = plan_deployment(
        load_arch("meta-llama/Llama-3.1-8B"), H100, 8, DeploymentRequest(profile="throughput")
    )
    assert plan.engine_args["tensor_parallel_size"] == 1
    assert [r.gpu_indices for r in plan.replicas] == [(i,) for i in range(8)]
    assert [r.port for r in plan.replicas] == list(range(8000, 8008))
    assert plan.engine_args["max_num_batched_tokens"] == 16384
    assert plan.engine_args["gpu_memory_utilization"] >= 0.9
    assert all(d.reason for d in plan.reasons)
    json.dumps(plan.to_json())


def test_smallest_tp_that_holds_the_context_then_replicas() -> None:
    plan = plan_deployment(load_arch("meta-llama/Llama-3.3-70B-Instruct"), H100, 8, DeploymentRequest())
    assert plan.engine_args["tensor_parallel_size"] == 4
    assert [r.gpu_indices for r in plan.replicas] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    reason = plan.reason_for("tensor_parallel_size")
    assert reason is not None and "TP=2 could not hold" in reason.reason


def test_requested_concurrency_can_force_wider_tp() -> None:
    arch = load_arch("meta-llama/Llama-3.1-8B")
    assert plan_deployment(arch, H100, 8, DeploymentRequest()).engine_args["tensor_parallel_size"] == 1
    wide = plan_deployment(arch, H100, 8, DeploymentRequest(concurrency=5))
    assert wide.engine_args["tensor_parallel_size"] == 2
    assert wide.memory.max_concurrency >= 5


def test_latency_profile_uses_widest_tp_and_small_batches() -> None:
    plan = plan_deployment(load_arch("Qwen/Qwen3-8B"), H100, 4, DeploymentRequest(profile="latency"))
    assert plan.engine_args["tensor_parallel_size"] == 4
    assert len(plan.replicas) == 1
    assert plan.engine_args["max_num_batched_tokens"] == 2048


def test_explicit_engine_args_win_and_are_only_checked() -> None:
    request = DeploymentRequest(
        engine_args={"tensor-parallel-size": 2, "max_num_seqs": 64, "gpu_memory_utilization": 0.97}
    )
    plan = plan_deployment(load_arch("meta-llama/Llama-3.1-8B"), H100, 8, request)
    assert plan.engine_args["tensor_parallel_size"] == 2
    assert plan.engine_args["max_num_seqs"] == 64
    assert plan.engine_args["gpu_memory_utilization"] == 0.97
    assert len(plan.replicas) == 4
    assert any("above 0.95" in w for w in plan.warnings)
    reason = plan.reason_for("max_num_seqs")
    assert reason is not None and reason.reason == "explicit"


def test_fp8_kv_cache_when_it_is_the_only_way_to_fit() -> None:
    plan = plan_deployment(load_arch("Qwen/Qwen3-8B"), L4, 1, DeploymentRequest(max_model_len=32768))
    assert plan.engine_args["kv_cache_dtype"] == "fp8"
    assert plan.engine_args["max_model_len"] == 32768
    assert any("fp8" in w for w in plan.warnings)


def test_a_fit_inside_the_prediction_error_band_is_refused_unless_tight_fit() -> None:
    arch = load_arch("Qwen/Qwen3-8B")
    with pytest.raises(PlanError) as caught:
        plan_deployment(arch, L4, 1, DeploymentRequest())  # fp8 KV leaves 0.49 GiB beyond one request
    assert "fits only at the optimistic edge of the prediction" in caught.value.message
    assert "tight_fit: true" in caught.value.hint and "max_model_len <= " in caught.value.hint
    plan = plan_deployment(arch, L4, 1, DeploymentRequest(tight_fit=True))
    assert plan.engine_args["max_model_len"] == 40960
    assert any("tight fit accepted" in w for w in plan.warnings)


def test_fewer_graph_sizes_then_enforce_eager_when_graphs_do_not_fit() -> None:
    arch = load_arch("Qwen/Qwen3-8B")
    base = VllmSettings(parse_version("0.21.0"), 1, 1, 0.92, 40960, 256, 2048)
    with_graphs = vllm_memory(arch, L4, base).max_model_len_that_fits
    fewer = vllm_memory(arch, L4, replace(base, capture_sizes=(1, 2, 4, 8, 16, 32))).max_model_len_that_fits
    eager = vllm_memory(arch, L4, replace(base, enforce_eager=True)).max_model_len_that_fits
    assert with_graphs < fewer < eager
    # tight_fit: these lengths sit right at each mode's limit, inside the prediction's error band
    request = DeploymentRequest(
        engine_version="0.21.0", max_model_len=(with_graphs + fewer) // 2, tight_fit=True
    )
    plan = plan_deployment(arch, L4, 1, request)
    assert plan.engine_args["compilation_config"] == {"cudagraph_capture_sizes": [1, 2, 4, 8, 16, 32]}
    assert plan.engine_args["enforce_eager"] is False
    request = DeploymentRequest(engine_version="0.21.0", max_model_len=(fewer + eager) // 2, tight_fit=True)
    plan = plan_deployment(arch, L4, 1, request)
    assert plan.engine_args["enforce_eager"] is True
    assert "compilation_config" not in plan.engine_args
    assert plan.engine_args["kv_cache_dtype"] == "auto"


def test_context_shrinks_only_when_allowed() -> None:
    arch = load_arch("Qwen/Qwen3-8B")
    request = DeploymentRequest(engine_args={"kv_cache_dtype": "auto"})
    with pytest.raises(PlanError):
        plan_deployment(arch, L4, 1, request)
    plan = plan_deployment(arch, L4, 1, DeploymentRequest(engine_args={"kv_cache_dtype": "auto"},
                                                          allow_context_shrink=True))  # fmt: skip
    assert plan.engine_args["max_model_len"] < 40960
    assert plan.engine_args["max_model_len"] % 1024 == 0
    assert any("shrunk from 40960" in w for w in plan.warnings)


def test_nothing_fits_raises_plan_error_with_numbers_and_options() -> None:
    with pytest.raises(PlanError) as caught:
        plan_deployment(load_arch("meta-llama/Llama-3.3-70B-Instruct"), L4, 2, DeploymentRequest())
    assert caught.value.message == (
        "meta-llama/Llama-3.3-70B-Instruct does not fit on 2x L4 (22.03 GiB each): "
        "at TP=2 weights 65.74 GiB + activations 1.21 GiB + other 0.21 GiB exceed the 19.83 GiB budget "
        "(gpu_memory_utilization 0.9); vLLM would refuse it (kv-cache-has-memory): No available memory for "
        "the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."
    )
    assert caught.value.hint == (
        "options: use 16 GPUs (tensor_parallel_size 16, or pipeline_parallel_size 8 over 8 nodes); "
        "a fp8 variant needs 33.88 GiB/GPU (still does not fit); "
        "a 4-bit AWQ/GPTQ variant needs 18.55 GiB/GPU (still does not fit)"
    )


def test_too_long_context_lists_the_length_that_fits() -> None:
    request = DeploymentRequest(engine_args={"kv_cache_dtype": "auto", "enforce_eager": True})
    with pytest.raises(PlanError) as caught:
        plan_deployment(load_arch("Qwen/Qwen3-8B"), L4, 1, request)
    assert "one request at max_model_len 40960 needs 5.62 GiB" in caught.value.message
    assert "set max_model_len <= " in caught.value.hint


def test_context_above_the_model_maximum_is_refused_as_vllm_refuses_it() -> None:
    derived = r"greater than the derived max_model_len \(max_position_embeddings=40960"
    with pytest.raises(InputError, match=derived):
        plan_deployment(load_arch("Qwen/Qwen3-8B"), H100, 1, DeploymentRequest(max_model_len=65536))
    allowed = DeploymentRequest(max_model_len=65536, allow_long_max_model_len=True)
    assert plan_deployment(load_arch("Qwen/Qwen3-8B"), H100, 1, allowed).engine_args["max_model_len"] == 65536


def test_bad_profile_and_no_gpus_are_input_errors() -> None:
    arch = load_arch("Qwen/Qwen3-8B")
    with pytest.raises(InputError):
        plan_deployment(arch, H100, 0, DeploymentRequest())
    with pytest.raises(InputError):
        plan_deployment(arch, H100, 1, DeploymentRequest(profile="fast"))  # type: ignore[arg-type]


def test_sglang_plan_picks_replicas_and_its_own_flags() -> None:
    request = DeploymentRequest(engine="sglang", engine_version="0.5.2")
    plan = plan_deployment(load_arch("meta-llama/Llama-3.1-8B"), H100, 2, request)
    assert plan.engine_args["tp_size"] == 1
    assert plan.engine_args["mem_fraction_static"] == 0.835
    assert plan.engine_args["chunked_prefill_size"] == 8192
    assert plan.engine_args["dp_size"] == 2
    assert [(r.gpu_indices, r.port) for r in plan.replicas] == [((0, 1), 8000)]


def _host(name: str, gpus: GpuSpec | None) -> Host:
    return Host(name, f"{name}.lan", SshSettings(), gpus, DriverSpec(), EngineSpec())


def test_plan_inventory_uses_facts_first_and_splits_shared_hosts() -> None:
    inv = Inventory(
        path="fleet.yml",
        hosts={"a": _host("a", GpuSpec("H100-80GB", 8)), "b": _host("b", None)},
        groups={},
        models={
            "small": ModelDeployment("small", "Qwen/Qwen3-8B", ("a", "b"), port=8000),
            "big": ModelDeployment("big", "meta-llama/Llama-3.3-70B-Instruct", ("a",), port=9000),
        },
    )
    result = plan_inventory(inv, {"b": ("NVIDIA L40S", 4, 46068)})
    by_key = {(e.host, e.model): e for e in result.entries}
    small_a, big_a, small_b = by_key["a", "small"], by_key["a", "big"], by_key["b", "small"]
    assert small_a.gpu_indices == (0, 1, 2, 3) and big_a.gpu_indices == (4, 5, 6, 7)
    assert big_a.plan is not None and big_a.plan.replicas[0].gpu_indices == (4, 5, 6, 7)
    assert big_a.plan.replicas[0].port == 9000
    assert small_b.gpu_source == "facts" and small_b.plan is not None and small_b.plan.gpu == "L40S"
    assert result.ok
    json.dumps(result.to_json())


def test_plan_inventory_reports_each_failure() -> None:
    inv = Inventory(
        path="fleet.yml",
        hosts={"a": _host("a", GpuSpec("L4", 1)), "c": _host("c", None)},
        groups={},
        models={"big": ModelDeployment("big", "meta-llama/Llama-3.3-70B-Instruct", ("a", "c"))},
    )
    result = plan_inventory(inv)
    assert not result.ok
    assert [e.host for e in result.failures()] == ["a", "c"]
    with pytest.raises(PlanError, match="c/big: no GPUs known"):
        result.raise_for_failures()


def test_pipeline_parallel_across_nodes_only_when_one_node_cannot_hold_it() -> None:
    arch = load_arch("meta-llama/Llama-3.1-405B")
    with pytest.raises(PlanError, match="does not fit on 8x H100-80GB"):
        plan_deployment(arch, H100, 8, DeploymentRequest())
    plan = plan_deployment(arch, H100, 8, DeploymentRequest(nodes=2))
    assert (plan.engine_args["tensor_parallel_size"], plan.engine_args["pipeline_parallel_size"]) == (8, 2)
    assert plan.replicas[0].nodes == (0, 1)
    small = plan_deployment(load_arch("Qwen/Qwen3-8B"), H100, 8, DeploymentRequest(nodes=2))
    assert "pipeline_parallel_size" not in small.engine_args


def test_memory_saver_lowers_utilization_to_what_the_model_needs() -> None:
    plan = plan_deployment(load_arch("Qwen/Qwen3-8B"), H100, 1, DeploymentRequest(profile="memory-saver"))
    util = plan.engine_args["gpu_memory_utilization"]
    assert util < 0.5
    assert plan.memory.max_concurrency >= 1
    assert plan.engine_args["max_num_seqs"] == 32


def test_plan_inventory_on_v0_defaults_the_step_budget_to_max_model_len() -> None:
    # vLLM 0.6.4 without chunked prefill schedules a whole prompt per step: max(max_model_len, 2048)
    host = replace(_host("a", GpuSpec("RTX 3090", 1)), engine=EngineSpec(version="0.6.4"))
    inv = Inventory(
        path="fleet.yml",
        hosts={"a": host},
        groups={},
        models={"m": ModelDeployment("m", "meta-llama/Llama-3.1-8B-Instruct", ("a",), max_model_len=20000)},
    )
    result = plan_inventory(inv)
    assert result.ok, [e.error for e in result.failures()]
    plan = result.entries[0].plan
    assert plan is not None and plan.engine_args.get("max_num_batched_tokens", 20000) == 20000


def test_the_mxfp4_backend_follows_the_triton_kernels_the_hosts_venv_has() -> None:
    # Triton pads Hopper experts (64, 256), Marlin (128, 256): llm-d's vllm-openai 0.11.0 H100 start of
    # gpt-oss-120b loaded 64.38 GiB, a pip 0.10.1 start 65.97 (vllm#23278)
    case = Path(__file__).parents[1] / "facts/engine_venvs/vllm_with_triton_kernels.json"
    venvs = json.loads(case.read_text())["fact"]
    gathered = {"gpu-01": {"facts": {"engine_venvs": venvs, "resources": {"memory_mib": 2 << 20}}}}
    host = host_resources_from(gathered)["gpu-01"]
    assert host.triton_kernels == ("0.11.0",)
    arch = load_arch("openai/gpt-oss-120b")
    request = DeploymentRequest(engine_args={"tensor_parallel_size": 2}, max_model_len=16000)
    weights = {}
    for version in ("0.11.0", "0.10.1.1"):
        asked = replace(request, engine_version=version)
        weights[version] = plan_deployment(arch, H100, 2, replace(asked, host=host)).memory.weights_gib
        assert plan_deployment(arch, H100, 2, asked).memory.weights_gib == pytest.approx(33.05, abs=0.01)
    assert weights["0.11.0"] == pytest.approx(32.35, abs=0.01)  # Triton, from the venv's triton_kernels
    assert weights["0.10.1.1"] == pytest.approx(33.05, abs=0.01)  # that venv has none: Marlin


@pytest.mark.parametrize("profile", ["latency", "throughput", "memory-saver"])
def test_a_profiles_step_budget_on_v0_still_holds_a_whole_prompt(profile: str) -> None:
    # V0 without chunked prefill refuses a step budget below max_model_len; the profile's is the planner's own
    arch = load_arch("meta-llama/Llama-3.1-8B-Instruct")
    request = DeploymentRequest(engine_version="0.6.4", max_model_len=20000, profile=profile)
    a100 = lookup_gpu("A100-80GB")
    plan = plan_deployment(arch, a100, 1, request)
    assert plan.engine_args["max_num_batched_tokens"] == 20000
    reason = plan.reason_for("max_num_batched_tokens")
    assert reason is not None and "whole prompt per step" in reason.reason
    chunked = replace(request, engine_args={"enable_chunked_prefill": True})
    assert plan_deployment(arch, a100, 1, chunked).engine_args["max_num_batched_tokens"] < 20000


def _serving_host_facts(foreign_mib: int) -> dict[str, Any]:
    """An H100 host whose GPU 0 runs vllmctl's own engine (72,000 MiB) and, on GPU 1, `foreign_mib` of
    another process, as the gpus and gpu_processes facts read them."""
    case = Path(__file__).parents[1] / "facts/gpu_processes/our_engine_and_a_foreign_process.json"
    held = json.loads(case.read_text())["fact"]
    held["processes"][1]["mib"] = foreign_mib
    gpus = [
        {"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559, "memory_used_mib": 72500},
        {
            "index": 1,
            "name": "NVIDIA H100 80GB HBM3",
            "memory_total_mib": 81559,
            "memory_used_mib": foreign_mib,
        },
    ]
    facts = {
        "gpus": {"status": "ok", "gpus": gpus},
        "gpu_processes": held,
        "resources": {"memory_mib": 1 << 20},
    }
    return {"gpu-01": {"facts": facts}}


def test_the_memory_vllmctls_own_engine_holds_is_not_other_processes_memory() -> None:
    """#36: a host serving its engine replans as an idle one would; another process's memory counts."""
    assert host_resources_from(_serving_host_facts(0))["gpu-01"].gpu_used_gib == pytest.approx(500 / 1024)
    held = host_resources_from(_serving_host_facts(8500))["gpu-01"]
    assert held.gpu_used_gib == pytest.approx(8500 / 1024)
    facts = _serving_host_facts(0)
    del facts["gpu-01"]["facts"]["gpu_processes"]  # no process list (an old driver): all of it counts
    assert host_resources_from(facts)["gpu-01"].gpu_used_gib == pytest.approx(72500 / 1024)


def test_a_foreign_process_holding_most_of_a_gpu_refuses_a_plan_that_fit() -> None:
    inv = Inventory(
        path="fleet.yml",
        hosts={"gpu-01": _host("gpu-01", None)},
        groups={},
        models={"m": ModelDeployment("m", "meta-llama/Llama-3.1-8B-Instruct", ("gpu-01",))},
    )
    facts = {"gpu-01": ("NVIDIA H100 80GB HBM3", 2, 81559)}
    ours = plan_inventory(inv, facts, resources=host_resources_from(_serving_host_facts(0)))
    assert ours.ok, [e.error for e in ours.failures()]
    squeezed = plan_inventory(inv, facts, resources=host_resources_from(_serving_host_facts(70000)))
    assert not squeezed.ok
    (failed,) = squeezed.failures()
    # vLLM's own start check (free-memory-at-start), with the 70,000 MiB the other process holds
    assert failed.error is not None and "Free memory on device (9.58/79.19 GiB)" in failed.error, failed.error
    assert "reduce GPU memory used by other processes" in failed.error
