"""The kernel-module flavour per GPU and branch, with the reason in the plan; a flavour the GPU cannot run is
refused at plan time (before anything is installed), on Ubuntu and elsewhere."""

from __future__ import annotations

from typing import Any

import pytest

from vllmctl.ops import OPERATIONS, OpError
from vllmctl.ops.driver_flavor import choose_flavor

UBUNTU = {"id": "ubuntu", "version_id": "24.04"}
DEBIAN = {"id": "debian", "version_id": "12"}
NO_DRIVER = {"status": "no-driver", "gpus": []}
PACKAGES = {"apt": True, "installed": {}, "held": [], "reboot_required": False, "tools": ["apt-get"]}


def plan(gpu: str | None, branch: str, flavor: str | None, os_release: dict[str, Any] = UBUNTU) -> Any:
    facts = {"gpus": NO_DRIVER, "driver_packages": PACKAGES, "os_release": os_release}
    return OPERATIONS["nvidia_driver"]({"branch": branch, "flavor": flavor, "gpu": gpu}, facts)


@pytest.mark.parametrize(
    ("gpu", "branch", "flavor", "why"),
    [
        ("B200", "580", "open", "B200 (Blackwell) is supported only by the open kernel modules"),
        ("B200", "550", "open", "only by the open kernel modules"),  # required, whatever the branch
        ("GH200", "580", "open", "Grace Hopper/Blackwell"),
        ("RTX 5090", "580", "open", "(Blackwell)"),
        ("H100-80GB", "580", "open", "NVIDIA's default from branch 560"),
        ("H100-80GB", "550", "", "the default before branch 560"),
        ("V100-16GB", "580", "", "predates Turing"),
        ("T4", "580", "open", "default from branch 560"),  # Turing runs the open modules
        (None, "570", "open", "default from branch 560"),
    ],
)
def test_the_flavour_follows_the_gpu_and_the_branch(
    gpu: str | None, branch: str, flavor: str, why: str
) -> None:
    choice = choose_flavor(gpu, branch, None)
    assert choice.flavor == flavor and why in choice.reason


def test_b200_is_planned_open_with_the_reason_in_the_plan() -> None:
    step = plan("B200", "580", None)
    assert (
        step.target
        == "nvidia-driver-580-open (B200 (Blackwell) is supported only by the open kernel modules)"
    )
    assert (
        "nvidia-driver-580-open" in step.rendered()[1]
        and step.rendered()[2] == "apt-mark hold nvidia-driver-580-open"
    )


@pytest.mark.parametrize("flavor", ["", "server"])
@pytest.mark.parametrize("os_release", [UBUNTU, DEBIAN])
def test_a_proprietary_flavour_on_b200_is_refused_at_plan_time(
    flavor: str, os_release: dict[str, Any]
) -> None:
    with pytest.raises(OpError) as refused:
        plan("B200", "580", flavor, os_release)
    assert (
        "proprietary kernel modules, but B200 (Blackwell) is supported only by the open"
        in refused.value.message
    )
    assert ("server-open" if flavor else "'open'") in refused.value.hint


def test_open_modules_on_a_pre_turing_gpu_are_refused() -> None:
    with pytest.raises(OpError) as refused:
        plan("V100-16GB", "580", "open")
    assert "predates Turing" in refused.value.message and "''" in refused.value.hint


def test_an_override_the_gpu_can_run_wins_and_says_so() -> None:
    step = plan("H100-80GB", "580", "server")
    assert step.target == "nvidia-driver-580-server (driver.flavor 'server' (proprietary kernel modules))"


def test_debian_keeps_the_package_name_it_always_had() -> None:
    step = plan("H100-80GB", "580", None, DEBIAN)
    assert step.target == "nvidia-driver-580"
    assert step.rendered()[2] == "apt-mark hold nvidia-driver-580"


def test_an_unknown_flavour_is_refused() -> None:
    with pytest.raises(OpError, match="not one vllmctl knows"):
        choose_flavor("H100-80GB", "580", "beta")


def test_the_inventory_takes_driver_flavor_and_refuses_an_unknown_one(tmp_path: Any) -> None:
    from vllmctl.errors import InvalidInputError
    from vllmctl.inventory import load_inventory

    path = tmp_path / "inv.yml"
    path.write_text(
        "vllmctl: 1\nhosts:\n  b1: {address: 10.0.0.1, driver: {branch: '580', flavor: server-open}}\n"
    )
    assert load_inventory(path).hosts["b1"].driver.flavor == "server-open"
    path.write_text("vllmctl: 1\nhosts:\n  b1: {address: 10.0.0.1, driver: {branch: '580', flavor: beta}}\n")
    with pytest.raises(InvalidInputError) as refused:
        load_inventory(path)
    assert "driver flavor is '', open, server or server-open" in refused.value.render()
