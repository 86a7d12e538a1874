"""`gateway:` in the inventory: every problem with file:line and field, and the typed GatewaySpec."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from vllmctl.inventory import load_inventory

Problems = Callable[..., list[str]]

HEAD = """\
vllmctl: 1
hosts:
  gpu-01: {address: 10.0.0.1}
  gpu-02: {address: 10.0.0.2}
  edge: {address: 10.0.0.9}
groups:
  gpus: [gpu-01, gpu-02]
models:
  tiny: {source: org/tiny, hosts: gpus, port: 8000}
  keyed: {source: org/keyed, hosts: gpu-01, port: 8100, engine_args: {api_key: {secret: k}}}
  other: {source: org/other, hosts: edge, port: 9000}
secrets:
  k: {env: K}
"""


def test_a_gateway_is_typed_with_its_defaults(workdir: Path) -> None:
    (workdir / "inv.yml").write_text(HEAD + "gateway:\n  hosts: edge\n  models: {tiny: {port: 9100}}\n")
    gateway = load_inventory("inv.yml").gateway
    assert gateway is not None
    assert (gateway.hosts, gateway.ports, gateway.address) == (("edge",), {"tiny": 9100}, "0.0.0.0")
    assert (gateway.check_interval_s, gateway.drain_timeout_s, gateway.metrics_port) == (2.0, 120.0, None)
    assert gateway.tls is None and not gateway.check_api_key


def test_hosts_models_address_ports_and_api_keys_are_checked_at_their_lines(problems: Problems) -> None:
    found = problems(
        HEAD
        + """\
gateway:
  hosts: [edge, edg]
  address: "0.0.0.0 ; x"
  check_api_key: true
  metrics_port: 9100
  models:
    tiny: {port: 9100}
    keyed: {port: 9000}
    nope: {port: 9300}
"""
    )
    assert found == [
        "inv.yml:15:17: gateway.hosts[1]: unknown host or group 'edg'\n  hint: did you mean 'edge'?",
        "inv.yml:16:12: gateway.address: gateway address '0.0.0.0 ; x' is not an IPv4 address\n"
        "  hint: an IPv4 address of the gateway host, or 0.0.0.0 for all of them",
        "inv.yml:17:18: gateway.check_api_key: check_api_key: model 'tiny' has no API key to check\n"
        "  hint: give the model `engine_args: {api_key: {secret: NAME}}`, or set check_api_key: false",
        "inv.yml:18:17: gateway.metrics_port: gateway port 9100 is also gateway models.tiny.port\n"
        "  hint: give each endpoint its own port",
        "inv.yml:21:19: gateway.models.keyed.port: gateway port 9000 on host 'edge' is already model"
        " 'other's port\n  hint: choose another gateway port",
        "inv.yml:22:5: gateway.models.nope: gateway model 'nope' is not a model\n"
        "  hint: add it under `models:` or remove it here",
    ]


def test_the_schema_refuses_unknown_fields_and_bad_ports(problems: Problems) -> None:
    found = problems(HEAD + "gateway:\n  hosts: edge\n  models: {tiny: {port: 70000}}\n  listen: x\n")
    assert any("gateway" in p and "listen" in p for p in found), found
    assert any("gateway.models.tiny.port" in p for p in found), found


def test_a_vip_is_typed_with_its_default_router_id(workdir: Path) -> None:
    text = "gateway:\n  hosts: [edge, gpu-01]\n  models: {tiny: {port: 9100}}\n"
    (workdir / "inv.yml").write_text(HEAD + text + "  vip: {address: 10.0.0.100, interface: eth0}\n")
    gateway = load_inventory("inv.yml").gateway
    assert gateway is not None and gateway.vip is not None
    assert (gateway.vip.address, gateway.vip.interface, gateway.vip.virtual_router_id) == (
        "10.0.0.100",
        "eth0",
        51,
    )


def test_a_vip_address_is_an_unused_ipv4_address_on_two_gateway_hosts(problems: Problems) -> None:
    found = problems(
        HEAD
        + """\
