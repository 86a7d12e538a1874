"""Transport without a network: error hints, sudo and timeout wrapping, trust-on-first-use records, the
host-key policy Fabric's connections get, and Result's own failure wording."""

from __future__ import annotations

import shlex
import socket
import threading
from pathlib import Path

import paramiko
import pytest
from executor_builders import host

from vllmctl.errors import TransportError
from vllmctl.transport import GroupResult, Result, SshTransport, resolve_target
from vllmctl.transport.connection import _RecordingPolicy, connect_error, connection_chain

NO_SSH_CONFIG: tuple[str, ...] = ()


def test_host_key_mismatch_hint_names_the_exact_ssh_keygen_command() -> None:
    good, bad = paramiko.ECDSAKey.generate(), paramiko.ECDSAKey.generate()
    target = resolve_target(
        host("gpu-1", "10.0.0.9", known_hosts="/k/known_hosts", port=2222), paramiko.SSHConfig()
    )
    error = connect_error(target, paramiko.BadHostKeyException("[10.0.0.9]:2222", bad, good))
    assert "host key mismatch" in error.message
    assert "ssh-keygen -f /k/known_hosts -R '[10.0.0.9]:2222'" in error.hint


def test_unknown_host_key_suggests_keyscan_or_explicit_trust_on_first_use() -> None:
    target = resolve_target(host("gpu-1", "10.0.0.9", known_hosts="/k/kh"), paramiko.SSHConfig())
    error = connect_error(target, paramiko.SSHException("Server '10.0.0.9' not found in known_hosts"))
    assert "host key unknown" in error.message
    assert "ssh-keyscan -p 22 10.0.0.9 >> /k/kh" in error.hint and "strict_host_keys: false" in error.hint


def test_an_unknown_jump_host_key_names_the_jump_host() -> None:
    target = resolve_target(host("gpu-1", "10.0.0.9", jump_host="ops@bastion:2200"), paramiko.SSHConfig())
    error = connect_error(target, paramiko.SSHException("Server '[bastion]:2200' not found in known_hosts"))
    assert "via ops@bastion:2200" in error.message and "[bastion]:2200" in error.message
    assert "ssh-keyscan -p 2200 bastion >> ~/.ssh/known_hosts" in error.hint


@pytest.mark.parametrize(
    ("exc", "words"),
    [
        (TimeoutError("timed out"), "unreachable (no answer within 10s)"),
        (ConnectionRefusedError(111, "refused"), "unreachable"),
        (paramiko.AuthenticationException("denied"), "authentication failed"),
        (paramiko.ChannelException(2, "Connect failed"), "unreachable from the jump host (Connect failed"),
    ],
)
def test_connect_errors_say_what_went_wrong(exc: Exception, words: str) -> None:
    error = connect_error(resolve_target(host("gpu-1"), paramiko.SSHConfig()), exc)
    assert words in error.message and error.hint
    assert error.message.startswith("gpu-1 (ops@10.0.0.1:22)")


