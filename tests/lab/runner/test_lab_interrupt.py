"""On the lab: an apply killed with SIGTERM mid-run stops at a step boundary and leaves no lock; one killed
with SIGKILL leaves a lock that `history` and `status` show with its owner and age, and that the next run
on this controller breaks by itself, saying so; a lock whose owner lives, or that another controller wrote,
still refuses with the --break-lock hint."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from vllmctl.lab.testing import LabFleet, LabHostInfo

pytestmark = pytest.mark.lab

LOCK = "/var/lib/vllmctl/lock"
MARK = "/tmp/vllmctl-in-useradd"


@pytest.fixture(scope="module")
def lab(lab_fleet: LabFleet, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    directory = tmp_path_factory.mktemp("interrupt")
    doc = yaml.safe_load(lab_fleet.inventory.read_text())
    doc["models"] = {"tiny": {"source": "/srv/models/tiny", "hosts": [lab_fleet.hosts[2].name], "port": 8000}}
    doc.pop("secrets", None)
    inventory = directory / "fleet.yml"
    inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
    return {"fleet": lab_fleet, "inventory": inventory, "dir": directory, "host": lab_fleet.hosts[2]}


def argv(lab: dict[str, Any], *extra: str) -> list[str]:
    command = [sys.executable, "-m", "vllmctl", "apply", str(lab["inventory"]), "--json"]
    return [*command, "--playbook", "units", "--limit", lab["host"].name, *extra]


def env(lab: dict[str, Any]) -> dict[str, str]:
    return {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", "XDG_STATE_HOME": str(lab["dir"])}


def apply(lab: dict[str, Any], *extra: str) -> tuple[int, dict[str, Any], str]:
    done = subprocess.run(argv(lab, *extra), capture_output=True, text=True, timeout=300, env=env(lab))
    return done.returncode, json.loads(done.stdout), done.stderr


def shown_lock(lab: dict[str, Any], command: str) -> dict[str, Any]:
    """The lock `vllmctl history` or `vllmctl status` reports for the lab's host (--json)."""
    argv = [sys.executable, "-m", "vllmctl", command, str(lab["inventory"]), "--json"]
    argv += ["--limit", lab["host"].name, "--timeout", "60"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env(lab))
    locks: dict[str, Any] = json.loads(done.stdout)["locks"]
    assert list(locks) == [lab["host"].name], (locks, done.stderr)
    return dict(locks[lab["host"].name])


def sh(fleet: LabFleet, host: LabHostInfo, command: str) -> str:
    result = fleet.ssh(host, command)
    assert result.returncode == 0, result.stderr
    return result.stdout


def slow_useradd(fleet: LabFleet, host: LabHostInfo) -> None:
    """The next `useradd` on the host marks that it runs, then takes a while: the run is mid-step."""
    script = f'#!/bin/sh\nrm -f "$0"\ntouch {MARK}\nsleep 4\nexec /usr/sbin/useradd "$@"\n'
    sh(fleet, host, f"sudo rm -f {MARK}; sudo pkill -KILL -u vllm; sudo userdel vllm || true")
    sh(fleet, host, f"printf '%s' '{script}' | sudo tee /usr/local/sbin/useradd >/dev/null")
    sh(fleet, host, "sudo chmod 755 /usr/local/sbin/useradd")


def killed_mid_step(lab: dict[str, Any], signum: int) -> subprocess.Popen[str]:
    fleet, host = lab["fleet"], lab["host"]
    slow_useradd(fleet, host)
    process = subprocess.Popen(
        argv(lab), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(lab)
    )
    deadline = time.monotonic() + 120
    while fleet.ssh(host, f"test -e {MARK}").returncode != 0:
        assert time.monotonic() < deadline and process.poll() is None, "the apply never reached useradd"
        time.sleep(0.3)
    process.send_signal(signum)
    return process


def test_sigterm_mid_step_stops_at_the_boundary_and_leaves_no_lock(lab: dict[str, Any]) -> None:
    fleet, host = lab["fleet"], lab["host"]
    apply(lab)
    out, err = killed_mid_step(lab, signal.SIGTERM).communicate(timeout=120)
    doc = json.loads(out)
    assert "interrupted by SIGTERM" in err
    assert doc["aborted"] == "interrupted by SIGTERM", doc
    assert doc["hosts"][host.name]["status"] == "failed"
    assert doc["hosts"][host.name]["error"].startswith("interrupted by SIGTERM before ")
    assert fleet.ssh(host, f"test -e {LOCK}").returncode != 0, "the interrupted run left its lock"
    code, doc, stderr = apply(lab)  # the next run plans from what the host has and converges
    assert code == 0, stderr


def test_sigkill_leaves_a_lock_the_next_run_here_breaks_saying_so(lab: dict[str, Any]) -> None:
    fleet, host = lab["fleet"], lab["host"]
    process = killed_mid_step(lab, signal.SIGKILL)
    assert process.wait(60) == -signal.SIGKILL
    owner = sh(fleet, host, f"sudo cat {LOCK}/owner").strip()
    assert f"pid={process.pid} " in owner and " boot=" in owner and owner.endswith(" cmd=apply")
    for command in ("history", "status"):  # status reads the lock though no engine serves yet
        shown = shown_lock(lab, command)
        assert (shown["owner"], shown["pid"], shown["command"]) == (owner, process.pid, "apply"), command
        assert 0 <= shown["age_s"] < 300, command
    time.sleep(5)  # the killed run's useradd ends on the host
    code, doc, stderr = apply(lab)
    assert code == 0, stderr
    assert doc["hosts"][host.name]["broke_lock"] == owner
    assert f"broke a stale lock ({owner})" in stderr
    audit = sh(fleet, host, "sudo cat /var/log/vllmctl/audit.log")
    assert any(json.loads(line).get("event") == "broke stale lock" for line in audit.splitlines())
    assert fleet.ssh(host, f"test -e {LOCK}").returncode != 0


@pytest.mark.parametrize("who", ["alive", "elsewhere"])
def test_a_lock_whose_owner_lives_or_is_elsewhere_still_refuses(lab: dict[str, Any], who: str) -> None:
    fleet, host = lab["fleet"], lab["host"]
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    here = socket.gethostname()
    owner = f"ops@{here} pid={os.getpid()} boot={boot} cmd=apply"  # this test process: alive
    if who == "elsewhere":
        owner = f"ops@not-{here} pid=999999 boot={boot} cmd=apply"
    sh(fleet, host, f"sudo mkdir {LOCK} && echo '{owner}' | sudo tee {LOCK}/owner >/dev/null")
    try:
        code, doc, stderr = apply(lab)
        assert code == 1
        assert f"locked by another apply ({owner})" in doc["hosts"][host.name]["error"]
        assert "if it died, run again with --break-lock" in doc["hosts"][host.name]["hint"]
        assert sh(fleet, host, f"sudo cat {LOCK}/owner").strip() == owner
    finally:
        code, doc, stderr = apply(lab, "--break-lock")
    assert code == 0, stderr
