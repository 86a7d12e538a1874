"""keepalived.conf for a gateway host, pure: the VIP on the first gateway host whose HAProxy runs, the
others its unicast peers in the order they take it over."""

from __future__ import annotations

from vllmctl.inventory.model import Inventory
from vllmctl.paths import HAPROXY_UNIT
from vllmctl.render.templates import render_template

INSTANCE = "vllmctl_gateway"
FIRST_PRIORITY = 150
NEXT_PRIORITY = 100


def priority(index: int) -> int:
    """The first gateway host 150, then 100, 99, ...: the highest one whose HAProxy runs holds the VIP."""
    return FIRST_PRIORITY if index == 0 else NEXT_PRIORITY - (index - 1)


def render_keepalived(inventory: Inventory, host: str) -> str:
    gateway = inventory.gateway
    assert gateway is not None and gateway.vip is not None and host in gateway.hosts
    addresses = {name: inventory.hosts[name].address for name in gateway.hosts}
    context = {
        "haproxy_unit": HAPROXY_UNIT,
        "instance": INSTANCE,
        "interface": gateway.vip.interface,
        "virtual_router_id": gateway.vip.virtual_router_id,
        "priority": priority(gateway.hosts.index(host)),
        "source": addresses[host],
        "peers": [address for name, address in addresses.items() if name != host],
        "address": gateway.vip.address,
    }
    return render_template("keepalived.conf.j2", context)
