"""Helpers for tests that use a lab fleet: start/stop it through the CLI and reach hosts with real OpenSSH.

Used by the session fixtures in tests/conftest.py; importable so tests can annotate with `LabFleet`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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

    def failed_units(self, host: LabHostInfo, reset: bool = False) -> str:
        """Each failed unit on the host with the end of its journal ("" when none); `reset` clears them."""
        script = (
            "for u in $(systemctl --failed --no-legend --plain | cut -d' ' -f1); do "
            'echo "== $u"; sudo journalctl -u "$u" --no-pager -n 15; done'
        ) + ("; sudo systemctl reset-failed" if reset else "")
        done = self.ssh(host, script, timeout=60)
        return done.stdout + (done.stderr if done.returncode else "")

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
    # as `make demo` does: a host whose boot left a failed unit (systemd degraded) is no host to test on
    checked = vllmctl("lab", "check", "--name", name)
    if checked.returncode != 0:
        raise RuntimeError(f"lab check --name {name} failed: {checked.stdout[-2000:]}{checked.stderr}")
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


def _lab_host(fleet: LabFleet, host: LabHostInfo) -> tuple[Any, Any]:
    from vllmctl.lab import state
    from vllmctl.lab.teardown import layout_of

    saved = state.load(fleet.name)
    if saved is None:
        raise RuntimeError(f"no lab fleet named {fleet.name}")
    layout = layout_of(saved)
    (lab_host,) = [h for h in layout.hosts if h.name == host.name]
    return layout, lab_host


def power_off(fleet: LabFleet, host: LabHostInfo) -> None:
    """Pull the plug: every process of the host killed at once (nothing shuts down in order, keepalived
    sends no goodbye), its relaunch loop told not to boot it again, and its link down, since its network
    namespace outlives it with the addresses it had."""
    from vllmctl.lab import machines
    from vllmctl.lab.teardown import host_dir

    layout, lab_host = _lab_host(fleet, host)
    (host_dir(fleet.name, lab_host) / "stop").touch()
    for pid in machines.running_pids(layout, lab_host):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    subprocess.run(["ip", "link", "set", lab_host.veth, "down"], check=True)


def in_mounts_of(fleet: LabFleet, host: LabHostInfo, argv: list[str], net: bool = False) -> str:
    """Run `argv` here in the host's mount namespace (its systemd's; `net`: and its network namespace),
    without SSH: e.g. mount a small tmpfs on it, or look at a host the controller cannot reach. Its stdout."""
    from vllmctl.lab import machines

    layout, lab_host = _lab_host(fleet, host)
    for pid in machines.running_pids(layout, lab_host):
        if Path(f"/proc/{pid}/comm").read_text().strip() == "systemd":
            spaces = ["-m", "-n"] if net else ["-m"]
            argv = ["nsenter", "-t", str(pid), *spaces, *argv]
            return subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    raise RuntimeError(f"{host.name}: its systemd is not running")
