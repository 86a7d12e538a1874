"""The lab's private network: one bridge per fleet on the controller, one netns + veth per host.

Only the fleet's own subnet is touched; hosts get no default route, so they reach nothing but the bridge.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from vllmctl.lab.layout import FleetLayout, LabHost
from vllmctl.lab.sh import run, try_run

NETNS_DIR = Path("/run/netns")


def subnet_in_use(subnet: int) -> bool:
    """True when anything on the controller already routes or names this lab subnet."""
    routes = subprocess.run(
        ["ip", "-j", "route", "show", "table", "all"], capture_output=True, text=True, check=False
    )
    prefix = f"10.199.{subnet}."
    for route in json.loads(routes.stdout or "[]"):
        if str(route.get("dst", "")).startswith(prefix):
            return True
    return Path(f"/sys/class/net/vlab{subnet}").exists()


def create_bridge(layout: FleetLayout) -> None:
    run(["ip", "link", "add", layout.bridge, "type", "bridge"])
    run(["ip", "addr", "add", f"{layout.bridge_address}/24", "dev", layout.bridge])
    run(["ip", "link", "set", layout.bridge, "up"])


def create_host_network(layout: FleetLayout, host: LabHost) -> None:
    run(["ip", "netns", "add", host.netns])
    run(["ip", "link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.netns])
    run(["ip", "link", "set", host.veth, "master", layout.bridge, "up"])
    run(["ip", "-n", host.netns, "addr", "add", f"{host.address}/24", "dev", "eth0"])
    run(["ip", "-n", host.netns, "link", "set", "eth0", "up"])
    run(["ip", "-n", host.netns, "link", "set", "lo", "up"])


def remove_host_network(host: LabHost) -> None:
    if Path(f"/sys/class/net/{host.veth}").exists():
        try_run(["ip", "link", "del", host.veth])
    if (NETNS_DIR / host.netns).exists():
        try_run(["ip", "netns", "del", host.netns])


def remove_bridge(layout: FleetLayout) -> None:
    if Path(f"/sys/class/net/{layout.bridge}").exists():
        try_run(["ip", "link", "del", layout.bridge])


def leftovers(layout: FleetLayout) -> list[str]:
    """Network objects of this fleet still present, for stale-fleet detection and teardown checks."""
    found = []
    if Path(f"/sys/class/net/{layout.bridge}").exists():
        found.append(f"bridge {layout.bridge}")
    for host in layout.hosts:
        if (NETNS_DIR / host.netns).exists():
            found.append(f"netns {host.netns}")
        if Path(f"/sys/class/net/{host.veth}").exists():
            found.append(f"veth {host.veth}")
    return found
