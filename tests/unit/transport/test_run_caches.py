"""What does not depend on the host is read once per run (#19): known_hosts parsed once per version of the
file, private keys loaded once, one parsed ssh_config; each client still gets its own copy of the keys."""

from __future__ import annotations

import os
from pathlib import Path

import paramiko
import pytest
from executor_builders import host

from vllmctl.transport import resolve_target
from vllmctl.transport.connection import _RecordingPolicy, connection_chain, private_key
from vllmctl.transport.target import shared_ssh_config


def _known(path: Path, *names: str) -> paramiko.PKey:
    key = paramiko.ECDSAKey.generate()
    path.write_text("".join(f"{name} {key.get_name()} {key.get_base64()}\n" for name in names))
    return key


def test_known_hosts_is_parsed_once_per_version_of_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    known = tmp_path / "known_hosts"
    _known(known, "10.0.0.1", "10.0.0.2")
    loads: list[str] = []
    real = paramiko.HostKeys.load
    monkeypatch.setattr(paramiko.HostKeys, "load", lambda self, f: (loads.append(f), real(self, f))[1])
    targets = [resolve_target(host(f"gpu-{i}", f"10.0.0.{i}", known_hosts=str(known)), paramiko.SSHConfig())
               for i in (1, 2)]  # fmt: skip
    clients = [connection_chain(target)[-1].client for target in targets]
    assert len(loads) == 1
    assert all(c.get_host_keys().lookup("10.0.0.2") is not None for c in clients)
    _known(known, "10.0.0.3")  # rewritten (another size): read again
    os.utime(known, ns=(1, 1))
    [connection] = connection_chain(targets[0])
    assert len(loads) == 2 and connection.client.get_host_keys().lookup("10.0.0.3") is not None


def test_a_recorded_key_stays_in_that_client(tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    _known(known, "10.0.0.1")
    target = resolve_target(
        host("gpu-1", known_hosts=str(known), strict_host_keys=False), paramiko.SSHConfig()
    )
    first, second = (connection_chain(target)[-1].client for _ in range(2))
    _RecordingPolicy(str(tmp_path / "other")).missing_host_key(
        first, "10.9.9.9", paramiko.ECDSAKey.generate()
    )
    assert first.get_host_keys().lookup("10.9.9.9") is not None
    assert second.get_host_keys().lookup("10.9.9.9") is None


def test_a_private_key_is_loaded_once_and_passed_as_pkey(tmp_path: Path) -> None:
    path = tmp_path / "id_ed"
    paramiko.ECDSAKey.generate().write_private_key_file(str(path))
    assert private_key(str(path)) is private_key(str(path)) is not None
    target = resolve_target(host("gpu-1", identity_file=str(path)), paramiko.SSHConfig())
    [connection] = connection_chain(target)
    assert connection.connect_kwargs["pkey"] is private_key(str(path))
    assert "key_filename" not in connection.connect_kwargs


def test_a_key_with_a_passphrase_or_a_certificate_is_left_to_paramiko(tmp_path: Path) -> None:
    locked = tmp_path / "id_locked"
    paramiko.ECDSAKey.generate().write_private_key_file(str(locked), password="secret")
    certified = tmp_path / "id_cert"
    paramiko.ECDSAKey.generate().write_private_key_file(str(certified))
    (tmp_path / "id_cert-cert.pub").write_text("")
    assert private_key(str(locked)) is None and private_key(str(certified)) is None
    target = resolve_target(host("gpu-1", identity_file=str(locked)), paramiko.SSHConfig())
    assert connection_chain(target)[-1].connect_kwargs["key_filename"] == [str(locked)]


def test_ssh_config_is_parsed_once_until_it_changes(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("Host a\n  User alice\n")
    first = shared_ssh_config([str(config)])
    assert shared_ssh_config([str(config)]) is first
    config.write_text("Host a\n  User bob-the-second\n")
    assert shared_ssh_config([str(config)]).lookup("a")["user"] == "bob-the-second"
