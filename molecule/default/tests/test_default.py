"""What every converged lab host must show: Molecule's verify step (testinfra over strict paramiko)."""

from __future__ import annotations

from typing import Any


def test_systemd_is_running(host: Any) -> None:
    assert host.run("systemctl is-system-running --wait").stdout.strip() == "running"


def test_sshd_is_enabled_and_running(host: Any) -> None:
    ssh = host.service("ssh")
    assert ssh.is_running
    assert ssh.is_enabled


def test_ops_can_sudo_without_a_password(host: Any) -> None:
    assert host.run("sudo -n true").rc == 0


def test_gpus_match_the_inventory(host: Any, host_spec: dict[str, Any]) -> None:
    gpus = host_spec.get("gpus")
    result = host.run("nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits")
    if gpus is None:
        assert result.rc != 0
        return
    assert result.rc == 0
    assert len(result.stdout.splitlines()) == gpus["count"]


def test_the_package_server_is_reachable(host: Any, index_url: str) -> None:
    fetch = f"python3 -c 'import urllib.request as r; r.urlopen(\"{index_url}\", timeout=5)'"
    assert host.run(fetch).rc == 0
