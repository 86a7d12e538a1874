"""keepalived.conf for a gateway host, pure: the VIP on the first gateway host whose HAProxy answers, the
others its unicast peers in the order they take it over; and the check script that asks HAProxy."""

from __future__ import annotations

from vllmctl.inventory.model import Inventory
from vllmctl.paths import HAPROXY_ADMIN_SOCKET, KEEPALIVED_CHECK
from vllmctl.render.quoting import shell_word
from vllmctl.render.templates import render_template

INSTANCE = "vllmctl_gateway"
FIRST_PRIORITY = 150
NEXT_PRIORITY = 100
CHECK_TIMEOUT_S = 2  # keepalived counts a check that runs longer as failed


def check_script() -> str:
    """Succeeds only when HAProxy answers `show info` on its admin socket within a second: a HAProxy that is
    stopped, frozen (SIGSTOP), deadlocked or out of file descriptors fails it, where `systemctl is-active`
    still said active (the kernel queues the connection of a process that never reads it)."""
    socket = shell_word(f"UNIX-CONNECT:{HAPROXY_ADMIN_SOCKET}")
    return (
        "#!/bin/sh\n"
        "# Managed by vllmctl: keepalived's check for the gateway's VIP (templates/keepalived.conf.j2).\n"
        f"echo 'show info' | timeout {CHECK_TIMEOUT_S} socat -t 1 -T 1 - {socket} | grep -q '^Pid: '\n"
    )


def priority(index: int) -> int:
    """The first gateway host 150, then 100, 99, ...: the highest one whose HAProxy runs holds the VIP."""
    return FIRST_PRIORITY if index == 0 else NEXT_PRIORITY - (index - 1)


def render_keepalived(inventory: Inventory, host: str) -> str:
    gateway = inventory.gateway
    assert gateway is not None and gateway.vip is not None and host in gateway.hosts
    addresses = {name: inventory.hosts[name].address for name in gateway.hosts}
    context = {
        "check": KEEPALIVED_CHECK,
        "check_timeout_s": CHECK_TIMEOUT_S,
        "instance": INSTANCE,
        "interface": gateway.vip.interface,
        "virtual_router_id": gateway.vip.virtual_router_id,
        "priority": priority(gateway.hosts.index(host)),
        "source": addresses[host],
        "peers": [address for name, address in addresses.items() if name != host],
        "address": gateway.vip.address,
    }
    return render_template("keepalived.conf.j2", context)
