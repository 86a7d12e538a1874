"""How the inventory's `ssh` settings merge with ~/.ssh/config: the inventory wins where it sets a key,
ssh_config fills in the rest (HostName, User, Port, IdentityFile, IdentitiesOnly, ProxyJump, ProxyCommand)."""

from __future__ import annotations

from pathlib import Path

import paramiko
import pytest
from executor_builders import host, loaded, parsed

from vllmctl.errors import TransportError
from vllmctl.transport import load_ssh_config, resolve_target


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    for name in ("lab_key", "jump_key"):
        (tmp_path / name).write_text("not read here\n")
    return tmp_path


def alias_config(keys: Path) -> paramiko.SSHConfig:
    return parsed(f"""
Host gpu-alias
    HostName 10.1.2.3
    User deploy
    Port 2222
    IdentityFile {keys}/lab_key
    IdentityFile {keys}/missing_key
    ProxyJump bastion
Host bastion
    HostName 10.1.2.1
    Port 2200
    IdentityFile {keys}/jump_key
""")


def test_an_alias_gives_hostname_user_port_identity_and_proxyjump(keys: Path) -> None:
    target = resolve_target(loaded("gpu-alias", set()), alias_config(keys))
    assert (target.alias, target.hostname, target.user, target.port) == (
        "gpu-alias",
        "10.1.2.3",
        "deploy",
        2222,
    )
    assert target.identity_files == (f"{keys}/lab_key",)  # a missing IdentityFile is skipped, as OpenSSH does
    assert target.use_agent  # ssh_config keys do not turn the agent off; IdentitiesOnly does
    [hop] = target.jumps
    assert (hop.hostname, hop.port, hop.user) == ("10.1.2.1", 2200, "deploy")  # the jump's user: the host's
    assert hop.identity_files == (f"{keys}/lab_key", f"{keys}/jump_key")
    assert target.where == "h (deploy@gpu-alias = 10.1.2.3:2222 via bastion)"


def test_inventory_keys_win_over_ssh_config(keys: Path) -> None:
    given = {"user", "port", "identity_file", "jump_host"}
    inventory = loaded("gpu-alias", given, port=22, identity_file="/k/id", jump_host="root@gate:2022")
    target = resolve_target(inventory, alias_config(keys))
    assert (target.hostname, target.user, target.port) == ("10.1.2.3", "ops", 22)  # HostName still applies
    assert target.identity_files == ("/k/id",) and not target.use_agent  # the inventory key only, as before
    [hop] = target.jumps
    assert (hop.hostname, hop.user, hop.port) == ("gate", "root", 2022)


def test_settings_built_in_code_count_as_given(keys: Path) -> None:
    target = resolve_target(host("h", "gpu-alias"), alias_config(keys))  # given=None: every field is set
    assert (target.user, target.port) == ("ops", 22)
    # a field left None sets nothing: ssh_config's IdentityFile and ProxyJump still apply
    assert target.identity_files == (f"{keys}/lab_key",)
    [hop] = target.jumps
    assert hop.hostname == "10.1.2.1"


def test_no_ssh_config_entry_means_the_inventory_and_the_defaults() -> None:
    target = resolve_target(loaded("10.0.0.5", set()), parsed("Host other\n  User x\n"))
    assert (target.hostname, target.user, target.port, target.jumps, target.proxy_command) == (
        "10.0.0.5",
        "ops",
        22,
        (),
        None,
    )
    assert target.use_agent and target.identity_files == ()


def test_multi_hop_proxyjump_and_none() -> None:
    config = parsed(
        "Host far\n  ProxyJump a@one:2201,two\nHost near\n  ProxyJump none\n  ProxyCommand none\n"
    )
    hops = resolve_target(loaded("far", set()), config).jumps
    assert [(h.user, h.hostname, h.port) for h in hops] == [("a", "one", 2201), ("ops", "two", 22)]
    near = resolve_target(loaded("near", set()), config)
    assert near.jumps == () and near.proxy_command is None


def test_a_wildcard_proxyjump_does_not_loop_through_the_jump_host_itself() -> None:
    config = parsed("Host bastion\n  HostName 10.9.9.9\nHost *\n  ProxyJump bastion\n")
    assert resolve_target(loaded("bastion", set()), config).jumps == ()
    assert [h.hostname for h in resolve_target(loaded("gpu", set()), config).jumps] == ["10.9.9.9"]


def test_proxycommand_applies_only_without_a_jump() -> None:
    config = parsed("Host *\n  ProxyCommand nc -X 5 -x proxy:1080 %h %p\n")
    assert resolve_target(loaded("gpu", set()), config).proxy_command == "nc -X 5 -x proxy:1080 gpu 22"
    inventory = loaded("gpu", {"jump_host"}, jump_host="gate")
    assert resolve_target(inventory, config).proxy_command is None


def test_identities_only_turns_the_agent_off(keys: Path) -> None:
    config = parsed(f"Host gpu\n  IdentityFile {keys}/lab_key\n  IdentitiesOnly yes\n")
    target = resolve_target(loaded("gpu", set()), config)
    assert target.identity_files == (f"{keys}/lab_key",) and not target.use_agent


def test_files_are_read_in_order_first_value_wins_and_missing_ones_are_skipped(tmp_path: Path) -> None:
    user, system = tmp_path / "config", tmp_path / "ssh_config"
    user.write_text("Host gpu\n  Port 2201\n")
    system.write_text("Host *\n  Port 2299\n  User sys\n")
    config = load_ssh_config([str(user), str(tmp_path / "absent"), str(system)])
    target = resolve_target(loaded("gpu", set()), config)
    assert (target.port, target.user) == (2201, "sys")


def test_a_bad_port_in_ssh_config_is_an_error_with_a_hint() -> None:
    with pytest.raises(TransportError, match="port 'ssh'"):
        resolve_target(loaded("gpu", set()), parsed("Host gpu\n  Port ssh\n"))


def test_http_reaches_an_aliased_host_at_its_ssh_config_hostname(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An inventory naming a host by its ssh_config alias: health checks, status and bench go to HostName."""
    from vllmctl.transport.target import http_address

    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "config").write_text("Host gpu-07-alias\n  HostName 10.2.0.7\n  ProxyJump bastion\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    # the parsed ssh_config is shared per version of the file: a new file is read again
    assert http_address(host("gpu-07", "gpu-07-alias")) == "10.2.0.7"
    assert http_address(host("gpu-08", "10.2.0.8")) == "10.2.0.8"
