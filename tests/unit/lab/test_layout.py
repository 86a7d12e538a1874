"""Fleet names, subnets and interface names derive from the fleet name and stay within kernel limits."""

from __future__ import annotations

import pytest

from vllmctl.errors import InputError
from vllmctl.lab.layout import (
    FIRST_SUBNET,
    LAST_SUBNET,
    MAX_HOSTS,
    check_fleet_name,
    check_host_count,
    fleet_layout,
    subnet_candidates,
)

IFNAMSIZ = 15


def test_subnet_candidates_cover_every_subnet_once_and_depend_on_the_name() -> None:
    first = subnet_candidates("lab")
    assert sorted(first) == list(range(FIRST_SUBNET, LAST_SUBNET + 1))
    assert first == subnet_candidates("lab")
    assert first[0] != subnet_candidates("other")[0]


def test_hosts_get_consecutive_addresses_from_11() -> None:
    layout = fleet_layout("lab", 42, 3)
    assert [(h.name, h.address) for h in layout.hosts] == [
        ("lab-1", "10.199.42.11"),
        ("lab-2", "10.199.42.12"),
        ("lab-3", "10.199.42.13"),
    ]
    assert layout.bridge_address == "10.199.42.1"
    assert layout.index_url == "http://10.199.42.1:8765/simple/"


def test_interface_names_fit_the_kernel_limit_at_the_extremes() -> None:
    layout = fleet_layout("a" * 20, LAST_SUBNET, MAX_HOSTS)
    names = [layout.bridge, *(h.veth for h in layout.hosts)]
    assert max(len(n) for n in names) <= IFNAMSIZ
    assert len(set(names)) == len(names)


def test_two_fleets_never_share_netns_names() -> None:
    one = {h.netns for h in fleet_layout("a", 10, 4).hosts}
    two = {h.netns for h in fleet_layout("b", 11, 4).hosts}
    assert not one & two


@pytest.mark.parametrize("name", ["", "Lab", "1lab", "lab_x", "a" * 21, "lab/../x"])
def test_bad_fleet_names(name: str) -> None:
    with pytest.raises(InputError):
        check_fleet_name(name)


@pytest.mark.parametrize("count", [0, -1, MAX_HOSTS + 1])
def test_bad_host_counts(count: int) -> None:
    with pytest.raises(InputError):
        check_host_count(count)
