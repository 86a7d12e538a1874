"""Driver release pins and both apt layouts on the deployment's two spare hosts (8xH100 HGX boards, with
NVSwitches): a pin to the older of the lab repository's two 580 releases installs and holds exactly it,
Fabric Manager and NSCQ included; NVIDIA's layout (unsuffixed names) converges as Ubuntu's does; each second
apply changes nothing. Each test leaves its host as it found it: 580.95.05, Ubuntu's names, no pin."""

from __future__ import annotations

import copy
import shlex
from pathlib import Path
from typing import Any

import pytest

from vllmctl.lab.debrepo import NVIDIA_LAYOUT, OLDER_580
from vllmctl.paths import DRIVER_PIN_PREFS

pytestmark = pytest.mark.lab

NEWEST = "580.95.05"
STACK = "'nvidia-*' 'libnvidia-*'"
PURGE = "sudo env DEBIAN_FRONTEND=noninteractive apt-get purge -y -q --allow-change-held-packages"


def _inventory(deployment: Any, host: Any, branch: str) -> Path:
    doc = copy.deepcopy(deployment.inventory_doc)
    doc["hosts"][host.name]["driver"] = {"branch": branch}
    return Path(deployment.write_inventory(f"pin-{host.name}-{branch}.yml", doc))


def _drivers(deployment: Any, host: Any, branch: str) -> dict[str, Any]:
    code, doc, output = deployment.apply(
        _inventory(deployment, host, branch), "--playbook", "drivers", "--limit", host.name
    )
    assert code == 0, output[-4000:]
    return dict(doc["hosts"][host.name])


def _changed(result: dict[str, Any]) -> list[str]:
    return [s["op"] for s in result["steps"] if s["status"] == "changed"]


def _installed(deployment: Any, host: Any) -> dict[str, str]:
    """Installed NVIDIA packages, name -> 'version status' (`hi`: held and installed)."""
    query = (
        f"dpkg-query -W -f='${{Package}}\\t${{Version}}\\t${{db:Status-Abbrev}}\\n' {STACK} 2>/dev/null; true"
    )
    found = {}
    for line in deployment.sh(host, query).splitlines():
        name, version, status = line.split("\t")[:3]
        if status[1:2] == "i":  # purged ones stay known to dpkg, without a version
            found[name] = f"{version} {status.strip()}"
    return found


def _smi_driver(deployment: Any, host: Any) -> str:
    query = "nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1"
    return str(deployment.sh(host, query)).strip()


def test_a_release_pin_installs_and_holds_exactly_that_release_and_a_branch_pin_lets_it_go(
    deployment: Any,
) -> None:
    host = deployment.spare_hosts[0]
    older = OLDER_580.version
    _drivers(deployment, host, "580")  # from wherever the other modules left it: branch 580, Ubuntu's names
    try:
        result = _drivers(deployment, host, older)
        assert {"nvidia_driver", "fabric_manager"} <= set(_changed(result)), result["steps"]
        assert _smi_driver(deployment, host) == older
        installed = _installed(deployment, host)
        for name in ("nvidia-driver-580", "nvidia-fabricmanager-580", "libnvidia-nscq-580"):
            assert installed.get(name) == f"{older}-1 hi", installed  # exactly the pin, held
        assert older in deployment.sh(host, f"cat {DRIVER_PIN_PREFS}")
        # apt itself resolves the whole stack to the pin, though a newer 580 is offered
        policy = deployment.sh(host, "apt-cache policy nvidia-driver-580")
        assert f"Candidate: {older}-1" in policy and f"{NEWEST}-1" in policy, policy
        assert _changed(_drivers(deployment, host, older)) == []
    finally:
        back = _drivers(deployment, host, NEWEST)  # up again, then only the branch: the pin file goes
        assert _smi_driver(deployment, host) == NEWEST, back
        assert _changed(_drivers(deployment, host, "580")) == ["nvidia_driver"]
        assert deployment.fleet.ssh(host, f"test -e {DRIVER_PIN_PREFS}").returncode == 1
    assert _installed(deployment, host)["nvidia-fabricmanager-580"] == f"{NEWEST}-1 hi"


def test_nvidias_repository_layout_converges_with_its_unsuffixed_names(deployment: Any) -> None:
    host = deployment.spare_hosts[1]
    sources = "/etc/apt/sources.list"
    ubuntu = deployment.sh(host, f"cat {sources}")
    nvidia = ubuntu.replace("/debian ./", f"/debian/{NVIDIA_LAYOUT} ./")
    assert nvidia != ubuntu, ubuntu
    _drivers(deployment, host, "580")  # from wherever the other modules left it (one switches it to 570)

    def switch(to: str, purge: str) -> None:
        """Another layout, as on a host set up with that repository: its stack's companions not installed."""
        deployment.sh(
            host, f"printf '%s' {shlex.quote(to)} | sudo tee {sources} >/dev/null && sudo apt-get update -qq"
        )
        deployment.sh(host, f"{PURGE} {purge} 2>/dev/null || true")

    try:
        switch(nvidia, "nvidia-fabricmanager-580 libnvidia-nscq-580")
        result = _drivers(deployment, host, "580")
        assert "fabric_manager" in _changed(result) and "nvidia_driver" not in _changed(result), result[
            "steps"
        ]
        installed = _installed(deployment, host)
        assert installed.get("nvidia-fabricmanager") == f"{NEWEST}-1 hi", installed
        assert installed.get("libnvidia-nscq") == f"{NEWEST}-1 hi", installed
        assert not [
            name for name in installed if name.startswith(("nvidia-fabricmanager-", "libnvidia-nscq-"))
        ]
        assert deployment.sh(host, "systemctl is-active nvidia-fabricmanager.service").strip() == "active"
        assert "Completed" in deployment.sh(host, "nvidia-smi -q | grep -A1 Fabric")
        assert _changed(_drivers(deployment, host, "580")) == []
    finally:
        switch(ubuntu, "nvidia-fabricmanager libnvidia-nscq")
        assert "fabric_manager" in _changed(_drivers(deployment, host, "580"))
    assert _installed(deployment, host)["nvidia-fabricmanager-580"] == f"{NEWEST}-1 hi"
