"""Issue #22: a problem in an INI inventory, a group_vars or a host_vars file names that file, line and
column; Vault is refused, never decrypted; values meet the checks native ones meet; without ansible-core,
the hint names the extra."""

from __future__ import annotations

import json
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from inventory_verdict import verdict

from vllmctl.errors import InvalidInputError
from vllmctl.inventory import load_inventory
from vllmctl.inventory.ansible import read_ansible

pytestmark = pytest.mark.skipif(find_spec("ansible") is None, reason="needs ansible-core (vllmctl[ansible])")

VAULT_HINT = (
    "  hint: vllmctl never decrypts Ansible Vault: give vllmctl its secrets under `secrets:` ({env} or "
    "{file}), or keep encrypted variables out of the files vllmctl reads"
)
ADDRESS_HINT = (
    "  hint: an address is a DNS name (letters, digits, '-', '_' and '.'), an IPv4 address, or an IPv6 "
    "address (bare or in [brackets])"
)


def refused(workdir: Path, ini: str, **files: str) -> list[str]:
    for name, text in files.items():
        path = workdir / name.replace("__", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (workdir / "hosts.ini").write_text(ini)
    with pytest.raises(InvalidInputError) as caught:
        load_inventory("hosts.ini")
    return [problem.render() for problem in caught.value.problems]


def test_a_line_ansible_cannot_parse_is_named(workdir: Path) -> None:
    assert refused(workdir, "[gpus]\ngpu01\n\n[gpus:vars]\nnovalue\n") == [
        "hosts.ini:5:1: invalid Ansible INI inventory: Expected key=value, got: novalue\n"
        "  hint: fix this line; see https://docs.ansible.com/ansible/latest/inventory_guide/intro_inventory.html"
    ]
    assert refused(workdir, "[gpus]\ngpu01\n[all:children]\ngpus\nnope\n")[0].startswith(
        "hosts.ini:5:1: invalid Ansible INI inventory: "
        "Section [all:children] includes undefined group 'nope'."
    )


def test_values_are_checked_at_their_ini_line_and_column(workdir: Path) -> None:
    ini = (
        "[gpus]\n"
        "gpu01 ansible_host=10.0.0.1;id\n"
        "gpu[02:03]\n"
        "\n"
        "[gpus:vars]\n"
        "ansible_user='a b'\n"
        "ansible_become=maybe\n"
    )
    assert refused(workdir, ini) == [
        "hosts.ini:2:20: gpu01.ansible_host: '10.0.0.1;id' is not a host name, IPv4 or IPv6 address (it "
        f"contains ';')\n{ADDRESS_HINT}",
        "hosts.ini:6:14: [gpus:vars].ansible_user: 'a b' is not a valid user name\n"
        "  hint: a user name is letters, digits, '_', '.' and '-', starts with a letter or '_', "
        "at most 32 long",
        "hosts.ini:7:16: [gpus:vars].ansible_become: expected true or false, got string 'maybe'\n"
        "  hint: Run privileged steps through sudo (needed when user is not root).",
    ]


def test_group_vars_and_host_vars_problems_name_their_file_and_line(workdir: Path) -> None:
    found = refused(
        workdir,
        "[gpus]\ngpu01\ngpu02\n",
        group_vars__gpus__ssh="---\n# how we log in\nansible_port: 99999\n",
        group_vars__gpus__env="env: {LD_PRELOAD: /tmp/x.so}\n",
        host_vars__gpu02="rack: r1\nansible_ssh_host: '-oProxyCommand=x'\n",
    )
    assert found == [
        "group_vars/gpus/env:1:7: env.LD_PRELOAD: vars.env 'LD_PRELOAD': LD_PRELOAD may not be set: "
        "it changes which code or files the engine loads\n"
        "  hint: pick another name: an inventory never changes which code the engine runs",
        "group_vars/gpus/ssh:3:15: ansible_port: must be <= 65535, got integer 99999\n"
        "  hint: SSH port (1–65535).",
        "host_vars/gpu02:2:19: ansible_ssh_host: address '-oProxyCommand=x' starts with '-': "
        f"ssh would read it as an option\n{ADDRESS_HINT}",
    ]


def test_a_broken_group_vars_file_is_named_at_its_line(workdir: Path) -> None:
    found = refused(
        workdir, "[gpus]\ngpu01\n", group_vars__all="a: 1\nb: [\n", host_vars__gpu01="a: 1\na: 2\n"
    )
    assert found == [
        "group_vars/all:3:1: invalid YAML: expected the node content, but found '<stream end>'\n"
        "  hint: check indentation and quoting around this spot",
        "host_vars/gpu01:2:1: a: duplicate key 'a' (first defined at line 1)\n"
        "  hint: YAML keeps only the last one; remove or rename one of them",
    ]


def test_vault_is_refused_as_a_file_an_ini_value_and_a_yaml_value(workdir: Path) -> None:
    found = refused(
        workdir,
        "[gpus]\ngpu01 db_pass=$ANSIBLE_VAULT;1.1;AES256\ngpu02 ansible_password=$ANSIBLE_VAULT;1.1;AES256\n",
        group_vars__all__vault="$ANSIBLE_VAULT;1.1;AES256\n6238373035\n",
        group_vars__gpus="rack: r1\napi: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6238\n",
    )
    assert found == [
        f"group_vars/all/vault:1:1: file is encrypted with Ansible Vault\n{VAULT_HINT}",
        f"group_vars/gpus:2:6: api: 'api' is encrypted with Ansible Vault\n{VAULT_HINT}",
        f"hosts.ini:2:15: gpu01.db_pass: 'db_pass' is encrypted with Ansible Vault\n{VAULT_HINT}",
    ]  # ansible_password is Ansible's own and never read: left alone


def test_a_vault_encrypted_inventory_is_refused(workdir: Path) -> None:
    assert refused(workdir, "$ANSIBLE_VAULT;1.1;AES256\n6238373035\n") == [
        f"hosts.ini:1:1: file is encrypted with Ansible Vault\n{VAULT_HINT}"
    ]


def test_a_bastion_in_ssh_common_args_meets_the_jump_host_checks(workdir: Path) -> None:
    ini = (
        "[gpus]\n"
        "gpu01 ansible_ssh_common_args='-o ProxyJump=ops@bastion;id'\n"
        "gpu02 ansible_ssh_common_args='-o ProxyCommand=\"nc %h %p\"'\n"
        "gpu03 ansible_ssh_common_args='-o ProxyJump=ops:secret@bastion'\n"
        "gpu04 ansible_ssh_common_args='-o ProxyCommand=\"ssh -W %h:%p -q -p 2222 ops@bastion\"'\n"
    )
    found = refused(workdir, ini)
    assert found[0] == (
        "hosts.ini:2:31: gpu01.ansible_ssh_common_args: jump_host 'bastion;id' is not a host name, IPv4 or "
        f"IPv6 address (it contains ';')\n{ADDRESS_HINT}"
    )
    assert found[1].startswith(
        "hosts.ini:3:31: gpu02.ansible_ssh_common_args: ProxyCommand 'nc %h %p' does not run ssh\n"
        "  hint: a bastion is read from `-o ProxyJump=[user@]host[:port]`"
    )
    assert found[2] == (
        "hosts.ini:4:31: gpu03.ansible_ssh_common_args: jump_host carries a password\n"
        "  hint: vllmctl uses keys only: drop ':password' and use identity_file"
    )
    assert len(found) == 3  # gpu04's bastion is fine


def test_a_template_in_a_connection_variable_is_refused_not_evaluated(workdir: Path) -> None:
    ini = "[gpus]\ngpu01 ansible_host='{{ inventory_hostname }}.example' rack='{{ zone }}-1'\n"
    assert refused(workdir, ini) == [
        "hosts.ini:2:20: gpu01.ansible_host: 'ansible_host' is a Jinja template\n"
        "  hint: vllmctl does not evaluate Ansible's templates: write the value itself"
    ]  # a free variable keeps its template text, as ansible-inventory --list shows it


def test_a_file_without_extension_is_yaml_when_it_reads_like_yaml(workdir: Path) -> None:
    (workdir / "inventory").write_text("vllmctl: 1\nhosts: [a\n")
    with pytest.raises(InvalidInputError) as caught:
        load_inventory("inventory")
    assert caught.value.problems[0].render().startswith("inventory:3:1: invalid YAML")
    (workdir / "inventory").write_text("# DeepOps names its INI inventory like this\n[gpus]\ngpu01 a=1\n")
    assert load_inventory("inventory").hosts["gpu01"].vars == {"a": 1}


def test_ini_names_meet_the_name_rule(workdir: Path) -> None:
    assert refused(workdir, "[gpus]\ngpu01\n[bad!group]\ngpu01\n")[0] == (
        "hosts.ini:3:2: [bad!group]: group name 'bad!group' is not a name vllmctl accepts\n"
        "  hint: names use letters, digits, '.', '_' and '-', start with a letter or digit, "
        "at most 63 characters"
    )


def test_without_ansible_core_the_hint_names_the_extra(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [name for name in sys.modules if name == "ansible" or name.startswith("ansible.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "ansible", None)
    assert refused(workdir, "[gpus]\ngpu01\n") == [
        "hosts.ini: reading an Ansible INI inventory needs ansible-core\n"
        "  hint: install the extra that reads them: pip install 'vllmctl[ansible]' "
        "(ansible-core 2.19 or later)"
    ]


hostile = st.text(alphabet="ab1.:-_;$`() [@]%", min_size=1, max_size=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(address=hostile, user=hostile)
def test_an_ini_value_gets_the_verdict_a_native_one_gets(workdir: Path, address: str, user: str) -> None:
    """Whatever INI makes of a value (ansible-core's parser decides), that value gets the native verdict."""
    ini = f"[gpus]\ng1 ansible_host='{address}' ansible_user='{user}'\n"
    (workdir / "hosts.ini").write_text(ini)
    try:
        read = read_ansible("hosts.ini")
    except InvalidInputError:
        return  # not a host line Ansible reads; reported at its line (test above)
    # The twin holds what INI produced, numbers as text as Ansible uses them, a list a list (JSON is YAML)
    produced = [read.hosts["g1"][key].value for key in ("ansible_host", "ansible_user")]
    as_address, as_user = (
        json.dumps(str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value)
        for value in produced
    )
    native = f"vllmctl: 1\nhosts:\n  g1: {{address: {as_address}, ssh: {{user: {as_user}}}}}\n"
    assert verdict(workdir, "hosts.ini", ini) == verdict(workdir, "inv.yml", native)
