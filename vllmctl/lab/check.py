"""`lab check`: reach every host of a fleet over real OpenSSH with strict host keys and report what it says.

The remote answer is parsed by a pure function; only `check_fleet` runs ssh.
"""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from vllmctl.errors import InputError
from vllmctl.lab import state
from vllmctl.lab.layout import LabHost, fleet_layout

REMOTE_PROBE = (
    "hostname; timeout 60 systemctl is-system-running --wait; "
    "nvidia-smi -L >/tmp/.vllmctl-lab-gpus 2>&1 && wc -l </tmp/.vllmctl-lab-gpus || echo none; "
    "rm -f /tmp/.vllmctl-lab-gpus"
)


@dataclass(frozen=True)
class HostCheck:
    name: str
    address: str
    reachable: bool
    hostname: str = ""
    system_state: str = ""
    gpus: str = ""  # a count, or "none" when nvidia-smi fails (no driver, no GPUs)
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.reachable and self.hostname == self.name and self.system_state == "running"


def ssh_argv(
    identity_file: Path, known_hosts: Path, address: str, command: str, user: str = "ops"
) -> list[str]:
    return [
        "ssh",
        "-i",
        str(identity_file),
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        f"UserKnownHostsFile={known_hosts}",
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=10",
        f"{user}@{address}",
        command,
    ]


def parse_probe(host: LabHost, returncode: int, stdout: str, stderr: str) -> HostCheck:
    lines = stdout.split()
    if returncode == 255 or len(lines) < 3:
        tail = stderr.strip().splitlines()[-1:] or ["no answer"]
        return HostCheck(host.name, host.address, reachable=False, error=tail[0])
    return HostCheck(host.name, host.address, True, hostname=lines[0], system_state=lines[1], gpus=lines[2])


def check_fleet(name: str) -> list[HostCheck]:
    saved = state.load(name)
    if saved is None:
        raise InputError(f"there is no lab fleet named {name!r}", "see `vllmctl lab list`")
    directory = state.fleet_dir(name)
    layout = fleet_layout(saved.name, saved.subnet, saved.host_count)

    def probe(host: LabHost) -> HostCheck:
        argv = ssh_argv(directory / "id_ed25519", directory / "known_hosts", host.address, REMOTE_PROBE)
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=90, check=False)
        except subprocess.TimeoutExpired:
            return HostCheck(host.name, host.address, reachable=False, error="timed out after 90 s")
        return parse_probe(host, done.returncode, done.stdout, done.stderr)

    with ThreadPoolExecutor(max_workers=16) as pool:
        return list(pool.map(probe, layout.hosts))
