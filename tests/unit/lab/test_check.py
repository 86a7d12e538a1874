"""`lab check` turns each host's SSH answer into a row; a silent host is reported, not raised."""

from __future__ import annotations

from pathlib import Path

from vllmctl.lab.check import parse_probe, ssh_argv
from vllmctl.lab.layout import fleet_layout

HOST = fleet_layout("lab", 50, 1).hosts[0]


def test_a_ready_host() -> None:
    check = parse_probe(HOST, 0, "lab-1\nrunning\n8\n", "")
    assert (check.reachable, check.hostname, check.system_state, check.gpus) == (
        True,
        "lab-1",
        "running",
        "8",
    )
    assert check.ok


def test_a_host_still_starting_or_misnamed_is_not_ok() -> None:
    assert not parse_probe(HOST, 1, "lab-1\nstarting\nnone\n", "").ok
    assert not parse_probe(HOST, 0, "other\nrunning\n8\n", "").ok


def test_an_unreachable_host_carries_sshs_last_words() -> None:
    check = parse_probe(HOST, 255, "", "debug\nHost key verification failed.\n")
    assert not check.reachable
    assert check.error == "Host key verification failed."
    assert not check.ok


def test_ssh_is_always_strict() -> None:
    argv = ssh_argv(Path("/k"), Path("/kh"), "10.199.50.11", "true")
    assert argv[:2] == ["ssh", "-i"]
    assert "StrictHostKeyChecking=yes" in argv
    assert "UserKnownHostsFile=/kh" in argv
    assert argv[-2:] == ["ops@10.199.50.11", "true"]
