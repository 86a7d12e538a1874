"""Names and addresses of a lab fleet, derived from its name alone: subnet, bridge, hosts, interfaces.

Pure: the same name always gives the same candidates, so two fleets coexist and teardown can re-derive them.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from vllmctl.errors import InputError

SUBNET_PREFIX = "10.199"
FIRST_SUBNET, LAST_SUBNET = 10, 249
FIRST_HOST_OCTET = 11
MAX_HOSTS = 64
PKG_PORT = 8765
_NAME = re.compile(r"^[a-z][a-z0-9-]{0,19}$")


@dataclass(frozen=True)
class LabHost:
    name: str
    address: str
    netns: str
    veth: str


@dataclass(frozen=True)
class FleetLayout:
    name: str
    subnet: int
    hosts: tuple[LabHost, ...]

    @property
    def bridge(self) -> str:
        return f"vlab{self.subnet}"

    @property
    def bridge_address(self) -> str:
        return f"{SUBNET_PREFIX}.{self.subnet}.1"

    @property
    def cidr(self) -> str:
        return f"{SUBNET_PREFIX}.{self.subnet}.0/24"

    @property
    def cgroup(self) -> str:
        return f"vllmctl-lab-{self.name}"

    @property
    def index_url(self) -> str:
        return f"http://{self.bridge_address}:{PKG_PORT}/simple/"

    @property
    def debian_url(self) -> str:
        return f"http://{self.bridge_address}:{PKG_PORT}/debian"


def check_fleet_name(name: str) -> str:
    if not _NAME.match(name):
        raise InputError(
            f"fleet name {name!r} is not allowed",
            "use 1-20 characters: lowercase letters, digits and '-', starting with a letter",
        )
    return name


def check_host_count(count: int) -> int:
    if not 1 <= count <= MAX_HOSTS:
        raise InputError(f"--hosts {count} is out of range", f"use 1 to {MAX_HOSTS} hosts")
    return count


def subnet_candidates(name: str) -> list[int]:
    """Every subnet number, starting at one chosen by the name so fleets rarely collide."""
    span = LAST_SUBNET - FIRST_SUBNET + 1
    start = int(hashlib.sha256(name.encode()).hexdigest(), 16) % span
    return [FIRST_SUBNET + (start + step) % span for step in range(span)]


def host_name(fleet: str, index: int) -> str:
    return f"{fleet}-{index}"


def fleet_layout(name: str, subnet: int, host_count: int) -> FleetLayout:
    hosts = tuple(
        LabHost(
            name=host_name(name, i),
            address=f"{SUBNET_PREFIX}.{subnet}.{FIRST_HOST_OCTET + i - 1}",
            netns=f"vllmctl-{name}-{i}",
            veth=f"vlab{subnet}h{i}",
        )
        for i in range(1, host_count + 1)
    )
    return FleetLayout(name=name, subnet=subnet, hosts=hosts)
