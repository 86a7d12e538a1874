"""Preflight, pure parts: node-fact parsing, each check's message, the clock bound with SSH latency, and
`ray status` reading; the listener and probe scripts run for real on this machine's loopback."""

from __future__ import annotations

import socket
import subprocess

from ray_texts import ray_status

from vllmctl.inventory.model import ClusterSpec, EngineSpec, ModelDeployment
from vllmctl.multinode.bringup import RayStatus, cluster_formed, parse_ray_status
from vllmctl.multinode.preflight import (
    NodeFacts,
    ProbeResult,
    listener_argv,
    parse_listener,
    parse_node_facts,
    parse_probe,
    probe_argv,
)
from vllmctl.multinode.preflight_checks import (
    clock_problems,
    fact_problems,
    reachability_problems,
)

CLUSTER = ClusterSpec(group="big", hosts=("a", "b", "c"), interface="eth1")
ENGINE = EngineSpec(name="vllm", version="0.11.0")
MODEL = ModelDeployment(name="m", source="org/model", hosts=("a", "b", "c"), revision="v1")


def facts(**changes: object) -> NodeFacts:
    base = {
        "host_time": 1000.0,
        "interface_ip": "10.1.0.1",
        "engine_version": "0.11.0",
        "ray_version": "2.60.0",
        "model_revision": "abc123",
        "sent_at": 999.9,
        "received_at": 1000.1,
    }
    return NodeFacts(**{**base, **changes})  # type: ignore[arg-type]


def test_node_facts_parse_and_missing_values_become_none() -> None:
    out = "time=1700000000.25\ninterface_ip=-\nengine_version=0.11.0\nray_version=-\nmodel_revision=9f1c\n"
    assert parse_node_facts(out, 1.0, 2.0) == NodeFacts(1700000000.25, None, "0.11.0", None, "9f1c", 1.0, 2.0)


def test_a_healthy_cluster_has_no_problems() -> None:
    assert fact_problems(CLUSTER, MODEL, ENGINE, {h: facts() for h in CLUSTER.hosts}) == []


def test_each_problem_names_the_host_and_the_fix() -> None:
    found = {
        "a": facts(),
        "b": facts(interface_ip=None, engine_version="0.10.2"),
        "c": facts(ray_version=None, model_revision="def456"),
    }
    rendered = [p.render() for p in fact_problems(CLUSTER, MODEL, ENGINE, found)]
    assert rendered == [
        "b: interface 'eth1' (cluster_interface of group 'big') does not exist here or has no IPv4 address\n"
        "  hint: name the NIC every node shares in groups.big.cluster_interface (`ip -br addr` on the host "
        "lists them)",
        "b: vllm in /opt/vllmctl/venvs/vllm-0.11.0 is 0.10.2 here but 0.11.0 on the head a\n"
        "  hint: install vllm==0.11.0 in /opt/vllmctl/venvs/vllm-0.11.0 on every node (`vllmctl apply` "
        "installs it; one engine version for the whole group)",
        "c: ray in /opt/vllmctl/venvs/vllm-0.11.0 is missing\n"
        "  hint: install ray==2.60.0 in /opt/vllmctl/venvs/vllm-0.11.0 on every node "
        "(groups.big.ray.version)",
        "c: model org/model (revision or file fingerprint) is def456 here but abc123 on the head a\n"
        "  hint: stage the same files on every node: pin models.m.revision and apply",
    ]


def test_clock_skew_beyond_the_bound_plus_ssh_latency_is_reported() -> None:
    # b answered 1.5 s ahead with 0.1 s of round-trip uncertainty on each side: out of sync
    found = {"a": facts(), "b": facts(host_time=1001.5), "c": facts(host_time=1000.9)}
    problems = clock_problems(CLUSTER, found)
    assert [p.render() for p in problems] == [
        "b: clock is 1.50 s off the head a's (bound 1 s; 0.20 s of that may be SSH latency)\n"
        "  hint: enable time sync on every node (chrony or systemd-timesyncd) and check `timedatectl`"
    ]


def test_a_slow_round_trip_does_not_count_as_skew() -> None:
    # c's reply took 1 s: its clock may have been read anywhere in that window, so 1.3 s apart is not proof
    found = {"a": facts(), "b": facts(), "c": facts(host_time=1001.3, sent_at=999.5, received_at=1000.5)}
    assert clock_problems(CLUSTER, found) == []


def test_unreachable_ports_name_source_target_and_port() -> None:
    results = [ProbeResult("a", "b", 6379, "ok"), ProbeResult("a", "b", 6380, "timeout")]
    problems = reachability_problems(results, {"b": "10.1.0.2"})
    assert [p.render() for p in problems] == [
        "a: cannot reach b (10.1.0.2) on TCP port 6380: timeout\n"
        "  hint: open TCP 6380 from a to b in every firewall between them: Ray and NCCL need every node to "
        "reach every other on the group's ports"
    ]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_listener_and_probe_scripts_work_for_real_on_loopback() -> None:
    free, closed = _free_port(), _free_port()
    busy_socket = socket.socket()
    busy_socket.bind(("0.0.0.0", 0))
    busy_socket.listen()
    busy = int(busy_socket.getsockname()[1])
    try:
        started = subprocess.run(listener_argv([free, busy], 20), capture_output=True, text=True, timeout=20)
        ports_in_use, pid = parse_listener(started.stdout)
        assert ports_in_use == [busy] and pid is not None
        targets = [("self", "127.0.0.1", free), ("self", "127.0.0.1", busy), ("self", "127.0.0.1", closed)]
        probed = subprocess.run(probe_argv(targets, 2), capture_output=True, text=True, timeout=20)
        assert [(r.port, r.outcome) for r in parse_probe("self", probed.stdout)] == [
            (free, "ok"),
            (busy, "ok"),
            (closed, "refused"),
        ]
        subprocess.run(["kill", str(pid)], check=True)
    finally:
        busy_socket.close()


RAY_STATUS = ray_status(nodes=2, gpus=16.0)


def test_ray_status_is_read_as_alive_nodes_and_gpus() -> None:
    status = parse_ray_status(RAY_STATUS)
    assert status == RayStatus(nodes=2, gpus=16.0)
    assert cluster_formed(status, nodes=2, gpus_per_node=8) is None
    assert cluster_formed(status, nodes=3, gpus_per_node=8) == "2 of 3 Ray nodes alive"
    assert cluster_formed(RayStatus(2, 8.0), nodes=2, gpus_per_node=8) == "8 of 16 GPUs registered"
