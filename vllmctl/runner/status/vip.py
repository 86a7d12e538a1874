"""Which gateway host holds the virtual IP, for `status`: `ip -4 -o addr show dev IFACE` on each one; the
parsing is pure."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vllmctl.errors import VllmctlError
from vllmctl.inventory.model import Inventory, VipSpec
from vllmctl.ops import Command
from vllmctl.runner.core.remote import Remote


def vip_command(vip: VipSpec) -> Command:
    return Command(argv=("ip", "-4", "-o", "addr", "show", "dev", vip.interface), sudo=False)


def holds_vip(output: str, address: str) -> bool:
    """`ip -o` prints one address a line: `2: eth0    inet 10.0.0.100/32 scope global eth0 ...`."""
    for line in output.splitlines():
        words = line.split()
        if "inet" in words[:-1] and words[words.index("inet") + 1].split("/")[0] == address:
            return True
    return False


def vip_view(inventory: Inventory, connect: Callable[[str], Remote], timeout_s: float) -> dict[str, Any]:
    """`{address, interface, holders: [host...], hosts: {host: true | false | "error: ..."}}`; `{}` without
    a VIP. Exactly one holder is the healthy state."""
    gateway = inventory.gateway
    if gateway is None or gateway.vip is None:
        return {}
    vip = gateway.vip
    hosts: dict[str, bool | str] = {}
    for host in gateway.hosts:
        try:
            hosts[host] = _holds(connect(host), vip, timeout_s)
        except (VllmctlError, OSError) as exc:  # an unreachable host is one row of the view, not the end
            hosts[host] = f"error: {getattr(exc, 'message', None) or exc}"[:200]
    holders = [host for host, held in hosts.items() if held is True]
    return {"address": vip.address, "interface": vip.interface, "holders": holders, "hosts": hosts}


def _holds(remote: Remote, vip: VipSpec, timeout_s: float) -> bool | str:
    try:
        result = remote.execute(vip_command(vip), timeout_s)
    finally:
        remote.close()
    return holds_vip(result.stdout, vip.address) if result.ok else f"error: {result.stderr.strip()}"[:200]


def vip_line(view: dict[str, Any]) -> str:
    holders = view["holders"]
    where = ", ".join(holders) if holders else "no gateway host"
    warning = " (expected exactly one)" if len(holders) != 1 else ""
    return f"gateway VIP {view['address']} on {view['interface']}: held by {where}{warning}"


def ssh_vip_view(inventory: Inventory, timeout_s: float) -> dict[str, Any]:
    from vllmctl.runner.core.remote import SshRemote  # the edge: status connects over SSH
    from vllmctl.transport import SshTransport

    return vip_view(inventory, lambda name: SshRemote(SshTransport(inventory.hosts[name])), timeout_s)
