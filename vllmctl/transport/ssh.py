"""`SshTransport`: one Fabric connection per host, opened lazily and reused; deadlines, sudo, argv quoted by
`quoting.shell_join`, uploads through stdin or SFTP with an atomic rename, errors with hints."""

from __future__ import annotations

import os
import re
import select
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import paramiko

from vllmctl.errors import TransportError
from vllmctl.inventory.model import Host
from vllmctl.paths import incoming_dir, push_partial
from vllmctl.render.quoting import host_path, shell_join, shell_resolves_under, shell_word
from vllmctl.transport.connection import connect_error, connection_chain
from vllmctl.transport.result import Result
from vllmctl.transport.target import SSH_CONFIG_FILES, SshTarget, resolve_target, shared_ssh_config

SHA256 = re.compile(r"[0-9a-f]{64}")
CHUNK = 1 << 20
STALE_PARTIAL_MIN = 24 * 60  # a partial push of a file no run has asked for in a day is removed
QUIET_AFTER_EXIT_S = 2.0  # the output still arriving after the exit status: no new byte this long ends it


class SshTransport:
    """One SSH connection to one host (through its jump hosts), opened lazily and reused for every command
    of a run. `ssh_config` lists the ssh_config files to merge with the inventory (default: the user's and
    the system's, as OpenSSH reads them)."""

    def __init__(self, host: Host, ssh_config: Sequence[str] = SSH_CONFIG_FILES) -> None:
        self.host = host
        self._ssh_config = tuple(ssh_config)
        self._target: SshTarget | None = None
        self._chain: list[Any] = []  # fabric.Connection objects: jump hosts first, the host last

    @property
    def target(self) -> SshTarget:
        """The inventory merged with ssh_config, read once (on first use, so errors come from connect)."""
        if self._target is None:
            self._target = resolve_target(self.host, shared_ssh_config(self._ssh_config))
        return self._target

    def connect(self) -> Any:
        """The open fabric.Connection to the host; a dropped one is replaced by a fresh one."""
        if self._chain:
            transport = self._chain[-1].client.get_transport()
            if transport is not None and transport.is_active():
                return self._chain[-1]
            self.close()  # the connection dropped: the next command gets a fresh one
        target = self.target
        try:
            self._chain = connection_chain(target)
            for connection in self._chain:  # jump hosts first, each through the one before
                connection.open()
                # the next hop's direct-tcpip channel waits this long, not paramiko's default hour
                connection.transport.channel_timeout = target.connect_timeout_s
        # paramiko re-raises its reader thread's EOFError when sshd closes the connection mid-handshake
        except (paramiko.SSHException, OSError, EOFError) as exc:
            self.close()
            raise connect_error(target, exc) from exc
        return self._chain[-1]

    def host_key(self) -> tuple[str, str]:
        """(type, base64) of the host key this connection verified: what a peer checks in a fan-out."""
        transport = self._client().get_transport()
        if transport is None:
            raise TransportError(f"{self.host.name}: connection lost", "check the host and run again")
        key = transport.get_remote_server_key()
        return key.get_name(), key.get_base64()

    def _client(self) -> paramiko.SSHClient:
        client: paramiko.SSHClient = self.connect().client
        return client

    def _wrap(self, command: str, sudo: bool, timeout: float | None) -> str:
        as_root = sudo and self.host.ssh.sudo and self.target.user != "root"
        if timeout is not None:
            # the remote side kills the command too, so a hung process does not outlive its deadline; sudo
            # runs `timeout` itself, not a shell around it (one process fewer per command on every host)
            command = f"timeout -k 5 {max(1, int(timeout))} sh -c {shell_word(command)}"
            return f"sudo -n -- {command}" if as_root else command
        return f"sudo -n -- sh -c {shell_word(command)}" if as_root else command

    def run(
        self,
        cmd: list[str] | tuple[str, ...] | str,
        sudo: bool = False,
        timeout: float | None = None,
        stdin: bytes | None = None,
    ) -> Result:
        """Run a command; argv lists are quoted word by word. Secrets go in `stdin`, never in `cmd`."""
        command = cmd if isinstance(cmd, str) else shell_join(cmd)
        transport = self._client().get_transport()
        if transport is None or not transport.is_active():
            raise TransportError(f"{self.host.name}: connection lost", "check the host and run again")
        try:
            channel = transport.open_session(timeout=self.host.ssh.connect_timeout_s)
            channel.exec_command(self._wrap(command, sudo, timeout))
            if stdin is not None:
                channel.sendall(stdin)
            channel.shutdown_write()
            out, err, code, timed_out = _collect(channel, timeout)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise TransportError(
                f"{self.host.name}: connection lost while running a command ({exc or type(exc).__name__})",
                "check that sshd still runs on the host and apply again: it converges from where it left off",
            ) from exc
        return Result(out, err, code, timed_out, command, self.host.name)

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
        `root`, only where `path`'s directory resolves on the host inside it. The file arrives under its
        sha256, so a push cut off (connection lost, disk full) resumes from the bytes already there; a
        partial whose sum does not match once complete is removed, and the next push starts over. stdout
        says how many bytes were sent and from which offset."""
        host_path(path)
        if not SHA256.fullmatch(sha256):
            raise TransportError(
                f"not pushing {source}: {sha256!r} is not a sha256", "a vllmctl bug: report it"
            )
        user = self.target.user
        incoming, sent = incoming_dir(user), push_partial(user, sha256)
        q = shell_word
        prepare = (
            f"install -d -m 0700 -o {q(user)} {q(incoming)} && find {q(incoming)} -maxdepth 1 -name '*.part' "
            f"! -name {q(sha256 + '.part')} -mmin +{STALE_PARTIAL_MIN} -delete"
        )
        prepared = self.run(prepare, sudo=True, timeout=30)
        if not prepared.ok:
            return prepared
        resumed, size = self._send(source, sent, timeout)
        refusal = q(f"not writing {path}: it resolves outside {root}")
        confine = f"{shell_resolves_under(path, root)} || {{ echo {refusal} >&2; exit 1; }}; " if root else ""
        mismatch = q(f"sha256 mismatch after sending {source}: the partial copy was removed")
        script = (
            f"set -e; trap 'rm -f {q(sent)}' EXIT; {confine}"
            f"echo {q(sha256 + '  ' + sent)} | sha256sum --check --quiet --status - "
            f"|| {{ echo {mismatch} >&2; exit 1; }}; "
            f'tmp=$(mktemp {q(os.path.dirname(path) or ".")}/.vllmctl-push.XXXXXX); mv -f {q(sent)} "$tmp"; '
            f'chmod {q(mode)} "$tmp"; chown {q(owner + ":" + group)} "$tmp"; mv -f "$tmp" {q(path)}'
        )
        moved = self.run(script, sudo=True, timeout=timeout)
        said = f"sent {size - resumed} of {size} bytes" + (f", resumed at byte {resumed}" if resumed else "")
        return replace(moved, stdout=said + "\n" + moved.stdout)

    def _send(self, source: str, sent: str, timeout: float | None) -> tuple[int, int]:
        """Writes `source` to `sent` from the size `sent` already has: (bytes already there, file size)."""
        try:
            size = os.path.getsize(source)
            sftp = self._client().open_sftp()
            try:
                sftp.get_channel().settimeout(timeout)  # type: ignore[union-attr]
                try:
                    have = sftp.stat(sent).st_size or 0
                except FileNotFoundError:
                    have = 0
                have = have if have <= size else 0
                with open(source, "rb") as local, sftp.open(sent, "r+b" if have else "wb") as remote:
                    local.seek(have)
                    remote.seek(have)
                    remote.set_pipelined(True)
                    while chunk := local.read(CHUNK):
                        remote.write(chunk)
                return have, size
            finally:
                sftp.close()
        except OSError as exc:
            if isinstance(exc, FileNotFoundError):
                raise TransportError(
                    f"cannot read {source}: {exc.strerror}", "check the model's source path"
                ) from exc
            raise TransportError(
                f"{self.host.name}: sending {source} failed ({exc})",
                "check the host's free disk and apply again: the push resumes from the bytes already sent",
            ) from exc
        except (paramiko.SSHException, EOFError) as exc:  # SFTP reads EOF when the connection drops
            raise TransportError(
                f"{self.host.name}: connection lost while sending {source} ({exc or type(exc).__name__})",
                "apply again: it converges from where it left off, the file from the bytes already sent",
            ) from exc

    def close(self) -> None:
        """Closes the host's connection and its jump hosts' (Fabric leaves gateways open)."""
        for connection in reversed(self._chain):
            connection.client.close()
        self._chain = []


def _collect(channel: paramiko.Channel, timeout: float | None) -> tuple[str, str, int, bool]:
    # a local deadline a little after the remote `timeout`, in case the remote side hangs entirely
    deadline = None if timeout is None else time.monotonic() + timeout + 10
    out, err = bytearray(), bytearray()
    last_data = time.monotonic()
    while True:
        if channel.recv_ready():
            out += channel.recv(65536)
            last_data = time.monotonic()
        elif channel.recv_stderr_ready():
            err += channel.recv_stderr(65536)
            last_data = time.monotonic()
        elif channel.closed or (channel.eof_received and channel.exit_status_ready()):
            break
        elif deadline is not None and time.monotonic() > deadline:
            channel.close()
            return out.decode(errors="replace"), err.decode(errors="replace"), -1, True
        elif channel.eof_received:
            # the output is complete and the exit status follows; paramiko keeps the channel's pipe readable
            # forever after EOF, so a select here would spin (one host spun ~1,000 times, starving the rest)
            channel.status_event.wait(0.5)
        elif channel.exit_status_ready():
            # sshd may send the exit status before the last of the output (the rest waits on the channel's
            # window): read on to EOF, unless nothing arrives for a while, as when a process the command left
            # in the background holds its output open and EOF never comes
            if time.monotonic() - last_data > QUIET_AFTER_EXIT_S:
                break
            select.select([channel], [], [], 0.2)
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
    return out.decode(errors="replace"), err.decode(errors="replace"), code, code == 124
