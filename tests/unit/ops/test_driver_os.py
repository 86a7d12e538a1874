"""The driver stack is refused at plan time on an OS it is not managed on (Ubuntu 22.04/24.04 and Debian
are), with the fix; an unknown os-release claims nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from vllmctl.commands.plan import driver_plans
from vllmctl.inventory import load_inventory
from vllmctl.ops import OPERATIONS, OpError

NO_DRIVER = {"status": "no-driver", "gpus": []}
PACKAGES = {"apt": True, "installed": {}, "held": [], "reboot_required": False, "tools": ["apt-get"]}
ROCKY = {"id": "rocky", "version_id": "9.4", "pretty_name": "Rocky Linux 9.4 (Blue Onyx)"}


def facts(release: dict[str, Any] | None) -> dict[str, Any]:
    return {"gpus": NO_DRIVER, "driver_packages": PACKAGES, "os_release": release, "gpu_health": {}}


@pytest.mark.parametrize("op", ["nvidia_driver", "driver_reboot"])
@pytest.mark.parametrize(
    "release", [ROCKY, {"id": "ubuntu", "version_id": "20.04"}, {"id": "centos", "version_id": "7"}]
)
def test_an_unsupported_os_refuses_the_driver_stack_with_the_fix(op: str, release: dict[str, Any]) -> None:
    with pytest.raises(OpError) as refused:
        OPERATIONS[op]({"branch": "580", "reboot": True}, facts(release))
    assert "Ubuntu 22.04 and 24.04 and Debian only" in refused.value.message
    assert "remove driver.branch" in refused.value.hint


@pytest.mark.parametrize(
    "release",
    [
        {"id": "ubuntu", "version_id": "22.04"},
        {"id": "ubuntu", "version_id": "24.04"},
        {"id": "debian", "version_id": "12"},
        None,  # os-release unknown: nothing claimed
    ],
)
def test_supported_or_unknown_os_is_planned(release: dict[str, Any] | None) -> None:
    step = OPERATIONS["nvidia_driver"]({"branch": "580"}, facts(release))
    assert any("install" in line for line in step.rendered())


def test_no_pinned_branch_is_never_refused() -> None:
    assert OPERATIONS["nvidia_driver"]({"branch": None}, facts(ROCKY)).noop


def test_plan_with_gathered_facts_refuses_it_per_host(tmp_path: Path) -> None:
    inventory = tmp_path / "os.yml"
    inventory.write_text(
        "vllmctl: 1\nhosts:\n"
        "  r1: {address: 10.0.0.1, gpus: {model: H100-80GB, count: 8}, driver: {branch: '580'}}\n"
        "  u1: {address: 10.0.0.2, gpus: {model: H100-80GB, count: 8}, driver: {branch: '580'}}\n"
    )
    releases = {"r1": ROCKY, "u1": {"id": "ubuntu", "version_id": "24.04"}}
    plans, errors = driver_plans(load_inventory(str(inventory)), {"r1", "u1"}, releases)
    assert [p["host"] for p in plans] == ["u1"]
    assert [e["host"] for e in errors] == ["r1"] and "Rocky Linux 9.4" in errors[0]["message"]
