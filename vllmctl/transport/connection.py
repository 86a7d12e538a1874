"""Fabric connections for one target (jump hosts first) with vllmctl's host-key policy in place of
Fabric's AutoAddPolicy: strict by default, record-on-first-use only as an opt-in; errors with hints.

What does not depend on the host is read once per run, not once per connection: a known_hosts file is parsed
once per version of the file (paramiko's own load is quadratic in its lines, so 64 hosts each loading a
64-line file cost more CPU than their SSH handshakes), private keys are loaded once, one Fabric config serves
every connection."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
from pathlib import Path
from typing import Any

import fabric
import paramiko

from vllmctl.errors import TransportError
from vllmctl.transport.target import SshTarget, known_hosts_name

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"

_cache_lock = threading.Lock()
_Stamp = tuple[int, int, int] | None
_known_hosts: dict[str, tuple[_Stamp, paramiko.HostKeys]] = {}
_private_keys: dict[str, tuple[_Stamp, paramiko.PKey | None]] = {}


def _stamp(path: str) -> _Stamp:
    """A file's version (mtime, size, inode), or None when it cannot be read: a changed file is read again."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return (found.st_mtime_ns, found.st_size, found.st_ino)


def _parsed_host_keys(path: str) -> paramiko.HostKeys:
    """The file's keys, parsed once per version of the file (the first thread parses, the others wait)."""
    stamp = _stamp(path)
    with _cache_lock:
        cached = _known_hosts.get(path)
        if cached is None or cached[0] != stamp:
            keys = paramiko.HostKeys()
            if stamp is not None:
                # unreadable: no keys known, so strict checking refuses the host, as before
                with contextlib.suppress(OSError):
                    keys.load(path)
            cached = _known_hosts[path] = (stamp, keys)
        return cached[1]


def _fill(into: paramiko.HostKeys, path: str) -> None:
    """`into` gets its own copy of the entries: a recording policy adds to it without touching the cache."""
    into._entries = list(_parsed_host_keys(path)._entries)  # type: ignore[attr-defined]


def private_key(path: str) -> paramiko.PKey | None:
    """The key at `path`, loaded once per version of the file; None leaves the file to paramiko (a key with
    a passphrase, a certificate beside it, a format it reads its own way), which reports it as before."""
    if os.path.exists(path + "-cert.pub"):
        return None
    stamp = _stamp(path)
    with _cache_lock:
        cached = _private_keys.get(path)
        if cached is None or cached[0] != stamp:
            try:
                key: paramiko.PKey | None = paramiko.PKey.from_path(path) if stamp is not None else None
            except Exception:  # any failure: paramiko tries the file itself and words it
                key = None
            cached = _private_keys[path] = (stamp, key)
        return cached[1]


def _config() -> fabric.Config:
    """A Fabric config of its own for each connection (0.2 ms): a Connection writes into the config it is
    given (`inline_ssh_env`), and each write re-merges it through an empty dict, so one shared by threads
    answered another thread's `Connection()` with "No attribute or config key found for 'timeouts'"."""
    return fabric.Config(ssh_config=paramiko.SSHConfig(), lazy=True)


class _RecordingPolicy(paramiko.MissingHostKeyPolicy):
    """Explicit opt-in trust-on-first-use: accept an unknown key and record it in the known_hosts file."""

    _lock = threading.Lock()

    def __init__(self, known_hosts: str) -> None:
        self.known_hosts = known_hosts

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        with self._lock:
            path = Path(self.known_hosts).expanduser()
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a") as handle:
                handle.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
        client.get_host_keys().add(hostname, key.get_name(), key)


def host_key_client(target: SshTarget) -> paramiko.SSHClient:
    """An SSHClient that knows the inventory's known_hosts (or the user's) and refuses unknown keys, or,
    with `strict_host_keys: false`, records them."""
    client = paramiko.SSHClient()
    known = target.known_hosts
    if known:
        _fill(client.get_host_keys(), str(Path(known).expanduser()))
    else:
        _fill(client._system_host_keys, os.path.expanduser(DEFAULT_KNOWN_HOSTS))  # type: ignore[attr-defined]
    record_to = os.path.expanduser(known or DEFAULT_KNOWN_HOSTS)
    strict = target.strict_host_keys
    client.set_missing_host_key_policy(paramiko.RejectPolicy() if strict else _RecordingPolicy(record_to))
    return client


