"""A host reached through an ssh_config alias whose ProxyJump is another lab host: the alias supplies
HostName, User, IdentityFile and the jump; host keys stay strict for the jump host and the target alike."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest
import yaml
from facts_cli import run_facts

from vllmctl.errors import TransportError
from vllmctl.inventory.model import DriverSpec, EngineSpec, Host, SshSettings
from vllmctl.lab.testing import LabFleet, LabHostInfo
from vllmctl.transport import SshTransport

pytestmark = pytest.mark.lab

ALIAS = "vllmctl-proxied"  # resolves nowhere: only ~/.ssh/config knows where it goes


def ssh_config(fleet: LabFleet, jump: LabHostInfo, target: LabHostInfo) -> str:
    return (
        f"Host {ALIAS}\n"
        f"    HostName {target.address}\n"
        "    User ops\n"
        f"    IdentityFile {fleet.identity_file}\n"
        "    IdentitiesOnly yes\n"
        "    ProxyJump vllmctl-bastion\n"
        "Host vllmctl-bastion\n"
        f"    HostName {jump.address}\n"
    )


def proxied_host(known_hosts: Path) -> Host:
    """As the loader builds it from an inventory that sets only these ssh keys (ssh_config gives the rest)."""
    given = frozenset({"known_hosts", "strict_host_keys", "connect_timeout_s"})
    settings = SshSettings(
        known_hosts=str(known_hosts), strict_host_keys=True, connect_timeout_s=30, given=given
    )
    return Host("proxied", ALIAS, settings, None, DriverSpec(), EngineSpec())


@pytest.fixture
def pair(lab_fleet: LabFleet, tmp_path: Path) -> tuple[LabHostInfo, LabHostInfo, Path]:
    jump, target = lab_fleet.hosts[2], lab_fleet.hosts[3]  # the spare pair: nothing is deployed there
    config = tmp_path / "ssh_config"
    config.write_text(ssh_config(lab_fleet, jump, target))
    return jump, target, config


def test_a_command_runs_on_the_alias_target_through_the_jump_host(
    lab_fleet: LabFleet, pair: tuple[LabHostInfo, LabHostInfo, Path]
) -> None:
    jump, target, config = pair
    transport = SshTransport(proxied_host(lab_fleet.known_hosts), ssh_config=[str(config)])
    try:
        result = transport.run(["sh", "-c", 'hostname; echo "$SSH_CONNECTION"; id -un'], timeout=60)
        assert result.ok, result.failure()
        hostname, connection, user = result.stdout.splitlines()
        assert hostname == target.name and user == "ops"
        # sshd on the target saw the connection come from the jump host, not from this controller
        assert connection.split()[0] == jump.address and connection.split()[2] == target.address
        assert transport.run(["id", "-u"], sudo=True, timeout=60).stdout.strip() == "0"
        assert [c.host for c in transport._chain] == [jump.address, target.address]
    finally:
        transport.close()


def test_uploads_go_through_the_jump_host_too(
    lab_fleet: LabFleet, pair: tuple[LabHostInfo, LabHostInfo, Path], tmp_path: Path
) -> None:
    """`put` (stdin) and `put_file` (SFTP on the same Fabric connection), then read back on the target."""
    _, _, config = pair
    payload = os.urandom(200_000)
    source = tmp_path / "payload.bin"
    source.write_bytes(payload)
    transport = SshTransport(proxied_host(lab_fleet.known_hosts), ssh_config=[str(config)])
    folder = f"/var/tmp/vllmctl-proxyjump-{os.getpid()}"
    try:
        assert transport.run(["mkdir", "-p", folder], sudo=True, timeout=60).ok
        sent = transport.put_file(str(source), f"{folder}/pushed.bin", hashlib.sha256(payload).hexdigest())
        assert sent.ok, sent.failure("pushing a file")
        assert transport.put(b"through stdin\n", f"{folder}/put.txt", mode="0600", timeout=60).ok
        listing = transport.run(
            f"sha256sum {folder}/pushed.bin; cat {folder}/put.txt; stat -c %a {folder}/put.txt",
            sudo=True,
            timeout=60,
        )
        lines = listing.stdout.splitlines()
        assert lines[0].split()[0] == hashlib.sha256(payload).hexdigest()
        assert lines[1:] == ["through stdin", "600"]
    finally:
        transport.run(["rm", "-rf", folder], sudo=True, timeout=60)
        transport.close()


def test_the_jump_host_key_is_checked_strictly(
    lab_fleet: LabFleet, pair: tuple[LabHostInfo, LabHostInfo, Path], tmp_path: Path
) -> None:
    jump, _, config = pair
    lines = lab_fleet.known_hosts.read_text().splitlines(keepends=True)
    known = tmp_path / "known_hosts"
    known.write_text("".join(line for line in lines if jump.address not in line.split()[0].split(",")))
    before = known.read_text()
    transport = SshTransport(proxied_host(known), ssh_config=[str(config)])
    with pytest.raises(TransportError) as refused:
        transport.run(["true"], timeout=60)
    assert f"host key unknown for {jump.address}" in refused.value.message
    assert f"ssh-keyscan -p 22 {jump.address} >> {known}" in refused.value.hint
    assert known.read_text() == before  # strict: nothing was recorded


def test_a_target_the_jump_host_cannot_reach_fails_fast_as_unreachable(
    lab_fleet: LabFleet, pair: tuple[LabHostInfo, LabHostInfo, Path], tmp_path: Path
) -> None:
    _, target, config = pair
    closed = tmp_path / "closed_port"
    closed.write_text(
        config.read_text().replace(f"HostName {target.address}\n", f"HostName {target.address}\n    Port 1\n")
    )
    transport = SshTransport(proxied_host(lab_fleet.known_hosts), ssh_config=[str(closed)])
    started = time.monotonic()
    with pytest.raises(TransportError, match="unreachable from the jump host"):
        transport.run(["true"], timeout=60)
    assert time.monotonic() - started < 30
    assert transport._chain == []  # the jump host's connection was closed too


def test_the_cli_reaches_a_host_named_by_an_alias_in_the_users_ssh_config(
    lab_fleet: LabFleet, pair: tuple[LabHostInfo, LabHostInfo, Path], tmp_path: Path
) -> None:
    """`vllmctl facts` with HOME pointing at a folder whose .ssh/config holds the alias: the inventory sets
    no user, key or jump host; sshd on the target logs the login as coming from the jump host."""
    jump, target, config = pair
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    (home / ".ssh" / "config").write_text(config.read_text())
    ssh = {"known_hosts": str(lab_fleet.known_hosts), "connect_timeout_s": 30}
    inventory = tmp_path / "proxied.yml"
    inventory.write_text(
        yaml.safe_dump({"vllmctl": 1, "defaults": {"ssh": ssh}, "hosts": {"proxied": {"address": ALIAS}}})
    )
    done = run_facts(inventory, home, tmp_path / "state")
    assert done.returncode == 0, done.stdout + done.stderr
    found = json.loads(done.stdout)["proxied"]
    assert "error" not in found and found["facts"]["os_release"]["pretty_name"]
    logins = lab_fleet.ssh(target, "sudo -n journalctl --no-pager -o cat _COMM=sshd")
    assert f"Accepted publickey for ops from {jump.address}" in logins.stdout
