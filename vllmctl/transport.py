"""SSH transport, the only module that imports paramiko: strict host keys, deadlines, one connection per
host, argv quoted by `quoting.shell_join`, uploads through stdin with an atomic rename, errors with hints."""

from __future__ import annotations

import os
import select
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import paramiko

from vllmctl.errors import TransportError
from vllmctl.inventory.model import Host
from vllmctl.render.quoting import host_path, shell_join, shell_resolves_under, shell_word

TAIL_CHARS = 2000


@dataclass(frozen=True)
class Result:
    stdout: str
    stderr: str
    exited: int
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.exited == 0 and not self.timed_out


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


def _known_hosts_name(address: str, port: int) -> str:
    return address if port == 22 else f"[{address}]:{port}"


def _connect_error(host: Host, exc: Exception) -> TransportError:
    ssh = host.ssh
    where = f"{host.name} ({ssh.user}@{host.address}:{ssh.port})"
    known = ssh.known_hosts or "~/.ssh/known_hosts"
    entry = _known_hosts_name(host.address, ssh.port)
    if isinstance(exc, paramiko.BadHostKeyException):
        return TransportError(
            f"{where}: host key mismatch (the host presented a different key than {known} holds)",
            f"if the host was reinstalled, run `ssh-keygen -f {known} -R '{entry}'` and add its new key; "
            "otherwise someone may be intercepting the connection",
        )
    if isinstance(exc, paramiko.AuthenticationException):
        return TransportError(
            f"{where}: authentication failed",
            f"check ssh.user and ssh.identity_file ({ssh.identity_file or 'agent/default keys'})",
        )
    if isinstance(exc, paramiko.SSHException) and "not found in known_hosts" in str(exc):
        return TransportError(
            f"{where}: host key unknown (not in {known})",
            f"add it with `ssh-keyscan -p {ssh.port} {host.address} >> {known}` after checking its "
            "fingerprint, or set ssh.strict_host_keys: false to record it on first use",
        )
    if isinstance(exc, socket.timeout | TimeoutError):
        return TransportError(
            f"{where}: unreachable (no answer within {ssh.connect_timeout_s:g}s)",
            "check the address, that the host is up and that sshd listens on that port",
        )
    if isinstance(exc, EOFError):
        return TransportError(
            f"{where}: unreachable (the connection closed during the SSH handshake)",
            "check that sshd runs and accepts connections (MaxStartups, a restart in progress)",
        )
    return TransportError(f"{where}: unreachable ({exc})", "check the address, the port and that sshd runs")


