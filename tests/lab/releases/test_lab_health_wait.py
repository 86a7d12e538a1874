"""The health waits against real systemd units on a lab host: an engine that exits is reported at once (not
after the deadline), with the journal tail; a running one that never answers waits it out; a crash that
systemd counted before a manual restart is not an exit."""

from __future__ import annotations

import shlex
import time

import pytest

from vllmctl.lab.testing import LabFleet
from vllmctl.ops.service_start import POLL
from vllmctl.paths import WAIT_HEALTHY_HELPER as HELPER
from vllmctl.releases.unit_exit import SHOW_PROPERTIES, exited_units

pytestmark = pytest.mark.lab

DEADLINE_S = 120


def _install_helper(lab_fleet: LabFleet) -> None:
    host = lab_fleet.hosts[-1]
    install = f"install -d /var/lib/vllmctl/bin && printf %s {shlex.quote(POLL)} > {HELPER}"
    result = lab_fleet.ssh(host, f"sudo sh -c {shlex.quote(install)}")
    assert result.returncode == 0, result.stderr


def _start_unit(lab_fleet: LabFleet, unit: str, command: str) -> None:
    host = lab_fleet.hosts[-1]
    argv = ["sudo", "systemd-run", f"--unit={unit}", "-p", "Restart=on-failure", "-p", "RestartSec=3"]
    argv += ["/bin/sh", "-c", command]
    result = lab_fleet.ssh(host, shlex.join(argv))
    assert result.returncode == 0, result.stderr


def _wait(lab_fleet: LabFleet, unit: str, deadline_s: float) -> tuple[int, str, str, float]:
    host = lab_fleet.hosts[-1]
    argv = [
        "sudo",
        "python3",
        HELPER,
        "http://127.0.0.1:8999",
        "tiny",
        f"{deadline_s:g}",
        unit,
        "/nonexistent",
        "5",
    ]
    began = time.monotonic()
    result = lab_fleet.ssh(host, shlex.join(argv), timeout=deadline_s + 60)
    return result.returncode, result.stdout, result.stderr, time.monotonic() - began


def test_an_engine_that_exits_is_reported_long_before_the_deadline(lab_fleet: LabFleet) -> None:
    _install_helper(lab_fleet)
    unit = "vllmctl-crashes-0.service"
    _start_unit(lab_fleet, unit, "echo 'ValueError: bad engine flag' >&2; sleep 1; exit 3")
    try:
        code, _, stderr, took = _wait(lab_fleet, unit, DEADLINE_S)
    finally:
        lab_fleet.ssh(lab_fleet.hosts[-1], f"sudo systemctl stop {unit}; sudo systemctl reset-failed {unit}")
    assert code == 1, stderr
    assert "the service exited" in stderr and "ValueError: bad engine flag" in stderr, stderr
    assert took < DEADLINE_S / 2, f"took {took:.0f} s of the {DEADLINE_S} s deadline"


def test_a_running_engine_that_never_answers_waits_out_the_deadline(lab_fleet: LabFleet) -> None:
    _install_helper(lab_fleet)
    unit = "vllmctl-silent-0.service"
    _start_unit(lab_fleet, unit, "echo 'loading weights'; exec sleep 600")
    try:
        code, stdout, stderr, _ = _wait(lab_fleet, unit, 4)
    finally:
        lab_fleet.ssh(
            lab_fleet.hosts[-1], f"sudo systemctl stop {unit}; sudo systemctl reset-failed {unit} || true"
        )
    assert code == 1, stderr
    assert "not ready within 4s" in stderr and "the service exited" not in stderr, stderr
    assert "loading weights" in stderr  # the journal tail
    assert stdout.count("not ready after") >= 2, stdout  # it kept polling


def _show(lab_fleet: LabFleet, unit: str) -> str:
    argv = ["systemctl", "show", "-p", SHOW_PROPERTIES, "--", unit]
    return lab_fleet.ssh(lab_fleet.hosts[-1], shlex.join(argv)).stdout


def test_a_crash_before_a_manual_restart_is_forgotten_but_one_during_the_wait_is_reported(
    lab_fleet: LabFleet,
) -> None:
    """The gate's watch counts any NRestarts > 0 as an exit: that is right only because real systemd resets
    NRestarts when a unit is restarted by hand (as apply and rollback do), which this pins down."""
    unit, marker = "vllmctl-flaky-0.service", "/run/vllmctl-flaky-crashed"
    host = lab_fleet.hosts[-1]
    lab_fleet.ssh(host, f"sudo rm -f {marker}")
    _start_unit(lab_fleet, unit, f"[ -e {marker} ] || {{ touch {marker}; exit 3; }}; exec sleep 600")
    try:
        deadline = time.monotonic() + 60
        while "NRestarts=1" not in _show(lab_fleet, unit) and time.monotonic() < deadline:
            time.sleep(1)
        assert exited_units(_show(lab_fleet, unit)) == [
            f"{unit} (active/running, 1 restarts since the wait began)"
        ]
        assert lab_fleet.ssh(host, f"sudo systemctl restart {unit}").returncode == 0
        assert exited_units(_show(lab_fleet, unit)) == []
        lab_fleet.ssh(host, f"sudo systemctl kill -s KILL {unit}")
        deadline = time.monotonic() + 30
        while not exited_units(_show(lab_fleet, unit)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert exited_units(_show(lab_fleet, unit)) != []
    finally:
        lab_fleet.ssh(
            host, f"sudo systemctl stop {unit}; sudo systemctl reset-failed {unit}; sudo rm -f {marker}"
        )
