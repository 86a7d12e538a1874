"""Ansible YAML inventories: imported through `ansible_inventory:` and read on their own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from vllmctl.inventory import load_inventory

Problems = Callable[..., list[str]]

ANSIBLE = """\
all:
  vars:
    ansible_user: deploy
    region: eu
  children:
    gpu:
      vars: {region: fra, ansible_python_interpreter: /usr/bin/python3}
      hosts:
        g1: {ansible_host: 10.1.0.1, ansible_port: "2222", ansible_ssh_private_key_file: ~/.ssh/k}
        g2:
      children:
        big:
          hosts:
            g3: {ansible_host: 10.1.0.3, ansible_user: root, region: muc, ansible_become: false}
    ungrouped:
      hosts:
        lone: {}
"""


def test_ansible_file_alone_gives_hosts_and_groups(workdir: Path) -> None:
    (workdir / "hosts.yml").write_text(ANSIBLE)
    inventory = load_inventory("hosts.yml")
    assert list(inventory.hosts) == ["g1", "g2", "g3", "lone"]
    assert inventory.groups == {"gpu": ("g1", "g2", "g3"), "big": ("g3",)}
    assert inventory.models == {}
    g1, g2, g3 = inventory.hosts["g1"], inventory.hosts["g2"], inventory.hosts["g3"]
    assert (g1.address, g1.ssh.user, g1.ssh.port, g1.ssh.identity_file) == (
        "10.1.0.1",
        "deploy",
        2222,
        "~/.ssh/k",
    )
    assert (g2.address, g2.ssh.port, g2.vars) == ("g2", 22, {"region": "fra"})
    assert (g3.ssh.user, g3.ssh.sudo, g3.vars) == ("root", False, {"region": "muc"})


def test_imported_hosts_take_defaults_and_native_overrides(workdir: Path) -> None:
    (workdir / "ansible").mkdir()
    (workdir / "ansible" / "hosts.yml").write_text(ANSIBLE)
    (workdir / "inv.yml").write_text(
        "vllmctl: 1\n"
        "ansible_inventory: ansible/hosts.yml\n"
        "defaults: {ssh: {port: 2200, known_hosts: /kh}, gpus: {model: L40S, count: 2}}\n"
        "hosts:\n"
        "  g3: {gpus: {model: H100-80GB, count: 8}, ssh: {user: ops}}\n"
        "  extra: {address: 10.9.9.9}\n"
        "groups: {serving: [gpu, extra]}\n"
        "models: {m: {source: org/m, hosts: serving}}\n"
    )
    inventory = load_inventory("inv.yml")
    g1, g2, g3 = inventory.hosts["g1"], inventory.hosts["g2"], inventory.hosts["g3"]
    assert (g1.ssh.port, g1.ssh.known_hosts, g2.ssh.port) == (2222, "/kh", 2200)
    assert g3.gpus is not None and (g3.gpus.model, g3.ssh.user, g3.address) == (
        "H100-80GB",
        "ops",
        "10.1.0.3",
    )
    assert g2.gpus is not None and g2.gpus.model == "L40S"
    assert inventory.models["m"].hosts == ("g1", "g2", "g3", "extra")
    assert set(inventory.groups) == {"gpu", "big", "serving"}


def test_problems_point_into_the_ansible_file(problems: Problems) -> None:
    found = problems(
        "vllmctl: 1\nansible_inventory: hosts.yml\ngroups: {gpu: [g1]}\n",
        **{
            "hosts.yml": """\
            all:
              children:
                gpu:
                  hosts:
                    g1: {ansible_host: "10.0.0.1 x", ansible_port: 99999}
                  host: {}
            """
        },
    )
    assert found == [
        "hosts.yml:5:28: all.children.gpu.hosts.g1.ansible_host: '10.0.0.1 x' is not a host name, IPv4 or "
        "IPv6 address (it contains ' ')\n"
        "  hint: an address is a DNS name (letters, digits, '-', '_' and '.'), an IPv4 address, or an IPv6 "
        "address (bare or in [brackets])",
        "hosts.yml:5:56: all.children.gpu.hosts.g1.ansible_port: must be <= 65535, got integer 99999\n"
        "  hint: SSH port (1–65535).",
        "hosts.yml:6:7: all.children.gpu.host: unknown key 'host'\n  hint: did you mean 'hosts'?",
        "inv.yml:3:10: groups.gpu: group 'gpu' is also defined by the Ansible inventory\n"
        "  hint: rename the group here, or drop it and use the Ansible one",
    ]


def test_missing_ansible_file_points_at_the_key(problems: Problems) -> None:
    found = problems("vllmctl: 1\nansible_inventory: nope.yml\n")
    assert found == [
        "inv.yml:2:20: ansible_inventory: Ansible inventory 'nope.yml' not found (looked for nope.yml)\n"
        "  hint: the path is relative to this inventory file"
    ]


def test_unread_ansible_variables_are_left_alone_and_vault_values_are_refused(
    workdir: Path, problems: Problems
) -> None:
    (workdir / "hosts.yml").write_text(
        "all:\n"
        "  vars:\n"
        "    ansible_become_password: plain-text-password\n"
        "    ansible_password: !vault |\n"
        "      $ANSIBLE_VAULT;1.1;AES256\n"
        "      6238373035\n"
        "  hosts:\n"
        "    g1: {ansible_host: 10.0.0.1, rack: r1}\n"
    )
    assert load_inventory("hosts.yml").hosts["g1"].vars == {"rack": "r1"}
    found = problems(
        "all:\n  vars:\n    db_password: !vault |\n      $ANSIBLE_VAULT;1.1;AES256\n      6238\n"
        "  hosts: {g1: {}}\n",
        name="hosts.yml",
    )
    assert found == [
        "hosts.yml:3:18: all.vars.db_password: 'db_password' is encrypted with Ansible Vault\n"
        "  hint: vllmctl never decrypts Ansible Vault: give vllmctl its secrets under `secrets:` ({env} or "
        "{file}), or keep encrypted variables out of the files vllmctl reads"
    ]


def test_vault_value_in_a_vllmctl_inventory_is_refused(problems: Problems) -> None:
    found = problems("vllmctl: 1\nhosts:\n  a: {vars: {token_file: !vault abc}}\n")
    assert found == [
        "inv.yml:3:26: hosts.a.vars.token_file: an Ansible Vault value cannot be used here\n"
        "  hint: vllmctl does not decrypt Ansible Vault; declare the secret under `secrets:` instead"
    ]


def test_literal_secret_in_imported_vars_is_refused(problems: Problems) -> None:
    found = problems(
        "vllmctl: 1\nansible_inventory: hosts.yml\n",
        **{"hosts.yml": "all:\n  hosts:\n    g1: {api_token: abc123}\n"},
    )
    assert found == [
        "hosts.yml:3:21: all.hosts.g1.api_token: 'api_token' holds a literal secret\n"
        "  hint: move it to `secrets:` as {env: VAR} or {file: PATH} and reference that instead"
    ]
