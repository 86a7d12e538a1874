"""`lab down`, a failed `lab up` and a stale fleet all end with nothing of the fleet left behind."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from vllmctl.errors import VllmctlError
from vllmctl.lab import fleet, machines, state
from vllmctl.lab.layout import fleet_layout
from vllmctl.lab.testing import start_fleet, vllmctl

pytestmark = pytest.mark.lab


def traces(name: str, cidr: str) -> list[str]:
    """What of fleet `name` the controller still shows: netns, links, routes, mounts, cgroups, processes."""
    subnet = cidr.split(".")[2]
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    found = [f"netns {line}" for line in netns.splitlines() if line.startswith(f"vllmctl-{name}-")]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    found += [f"link {m}" for m in re.findall(rf"^\d+: (vlab{subnet}(?:h\d+)?)[@:]", links, re.MULTILINE)]
    routes = subprocess.run(["ip", "route"], capture_output=True, text=True, check=True).stdout
    found += [f"route {line}" for line in routes.splitlines() if line.startswith(cidr)]
    fleet_dir = str(state.fleet_dir(name))
    found += [f"mount {line}" for line in Path("/proc/mounts").read_text().splitlines() if fleet_dir in line]
    found += [f"cgroup {p}" for p in Path("/sys/fs/cgroup").glob(f"*/vllmctl-lab-{name}")]
    found += [f"cgroup {p}" for p in Path("/sys/fs/cgroup").glob(f"vllmctl-lab-{name}")]
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if fleet_dir + "/" in cmdline or f"--fleet {name} " in cmdline:
            found.append(f"process {proc.name}: {cmdline[:80]}")
    if state.fleet_dir(name).exists():
        found.append(f"state {fleet_dir}")
    return found


def fleet_name(tag: str) -> str:
    return f"pt{os.getpid()}-{tag}"


def test_down_leaves_nothing_behind(tmp_path: Path) -> None:
    name = fleet_name("down")
    inventory = tmp_path / "lab.yml"
    started = start_fleet(name, 2, inventory, gpus="none")
    try:
        before = traces(name, started.cidr)
        assert any(t.startswith("netns") for t in before)
        assert any(t.startswith("mount") for t in before)
        assert any(t.startswith("process") for t in before)
        assert inventory.exists()
    finally:
        result = vllmctl("lab", "down", "--name", name)
    assert result.returncode == 0, result.stderr
    assert traces(name, started.cidr) == []
    assert not inventory.exists()


@pytest.mark.parametrize("failing", ["personalise", "wait_for_ssh"])
def test_a_failed_up_rolls_everything_back(
    failing: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = fleet_name(f"rb{failing[:2]}")

    def boom(*args: object, **kwargs: object) -> str:
        raise VllmctlError("injected failure", "test")

    if failing == "personalise":
        monkeypatch.setattr(machines, "personalise", boom)
    else:
        monkeypatch.setattr(fleet, "_wait_for_ssh", boom)
    picked: list[int] = []
    pick_subnet = fleet._pick_subnet

    def recording_pick(fleet_name: str) -> int:
        picked.append(pick_subnet(fleet_name))
        return picked[-1]

    monkeypatch.setattr(fleet, "_pick_subnet", recording_pick)
    with pytest.raises(VllmctlError, match="injected failure"):
        fleet.up(name, 2, "2xL4", "580", tmp_path / "lab.yml", progress=lambda line: None)
    assert traces(name, fleet_layout(name, picked[0], 2).cidr) == []
    assert not (tmp_path / "lab.yml").exists()


def test_a_stale_fleet_is_detected_and_cleaned(tmp_path: Path) -> None:
    name = fleet_name("stale")
    started = start_fleet(name, 1, tmp_path / "lab.yml", gpus="none")
    try:
        saved = state.load(name)
        assert saved is not None
        layout = fleet_layout(name, saved.subnet, 1)
        for pid in machines.running_pids(layout, layout.hosts[0]):
            os.kill(pid, signal.SIGKILL)  # as if the controller had crashed
        again = vllmctl("lab", "up", "--name", name, "--hosts", "1", "--inventory", str(tmp_path / "x.yml"))
        assert again.returncode == 1
        assert "stale lab fleet" in again.stderr
        assert f"vllmctl lab down --name {name}" in again.stderr
        listed = {f["name"]: f for f in json.loads(vllmctl("lab", "list", "--json").stdout)}
        assert listed[name]["state"] == "stale"
    finally:
        down = vllmctl("lab", "down", "--name", name)
    assert down.returncode == 0, down.stderr
    assert traces(name, started.cidr) == []


def test_up_and_down_refuse_while_another_holds_the_fleet(tmp_path: Path) -> None:
    name = fleet_name("busy")
    with state.lock(name, "held by the test", ""):
        up = vllmctl("lab", "up", "--name", name, "--hosts", "1", "--inventory", str(tmp_path / "x.yml"))
        down = vllmctl("lab", "down", "--name", name)
    assert up.returncode == 1
    assert f"`vllmctl lab up` or `lab down` for fleet '{name}' is already in progress" in up.stderr
    assert down.returncode == 1
    assert "in progress" in down.stderr
    assert traces(name, "10.199.0.0/24") == []
