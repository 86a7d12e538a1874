"""SGLang decisions from the guides: dp_size over tp_size, expert parallel, schedule policy by workload,
schedule_conservativeness as an input, the overlap scheduler with grammars, torch.compile for small models."""

from __future__ import annotations

from vllmctl.catalog.gpus import lookup_gpu
from vllmctl.catalog.loader import load_arch
from vllmctl.planner import DeploymentPlan, DeploymentRequest, plan_deployment

H100 = lookup_gpu("H100-80GB")


def _plan(model: str, gpus: int, **request: object) -> DeploymentPlan:
    return plan_deployment(
        load_arch(model),
        H100,
        gpus,
        DeploymentRequest(engine="sglang", engine_version="0.5.2", **request),  # type: ignore[arg-type]
    )


def _reason(plan: DeploymentPlan, flag: str) -> str:
    decision = plan.reason_for(flag)
    assert decision is not None, flag
    return decision.reason


def test_data_parallel_workers_share_one_server_when_the_model_fits_small_tp() -> None:
    plan = _plan("meta-llama/Llama-3.1-8B", 4)
    assert (plan.engine_args["tp_size"], plan.engine_args["dp_size"]) == (1, 4)
    assert [(r.gpu_indices, r.port) for r in plan.replicas] == [((0, 1, 2, 3), 8000)]
    assert "data parallelism gives more throughput than a wider tp" in _reason(plan, "dp_size")
    latency = _plan("meta-llama/Llama-3.1-8B", 4, profile="latency")
    assert (latency.engine_args["tp_size"], latency.engine_args["dp_size"]) == (4, 1)
    assert "latency profile" in _reason(latency, "dp_size")
    explicit = _plan("meta-llama/Llama-3.1-8B", 4, engine_args={"tp_size": 2, "dp_size": 1})
    assert explicit.replicas[0].gpu_indices == (0, 1)
    assert _reason(explicit, "dp_size") == "explicit"
    assert _reason(explicit, "tp_size").startswith("explicit; tp 2: ")


def test_moe_gets_expert_parallel_over_its_tp_group() -> None:
    plan = _plan("Qwen/Qwen3-30B-A3B", 4, engine_args={"tp_size": 2})
    assert plan.engine_args["ep_size"] == 2
    assert _reason(plan, "ep_size").startswith("128 experts outnumber the 2 GPUs")
    assert "ep_size" not in _plan("Qwen/Qwen3-8B", 2, engine_args={"tp_size": 2}).engine_args


def test_schedule_policy_follows_the_workload() -> None:
    shared = _plan("Qwen/Qwen3-8B", 1, workload="shared_prefix")
    assert shared.engine_args["schedule_policy"] == "lpm"
    assert "radix-cache hits" in _reason(shared, "schedule_policy")
    assert _plan("Qwen/Qwen3-8B", 1).engine_args["schedule_policy"] == "fcfs"
    explicit = _plan(
        "Qwen/Qwen3-8B", 1, workload="shared_prefix", engine_args={"schedule_policy": "dfs-weight"}
    )
    assert explicit.engine_args["schedule_policy"] == "dfs-weight"


def test_schedule_conservativeness_defaults_to_one_and_takes_advice_through_engine_args() -> None:
    assert _plan("Qwen/Qwen3-8B", 1).engine_args["schedule_conservativeness"] == 1.0
    lowered = _plan("Qwen/Qwen3-8B", 1, engine_args={"schedule_conservativeness": 0.5})
    assert lowered.engine_args["schedule_conservativeness"] == 0.5
    assert _reason(lowered, "schedule_conservativeness") == "explicit"


def test_overlap_scheduler_off_only_with_a_grammar_backend() -> None:
    assert _plan("Qwen/Qwen3-8B", 1).engine_args["disable_overlap_schedule"] is False
    grammar = _plan("Qwen/Qwen3-8B", 1, engine_args={"grammar_backend": "xgrammar"})
    assert grammar.engine_args["disable_overlap_schedule"] is True
    assert "constrained decoding" in _reason(grammar, "disable_overlap_schedule")
    none = _plan("Qwen/Qwen3-8B", 1, engine_args={"grammar_backend": "none"})
    assert none.engine_args["disable_overlap_schedule"] is False


def test_torch_compile_only_for_small_dense_models_with_the_latency_profile() -> None:
    small = _plan("Qwen/Qwen3-4B", 1, profile="latency")
    assert small.engine_args["enable_torch_compile"] is True
    assert _plan("Qwen/Qwen3-4B", 1).engine_args["enable_torch_compile"] is False
    assert _plan("Qwen/Qwen3-14B", 1, profile="latency").engine_args["enable_torch_compile"] is False
    assert _plan("Qwen/Qwen3-30B-A3B", 1, profile="latency").engine_args["enable_torch_compile"] is False
