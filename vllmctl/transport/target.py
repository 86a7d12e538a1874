"""Where and how a host is reached: its inventory `ssh` settings merged with the user's ssh_config
(`~/.ssh/config`, then `/etc/ssh/ssh_config`). Keys the inventory sets win, as ssh command-line options do."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import paramiko

from vllmctl.errors import TransportError
from vllmctl.inventory.model import Host

SSH_CONFIG_FILES = ("~/.ssh/config", "/etc/ssh/ssh_config")


@dataclass(frozen=True)
class Hop:
    """One jump host (ssh_config ProxyJump or the inventory's jump_host), resolved through ssh_config."""

    spec: str  # as written, for messages
    hostname: str
    user: str
    port: int
    identity_files: tuple[str, ...]


@dataclass(frozen=True)
class SshTarget:
    name: str  # the inventory host name
    alias: str  # the inventory address, the name looked up in ssh_config
    hostname: str
    user: str
    port: int
    identity_files: tuple[str, ...]
    use_agent: bool
    jumps: tuple[Hop, ...]  # outermost first
    proxy_command: str | None
    known_hosts: str | None
    strict_host_keys: bool
    connect_timeout_s: float

    @property
    def where(self) -> str:
        shown = self.alias if self.alias == self.hostname else f"{self.alias} = {self.hostname}"
        via = f" via {', '.join(hop.spec for hop in self.jumps)}" if self.jumps else ""
        return f"{self.name} ({self.user}@{shown}:{self.port}{via})"


def known_hosts_name(address: str, port: int) -> str:
    return address if port == 22 else f"[{address}]:{port}"


def load_ssh_config(paths: Sequence[str] = SSH_CONFIG_FILES) -> paramiko.SSHConfig:
    """The files in order, as OpenSSH and Fabric read them: for each key, the first value found wins."""
    config = paramiko.SSHConfig()
    for path in paths:
        expanded = os.path.expanduser(path)
        if not os.path.isfile(expanded):
            continue
        try:
            with open(expanded) as handle:
                config.parse(handle)
        except (OSError, UnicodeDecodeError, paramiko.SSHException) as exc:
            raise TransportError(
                f"cannot read the ssh_config {path} ({exc})", "fix or move that file"
            ) from exc
    return config


_configs: dict[tuple[tuple[str, int, int] | None, ...], paramiko.SSHConfig] = {}
_configs_lock = threading.Lock()


def _version(path: str) -> tuple[str, int, int] | None:
    try:
        found = os.stat(os.path.expanduser(path))
    except OSError:
        return None
    return (path, found.st_mtime_ns, found.st_size)


def shared_ssh_config(paths: Sequence[str] = SSH_CONFIG_FILES) -> paramiko.SSHConfig:
    """`load_ssh_config`, parsed once per run (per version of the files) for every host; lookups only read."""
    key = tuple(_version(path) for path in paths)
    with _configs_lock:
        if key not in _configs:
            _configs[key] = load_ssh_config(paths)
        return _configs[key]


def http_address(host: Host) -> str:
    """Where the controller reaches a host's engines over HTTP: ssh_config's `HostName` when the inventory
    names the host by an alias, else its address (a host behind a jump host must still be routable)."""
    return str(shared_ssh_config().lookup(host.address).get("hostname", host.address))


def _port(text: object, where: str) -> int:
    try:
        return int(str(text))
    except ValueError as exc:
        raise TransportError(f"ssh_config gives {where} the port '{text}'", "give a number") from exc


def _identities(found: paramiko.SSHConfigDict) -> tuple[str, ...]:
    """ssh_config IdentityFiles that exist (OpenSSH skips missing ones too; paramiko would stop on them)."""
    found_files: str | list[str] = found.get("identityfile", [])
    files = [found_files] if isinstance(found_files, str) else found_files
    return tuple(path for path in (os.path.expanduser(p) for p in files) if os.path.isfile(path))


def _hop(spec: str, config: paramiko.SSHConfig, user: str, identities: tuple[str, ...]) -> Hop:
    """`[user@]host[:port]` (or `ssh://...`); a part it leaves out comes from ssh_config, then from the
    target: the same user and keys as the host behind it, port 22."""
    text = spec.strip().removeprefix("ssh://")
    hop_user, _, rest = text.rpartition("@")
    name, colon, port = rest.rpartition(":") if rest.count(":") == 1 else (rest, "", "")
    found = config.lookup(name)
    own = _identities(found)
    return Hop(
        spec=spec.strip(),
        hostname=found.get("hostname", name),
        user=hop_user or found.get("user", user),
        port=_port(port, f"jump host {spec}") if colon else _port(found.get("port", 22), spec),
        identity_files=identities + tuple(path for path in own if path not in identities),
    )


def resolve_target(host: Host, config: paramiko.SSHConfig) -> SshTarget:
    """The inventory's `ssh` keys win where it sets them; ssh_config's HostName, User, Port, IdentityFile
    (IdentitiesOnly), ProxyJump and ProxyCommand fill in the rest; vllmctl's defaults come last."""
    ssh = host.ssh
    identities: tuple[str, ...]

    def given(key: str) -> bool:
        return ssh.given is None or key in ssh.given

    found = config.lookup(host.address)
    hostname = found.get("hostname", host.address)
    user = ssh.user if given("user") else found.get("user", ssh.user)
    port = ssh.port if given("port") else _port(found.get("port", ssh.port), host.address)
    if given("identity_file") and ssh.identity_file:
        identities, agent = (os.path.expanduser(ssh.identity_file),), False  # that key only, as always
    else:
        identities = _identities(found)
        agent = found.get("identitiesonly", "no").lower() != "yes"
    if given("jump_host") and ssh.jump_host:
        jump: str | None = ssh.jump_host
    else:
        jump = found.get("proxyjump")
    jump = None if jump is None or jump.lower() == "none" else jump
    hops = tuple(_hop(spec, config, user, identities) for spec in (jump or "").split(",") if spec.strip())
    # `Host *` with ProxyJump matches the jump host itself: it is reached directly, as Fabric does
    hops = tuple(hop for hop in hops if (hop.hostname, hop.port) != (hostname, port))
    command = None if jump else found.get("proxycommand")
    return SshTarget(
        name=host.name,
        alias=host.address,
        hostname=hostname,
        user=user,
        port=port,
        identity_files=identities,
        use_agent=agent,
        jumps=hops,
        proxy_command=None if command is None or command.lower() == "none" else command,
        known_hosts=ssh.known_hosts,
        strict_host_keys=ssh.strict_host_keys,
        connect_timeout_s=ssh.connect_timeout_s,
    )
