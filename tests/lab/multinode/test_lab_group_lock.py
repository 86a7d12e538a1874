"""On real lab hosts over real SSH, with no vLLM and no Ray: a group run takes vllmctl's host lock on every
node first, so a node locked by someone else stops a group bring-up (before Ray is installed), rollback or
deploy before anything changes,
naming the owner; `history` (read-only) still lists the group; the lock is released after a run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from vllmctl.errors import VllmctlError
from vllmctl.inventory import load_inventory
from vllmctl.lab.testing import LabFleet, LabHostInfo
from vllmctl.multinode.plan import plan_cluster
from vllmctl.releases.group import group_spec
from vllmctl.runner.multinode.cluster_release import deploy_group
from vllmctl.runner.multinode.group_gate import GroupGateOptions

pytestmark = pytest.mark.lab

GROUP = "lockgrp"
OWNER = "alice@ops-box pid=4242 since=2026-11-21T17:00:00+00:00"
LOCK = "/var/lib/vllmctl/lock"


@pytest.fixture
def locked_worker(lab_fleet: LabFleet) -> Iterator[tuple[LabHostInfo, LabHostInfo]]:
    """The spare pair (hosts 3 and 4); the second holds a lock taken by hand, removed afterwards."""
    head, worker = lab_fleet.hosts[2:4]
    take = f"sudo mkdir -p {LOCK} && printf '%s\\n' '{OWNER}' | sudo tee {LOCK}/owner >/dev/null"
    assert lab_fleet.ssh(worker, take).returncode == 0
    try:
        yield head, worker
    finally:
        for host in (head, worker):
            lab_fleet.ssh(host, f"sudo rm -rf {LOCK} /var/lib/vllmctl/groups/{GROUP}")


def _inventory(lab_fleet: LabFleet, head: LabHostInfo, worker: LabHostInfo, path: Path) -> Path:
    doc = yaml.safe_load(lab_fleet.inventory.read_text())
    doc["groups"] = {
        GROUP: {"hosts": [head.name, worker.name], "multi_node": True, "cluster_interface": "eth0"}
    }
    doc["models"] = {"big": {"source": "meta-llama/Llama-3.1-405B", "hosts": GROUP, "max_model_len": 8192}}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _vllmctl(*args: str, state: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", "XDG_STATE_HOME": str(state)}
    argv = [sys.executable, "-m", "vllmctl", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, check=False)


def _untouched(lab_fleet: LabFleet, head: LabHostInfo, worker: LabHostInfo) -> None:
    """No group directory on either node, the head's lock given back, the worker's still the owner's."""
    for host in (head, worker):
        found = lab_fleet.ssh(host, f"sudo test -e /var/lib/vllmctl/groups/{GROUP} && echo there || true")
        assert found.stdout.strip() == "", f"{host.name}: the group directory was created"
    assert lab_fleet.ssh(head, f"sudo test -e {LOCK} && echo held || true").stdout.strip() == ""
    assert lab_fleet.ssh(worker, f"sudo cat {LOCK}/owner").stdout.strip() == OWNER


def test_a_locked_node_stops_group_rollback_and_deploy_naming_its_owner(
    lab_fleet: LabFleet, locked_worker: tuple[LabHostInfo, LabHostInfo], tmp_path: Path
) -> None:
    head, worker = locked_worker
    inventory = _inventory(lab_fleet, head, worker, tmp_path / "lock.yml")
    refused = f"{worker.name}: locked by another apply ({OWNER})"

    rolled = _vllmctl("rollback", str(inventory), "--limit", GROUP, "--yes", "--json", state=tmp_path)
    assert rolled.returncode == 1, rolled.stdout + rolled.stderr
    group = json.loads(rolled.stdout)["groups"][GROUP]
    assert group["ok"] is False and refused in group["reasons"][0], group
    _untouched(lab_fleet, head, worker)

    rollback = ("--rollback", "--yes", "--offline")
    by_cluster = _vllmctl("cluster", str(inventory), "big", *rollback, state=tmp_path)
    assert by_cluster.returncode == 1 and refused in by_cluster.stderr, by_cluster.stdout + by_cluster.stderr
    _untouched(lab_fleet, head, worker)

    ray_dir = "sudo test -d /var/lib/vllmctl/ray && echo there || true"
    before = [lab_fleet.ssh(host, ray_dir).stdout for host in (head, worker)]
    brought_up = _vllmctl("cluster", str(inventory), "big", "--offline", state=tmp_path)
    assert brought_up.returncode == 1 and refused in brought_up.stderr, brought_up.stdout + brought_up.stderr
    assert "ray" not in brought_up.stderr.split(refused)[0].lower()  # locked before Ray was installed
    assert [lab_fleet.ssh(host, ray_dir).stdout for host in (head, worker)] == before
    _untouched(lab_fleet, head, worker)

    inv = load_inventory(inventory)
    model = inv.models["big"]
    assert model.cluster is not None
    plan = plan_cluster(inv, model, model.cluster)
    addresses = {host: inv.hosts[host].address for host in plan.hosts}
    spec = group_spec(inv, plan, inv.hosts[plan.head].engine, addresses, start_engine=False)
    logged: list[str] = []
    with pytest.raises(VllmctlError) as caught:
        deploy_group(inv, spec, GroupGateOptions(owner="test-deploy"), logged.append)
    assert caught.value.message == refused and logged == []
    _untouched(lab_fleet, head, worker)

    shown = _vllmctl("history", str(inventory), "--json", state=tmp_path)  # read-only: takes no lock
    assert shown.returncode == 0, shown.stdout + shown.stderr
    listed = json.loads(shown.stdout)["groups"][GROUP]
    assert (listed["nodes"], listed["releases"], listed["errors"]) == ([head.name, worker.name], [], {})


def test_a_group_rollback_gives_its_locks_back(
    lab_fleet: LabFleet, locked_worker: tuple[LabHostInfo, LabHostInfo], tmp_path: Path
) -> None:
    head, worker = locked_worker
    lab_fleet.ssh(worker, f"sudo rm -rf {LOCK}")
    inventory = _inventory(lab_fleet, head, worker, tmp_path / "free.yml")
    rolled = _vllmctl("rollback", str(inventory), "--limit", GROUP, "--yes", "--json", state=tmp_path)
    # nothing was recorded on the pair: there is nothing to go back to, but the lock was taken and given back
    assert rolled.returncode == 1, rolled.stdout + rolled.stderr
    group = json.loads(rolled.stdout)["groups"][GROUP]
    assert "no earlier group release is known-good on every node" in group["reasons"][0], group
    for host in (head, worker):
        held = lab_fleet.ssh(host, f"sudo test -e {LOCK} && echo held || true").stdout.strip()
        assert held == "", host.name
