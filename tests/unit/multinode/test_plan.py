"""The cluster planner: TP = GPUs per node, PP = the fewest nodes that hold the model, reasons, and errors."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from vllmctl.errors import PlanError
from vllmctl.inventory.model import Inventory
from vllmctl.multinode.plan import cluster_entries, plan_cluster
from vllmctl.planner.inventory_plan import plan_inventory

Load = Callable[[str], Inventory]


def group(hosts: str, model: str, extra: str = "") -> str:
    return (
        f"groups:\n  big: {{hosts: [{hosts}], multi_node: true, cluster_interface: eth1}}\n"
        f"models:\n  m: {{source: {model}, hosts: big, max_model_len: 8192{extra}}}\n"
    )


def test_llama_405b_bf16_on_three_8xh100_hosts_takes_two(load: Load) -> None:
    inv = load(group("gpu-01, gpu-02, gpu-03", "meta-llama/Llama-3.1-405B"))
    model = inv.models["m"]
    assert model.cluster is not None
    plan = plan_cluster(inv, model, model.cluster)
    assert (plan.tp, plan.pp) == (8, 2)
    assert (plan.head, plan.workers, plan.spare) == ("gpu-01", ("gpu-02",), ("gpu-03",))
    args = plan.plan.engine_args
    assert args["tensor_parallel_size"] == 8
    assert args["pipeline_parallel_size"] == 2
    assert args["distributed_executor_backend"] == "ray"
    reasons = {d.flag: d.reason for d in plan.plan.reasons}
    assert reasons["tensor_parallel_size"].startswith("GPUs per node: 8x H100-80GB on each of the 3 hosts")
    assert reasons["pipeline_parallel_size"].startswith(
        "the fewest nodes that hold the model: one node cannot (meta-llama/Llama-3.1-405B does not fit on 8x"
    )
    assert reasons["nodes"] == "Ray head and API server on gpu-01; workers gpu-02; not needed: gpu-03"


def test_deepseek_v3_on_two_8xh100_hosts(load: Load) -> None:
    inv = load(group("gpu-01, gpu-02", "deepseek-ai/DeepSeek-V3"))
    model = inv.models["m"]
    assert model.cluster is not None
    plan = plan_cluster(inv, model, model.cluster)
    assert (plan.tp, plan.pp, plan.hosts) == (8, 2, ("gpu-01", "gpu-02"))
    assert plan.plan.engine_args["enable_expert_parallel"] is True


def test_a_model_that_fits_one_node_runs_on_the_head_alone(load: Load) -> None:
    inv = load(group("gpu-01, gpu-02", "meta-llama/Llama-3.1-8B"))
    model = inv.models["m"]
    assert model.cluster is not None
    plan = plan_cluster(inv, model, model.cluster)
    assert (plan.tp, plan.pp, plan.hosts, plan.spare) == (8, 1, ("gpu-01",), ("gpu-02",))
    reason = plan.plan.reason_for("pipeline_parallel_size")
    assert reason is not None
    assert reason.reason == "one node of 8x H100-80GB holds the model: the engine runs on the head alone"


def test_explicit_pipeline_size_wins(load: Load) -> None:
    inv = load(
        group("gpu-01, gpu-02", "meta-llama/Llama-3.1-8B", ", engine_args: {pipeline_parallel_size: 2}")
    )
    model = inv.models["m"]
    assert model.cluster is not None
    plan = plan_cluster(inv, model, model.cluster)
    assert (plan.tp, plan.pp, plan.hosts) == (8, 2, ("gpu-01", "gpu-02"))
    reason = plan.plan.reason_for("pipeline_parallel_size")
    assert reason is not None and reason.reason == "explicit: 2 pipeline stage(s), one per node"


def test_explicit_pipeline_size_above_the_node_count_is_refused(load: Load) -> None:
    inv = load(
        group("gpu-01, gpu-02", "meta-llama/Llama-3.1-8B", ", engine_args: {pipeline_parallel_size: 3}")
    )
    model = inv.models["m"]
    assert model.cluster is not None
    with pytest.raises(PlanError, match="pipeline_parallel_size 3 needs 3 nodes; group 'big' has 2"):
        plan_cluster(inv, model, model.cluster)


def test_nodes_with_different_gpus_are_a_clear_error(load: Load) -> None:
    inv = load(group("gpu-01, gpu-02, gpu-03", "meta-llama/Llama-3.1-405B"))
    model = inv.models["m"]
    assert model.cluster is not None
    facts = {"gpu-03": ("NVIDIA H100 80GB HBM3", 4, 81559)}  # gathered: 4 GPUs where 8 are declared
    with pytest.raises(PlanError) as caught:
        plan_cluster(inv, model, model.cluster, facts)
    assert caught.value.message == (
        "multi-node group 'big' mixes GPUs (gpu-01, gpu-02: 8x H100-80GB; gpu-03: 4x H100-80GB)"
    )
    assert caught.value.hint.startswith("every node of a multi-node engine needs the same GPU kind and count")


def test_gathered_facts_that_differ_from_the_declaration_count(load: Load) -> None:
    inv = load(group("gpu-01, gpu-02", "meta-llama/Llama-3.1-405B"))
    model = inv.models["m"]
    assert model.cluster is not None
    facts = {"gpu-02": ("NVIDIA A100-SXM4-80GB", 8, 81920)}
    with pytest.raises(PlanError, match="mixes GPUs"):
        plan_cluster(inv, model, model.cluster, facts)


def test_plan_entries_show_each_hosts_role(load: Load) -> None:
    inv = load(group("gpu-01, gpu-02, gpu-03", "meta-llama/Llama-3.1-405B"))
    entries = cluster_entries(inv, plan_inventory(inv).entries)
    roles = {}
    for entry in entries:
        assert entry.plan is not None
        decision = entry.plan.reason_for("role")
        assert decision is not None
        roles[entry.host] = decision.value
        assert entry.plan.engine_args["pipeline_parallel_size"] == 2
    assert roles == {"gpu-01": "head", "gpu-02": "worker", "gpu-03": "spare"}


def test_a_plain_host_list_whose_plan_needs_two_hosts_becomes_one_cluster(load: Load) -> None:
    inv = load(
        "models:\n  m: {source: meta-llama/Llama-3.1-405B, hosts: [gpu-01, gpu-02], max_model_len: 8192}\n"
    )
    entries = cluster_entries(inv, plan_inventory(inv).entries)
    roles = [e.plan.reason_for("role") for e in entries if e.plan is not None]
    assert [r.value for r in roles if r is not None] == ["head", "worker"]


def test_nodes_with_different_engine_versions_are_a_clear_error(load: Load) -> None:
    text = group("gpu-01, gpu-02", "meta-llama/Llama-3.1-405B")
    inv = load(text)
    hosts = dict(inv.hosts)
    hosts["gpu-02"] = replace(hosts["gpu-02"], engine=replace(hosts["gpu-02"].engine, version="0.10.2"))
    inv = replace(inv, hosts=hosts)
    model = inv.models["m"]
    assert model.cluster is not None
    with pytest.raises(PlanError) as caught:
        plan_cluster(inv, model, model.cluster)
    assert caught.value.message == (
        "multi-node group 'big' mixes engines (gpu-01: vllm 0.11.0; gpu-02: vllm 0.10.2)"
    )
