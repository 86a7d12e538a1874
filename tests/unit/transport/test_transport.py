"""Transport without a network: error hints, sudo and timeout wrapping, trust-on-first-use records."""

from __future__ import annotations

import shlex
import socket
import threading
from pathlib import Path

import paramiko
import pytest
from executor_builders import host

from vllmctl.errors import TransportError
from vllmctl.transport import SshTransport, _connect_error, _RecordingPolicy


def test_host_key_mismatch_hint_names_the_exact_ssh_keygen_command() -> None:
    good, bad = paramiko.ECDSAKey.generate(), paramiko.ECDSAKey.generate()
    target = host("gpu-1", "10.0.0.9", known_hosts="/k/known_hosts", port=2222)
    error = _connect_error(target, paramiko.BadHostKeyException("10.0.0.9", bad, good))
    assert "host key mismatch" in error.message
    assert "ssh-keygen -f /k/known_hosts -R '[10.0.0.9]:2222'" in error.hint


def test_unknown_host_key_suggests_keyscan_or_explicit_trust_on_first_use() -> None:
    target = host("gpu-1", "10.0.0.9", known_hosts="/k/kh")
    error = _connect_error(target, paramiko.SSHException("Server '10.0.0.9' not found in known_hosts"))
    assert "host key unknown" in error.message
    assert "ssh-keyscan -p 22 10.0.0.9 >> /k/kh" in error.hint and "strict_host_keys: false" in error.hint


@pytest.mark.parametrize(
    ("exc", "words"),
    [
        (TimeoutError("timed out"), "unreachable (no answer within 10s)"),
        (ConnectionRefusedError(111, "refused"), "unreachable"),
        (paramiko.AuthenticationException("denied"), "authentication failed"),
    ],
)
def test_connect_errors_say_what_went_wrong(exc: Exception, words: str) -> None:
    error = _connect_error(host("gpu-1"), exc)
    assert words in error.message and error.hint


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
    transport = SshTransport(host("gpu-1", "127.0.0.1", port=port))
    with pytest.raises(TransportError, match="closed during the SSH handshake"):
        transport.connect()
    server.join(timeout=10)
    listener.close()


def test_commands_run_through_sudo_and_a_remote_timeout() -> None:
    transport = SshTransport(host("gpu-1"))
    wrapped = transport._wrap("echo 'a b'", sudo=True, timeout=5)
    sudo = shlex.split(wrapped)
    assert sudo[:5] == ["sudo", "-n", "--", "sh", "-c"]
    timeout = shlex.split(sudo[5])
    assert timeout[:6] == ["timeout", "-k", "5", "5", "sh", "-c"]
    assert shlex.split(timeout[6]) == ["echo", "a b"]
    assert transport._wrap("true", sudo=False, timeout=None) == "true"


def test_root_needs_no_sudo() -> None:
    target = host("gpu-1")
    root = SshTransport(type(target)(**{**target.__dict__, "ssh": type(target.ssh)(user="root")}))
    assert root._wrap("true", sudo=True, timeout=None) == "true"


def test_trust_on_first_use_records_the_key(tmp_path: Path) -> None:
    known = tmp_path / "ssh" / "known_hosts"
    key = paramiko.ECDSAKey.generate()
    client = paramiko.SSHClient()
    _RecordingPolicy(str(known)).missing_host_key(client, "[10.0.0.9]:2222", key)
    assert known.read_text() == f"[10.0.0.9]:2222 {key.get_name()} {key.get_base64()}\n"
    assert client.get_host_keys().lookup("[10.0.0.9]:2222") is not None