def test_sshd_closing_mid_handshake_is_unreachable_not_a_crash() -> None:
    """What a dying or restarting sshd does: it sends its banner and closes. paramiko raises a bare EOFError
    for this, which once escaped apply as an internal error instead of an unreachable host."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def banner_then_close() -> None:
        peer, _ = listener.accept()
        with peer:
            peer.sendall(b"SSH-2.0-OpenSSH_9.2p1\r\n")
            peer.recv(256)

    server = threading.Thread(target=banner_then_close, daemon=True)
    server.start()
    transport = SshTransport(host("gpu-1", "127.0.0.1", port=port), ssh_config=NO_SSH_CONFIG)
    with pytest.raises(TransportError, match="closed during the SSH handshake"):
        transport.connect()
    server.join(timeout=10)
    listener.close()


def test_commands_run_through_sudo_and_a_remote_timeout() -> None:
    transport = SshTransport(host("gpu-1"), ssh_config=NO_SSH_CONFIG)
    wrapped = transport._wrap("echo 'a b'", sudo=True, timeout=5)
    words = shlex.split(wrapped)
    # sudo runs `timeout` directly: no shell between them
    assert words[:9] == ["sudo", "-n", "--", "timeout", "-k", "5", "5", "sh", "-c"] and len(words) == 10
    assert shlex.split(words[9]) == ["echo", "a b"]
    assert shlex.split(transport._wrap("echo 'a b'", sudo=True, timeout=None)) == [
        "sudo", "-n", "--", "sh", "-c", "echo 'a b'"
    ]  # fmt: skip
    assert transport._wrap("true", sudo=False, timeout=None) == "true"


def test_root_needs_no_sudo() -> None:
    target = host("gpu-1")
    root = SshTransport(
        type(target)(**{**target.__dict__, "ssh": type(target.ssh)(user="root")}), ssh_config=NO_SSH_CONFIG
    )
    assert root._wrap("true", sudo=True, timeout=None) == "true"


def test_root_from_ssh_config_needs_no_sudo_either(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("Host 10.0.0.1\n  User root\n")
    target = host("gpu-1")
    unset = type(target)(**{**target.__dict__, "ssh": type(target.ssh)(given=frozenset())})
    assert SshTransport(unset, ssh_config=[str(config)])._wrap("true", sudo=True, timeout=None) == "true"


def test_trust_on_first_use_records_the_key(tmp_path: Path) -> None:
    known = tmp_path / "ssh" / "known_hosts"
    key = paramiko.ECDSAKey.generate()
    client = paramiko.SSHClient()
    _RecordingPolicy(str(known)).missing_host_key(client, "[10.0.0.9]:2222", key)
    assert known.read_text() == f"[10.0.0.9]:2222 {key.get_name()} {key.get_base64()}\n"
    assert client.get_host_keys().lookup("[10.0.0.9]:2222") is not None


# --- Fabric's connections carry vllmctl's host-key policy, never its AutoAddPolicy -------------------------


def _policy(connection: object) -> paramiko.MissingHostKeyPolicy:
    return connection.client._policy  # type: ignore[attr-defined,no-any-return]


def test_every_connection_in_a_chain_rejects_unknown_keys_and_knows_the_inventory_file(
    tmp_path: Path,
) -> None:
    key = paramiko.ECDSAKey.generate()
    known = tmp_path / "known_hosts"
    known.write_text(f"bastion {key.get_name()} {key.get_base64()}\n")
    target = resolve_target(
        host("gpu-1", "10.0.0.9", known_hosts=str(known), jump_host="bastion"), paramiko.SSHConfig()
    )
    chain = connection_chain(target)
    assert [c.host for c in chain] == ["bastion", "10.0.0.9"]
    assert chain[1].gateway is chain[0] and chain[0].gateway is False
    for connection in chain:
        assert isinstance(_policy(connection), paramiko.RejectPolicy)
        assert connection.client.get_host_keys().lookup("bastion") is not None
        assert connection.forward_agent is False


def test_record_on_first_use_only_when_the_inventory_opts_in(tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    target = resolve_target(
        host("gpu-1", known_hosts=str(known), strict_host_keys=False, jump_host="bastion"),
        paramiko.SSHConfig(),
    )
    policies = [_policy(c) for c in connection_chain(target)]
    assert all(isinstance(p, _RecordingPolicy) and p.known_hosts == str(known) for p in policies)


def test_ssh_config_cannot_loosen_host_key_checking(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("Host *\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n")
    transport = SshTransport(host("gpu-1", known_hosts=str(tmp_path / "kh")), ssh_config=[str(config)])
    [connection] = connection_chain(transport.target)
    assert isinstance(_policy(connection), paramiko.RejectPolicy)


def test_connect_kwargs_carry_the_deadline_and_the_key_only() -> None:
    target = resolve_target(host("gpu-1", identity_file="/k/id", connect_timeout_s=2.5), paramiko.SSHConfig())
    [connection] = connection_chain(target)
    assert connection.connect_timeout is None  # Fabric would int() it: 2.5 s goes to paramiko as it is
    assert connection.connect_kwargs == {
        "timeout": 2.5,
        "banner_timeout": 2.5,
        "auth_timeout": 2.5,
        "allow_agent": False,
        "look_for_keys": False,
        "key_filename": ["/k/id"],
    }


# --- Result words its own failure ---------------------------------------------------------------------------


def test_a_failed_result_names_host_command_exit_and_stderr_tail() -> None:
    result = Result(
        "", "E: Unable to locate package nope\n", 100, command="apt-get install -y nope", host="gpu-1"
    )
    assert result.failed and not result.ok and result.return_code == 100
    assert (
        result.failure()
        == "gpu-1: `apt-get install -y nope` failed (exit 100): E: Unable to locate package nope"
    )
    assert result.failure("installing packages").startswith("gpu-1: installing packages failed (exit 100): ")
    error = result.error("installing packages")
    assert (error.message, error.hint) == (
        "gpu-1: installing packages failed (exit 100)",
        "stderr: E: Unable to locate package nope",
    )


def test_failure_text_is_short_redacted_and_says_timed_out() -> None:
    script = "pip install --index-url https://u:secret@idx/simple vllm\n" + "echo more\n" * 40
    result = Result("x" * 3000, "", 124, True, script, "gpu-2")
    text = result.failure(limit=100)
    assert text.startswith(
        "gpu-2: `pip install --index-url https://***@idx/simple vllm…` timed out (exit 124): "
    )
    assert "secret" not in text and text.endswith("x" * 100) and "x" * 101 not in text
    assert Result("", "", 0, command="true").failure() == ""
    assert Result("", "", 1).error().hint == "stderr: (none)"


def test_group_result_says_which_hosts_failed() -> None:
    group = GroupResult(a=Result("", "", 0, host="a"), b=Result("", "boom", 2, host="b"))
    assert list(group.failed) == ["b"] and list(group.succeeded) == ["a"] and not group.ok
