"""Issue #22: the bastion in `ansible_ssh_common_args` becomes `ssh.jump_host` and then meets exactly the
checks a native jump_host meets; a proxy vllmctl cannot follow itself is refused, never ignored."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from inventory_verdict import verdict

from vllmctl.inventory.ssh_args import SshArgsProblem, jump_host

READ: list[tuple[str, object]] = [
    ('-o ProxyCommand="ssh -W %h:%p -q ubuntu@10.0.0.1"', "ubuntu@10.0.0.1"),  # DeepOps' own example
    ("-o ProxyCommand='ssh -q -W %h:%p -p 2222 -l ops bastion.example.com'", "ops@bastion.example.com:2222"),
    ("'-oProxyCommand=/usr/bin/ssh -W %h:%p bastion'", "bastion"),
    ("-oProxyCommand=ssh -W %h:%p bastion", SshArgsProblem),  # unquoted: ssh would split it the same way
    ("-o ProxyJump=ops@bastion:2200", "ops@bastion:2200"),
    ("-o 'ProxyJump ops@bastion'", "ops@bastion"),
    ("-J ops@bastion -o StrictHostKeyChecking=no", "ops@bastion"),
    ("-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null", None),
    ("-C -o ProxyJump=none", None),
    ("", None),
]
REFUSED = [
    ('-o ProxyCommand="nc %h %p"', "ProxyCommand 'nc %h %p' does not run ssh"),
    (
        '-o ProxyCommand="ssh -W %h:%p -i key bastion"',
        "ProxyCommand option '-i' is not one vllmctl can follow",
    ),
    ('-o ProxyCommand="ssh bastion nc %h %p"', "is not `ssh -W %h:%p [user@]host`"),
    ("-o ProxyJump=a -J b", "names more than one proxy"),
    ("-F ~/.ssh/other_config", "'-F' is not an option vllmctl reads"),
    ("-o", "-o has no value"),
    ("-o 'ProxyJump=a", "cannot be split into words"),
]


@pytest.mark.parametrize(("args", "expected"), READ)
def test_a_bastion_is_read_from_the_shapes_ansible_users_write(args: str, expected: object) -> None:
    if expected is SshArgsProblem:
        with pytest.raises(SshArgsProblem, match="'-W' is not an option vllmctl reads"):
            jump_host(args)
    else:
        assert jump_host(args) == expected


@pytest.mark.parametrize(("args", "message"), REFUSED)
def test_a_proxy_vllmctl_cannot_follow_is_refused(args: str, message: str) -> None:
    with pytest.raises(SshArgsProblem) as refused:
        jump_host(args)
    assert message in refused.value.message


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bastion=st.text(alphabet="ab1.:-_;$`() [@]%,", min_size=1, max_size=12))
def test_a_proxyjump_bastion_gets_the_verdict_a_native_jump_host_gets(workdir: Path, bastion: str) -> None:
    pytest.importorskip("ansible")
    args = f"-o ProxyJump={bastion}".replace('"', "")
    ini = f'[gpus]\ng1 ansible_host=10.0.0.1 ansible_ssh_common_args="{args}"\n'
    try:
        expected = jump_host(args)
    except SshArgsProblem:
        return  # not one bastion as ssh would split it: refused before any host check
    if expected is None or expected.lower() == "none":
        return
    native = f"vllmctl: 1\nhosts:\n  g1: {{address: 10.0.0.1, ssh: {{jump_host: '{expected}'}}}}\n"
    assert verdict(workdir, "hosts.ini", ini) == verdict(workdir, "inv.yml", native)
