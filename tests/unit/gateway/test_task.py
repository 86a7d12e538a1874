"""The `gateway` task for one host: packages, then the config with the key and TLS files it reads; other
hosts get nothing; the TLS bundle is read on the controller at the edge."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllmctl.errors import InputError
from vllmctl.inventory import load_inventory
from vllmctl.runner.gateway.control import gateway_secrets
from vllmctl.tasks import expand
from vllmctl.tasks.desired import HostContext, ModelPlan, Replica
from vllmctl.tasks.gateway import TLS_SECRET

INVENTORY = """\
vllmctl: 1
hosts:
  a: {address: 10.0.0.1}
  b: {address: 10.0.0.2}
  gw: {address: 10.0.0.9}
models:
  tiny: {source: org/tiny, hosts: [a, b], port: 8000, engine_args: {api_key: {secret: key}}}
secrets:
  key: {env: KEY}
gateway:
  hosts: gw
  models: {tiny: {port: 9100}}
  check_api_key: true
"""


@pytest.fixture
def inventory_file(tmp_path: Path) -> Path:
    path = tmp_path / "inv.yml"
    path.write_text(INVENTORY)
    return path


def test_the_gateway_host_gets_packages_then_its_config_with_every_replica(inventory_file: Path) -> None:
    inv = load_inventory(inventory_file)
    fleet = {"b": {"tiny": ModelPlan({}, (Replica(0, 8000), Replica(1, 8001)))}}
    ctx = HostContext(inv, inv.hosts["gw"], secrets={"key": "s3cret", TLS_SECRET: "PEM"}, fleet_plans=fleet)
    packages, config, no_vip = expand("gateway", {}, ctx)
    assert (packages.op, packages.args["names"]) == ("system_packages", ["haproxy", "socat"])
    assert config.op == "gateway_config"
    # without a VIP, keepalived is stopped where an earlier inventory had one (a no-op where it never ran)
    assert (no_vip.op, no_vip.args) == ("keepalived_config", {"absent": True})
    assert "server a-8000 10.0.0.1:8000" in config.args["content"]
    assert "server b-8001 10.0.0.2:8001" in config.args["content"]
    assert config.args["files"] == {"/etc/haproxy/vllmctl/tiny.keys": "Bearer s3cret\n"}  # no tls: no pem
    assert "s3cret" not in config.args["content"]
    # a host that is no gateway host: the VIP, then HAProxy, taken off where vllmctl had set them up
    vip_off, haproxy_off = expand("gateway", {}, HostContext(inv, inv.hosts["a"]))
    assert (vip_off.op, vip_off.args) == ("keepalived_config", {"absent": True, "former_gateway": True})
    assert (haproxy_off.op, haproxy_off.args) == ("gateway_config", {"absent": True})


def test_the_tls_bundle_is_read_on_the_controller(inventory_file: Path, tmp_path: Path) -> None:
    (tmp_path / "c.pem").write_text("CERT")
    (tmp_path / "k.pem").write_text("KEY\n")
    inventory_file.write_text(INVENTORY + f"  tls: {{cert: {tmp_path}/c.pem, key: {tmp_path}/k.pem}}\n")
    inv = load_inventory(inventory_file)
    assert gateway_secrets(inv) == {TLS_SECRET: "CERT\nKEY\n"}
    ctx = HostContext(inv, inv.hosts["gw"], secrets={"key": "s", **gateway_secrets(inv)})
    _, config, _ = expand("gateway", {}, ctx)
    assert config.args["files"]["/etc/haproxy/vllmctl/gateway.pem"] == "CERT\nKEY\n"
    (tmp_path / "k.pem").unlink()
    with pytest.raises(InputError, match=r"gateway\.tls: cannot read"):
        gateway_secrets(inv)


def test_with_a_vip_the_gateway_hosts_also_get_keepalived_and_its_config(tmp_path: Path) -> None:
    path = tmp_path / "inv.yml"
    text = INVENTORY.replace(
        "  a: {address: 10.0.0.1}", "  a: {address: 10.0.0.1}\n  gw2: {address: 10.0.0.8}"
    )
    path.write_text(
        text.replace("hosts: gw\n", "hosts: [gw, gw2]\n") + "  vip: {address: 10.0.0.100, interface: eth0}\n"
    )
    inv = load_inventory(path)
    ctx = HostContext(inv, inv.hosts["gw2"], secrets={"key": "s3cret"}, fleet_plans={})
    packages, config, keepalived = expand("gateway", {}, ctx)
    assert packages.args["names"] == ["haproxy", "socat", "keepalived"]
    assert (config.op, keepalived.op) == ("gateway_config", "keepalived_config")
    assert "    priority 100\n" in keepalived.args["content"]
    assert "    unicast_src_ip 10.0.0.8\n" in keepalived.args["content"]
