"""Real container hosts: strict-key SSH, systemd, fake GPUs, and pip and apt from the package server."""

from __future__ import annotations

import io
import json
import os
import subprocess
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from vllmctl.lab.testing import LabFleet, LabHostInfo, vllmctl

pytestmark = pytest.mark.lab


def failed_units(fleet: LabFleet, host: LabHostInfo) -> str:
    return f"\n{host.name}:\n{fleet.failed_units(host)}"


def test_hosts_are_distinct_machines_running_systemd(lab_fleet: LabFleet) -> None:
    seen = set()
    for host in lab_fleet.hosts:
        result = lab_fleet.ssh(host, "hostname; cat /etc/machine-id; sudo -n id -u")
        assert result.returncode == 0, result.stderr
        hostname, machine_id, root_uid = result.stdout.split()
        assert hostname == host.name
        assert root_uid == "0"
        seen.add(machine_id)
        assert lab_fleet.wait_running(host) == "running", failed_units(lab_fleet, host)
    assert len(seen) == len(lab_fleet.hosts) == 4


def test_the_fleet_weighs_below_the_controller_for_cpu(lab_fleet: LabFleet) -> None:
    """A host's processes (its systemd, its sshd) are in the fleet's CPU cgroup, whose weight is a quarter of
    one controller process: a busy engine on a lab host cannot starve the tool driving it."""
    if not Path("/sys/fs/cgroup/cpu/cpu.shares").exists():
        pytest.skip("no cgroup v1 CPU controller on this machine: the fleet runs unweighted")
    fleet_cgroup = Path("/sys/fs/cgroup/cpu") / f"vllmctl-lab-{lab_fleet.name}"
    assert fleet_cgroup.joinpath("cpu.shares").read_text().strip() == "256"
    host_cgroup = fleet_cgroup / lab_fleet.hosts[0].name
    pids = {int(p) for procs in host_cgroup.rglob("cgroup.procs") for p in procs.read_text().split()}
    commands = {
        Path(f"/proc/{pid}/comm").read_text().strip() for pid in pids if Path(f"/proc/{pid}").exists()
    }
    assert {"systemd", "sshd"} <= commands, commands


def test_host_keys_are_unique_and_checked_strictly(lab_fleet: LabFleet, tmp_path: Path) -> None:
    keys = [line.split()[2] for line in lab_fleet.known_hosts.read_text().splitlines()]
    assert len(set(keys)) == 4
    wrong = tmp_path / "known_hosts"
    host = lab_fleet.hosts[0]
    wrong.write_text(f"{host.address} {lab_fleet.known_hosts.read_text().splitlines()[1].split(' ', 1)[1]}\n")
    argv = lab_fleet.ssh_argv(host, "true")
    argv[argv.index(f"UserKnownHostsFile={lab_fleet.known_hosts}")] = f"UserKnownHostsFile={wrong}"
    refused = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert refused.returncode == 255
    assert "HOST IDENTIFICATION HAS CHANGED" in refused.stderr


def test_fake_gpus_follow_the_cycled_spec(lab_fleet: LabFleet) -> None:
    query = "nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits"
    answers = [lab_fleet.ssh(host, query).stdout.splitlines() for host in lab_fleet.hosts]
    assert answers[0] == ["NVIDIA H100 80GB HBM3, 81559"] * 8
    assert answers[1] == ["NVIDIA L40S, 46068"] * 2
    assert answers[2] == answers[3] == answers[0]


def test_hosts_reach_only_their_subnet(lab_fleet: LabFleet) -> None:
    routes = lab_fleet.ssh(lab_fleet.hosts[0], "ip -4 route").stdout.splitlines()
    assert len(routes) == 1
    assert routes[0].startswith(lab_fleet.cidr)
    peer = lab_fleet.hosts[1].address
    assert lab_fleet.ssh(lab_fleet.hosts[0], f"timeout 3 bash -c '</dev/tcp/{peer}/22'").returncode == 0