def _connection(
    target: SshTarget, hostname: str, user: str, port: int, keys: tuple[str, ...], gateway: Any
) -> Any:
    """One fabric.Connection; every setting is already resolved, so Fabric reads no ssh_config of its own."""
    timeout = target.connect_timeout_s
    kwargs: dict[str, Any] = {
        "timeout": timeout,
        "banner_timeout": timeout,
        "auth_timeout": timeout,
        "allow_agent": target.use_agent,
        "look_for_keys": target.use_agent and not keys,
    }
    first = private_key(keys[0]) if keys else None
    if first is not None:  # loaded once per run; paramiko tries `pkey` first, then the files, as listed
        kwargs["pkey"] = first
        keys = keys[1:]
    if keys:
        kwargs["key_filename"] = list(keys)
    connection = fabric.Connection(
        hostname,
        user=user,
        port=port,
        config=_config(),
        gateway=gateway,
        forward_agent=False,
        connect_kwargs=kwargs,
    )
    connection.client = host_key_client(target)  # never Fabric's AutoAddPolicy
    return connection


def connection_chain(target: SshTarget) -> list[Any]:
    """The jump hosts' connections, outermost first, then the target's: each one the next one's gateway."""
    chain: list[Any] = []
    gateway: Any = target.proxy_command or False  # False: no gateway, not even one Fabric finds itself
    for hop in target.jumps:
        chain.append(_connection(target, hop.hostname, hop.user, hop.port, hop.identity_files, gateway))
        gateway = chain[-1]
    keys = target.identity_files
    chain.append(_connection(target, target.hostname, target.user, target.port, keys, gateway))
    return chain


def _key_entry(target: SshTarget, exc: Exception) -> str:
    """The known_hosts name of the host whose key was refused: the target, or a jump host."""
    if isinstance(exc, paramiko.BadHostKeyException):
        return str(exc.hostname)
    named = re.search(r"Server '(.+)' not found in known_hosts", str(exc))
    return named[1] if named else known_hosts_name(target.hostname, target.port)


def _keyscan(entry: str) -> str:
    bracketed = re.fullmatch(r"\[(.+)\]:(\d+)", entry)
    address, port = (bracketed[1], bracketed[2]) if bracketed else (entry, "22")
    return f"ssh-keyscan -p {port} {address}"


def connect_error(target: SshTarget, exc: Exception) -> TransportError:
    where = target.where
    known = target.known_hosts or DEFAULT_KNOWN_HOSTS
    if isinstance(exc, paramiko.BadHostKeyException):
        entry = _key_entry(target, exc)
        return TransportError(
            f"{where}: host key mismatch for {entry} (it presented a different key than {known} holds)",
            f"if the host was reinstalled, run `ssh-keygen -f {known} -R '{entry}'` and add its new key; "
            "otherwise someone may be intercepting the connection",
        )
    if isinstance(exc, paramiko.AuthenticationException):
        keys = ", ".join(target.identity_files) or "agent/default keys"
        return TransportError(
            f"{where}: authentication failed",
            f"check ssh.user and ssh.identity_file, or the User and IdentityFile in ~/.ssh/config ({keys})",
        )
    if isinstance(exc, paramiko.SSHException) and "not found in known_hosts" in str(exc):
        entry = _key_entry(target, exc)
        return TransportError(
            f"{where}: host key unknown for {entry} (not in {known})",
            f"add it with `{_keyscan(entry)} >> {known}` after checking its "
            "fingerprint, or set ssh.strict_host_keys: false to record it on first use",
        )
    if isinstance(exc, paramiko.ChannelException):
        return TransportError(
            f"{where}: unreachable from the jump host ({exc.text}, code {exc.code})",
            "check that the jump host can reach the address and port, and that it allows TCP forwarding",
        )
    if isinstance(exc, socket.timeout | TimeoutError):
        return TransportError(
            f"{where}: unreachable (no answer within {target.connect_timeout_s:g}s)",
            "check the address, that the host is up and that sshd listens on that port",
        )
    # a dying sshd closes (EOF) or, with our bytes still unread, resets: the same event to the user
    if isinstance(exc, EOFError | ConnectionResetError):
        return TransportError(
            f"{where}: unreachable (the connection closed during the SSH handshake)",
            "check that sshd runs and accepts connections (MaxStartups, a restart in progress)",
        )
    return TransportError(f"{where}: unreachable ({exc})", "check the address, the port and that sshd runs")
