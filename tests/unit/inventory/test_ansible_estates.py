"""Issue #22: existing Ansible estates read as they are. A DeepOps-shaped and a Kubespray-shaped inventory
(INI, group_vars/, host_vars/; fixtures cite the public files they follow) give the hosts, groups and
variables the real `ansible-inventory --list` gives on the same files, and become vllmctl hosts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

from vllmctl.inventory import ansible_yaml, load_inventory
from vllmctl.inventory.ansible import read_ansible
from vllmctl.inventory.source import read_yaml

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "ansible"
ESTATES = ["deepops/inventory", "kubespray/inventory.ini", "kubespray/hosts.yaml"]
needs_ansible = pytest.mark.skipif(
    find_spec("ansible") is None, reason="ansible-core is not installed (pip install 'vllmctl[ansible]')"
)


def ours(path: Path) -> dict[str, Any]:
    doc = read_yaml(path) if path.suffix in (".yml", ".yaml") else None
    read = read_ansible(str(path), doc)
    assert read.problems == []
    groups = {
        name: {"hosts": sorted(node.hosts) if name != "all" else [], "children": sorted(node.children)}
        for name, node in read.tree.groups.items()
    }
    return {
        "hostvars": {host: {key: w.value for key, w in found.items()} for host, found in read.hosts.items()},
        "groups": {name: body for name, body in groups.items() if body["hosts"] or body["children"]},
    }


def theirs(path: Path, tmp_path: Path) -> dict[str, Any]:
    """The real ansible-inventory, from the same environment, on the same files."""
    env = {**os.environ, "ANSIBLE_HOME": str(tmp_path / "ansible"), "ANSIBLE_LOCAL_TEMP": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "ansible.cli.inventory", "-i", str(path), "--list"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    listed = json.loads(done.stdout)
    meta = listed.pop("_meta")
    groups = {
        name: {"hosts": sorted(body.get("hosts", [])), "children": sorted(body.get("children", []))}
        for name, body in listed.items()
    }
    hosts = {host for body in groups.values() for host in body["hosts"]} | set(meta["hostvars"])
    return {
        "hostvars": {host: meta["hostvars"].get(host, {}) for host in hosts},
        "groups": {name: body for name, body in groups.items() if body["hosts"] or body["children"]},
    }


@needs_ansible
@pytest.mark.parametrize("estate", ESTATES)
def test_same_hosts_groups_and_variables_as_ansible_inventory(estate: str, tmp_path: Path) -> None:
    mine, reference = ours(FIXTURES / estate), theirs(FIXTURES / estate, tmp_path)
    assert sorted(mine["hostvars"]) == sorted(reference["hostvars"])
    assert mine["groups"] == reference["groups"]
    for host, variables in reference["hostvars"].items():
        assert mine["hostvars"][host] == variables, host


PRECEDENCE = """\
[all:vars]
tier=all
[top]
h1 own=inventory
h2
[top:vars]
tier=top
shade=top
[deep]
h1
[deep:vars]
tier=deep
shade=deep
[zeta]
h2
[zeta:vars]
shade=zeta
[alpha]
h2
[alpha:vars]
shade=alpha
ansible_group_priority=5
[mid:children]
deep
[top:children]
mid
"""


@needs_ansible
def test_precedence_follows_depth_then_priority_then_name_then_files(tmp_path: Path) -> None:
    """Inventory group vars: deeper groups win, among equals a higher ansible_group_priority, then the later
    name; then group_vars/all, then group_vars/GROUP files (a folder's files in order), the host's own
    inventory vars, host_vars files last."""
    (tmp_path / "hosts").write_text(PRECEDENCE)
    (tmp_path / "group_vars" / "top").mkdir(parents=True)
    (tmp_path / "group_vars" / "top" / "a.yml").write_text("from_files: top-a\nown: group-file\n")
    (tmp_path / "group_vars" / "top" / "b.yaml").write_text("from_files: top-b\n")
    (tmp_path / "group_vars" / "all.yml").write_text("from_files: all\ntier: all-file\n")
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "h2.json").write_text('{"tier": "host-file"}')
    mine, reference = ours(tmp_path / "hosts"), theirs(tmp_path / "hosts", tmp_path)
    assert mine == reference
    assert mine["hostvars"]["h1"] == {
        "tier": "all-file",
        "shade": "deep",
        "own": "inventory",
        "from_files": "top-b",
    }
    assert (mine["hostvars"]["h2"]["shade"], mine["hostvars"]["h2"]["tier"]) == ("alpha", "host-file")


def test_deepops_inventory_becomes_vllmctl_hosts_behind_its_bastion() -> None:
    inventory = load_inventory(FIXTURES / "deepops" / "inventory")
    assert list(inventory.hosts) == [
        "mgmt01",
        "mgmt02",
        "mgmt03",
        "login01",
        "gpu01",
        "gpu02",
        "gpu03",
        "gpu04",
    ]
    gpu01, gpu03 = inventory.hosts["gpu01"], inventory.hosts["gpu03"]
    assert (gpu01.address, gpu01.ssh.user, gpu01.ssh.identity_file, gpu01.ssh.jump_host, gpu01.ssh.port) == (
        "10.0.2.1",
        "ubuntu",
        "~/.ssh/id_rsa",
        "ubuntu@10.0.0.1",
        22,
    )
    assert (gpu03.address, gpu03.ssh.port) == ("gpu03", 2222)
    assert (
        gpu01.vars["slurm_cluster_install_cuda"] is False and gpu03.vars["slurm_cluster_install_cuda"] is True
    )
    assert gpu01.vars["nvidia_driver_branch"] == "550"  # slurm-cluster's group_vars beat k8s-cluster's (name)
    assert inventory.groups["slurm-cluster"] == ("login01", "gpu01", "gpu02", "gpu03", "gpu04")
    assert inventory.groups["k8s-cluster"] == ("mgmt01", "mgmt02", "mgmt03", "gpu01", "gpu02")


@needs_ansible
@pytest.mark.parametrize("estate", ["kubespray/inventory.ini", "kubespray/hosts.yaml"])
def test_kubespray_inventory_in_either_form_gives_the_same_vllmctl_hosts(estate: str) -> None:
    inventory = load_inventory(FIXTURES / estate)
    node2, bastion = inventory.hosts["node2"], inventory.hosts["bastion"]
    assert (node2.address, node2.ssh.user, node2.ssh.jump_host, node2.ssh.sudo) == (
        "95.54.0.13",
        "root",
        "some_user@95.54.0.2",
        True,
    )
    assert (bastion.address, bastion.ssh.user, bastion.ssh.jump_host) == ("95.54.0.2", "some_user", None)
    assert node2.vars["kube_version"] == "v1.30.4" and node2.vars["download_container"] is False
    assert inventory.hosts["node1"].vars["etcd_member_name"] == "etcd1"  # host_vars/node1.yml
    assert inventory.groups["k8s_cluster"] == ("node1", "node2", "node3", "node4", "node5", "node6")
    assert "bastion" not in inventory.groups  # a group named like a host is not a vllmctl group


def test_validate_and_the_imported_inventory_reference_read_ini_too(tmp_path: Path) -> None:
    native = tmp_path / "vllmctl.yml"
    source = FIXTURES / "deepops" / "inventory"
    native.write_text(
        f"vllmctl: 1\nansible_inventory: {source}\n"
        "hosts: {gpu01: {gpus: {model: H100-80GB, count: 8}}}\n"
        "models: {m: {source: org/m, hosts: kube-node, max_model_len: 4096}}\n"
    )
    inventory = load_inventory(native)
    assert inventory.models["m"].hosts == ("gpu01", "gpu02")
    assert inventory.hosts["gpu01"].gpus is not None and inventory.hosts["gpu01"].ssh.user == "ubuntu"
    done = subprocess.run(
        [sys.executable, "-m", "vllmctl", "validate", str(source), "--no-controller-checks"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        f"{source}: ok (8 hosts, 7 groups, 0 models)\n",
        "",
    )


# Host ranges in YAML inventories: expanded as Ansible expands them, located where Ansible refuses them.
RANGES = """\
all:
  children:
    gpus:
      hosts:
        gpu[01:03]:
          ansible_user: ops
        rack-[a:c].example:
        node[0:10:5]:
        solo.example:
      vars:
        ansible_port: 2222
"""


@needs_ansible
def test_yaml_ranges_expand_as_ansible_inventory_does(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(RANGES)
    mine, reference = ours(inventory), theirs(inventory, tmp_path)
    assert sorted(mine["hostvars"]) == sorted(reference["hostvars"])
    assert {"gpu02", "rack-b.example", "node5"} <= set(mine["hostvars"])
    assert mine["groups"] == reference["groups"]
    assert mine["hostvars"] == reference["hostvars"]


@needs_ansible
def test_a_range_ansible_refuses_is_located_at_its_key(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    ok1:\n    gpu[9:1]:\n")
    read = read_ansible(str(inventory), read_yaml(inventory))
    [problem] = read.problems
    assert (problem.location.line, problem.location.column) == (4, 5)
    assert "gpu[9:1]" in problem.message and "prefix[START:END]" in problem.hint
    assert "ok1" in read.hosts


def test_without_ansible_core_a_range_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ansible_yaml, "expand_host_range", lambda pattern: None)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    gpu[01:02]:\n")
    read = read_ansible(str(inventory), read_yaml(inventory))
    [problem] = read.problems
    assert problem.location.line == 3 and "vllmctl[ansible]" in problem.hint


def test_an_expanded_name_meets_the_name_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ansible_yaml, "expand_host_range", lambda pattern: ["ok", "bad:name"])
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    x[1:2]:\n")
    read = read_ansible(str(inventory), read_yaml(inventory))
    assert [p.message for p in read.problems] == ["host name 'bad:name' is not a name vllmctl accepts"]
