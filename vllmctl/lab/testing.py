"""Helpers for tests that use a lab fleet: start/stop it through the CLI and reach hosts with real OpenSSH.

Used by the session fixtures in tests/conftest.py; importable so tests can annotate with `LabFleet`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from vllmctl.lab.check import ssh_argv


@dataclass(frozen=True)
class LabHostInfo:
    name: str
    address: str


@dataclass(frozen=True)
class LabFleet:
    """A running lab fleet: reach its hosts with real OpenSSH and strict host-key checking."""

    name: str
    hosts: tuple[LabHostInfo, ...]
    inventory: Path
    identity_file: Path
    known_hosts: Path
    index_url: str
    debian_url: str
    cidr: str

    @property
    def directory(self) -> Path:
        return self.identity_file.parent

    def ssh_argv(self, host: LabHostInfo, command: str) -> list[str]:
        return ssh_argv(self.identity_file, self.known_hosts, host.address, command)

    def ssh(self, host: LabHostInfo, command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.ssh_argv(host, command), capture_output=True, text=True, timeout=timeout, check=False
        )

    def wait_running(self, host: LabHostInfo, deadline_s: float = 60) -> str:
        """Wait until systemd in the host reports `running`; returns the last state seen."""
        deadline = time.monotonic() + deadline_s
        seen = ""
        while time.monotonic() < deadline:
            seen = self.ssh(host, "systemctl is-system-running").stdout.strip()
            if seen in ("running", "degraded"):
                return seen
            time.sleep(0.5)
        return seen


def vllmctl(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vllmctl", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        check=False,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"},
    )


def start_fleet(name: str, hosts: int, inventory: Path, gpus: str = "8xH100-80GB") -> LabFleet:
    result = vllmctl("lab", "up", "--name", name, "--hosts", str(hosts), "--gpus", gpus,
                     "--inventory", str(inventory), "--no-engine", "--json")  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"lab up failed ({result.returncode}): {result.stderr}")
    data = json.loads(result.stdout)
    return LabFleet(
        name=data["name"],
        hosts=tuple(LabHostInfo(h["name"], h["address"]) for h in data["hosts"]),
        inventory=Path(data["inventory"]),
        identity_file=Path(data["identity_file"]),
        known_hosts=Path(data["known_hosts"]),
        index_url=data["index_url"],
        debian_url=data["debian_url"],
        cidr=data["cidr"],
    )


def stop_fleet(name: str) -> None:
    result = vllmctl("lab", "down", "--name", name)
    if result.returncode != 0 and "no lab fleet named" not in result.stderr:
        raise RuntimeError(f"lab down --name {name} failed: {result.stderr}")
