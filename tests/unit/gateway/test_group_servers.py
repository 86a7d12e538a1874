"""A multi-node model behind the gateway (launcher data_parallel, balancing external): one server per used
node of its group on the model's port, none for a spare host (the gateway host itself included); a host's
rollout drain leaves them to their group release."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dp_inventory import dp_inventory
from multinode_fixtures import load

from vllmctl.inventory.model import Inventory
from vllmctl.runner.fleet.hosts import load_model_archs
from vllmctl.runner.gateway.control import fleet_servers, gateway_plans, ssh_gateway
from vllmctl.tasks.desired import HostContext
from vllmctl.tasks.gateway import gateway_config
from vllmctl.transport import Result

__all__ = ["load"]
Load = Callable[[str], Inventory]
GATEWAY = "gateway:\n  hosts: gpu-03\n  models: {dsv3: {port: 9100}}\n"
INVENTORY = dp_inventory("{size_local: 8, size: 16, balancing: BALANCING}", tail=GATEWAY)


def backends(inv: Inventory) -> dict[str, Any]:
    archs = load_model_archs(inv, online=False)[0]
    return gateway_plans(inv, list(inv.hosts), {}, {}, archs, {})


def test_each_used_node_of_an_external_data_parallel_group_is_a_server_and_the_spare_is_none(
    load: Load,
) -> None:
    inv = load(INVENTORY.replace("BALANCING", "external"))
    plans = backends(inv)
    found = [(s.ref, s.host, s.address, s.port) for s in fleet_servers(inv, plans)]
    assert found == [
        ("dsv3/gpu-01-8000", "gpu-01", "10.0.0.11", 8000),
        ("dsv3/gpu-02-8000", "gpu-02", "10.0.0.12", 8000),
    ]
    # the gateway host is the group's spare: its own plans know nothing of the group, the fleet's do
    ctx = HostContext(inv, inv.hosts["gpu-03"], fleet_plans=plans)
    text = gateway_config(ctx)
    assert "    server gpu-01-8000 10.0.0.11:8000\n" in text
    assert "    server gpu-02-8000 10.0.0.12:8000\n" in text
    assert "gpu-03-8000" not in text


class Gateway:
    def __init__(self) -> None:
        self.sent: list[str] = []

    def execute(self, action: Any, timeout: float) -> Result:
        self.sent.append(action.render())
        return Result("", "", 0)

    def close(self) -> None:
        pass


def test_a_hosts_rollout_drain_leaves_a_group_server_to_its_group_release(load: Load) -> None:
    inv = load(INVENTORY.replace("BALANCING", "external"))
    control = ssh_gateway(inv, fleet_servers(inv, backends(inv)), 5.0)
    assert control is not None
    gateway = Gateway()
    control.connect = lambda name: gateway  # type: ignore[assignment,return-value]
    control.drain("gpu-01")
    assert control.ready("gpu-02")
    assert (gateway.sent, control.events) == ([], [])
