"""Issue #22: `vllmctl facts hosts.ini` on a bare Ansible INI inventory, DeepOps' layout, whose bastion is
given in `ansible_ssh_common_args` (as DeepOps and Kubespray write it) and whose user and key come from
group_vars/: the target's sshd logs the login as coming from the bastion; host keys stay strict."""

from __future__ import annotations

import json
import shutil
from importlib.util import find_spec
from pathlib import Path

import pytest
from facts_cli import run_facts

from vllmctl.lab.testing import LabFleet

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(find_spec("ansible") is None, reason="needs ansible-core (vllmctl[ansible])"),
]

BASTIONS = {
    "proxycommand": '-o ProxyCommand="ssh -W %h:%p -q ops@{jump}"',
    "proxyjump": "-o ProxyJump=ops@{jump} -o StrictHostKeyChecking=no",  # vllmctl stays strict regardless
}


def estate(folder: Path, fleet: LabFleet, args: str) -> Path:
    target = fleet.hosts[3]
    (folder / "group_vars").mkdir(parents=True)
    (folder / "hosts.ini").write_text(
        "# DeepOps' layout: hosts with ansible_host in [all], groups below, SSH settings in [all:vars]\n"
        "[all]\n"
        f"proxied ansible_host={target.address}\n"
        "\n"
        "[gpu-servers]\n"
        "proxied\n"
        "\n"
        "[all:vars]\n"
        f"ansible_ssh_common_args='{args}'\n"
    )
    (folder / "group_vars" / "gpu-servers.yml").write_text(
        f"ansible_user: ops\nansible_ssh_private_key_file: {fleet.identity_file}\nansible_become: true\n"
    )
    return folder / "hosts.ini"


@pytest.mark.parametrize("form", sorted(BASTIONS))
def test_facts_reach_a_host_through_the_bastion_in_ssh_common_args(
    lab_fleet: LabFleet, tmp_path: Path, form: str
) -> None:
    jump, target = lab_fleet.hosts[2], lab_fleet.hosts[3]  # the spare pair: nothing is deployed there
    inventory = estate(tmp_path / "estate", lab_fleet, BASTIONS[form].format(jump=jump.address))
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    shutil.copy(lab_fleet.known_hosts, home / ".ssh" / "known_hosts")  # no ssh_config: the route is the INI's
    since = lab_fleet.ssh(target, "date +%s").stdout.strip()
    done = run_facts(inventory, home, tmp_path / "state")
    assert done.returncode == 0, done.stdout + done.stderr
    found = json.loads(done.stdout)["proxied"]
    assert "error" not in found and found["facts"]["os_release"]["pretty_name"]
    logins = lab_fleet.ssh(target, f"sudo -n journalctl --no-pager -o cat _COMM=sshd --since=@{since}")
    assert f"Accepted publickey for ops from {jump.address}" in logins.stdout


def test_an_unknown_bastion_key_is_refused_not_recorded(lab_fleet: LabFleet, tmp_path: Path) -> None:
    jump = lab_fleet.hosts[2]
    inventory = estate(tmp_path / "estate", lab_fleet, BASTIONS["proxycommand"].format(jump=jump.address))
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    lines = lab_fleet.known_hosts.read_text().splitlines(keepends=True)
    known = home / ".ssh" / "known_hosts"
    known.write_text("".join(line for line in lines if jump.address not in line.split()[0].split(",")))
    before = known.read_text()
    done = run_facts(inventory, home, tmp_path / "state")
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"host key unknown for {jump.address}" in done.stdout + done.stderr
    assert known.read_text() == before
