"""What the fan-out lab tests share: an `apply` of their staging playbook with its JSON, a checked command on
a host, and the check that no fan-out access is left (no granted line, no one-time key directory)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllmctl.fanout.scripts import KEY_COMMENT
from vllmctl.lab.testing import LabFleet, LabHostInfo
from vllmctl.lab.testing import vllmctl as run_vllmctl


@dataclass
class FanoutLab:
    fleet: LabFleet
    inventory: Path
    playbook: Path

    def apply(self, *args: str) -> tuple[int, dict[str, Any], str]:
        argv = ("apply", str(self.inventory), "--playbook", str(self.playbook), "--yes", "--json", *args)
        done = run_vllmctl(*argv, timeout=900)
        doc = json.loads(done.stdout) if done.stdout.strip().startswith("{") else {}
        return done.returncode, doc, done.stderr

    def sh(self, host: LabHostInfo, command: str) -> str:
        done = self.fleet.ssh(host, command, timeout=120)
        assert done.returncode == 0, f"{host.name}: {command}: {done.stderr}"
        return done.stdout

    def assert_no_access_left(self, *hosts: LabHostInfo) -> None:
        """On `hosts` (default: every host of the fleet)."""
        for host in hosts or self.fleet.hosts:
            keys = self.sh(host, "cat ~/.ssh/authorized_keys")
            assert KEY_COMMENT not in keys, f"{host.name} still grants a fan-out copy"
            assert self.sh(host, "sudo sh -c 'ls -d /run/vllmctl-fanout.* 2>/dev/null || true'") == ""
