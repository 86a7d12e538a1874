"""Launcher data_parallel: the plan (ranks, experts per rank, all-to-all, ports), each node's exact argv in
both balancing modes, the unit, and the preflight's probes."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from dp_inventory import dp_inventory

from vllmctl.errors import PlanError
from vllmctl.inventory.model import EngineSpec, Inventory
from vllmctl.multinode.dp_plan import experts_per_rank, vllm_mode
from vllmctl.multinode.dp_units import dp_node_argv, render_dp_node_unit
from vllmctl.multinode.plan import ClusterPlan, plan_cluster
from vllmctl.multinode.plan import _for_host as for_host
from vllmctl.multinode.preflight import cluster_ports, probe_targets
from vllmctl.tasks.desired import venv_path

Load = Callable[[str], Inventory]
ADDRESSES = {"gpu-01": "192.168.50.1", "gpu-02": "192.168.50.2", "gpu-03": "192.168.50.3"}
INVENTORY = dp_inventory()


def planned(load: Load, text: str = INVENTORY) -> tuple[Inventory, ClusterPlan]:
    inv = load(text)
    model = inv.models["dsv3"]
    assert model.cluster is not None
    return inv, plan_cluster(inv, model, model.cluster)


def engine_of(inv: Inventory) -> EngineSpec:
    engine = inv.models["dsv3"].engine
    assert engine is not None
    return engine


def test_experts_split_as_vllms_determine_expert_map() -> None:
    assert experts_per_rank(256, 16) == (16, 16)
    assert experts_per_rank(60, 16) == (4, 3)  # the first 60 % 16 ranks hold one more
    assert experts_per_rank(0, 16) == (0, 0)


def test_vllm_runs_hybrid_with_several_local_ranks_and_external_with_one() -> None:
    assert vllm_mode("internal", 8, 16) == "internal"
    assert vllm_mode("external", 8, 16) == "hybrid"
    assert vllm_mode("external", 1, 2) == "external"
    assert vllm_mode("external", 8, 8) == "internal"  # one node: vLLM drops hybrid


def test_the_plan_splits_the_experts_over_every_rank_of_two_nodes(load: Load) -> None:
    _, plan = planned(load)
    dp = plan.data_parallel
    assert dp is not None
    assert (plan.hosts, plan.spare, plan.tp, plan.pp) == (("gpu-01", "gpu-02"), ("gpu-03",), 1, 1)
    assert (dp.size, dp.size_local, dp.mode, dp.rpc_port) == (16, 8, "internal", 29550)
    assert (dp.expert_parallel, dp.experts_per_rank, dp.all2all_backend) == (
        True,
        (16, 16),
        "allgather_reducescatter",
    )
    args = plan.plan.engine_args
    assert (args["data_parallel_size"], args["tensor_parallel_size"]) == (16, 1)
    assert args["enable_expert_parallel"] is True and args["distributed_executor_backend"] == "mp"
    # 256 experts over 16 ranks fit an 80 GB GPU each; on one node (8 ranks) they would not
    assert plan.plan.memory.weights_gib < 60
    reasons = {d.flag: d.reason for d in plan.plan.reasons}
    assert reasons["enable_expert_parallel"].startswith(
        "256 experts over DP 16 x TP 1 = 16 ranks: 16 experts whole each"
    )
    assert reasons["nodes"] == (
        "first rank's node and the DP RPC port on gpu-01; then gpu-02; not needed: gpu-03"
    )
    assert dp.ports(8000) == {
        "rpc": {"host": "gpu-01", "port": 29550, "reached_by": ["gpu-02"]},
        "api": {"gpu-01": 8000},
        "ephemeral": dp.ports(8000)["ephemeral"],
    }
    assert plan.to_json()["data_parallel"]["start_ranks"] == {"gpu-01": 0, "gpu-02": 8}


def test_each_host_shows_its_ranks(load: Load) -> None:
    _, plan = planned(load)
    roles = {
        host: next(d.reason for d in for_host(plan, host).reasons if d.flag == "role") for host in ADDRESSES
    }
    assert roles["gpu-01"] == "DP ranks 0-7 of 16 (TP 1 each); runs an API server"
    assert roles["gpu-02"] == "DP ranks 8-15 of 16 (TP 1 each); headless"
    assert roles["gpu-03"] == "the model fits on fewer nodes; nothing of it runs here"


def test_internal_head_serves_and_the_other_node_runs_headless_from_its_start_rank(load: Load) -> None:
    inv, plan = planned(load)
    model, engine = inv.models["dsv3"], engine_of(inv)
    head = dp_node_argv(model, engine, plan, "gpu-01", ADDRESSES["gpu-01"])
    other = dp_node_argv(model, engine, plan, "gpu-02", ADDRESSES["gpu-01"])
    python = f"{venv_path(engine)}/bin/python"
    assert head[:5] == [python, "/var/lib/vllmctl/bin/vllm-cli.py", "serve", "--model", model.source]
    common = [
        "--data-parallel-size-local", "8",
        "--data-parallel-address", "192.168.50.1",
        "--data-parallel-rpc-port", "29550",
    ]  # fmt: skip
    assert head[-6:] == common
    assert other[-9:] == [*common, "--data-parallel-start-rank", "8", "--headless"]
    assert head[:-6] == other[:-9]  # the same engine flags on every node
    for flag, value in (("--data-parallel-size", "16"), ("--tensor-parallel-size", "1")):
        assert head[head.index(flag) + 1] == value
    assert "--enable-expert-parallel" in head and "--data-parallel-hybrid-lb" not in head


def test_external_balancing_gives_every_node_an_api_server(load: Load) -> None:
    text = INVENTORY.replace("size: 16}", "size: 16, balancing: external, rpc_port: 13345}")
    inv, plan = planned(load, text)
    model, engine = inv.models["dsv3"], engine_of(inv)
    assert plan.data_parallel is not None and plan.data_parallel.mode == "hybrid"
    assert plan.data_parallel.api_hosts == ("gpu-01", "gpu-02")
    head = dp_node_argv(model, engine, plan, "gpu-01", ADDRESSES["gpu-01"])
    other = dp_node_argv(model, engine, plan, "gpu-02", ADDRESSES["gpu-01"])
    tail = ["--data-parallel-address", "192.168.50.1", "--data-parallel-rpc-port", "13345"]
    local = ["--data-parallel-size-local", "8", *tail]
    assert head[-9:] == [*local, "--data-parallel-start-rank", "0", "--data-parallel-hybrid-lb"]
    assert other[-9:] == [*local, "--data-parallel-start-rank", "8", "--data-parallel-hybrid-lb"]
    assert "--headless" not in other


def test_one_rank_per_node_external_is_vllms_external_mode(load: Load) -> None:
    text = INVENTORY.replace("{size_local: 8, size: 16}", "{size_local: 1, balancing: external}").replace(
        "max_model_len: 8192", "max_model_len: 8192\n    engine_args: {tensor_parallel_size: 8}"
    )
    inv, plan = planned(load, text)
    dp = plan.data_parallel
    assert dp is not None and (dp.mode, dp.size, dp.tp, dp.hosts) == ("external", 3, 8, tuple(ADDRESSES))
    model, engine = inv.models["dsv3"], engine_of(inv)
    third = dp_node_argv(model, engine, plan, "gpu-03", ADDRESSES["gpu-01"])
    assert third[-6:] == [
        "--data-parallel-rank", "2",
        "--data-parallel-address", "192.168.50.1",
        "--data-parallel-rpc-port", "29550",
    ]  # fmt: skip


def test_the_unit_names_its_ranks_and_has_no_ray(load: Load) -> None:
    inv, plan = planned(load)
    model, engine = inv.models["dsv3"], engine_of(inv)
    text = render_dp_node_unit(model, engine, plan, "gpu-02", ADDRESSES)
    lines = text.splitlines()
    assert lines[2] == (
        "Description=vllmctl dsv3 DP ranks 8-15 of 16 on node 1 of 2 in group wide "
        "(vllm 0.32.0, TP 1, internal, headless)"
    )
    assert "Environment=VLLM_HOST_IP=192.168.50.2" in lines
    assert "Environment=GLOO_SOCKET_IFNAME=eth1" in lines
    exec_start = next(line for line in lines if line.startswith("ExecStart="))
    assert exec_start.endswith("--data-parallel-start-rank 8 --headless")
    assert "RAY" not in text


def test_preflight_probes_only_the_heads_rpc_port(load: Load) -> None:
    _, plan = planned(load)
    assert cluster_ports(plan.cluster) == [29550]
    assert probe_targets(plan.cluster, "gpu-02", ADDRESSES) == [("gpu-01", "192.168.50.1", 29550)]
    assert probe_targets(plan.cluster, "gpu-01", ADDRESSES) == []


def test_too_many_ranks_for_a_nodes_gpus_are_refused(load: Load) -> None:
    text = INVENTORY.replace("{size_local: 8, size: 16}", "{size_local: 8}").replace(
        "max_model_len: 8192", "max_model_len: 8192\n    engine_args: {tensor_parallel_size: 2}"
    )
    with pytest.raises(PlanError) as refused:
        planned(load, text)
    assert refused.value.message == (
        "group 'wide': 8 DP rank(s) of TP 2 need 16 GPUs per node; each node has 8"
    )


def test_a_release_whose_launcher_was_not_read_is_refused(load: Load) -> None:
    with pytest.raises(PlanError) as refused:
        planned(load, INVENTORY.replace('"0.32.0"', '"0.35.0"'))
    assert refused.value.message.startswith(
        "launcher data_parallel in group 'wide': vLLM 0.35.0's launch flags were not read (read: 0.11.0 to "
        "0.34.0"
    )


def test_a_dense_model_is_refused_vllms_external_mode_from_0_21(load: Load) -> None:
    text = (
        INVENTORY.replace("{size_local: 8, size: 16}", "{size_local: 1, balancing: external}")
        .replace("deepseek-ai/DeepSeek-V3", "meta-llama/Llama-3.1-8B-Instruct")
        .replace("max_model_len: 8192", "max_model_len: 8192\n    engine_args: {tensor_parallel_size: 8}")
    )
    with pytest.raises(PlanError) as refused:
        planned(load, text)
    assert "Non-MoE models do not support external data parallel mode" in refused.value.message
    _, older = planned(load, text.replace('"0.32.0"', '"0.20.2"'))
    assert older.data_parallel is not None and older.data_parallel.experts_per_rank == (0, 0)