class SshTransport:
    """One SSH connection to one host, opened lazily and reused for every command of a run."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self._client: paramiko.SSHClient | None = None
        self._jump: paramiko.SSHClient | None = None

    def _new_client(self) -> paramiko.SSHClient:
        client = paramiko.SSHClient()
        known = self.host.ssh.known_hosts
        if known:
            if Path(known).expanduser().is_file():
                client.load_host_keys(str(Path(known).expanduser()))
        else:
            client.load_system_host_keys()
        strict = self.host.ssh.strict_host_keys
        record_to = known or os.path.expanduser("~/.ssh/known_hosts")
        client.set_missing_host_key_policy(paramiko.RejectPolicy() if strict else _RecordingPolicy(record_to))
        return client

    def _open_jump(self, timeout: float) -> socket.socket | paramiko.Channel | None:
        jump = self.host.ssh.jump_host
        if not jump:
            return None
        user, _, rest = jump.rpartition("@")
        address, _, port = rest.partition(":")
        self._jump = self._new_client()
        self._jump.connect(
            address,
            port=int(port or 22),
            username=user or self.host.ssh.user,
            key_filename=self.host.ssh.identity_file,
            timeout=timeout,
            banner_timeout=timeout,
            auth_timeout=timeout,
        )
        transport = self._jump.get_transport()
        assert transport is not None
        return transport.open_channel(
            "direct-tcpip", (self.host.address, self.host.ssh.port), ("127.0.0.1", 0)
        )

    def connect(self) -> paramiko.SSHClient:
        if self._client is not None:
            transport = self._client.get_transport()
            if transport is not None and transport.is_active():
                return self._client
            self.close()  # the connection dropped: the next command gets a fresh one
        ssh = self.host.ssh
        timeout = ssh.connect_timeout_s
        try:
            sock = self._open_jump(timeout)
            client = self._new_client()
            client.connect(
                self.host.address,
                port=ssh.port,
                username=ssh.user,
                key_filename=ssh.identity_file,
                timeout=timeout,
                banner_timeout=timeout,
                auth_timeout=timeout,
                sock=sock,
                allow_agent=ssh.identity_file is None,
                look_for_keys=ssh.identity_file is None,
            )
        # paramiko re-raises its reader thread's EOFError when sshd closes the connection mid-handshake
        except (paramiko.SSHException, OSError, EOFError) as exc:
            self.close()
            raise _connect_error(self.host, exc) from exc
        self._client = client
        return client

    def _wrap(self, command: str, sudo: bool, timeout: float | None) -> str:
        if timeout is not None:
            # the remote side kills the command too, so a hung process does not outlive its deadline
            command = f"timeout -k 5 {max(1, int(timeout))} sh -c {shell_word(command)}"
        if sudo and self.host.ssh.sudo and self.host.ssh.user != "root":
            command = f"sudo -n -- sh -c {shell_word(command)}"
        return command

    def run(
        self,
        cmd: list[str] | tuple[str, ...] | str,
        sudo: bool = False,
        timeout: float | None = None,
        stdin: bytes | None = None,
    ) -> Result:
        """Run a command; argv lists are quoted word by word. Secrets go in `stdin`, never in `cmd`."""
        command = cmd if isinstance(cmd, str) else shell_join(cmd)
        client = self.connect()
        transport = client.get_transport()
        if transport is None or not transport.is_active():
            raise TransportError(f"{self.host.name}: connection lost", "check the host and run again")
        try:
            channel = transport.open_session(timeout=self.host.ssh.connect_timeout_s)
            channel.exec_command(self._wrap(command, sudo, timeout))
            if stdin is not None:
                channel.sendall(stdin)
            channel.shutdown_write()
            return self._collect(channel, timeout)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise TransportError(
                f"{self.host.name}: connection lost while running a command ({exc or type(exc).__name__})",
                "check that sshd still runs on the host and apply again: it converges from where it left off",
            ) from exc

    def _collect(self, channel: paramiko.Channel, timeout: float | None) -> Result:
        # a local deadline a little after the remote `timeout`, in case the remote side hangs entirely
        deadline = None if timeout is None else time.monotonic() + timeout + 10
        out, err = bytearray(), bytearray()
        while True:
            if channel.recv_ready():
                out += channel.recv(65536)
            elif channel.recv_stderr_ready():
                err += channel.recv_stderr(65536)
            elif channel.exit_status_ready() or (channel.closed and channel.eof_received):
                break
            elif deadline is not None and time.monotonic() > deadline:
                channel.close()
                return Result(out.decode(errors="replace"), err.decode(errors="replace"), -1, True)
            else:
                select.select([channel], [], [], 0.5)
        while channel.recv_ready():
            out += channel.recv(65536)
        while channel.recv_stderr_ready():
            err += channel.recv_stderr(65536)
        # paramiko reports -1 when the channel closed without the server sending an exit status
        code = channel.recv_exit_status() if channel.exit_status_ready() else -1
        channel.close()
        if code == -1:
            raise EOFError("the channel closed without an exit status")
        return Result(out.decode(errors="replace"), err.decode(errors="replace"), code, code == 124)

    def put(
        self,
        content: bytes,
        path: str,
        mode: str = "0644",
        owner: str = "root",
        group: str = "root",
        sudo: bool = True,
        timeout: float | None = None,
    ) -> Result:
        """Write `content` (sent through stdin) to a temp name in the same directory, then rename it."""
        target = shell_word(host_path(path))
        script = (
            "set -e; umask 077; "
            f"tmp=$(mktemp {shell_word(os.path.dirname(path))}/.vllmctl-upload.XXXXXX); "
            'trap \'rm -f "$tmp"\' EXIT; cat > "$tmp"; '
            f'chmod {shell_word(mode)} "$tmp"; chown {shell_word(owner + ":" + group)} "$tmp"; '
            f'mv -f "$tmp" {target}; trap - EXIT'
        )
        return self.run(script, sudo=sudo, timeout=timeout, stdin=content)

    def put_file(
        self,
        source: str,
        path: str,
        sha256: str,
        mode: str = "0644",
        owner: str = "root",
        group: str = "root",
        timeout: float | None = None,
        root: str = "",
    ) -> Result:
        """Stream a local file over SFTP into a private incoming folder, check its sha256 on the host, then
        move it next to `path` and rename it into place (so a half-sent file is never seen there); with
        `root`, only where `path`'s directory resolves on the host inside it."""
        host_path(path)
        user = self.host.ssh.user
        incoming = f"/var/tmp/vllmctl-incoming-{user}"
        prepared = self.run(["install", "-d", "-m", "0700", "-o", user, incoming], sudo=True, timeout=30)
        if not prepared.ok:
            return prepared
        sent = f"{incoming}/{uuid.uuid4().hex}"
        try:
            sftp = self.connect().open_sftp()
            try:
                sftp.get_channel().settimeout(timeout)  # type: ignore[union-attr]
                sftp.put(source, sent)
            finally:
                sftp.close()
        except OSError as exc:
            if isinstance(exc, FileNotFoundError):
                raise TransportError(
                    f"cannot read {source}: {exc.strerror}", "check the model's source path"
                ) from exc
            raise TransportError(
                f"{self.host.name}: sending {source} failed ({exc})",
                "check the host's free disk and apply again",
            ) from exc
        except (paramiko.SSHException, EOFError) as exc:  # SFTP reads EOF when the connection drops
            raise TransportError(
                f"{self.host.name}: connection lost while sending {source} ({exc or type(exc).__name__})",
                "apply again: it converges from where it left off",
            ) from exc
        q = shell_word
        refusal = q(f"not writing {path}: it resolves outside {root}")
        confine = f"{shell_resolves_under(path, root)} || {{ echo {refusal} >&2; exit 1; }}; " if root else ""
        script = (
            f"set -e; trap 'rm -f {q(sent)}' EXIT; {confine}"
            f"echo {q(sha256 + '  ' + sent)} | sha256sum --check --quiet --status - "
            f"|| {{ echo {q('sha256 mismatch after sending ' + source)} >&2; exit 1; }}; "
            f'tmp=$(mktemp {q(os.path.dirname(path) or ".")}/.vllmctl-push.XXXXXX); mv -f {q(sent)} "$tmp"; '
            f'chmod {q(mode)} "$tmp"; chown {q(owner + ":" + group)} "$tmp"; mv -f "$tmp" {q(path)}'
        )
        return self.run(script, sudo=True, timeout=timeout)

    def close(self) -> None:
        for client in (self._client, self._jump):
            if client is not None:
                client.close()
        self._client = self._jump = None


def tail(text: str, limit: int = TAIL_CHARS) -> str:
    return text if len(text) <= limit else "…" + text[-limit:]