def _probe_wheel() -> tuple[str, bytes]:
    dist_info = "labprobe-1.0.dist-info"
    files = {
        "labprobe.py": "VALUE = 'served by the lab'\n",
        f"{dist_info}/METADATA": "Metadata-Version: 2.1\nName: labprobe\nVersion: 1.0\n",
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{dist_info}/RECORD"] = "".join(f"{name},,\n" for name in files) + f"{dist_info}/RECORD,,\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return "labprobe-1.0-py3-none-any.whl", buffer.getvalue()


def test_pip_installs_a_wheel_from_the_package_server(lab_fleet: LabFleet) -> None:
    filename, content = _probe_wheel()
    (lab_fleet.directory / "wheels" / filename).write_bytes(content)
    script = (
        "python3 -m venv /tmp/probe-venv && "
        f"/tmp/probe-venv/bin/pip install --no-cache-dir --index-url {lab_fleet.index_url} labprobe==1.0 && "
        "/tmp/probe-venv/bin/python -c 'import labprobe; print(labprobe.VALUE)'"
    )
    result = lab_fleet.ssh(lab_fleet.hosts[2], script, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == "served by the lab"


def test_apt_installs_and_removes_the_dummy_driver(lab_fleet: LabFleet) -> None:
    host = lab_fleet.hosts[1]
    apt = "sudo DEBIAN_FRONTEND=noninteractive apt-get -q -y"
    installed = lab_fleet.ssh(host, f"{apt} update && {apt} install nvidia-driver-570", timeout=120)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert "DRIVER version      : 570.195.03" in lab_fleet.ssh(host, "nvidia-smi --version").stdout
    assert lab_fleet.ssh(host, f"{apt} remove nvidia-driver-570").returncode == 0
    gone = lab_fleet.ssh(host, "nvidia-smi -L")
    assert gone.returncode == 9
    assert "couldn't communicate with the NVIDIA driver" in gone.stdout
    assert lab_fleet.ssh(host, f"{apt} install nvidia-driver-580").returncode == 0
    back = lab_fleet.ssh(host, "nvidia-smi --query-gpu=driver_version --format=csv,noheader")
    assert back.stdout.splitlines() == ["580.95.05"] * 2


def test_reboot_brings_the_host_back(lab_fleet: LabFleet) -> None:
    host = lab_fleet.hosts[3]
    pid1_started = "cut -d' ' -f22 /proc/1/stat"
    before = lab_fleet.ssh(host, pid1_started).stdout.strip()
    lab_fleet.ssh(host, "sudo systemctl reboot", timeout=30)
    assert lab_fleet.wait_running(host, deadline_s=60) == "running"
    assert lab_fleet.ssh(host, "hostname").stdout.strip() == host.name
    after = lab_fleet.ssh(host, pid1_started).stdout.strip()
    assert before and after and before != after


def test_inventory_describes_the_fleet(lab_fleet: LabFleet) -> None:
    doc = yaml.safe_load(lab_fleet.inventory.read_text())
    assert {name: h["address"] for name, h in doc["hosts"].items()} == {
        h.name: h.address for h in lab_fleet.hosts
    }
    assert doc["defaults"]["ssh"]["identity_file"] == str(lab_fleet.identity_file)
    assert doc["defaults"]["engine"]["index_url"] == lab_fleet.index_url
    assert doc["groups"] == {lab_fleet.name: [h.name for h in lab_fleet.hosts]}


def test_a_second_up_with_the_same_name_is_refused(lab_fleet: LabFleet) -> None:
    result = vllmctl("lab", "up", "--name", lab_fleet.name, "--hosts", "1", "--inventory", "/dev/null")
    assert result.returncode == 1
    assert "already running" in result.stderr
    assert f"lab down --name {lab_fleet.name}" in result.stderr
    assert lab_fleet.ssh(lab_fleet.hosts[0], "true").returncode == 0


def test_list_shows_the_fleet_running(lab_fleet: LabFleet) -> None:
    listed = {f["name"]: f for f in json.loads(vllmctl("lab", "list", "--json").stdout)}
    mine = listed[lab_fleet.name]
    assert (mine["hosts"], mine["running"], mine["state"], mine["pkg_server"]) == (4, 4, "running", True)


@pytest.mark.slow
def test_sixteen_hosts_answer_over_ssh(lab_fleet_16: LabFleet) -> None:
    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(lambda h: lab_fleet_16.ssh(h, "hostname"), lab_fleet_16.hosts))
    assert [r.stdout.strip() for r in results] == [h.name for h in lab_fleet_16.hosts]
    assert os.path.exists(lab_fleet_16.known_hosts)


def test_lab_check_reports_every_host_ready(lab_fleet: LabFleet) -> None:
    result = vllmctl("lab", "check", "--name", lab_fleet.name, "--json")
    failed = "".join(failed_units(lab_fleet, h) for h in lab_fleet.hosts) if result.returncode else ""
    assert result.returncode == 0, result.stderr + failed
    rows = json.loads(result.stdout)
    assert [(r["name"], r["hostname"], r["system_state"], r["gpus"], r["ok"]) for r in rows] == [
        (h.name, h.name, "running", gpus, True)
        for h, gpus in zip(lab_fleet.hosts, ["8", "2", "8", "8"], strict=True)
    ]
