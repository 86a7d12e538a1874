"""Rendered Ray node units and the head's vLLM unit, as exact text, against the cluster planner's TP/PP."""

from __future__ import annotations

from collections.abc import Callable

from vllmctl.inventory.model import Inventory
from vllmctl.multinode.plan import ClusterPlan, implicit_cluster, plan_cluster
from vllmctl.multinode.units import head_engine_argv, render_head_engine_unit, render_ray_unit

Load = Callable[[str], Inventory]
ADDRESSES = {"gpu-01": "192.168.50.1", "gpu-02": "192.168.50.2", "gpu-03": "192.168.50.3"}
INVENTORY = """\
groups:
  big: {hosts: [gpu-01, gpu-02, gpu-03], multi_node: true, cluster_interface: eth1}
models:
  llama-405b: {source: meta-llama/Llama-3.1-405B, hosts: big, max_model_len: 8192}
"""
TAIL = """\
Restart=on-failure
RestartSec=5
TimeoutStopSec=60
LimitNOFILE=65536
LimitMEMLOCK=infinity
StandardOutput=journal
StandardError=journal
SyslogIdentifier=vllmctl-ray-big

[Install]
WantedBy=multi-user.target
"""
PORTS = (
    "--node-manager-port=6380 --object-manager-port=6381 --min-worker-port=10002 --max-worker-port=10100 "
    "--num-gpus=8 --temp-dir=/var/lib/vllmctl/ray --disable-usage-stats"
)


def header(role: str, ip: str) -> str:
    return f"""\
# Managed by vllmctl: edits are overwritten on the next apply.
[Unit]
Description=vllmctl Ray {role} of big (ray 2.60.0)
After=network-online.target
Wants=network-online.target
StartLimitIntervalSec=0

[Service]
Type=simple
User=vllm
Group=vllm
WorkingDirectory=/var/lib/vllmctl/home
Environment=RAY_USAGE_STATS_ENABLED=0
Environment=VLLM_HOST_IP={ip}
Environment=NCCL_SOCKET_IFNAME=eth1
Environment=GLOO_SOCKET_IFNAME=eth1
"""


def planned(load: Load) -> tuple[Inventory, ClusterPlan]:
    inv = load(INVENTORY)
    model = inv.models["llama-405b"]
    assert model.cluster is not None
    return inv, plan_cluster(inv, model, model.cluster)


def test_head_unit(load: Load) -> None:
    inv, plan = planned(load)
    text = render_ray_unit(plan.cluster, inv.hosts["gpu-01"].engine, "gpu-01", ADDRESSES, plan.tp)
    assert text == (
        header("head", "192.168.50.1")
        + "ExecStart=/opt/vllmctl/venvs/vllm-0.11.0/bin/ray start --block --head --port=6379 "
        "--include-dashboard=false --node-ip-address=192.168.50.1 " + PORTS + "\n" + TAIL
    )


def test_worker_unit_joins_the_head_on_the_cluster_interface_address(load: Load) -> None:
    inv, plan = planned(load)
    text = render_ray_unit(plan.cluster, inv.hosts["gpu-02"].engine, "gpu-02", ADDRESSES, plan.tp)
    assert text == (
        header("worker", "192.168.50.2")
        + "ExecStart=/opt/vllmctl/venvs/vllm-0.11.0/bin/ray start --block --address=192.168.50.1:6379 "
        "--node-ip-address=192.168.50.2 " + PORTS + "\n" + TAIL
    )


def test_head_engine_unit_uses_the_planned_tp_and_pp(load: Load) -> None:
    inv, plan = planned(load)
    model = inv.models["llama-405b"]
    engine = inv.hosts["gpu-01"].engine
    argv = head_engine_argv(model, engine, plan)
    tp_at, pp_at = argv.index("--tensor-parallel-size"), argv.index("--pipeline-parallel-size")
    assert (argv[tp_at + 1], argv[pp_at + 1]) == (str(plan.tp), str(plan.pp)) == ("8", "2")
    backend_at = argv.index("--distributed-executor-backend")
    assert argv[backend_at + 1] == "ray"
    text = render_head_engine_unit(model, engine, plan, ADDRESSES)
    assert text.splitlines()[:21] == [
        "# Managed by vllmctl: edits are overwritten on the next apply.",
        "[Unit]",
        "Description=vllmctl llama-405b on Ray cluster big (vllm 0.11.0, PP 2 x TP 8)",
        "After=network-online.target vllmctl-ray-big.service",
        "Wants=network-online.target",
        "Requires=vllmctl-ray-big.service",
        "StartLimitIntervalSec=0",
        "",
        "[Service]",
        "Type=simple",
        "User=vllm",
        "Group=vllm",
        "WorkingDirectory=/var/lib/vllmctl/home",
        "EnvironmentFile=-/etc/vllmctl/llama-405b.env",
        "Environment=RAY_USAGE_STATS_ENABLED=0",
        "Environment=VLLM_HOST_IP=192.168.50.1",
        "Environment=NCCL_SOCKET_IFNAME=eth1",
        "Environment=GLOO_SOCKET_IFNAME=eth1",
        "Environment=RAY_ADDRESS=192.168.50.1:6379",
        "Environment=VLLM_PORT=29500",
        "ExecStart=/opt/vllmctl/venvs/vllm-0.11.0/bin/python -m vllm.entrypoints.openai.api_server "
        "--model meta-llama/Llama-3.1-405B --served-model-name llama-405b --host 0.0.0.0 --port 8000 "
        "--gpu-memory-utilization 0.9 --tensor-parallel-size 8 --pipeline-parallel-size 2 "
        "--max-model-len 8192 --max-num-seqs 1024 --max-num-batched-tokens 8192 --enable-prefix-caching "
        "--enable-chunked-prefill --no-enforce-eager --kv-cache-dtype auto "
        "--distributed-executor-backend ray",
    ]


def test_without_an_interface_no_nic_is_forced(load: Load) -> None:
    inv = load(
        "models:\n  m: {source: meta-llama/Llama-3.1-405B, hosts: [gpu-01, gpu-02], max_model_len: 8192}\n"
    )
    cluster = implicit_cluster(inv.models["m"])
    text = render_ray_unit(cluster, inv.hosts["gpu-02"].engine, "gpu-02", ADDRESSES, 8)
    assert "SOCKET_IFNAME" not in text
    assert "Environment=VLLM_HOST_IP=192.168.50.2\n" in text


def _environment(text: str) -> dict[str, str]:
    from systemd_syntax import environment_assignments, unit_settings

    found: dict[str, str] = {}
    for _, key, value in unit_settings(text):
        if key == "Environment":
            found |= environment_assignments(value)
    return found


def test_ray_unit_environment_values_reach_the_processes_unchanged(load: Load) -> None:
    # systemd expands no `$` in Environment=: a doubled `$$` would reach Ray and vLLM as two dollars
    inv, plan = planned(load)
    extra = {"PIP_EXTRA": "a$b ${c} 100% \"q\" 'x' \\ é", "NCCL_DEBUG": "INFO"}
    engine = inv.hosts["gpu-01"].engine
    ray = _environment(render_ray_unit(plan.cluster, engine, "gpu-02", ADDRESSES, plan.tp, extra))
    head = _environment(render_head_engine_unit(inv.models["llama-405b"], engine, plan, ADDRESSES, extra))
    for found in (ray, head):
        assert found["PIP_EXTRA"] == extra["PIP_EXTRA"] and found["NCCL_DEBUG"] == "INFO"
    assert ray["VLLM_HOST_IP"] == "192.168.50.2" and head["RAY_ADDRESS"] == "192.168.50.1:6379"