gateway:
  hosts: edge
  address: 10.0.0.9
  models: {tiny: {port: 9100}}
  vip: {address: 10.0.0.2, interface: eth0}
"""
    )
    assert found == [
        "inv.yml:16:12: gateway.address: a gateway with a vip listens on 0.0.0.0\n"
        "  hint: remove gateway.address (0.0.0.0): HAProxy must listen on the VIP wherever it moves",
        "inv.yml:18:3: gateway.vip: a vip needs two or more gateway hosts\n"
        "  hint: list two or more gateway hosts: the VIP moves between them",
        "inv.yml:18:18: gateway.vip.address: vip address 10.0.0.2 is host 'gpu-02's address\n"
        "  hint: choose an address no host has",
    ]


def test_a_vip_refuses_a_bad_address_interface_router_id_and_named_hosts(problems: Problems) -> None:
    head = HEAD.replace("edge: {address: 10.0.0.9}", "edge: {address: edge.example}")
    found = problems(
        head
        + """\
gateway:
  hosts: [edge, gpu-01]
  models: {tiny: {port: 9100}}
  vip: {address: 0.0.0.0, interface: "eth0 x", virtual_router_id: 256}
"""
    )
    assert any("gateway.vip.interface" in p and "interface name" in p for p in found), found
    assert any("gateway.vip.virtual_router_id" in p for p in found), found
    found = problems(
        head
        + """\
gateway:
  hosts: [edge, gpu-01]
  models: {tiny: {port: 9100}}
  vip: {address: 0.0.0.0, interface: eth0}
"""
    )
    assert found == [
        "inv.yml:17:3: gateway.vip: gateway host 'edge' has no IPv4 address for keepalived's unicast peers\n"
        "  hint: give host 'edge' an IPv4 `address`",
        "inv.yml:17:18: gateway.vip.address: vip address '0.0.0.0' is not usable\n"
        "  hint: an unused IPv4 address on the gateway hosts' network",
    ]


MULTI_NODE = """\
vllmctl: 1
hosts:
  gpu-01: {address: 10.0.0.1, gpus: {model: H100-80GB, count: 8}}
  gpu-02: {address: 10.0.0.2, gpus: {model: H100-80GB, count: 8}}
  edge: {address: 10.0.0.9}
groups:
  wide:
    hosts: [gpu-01, gpu-02]
    multi_node: true
    cluster_interface: eth1
    launcher: data_parallel
    data_parallel: {balancing: BALANCING}
  big:
    hosts: [gpu-01, gpu-02]
    multi_node: true
    cluster_interface: eth1
models:
  dsv3: {source: deepseek-ai/DeepSeek-V3, hosts: wide, port: 8000}
  llama: {source: meta-llama/Llama-3.1-405B, hosts: big, port: 8100}
gateway:
  hosts: edge
  models:
    dsv3: {port: 9100}
"""


def test_a_multi_node_model_behind_the_gateway_needs_external_data_parallel(
    problems: Problems, workdir: Path
) -> None:
    (workdir / "inv.yml").write_text(MULTI_NODE.replace("BALANCING", "external"))
    gateway = load_inventory("inv.yml").gateway
    assert gateway is not None and gateway.ports == {"dsv3": 9100}
    internal = MULTI_NODE.replace("BALANCING", "internal") + "    llama: {port: 9200}\n"
    assert problems(internal) == [
        f"inv.yml:{line}:5: gateway.models.{name}: gateway model '{name}' is a multi-node model with one API "
        "server: nothing to balance\n  hint: only a group with `launcher: data_parallel` and `data_parallel: "
        "{balancing: external}` runs an API server per node for the gateway to balance; serve "
        f"'{name}' without the gateway, or give group '{group}' external data parallel (docs/multinode.md)"
        for line, name, group in ((23, "dsv3", "wide"), (24, "llama", "big"))
    ]
