"""Multi-node groups in the inventory: what loads, and each mistake reported with file:line and field."""

from __future__ import annotations

from collections.abc import Callable

from vllmctl.inventory.model import ClusterSpec, Inventory, RaySettings

Load = Callable[[str], Inventory]
Problems = Callable[[str], list[str]]

GROUP = """\
groups:
  big:
    hosts: [gpu-01, gpu-02]
    multi_node: true
    cluster_interface: eth1
    ray: {gcs_port: 7000, min_worker_port: 20000, max_worker_port: 20050}
"""


def test_a_model_on_a_multi_node_group_carries_the_cluster(load: Load) -> None:
    inv = load(GROUP + "models:\n  big-model: {source: meta-llama/Llama-3.1-405B, hosts: big}\n")
    ray = RaySettings(gcs_port=7000, min_worker_port=20000, max_worker_port=20050)
    expected = ClusterSpec(group="big", hosts=("gpu-01", "gpu-02"), interface="eth1", ray=ray)
    assert inv.models["big-model"].cluster == expected
    assert inv.models["big-model"].hosts == ("gpu-01", "gpu-02")
    assert inv.clusters == {"big": expected}
    assert inv.groups["big"] == ("gpu-01", "gpu-02")


def test_a_mapping_group_without_multi_node_is_a_plain_group(load: Load) -> None:
    inv = load(
        "groups:\n  two: {hosts: [gpu-01, gpu-02]}\nmodels:\n  m: {source: Qwen/Qwen3-8B, hosts: two}\n"
    )
    assert inv.models["m"].cluster is None
    assert inv.clusters == {}
    assert inv.groups["two"] == ("gpu-01", "gpu-02")


def test_list_groups_still_load(load: Load) -> None:
    inv = load("groups:\n  two: [gpu-01, gpu-02]\nmodels:\n  m: {source: Qwen/Qwen3-8B, hosts: two}\n")
    assert inv.groups["two"] == ("gpu-01", "gpu-02")


def test_missing_interface_and_too_few_hosts(problems: Problems) -> None:
    found = problems("groups:\n  big: {hosts: [gpu-01], multi_node: true}\n")
    assert found == [
        "inv.yml:10:3: groups.big: multi-node group 'big' names no cluster_interface\n"
        "  hint: add cluster_interface: the NIC the hosts reach each other on (e.g. eth1); "
        "Ray, NCCL and Gloo bind to it",
        "inv.yml:10:16: groups.big.hosts: multi-node group 'big' has 1 host(s)\n"
        "  hint: a multi-node group needs at least 2 hosts; drop multi_node to serve on one host",
    ]


def test_schema_errors_inside_a_group_mapping_name_the_field(problems: Problems) -> None:
    found = problems(
        "groups:\n"
        "  big:\n"
        "    hosts: [gpu-01, gpu-02]\n"
        "    multi_node: yes please\n"
        "    cluster_interface: 'eth 1'\n"
        "    ray: {gcs_port: 80, dashbord: true}\n"
    )
    assert any(p.startswith("inv.yml:12:17: groups.big.multi_node: expected true or false") for p in found)
    assert any(p.startswith("inv.yml:13:24: groups.big.cluster_interface: an interface name") for p in found)
    assert any(
        p.startswith("inv.yml:14:21: groups.big.ray.gcs_port: must be >= 1024, got integer 80") for p in found
    )
    assert any(p.startswith("inv.yml:14:25: groups.big.ray.dashbord: unknown key 'dashbord'") for p in found)


def test_ray_ports_must_not_collide(problems: Problems) -> None:
    found = problems(
        "groups:\n"
        "  big:\n"
        "    hosts: [gpu-01, gpu-02]\n"
        "    multi_node: true\n"
        "    cluster_interface: eth1\n"
        "    ray: {gcs_port: 6379, node_manager_port: 6379, object_manager_port: 10050}\n"
    )
    assert found == [
        "inv.yml:14:46: groups.big.ray.node_manager_port: node_manager_port 6379 is also the gcs_port\n"
        "  hint: give each Ray port its own number",
        "inv.yml:14:73: groups.big.ray.object_manager_port: object_manager_port 10050 lies in the worker "
        "port range 10002-10100\n  hint: move it out of the range",
    ]


def test_a_multi_node_model_names_only_its_group(problems: Problems) -> None:
    found = problems(GROUP + "models:\n  m: {source: Qwen/Qwen3-8B, hosts: [big, gpu-03], port: 7000}\n")
    assert found == [
        "inv.yml:16:37: models.m.hosts: model 'm' names multi-node group 'big' together with other hosts\n"
        "  hint: serve a multi-node model on exactly one multi_node group",
    ]


def test_server_port_must_not_be_a_ray_port(problems: Problems) -> None:
    found = problems(GROUP + "models:\n  m: {source: Qwen/Qwen3-8B, hosts: big, port: 7000}\n")
    assert found == [
        "inv.yml:16:48: models.m.port: port 7000 is also a Ray port of group 'big' (gcs_port)\n"
        "  hint: pick a server port outside the group's Ray ports",
    ]


def test_sglang_is_refused_for_multi_node(problems: Problems) -> None:
    found = problems(
        GROUP
        + "models:\n  m: {source: Qwen/Qwen3-8B, hosts: big, engine: {name: sglang, version: '0.5.0'}}\n"
    )
    assert found[0].startswith(
        "inv.yml:16:37: models.m.hosts: model 'm' is multi-node but its engine is sglang"
    )
