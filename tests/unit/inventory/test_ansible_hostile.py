"""Issue #17: values imported from an Ansible inventory meet exactly the checks native ones do, and each
problem points at the Ansible variable that set it; read through `ansible_inventory:` or on their own.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllmctl.errors import InvalidInputError
from vllmctl.inventory import load_inventory

NATIVE = "vllmctl: 1\nansible_inventory: hosts.yml\n"

# (id, host variables of g1, "LINE:COL path", message fragment)
CASES = [
    ("host-semicolon", "{ansible_host: '10.0.0.1;id'}", "3:24 all.hosts.g1.ansible_host",
     "(it contains ';')"),
    ("host-option", "{ansible_ssh_host: '-oProxyCommand=x'}", "3:28 all.hosts.g1.ansible_ssh_host",
     "starts with '-'"),
    ("host-not-text", "{ansible_host: [a]}", "3:24 all.hosts.g1.ansible_host",
     "expected a string, got a list"),
    ("user-option", "{ansible_user: '-oX'}", "3:24 all.hosts.g1.ansible_user", "not a valid user name"),
    ("user-space", "{ansible_ssh_user: 'a b'}", "3:28 all.hosts.g1.ansible_ssh_user",
     "not a valid user name"),
    ("port-range", "{ansible_port: 99999}", "3:24 all.hosts.g1.ansible_port", "must be <= 65535"),
    ("port-text", "{ansible_port: 'ssh'}", "3:24 all.hosts.g1.ansible_port", "expected an integer"),
    ("port-float", "{ansible_port: 22.0}", "3:24 all.hosts.g1.ansible_port", "got number 22.0"),
    ("key-empty", "{ansible_ssh_private_key_file: ''}", "3:40 all.hosts.g1.ansible_ssh_private_key_file",
     "must not be empty"),
    ("env-reserved", "{env: {LD_PRELOAD: /tmp/x.so}}", "3:16 all.hosts.g1.env.LD_PRELOAD",
     "LD_PRELOAD may not be set"),
    ("env-bad-name", "{env: {'A=B': x}}", "3:16 all.hosts.g1.env.A=B", "an environment variable name is"),
    ("env-list", "{env: [A=1]}", "3:15 all.hosts.g1.env", "expected a mapping, got a list"),
    ("env-meaning-something-else", "{env: production}", "3:15 all.hosts.g1.env",
     "expected a mapping, got string 'production'"),
    ("driver-flavor", "{driver_flavor: 'server;id'}", "3:25 all.hosts.g1.driver_flavor", "a flavor is"),
]  # fmt: skip


def refused(workdir: Path, ansible: str, native: str | None = NATIVE) -> list[str]:
    (workdir / "hosts.yml").write_text(ansible)
    if native is not None:
        (workdir / "inv.yml").write_text(native)
    with pytest.raises(InvalidInputError) as caught:
        load_inventory("inv.yml" if native is not None else "hosts.yml")
    return [problem.render() for problem in caught.value.problems]


@pytest.mark.parametrize(("host_vars", "where", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
@pytest.mark.parametrize("read", ["imported", "alone"])
def test_imported_values_are_checked_where_ansible_set_them(
    workdir: Path, read: str, host_vars: str, where: str, message: str
) -> None:
    ansible = f"all:\n  hosts:\n    g1: {host_vars}\n"
    [found] = refused(workdir, ansible, NATIVE if read == "imported" else None)
    line, col, path = *where.split(" ")[0].split(":"), where.split(" ")[1]
    assert found.startswith(f"hosts.yml:{line}:{col}: {path}: ")
    assert message in found and "\n  hint: " in found
    if path.endswith(".env"):
        assert "an Ansible variable named env that means something else must be renamed" in found


def test_group_variables_are_reported_at_the_group(workdir: Path) -> None:
    ansible = "all:\n  vars: {ansible_user: 'ops;id'}\n  hosts: {g1: {}, g2: {}}\n"
    assert refused(workdir, ansible) == [
        "hosts.yml:2:24: all.vars.ansible_user: 'ops;id' is not a valid user name\n"
        "  hint: a user name is letters, digits, '_', '.' and '-', starts with a letter or '_', "
        "at most 32 long"
    ]


def test_two_imported_hosts_on_one_address_are_refused(workdir: Path) -> None:
    ansible = "all:\n  hosts:\n    g1: {ansible_host: 10.0.0.1}\n    g2: {ansible_host: 10.0.0.1}\n"
    assert refused(workdir, ansible) == [
        "hosts.yml:4:24: all.hosts.g2.ansible_host: host 'g2' has the same address and SSH port as host 'g1' "
        "(10.0.0.1, 22)\n"
        "  hint: each host is one machine: remove the duplicate, or give it its own address or port"
    ]


def test_defaults_given_to_imported_hosts_are_reported_at_the_defaults(workdir: Path) -> None:
    native = NATIVE + "defaults: {ssh: {user: 'a;b'}}\n"
    assert refused(workdir, "all:\n  hosts:\n    g1: {ansible_host: 10.0.0.1}\n", native) == [
        "inv.yml:3:24: defaults.ssh.user: 'a;b' is not a valid user name\n"
        "  hint: a user name is letters, digits, '_', '.' and '-', starts with a letter or '_', "
        "at most 32 long"
    ]


hostile = st.text(alphabet="ab1.:-_;$`() [@]%", min_size=1, max_size=12)
GENERATED = settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def verdict(workdir: Path, native: str, ansible: str | None) -> list[str]:
    """Problem messages and hints, without their location (which differs between the two files)."""
    if ansible is not None:
        (workdir / "hosts.yml").write_text(ansible)
    (workdir / "inv.yml").write_text(native)
    try:
        load_inventory("inv.yml")
    except InvalidInputError as exc:
        return [f"{p.message} | {p.hint}" for p in exc.problems]
    return []


@GENERATED
@given(address=hostile, user=hostile)
def test_an_imported_value_gets_the_verdict_a_native_one_gets(workdir: Path, address: str, user: str) -> None:
    quoted_address, quoted_user = (value.replace("'", "''") for value in (address, user))
    native = f"vllmctl: 1\nhosts:\n  g1: {{address: '{quoted_address}', ssh: {{user: '{quoted_user}'}}}}\n"
    ansible = f"all:\n  hosts:\n    g1: {{ansible_host: '{quoted_address}', ansible_user: '{quoted_user}'}}\n"
    assert verdict(workdir, NATIVE, ansible) == verdict(workdir, native, None)
