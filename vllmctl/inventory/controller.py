"""Checks on the controller's own files that an inventory names: SSH keys, known_hosts, secret files, local
model folders and wheelhouses. The filesystem is passed in (LocalFiles is the only one that touches it), so
parsing stays pure and these checks run only when `validate` asks for them.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vllmctl.inventory.positions import FieldPath
from vllmctl.inventory.resolve import Checker, ControllerFiles, mapping
from vllmctl.inventory.values import bare_address, system_directory
from vllmctl.render.quoting import shell_word

if TYPE_CHECKING:
    from vllmctl.errors import Location

MAX_LISTED = 8  # addresses spelled out in one ssh-keyscan hint


@dataclass
class LocalFiles:
    """This machine's filesystem, as the controller sees it."""

    uid: int = os.getuid()

    def expand(self, path: str) -> str:
        return os.path.expanduser(path)

    def stat(self, path: str) -> os.stat_result | None:
        try:
            return os.stat(path)
        except OSError:
            return None

    def realpath(self, path: str) -> str:
        return os.path.realpath(path)


def _mode(found: os.stat_result) -> str:
    return f"{stat.S_IMODE(found.st_mode):04o}"


def check_controller(checker: Checker, files: ControllerFiles) -> None:
    missing_known: dict[tuple[Location, str], list[tuple[str, int]]] = {}
    for host, merged in checker.resolved.hosts.items():
        ssh = mapping(merged.get("ssh"))
        identity = ssh.get("identity_file")
        if isinstance(identity, str) and identity:
            _identity_file(checker, files, checker.where(host, ("ssh", "identity_file")), identity)
        known = ssh.get("known_hosts") or "~/.ssh/known_hosts"
        if isinstance(known, str) and ssh.get("strict_host_keys", True) is True:
            found = files.stat(files.expand(known))
            where = checker.where(host, ("ssh", "known_hosts"))
            if found is None:
                port = ssh.get("port", 22)  # a port of the wrong type is the schema's error, not this hint's
                address, port = str(merged.get("address")), port if isinstance(port, int) else 22
                missing_known.setdefault((where, known), []).append((bare_address(address), port))
            elif found.st_mode & stat.S_IWOTH:
                hint = f"chmod 644 {shell_word(files.expand(known))}"
                checker.add_at(
                    where, f"known_hosts {known} is writable by anyone (mode {_mode(found)})", hint
                )
        wheelhouse = mapping(merged.get("vars")).get("engine_wheelhouse")
        if isinstance(wheelhouse, str) and wheelhouse.startswith("/"):
            _pushed_folder(checker, files, checker.where(host, ("vars", "engine_wheelhouse")), wheelhouse)
    for (where, known), hosts in missing_known.items():
        checker.add_at(
            where, f"known_hosts {known} does not exist", _keyscan_hint(files.expand(known), hosts)
        )
    for name, body in mapping(checker.data.get("secrets")).items():
        path = mapping(body).get("file")
        if isinstance(path, str) and path:
            _secret_file(checker, files, checker.doc.location(("secrets", name, "file")), path)
    for name, body in mapping(checker.data.get("models")).items():
        for path, source in _pushed_sources(name, mapping(body)):
            _pushed_folder(checker, files, checker.doc.location(path), source)


def _pushed_sources(name: str, body: dict[str, Any]) -> list[tuple[FieldPath, str]]:
    """A model's local folders the hosts receive: its source, its adapters' and its draft's."""
    found: list[tuple[FieldPath, Any]] = [(("models", name, "source"), body.get("source"))]
    adapters = body.get("adapters")
    for index, adapter in enumerate(adapters if isinstance(adapters, list) else []):
        found.append((("models", name, "adapters", index, "source"), mapping(adapter).get("source")))
    found.append((("models", name, "speculative", "model"), mapping(body.get("speculative")).get("model")))
    return [(path, source) for path, source in found if isinstance(source, str) and source.startswith("/")]


def _keyscan_hint(known: str, hosts: list[tuple[str, int]]) -> str:
    by_port: dict[int, list[str]] = {}
    for address, port in hosts:
        if address not in by_port.setdefault(port, []):
            by_port[port].append(address)
    commands = []
    for port, addresses in by_port.items():
        listed = " ".join(shell_word(a) for a in addresses[:MAX_LISTED])
        more = f" (and {len(addresses) - MAX_LISTED} more hosts)" if len(addresses) > MAX_LISTED else ""
        commands.append(f"ssh-keyscan -p {port} {listed} >> {shell_word(known)}{more}")
    return "; ".join(commands) + ", then check the fingerprints with each host's owner"


def _identity_file(checker: Checker, files: ControllerFiles, where: Location, path: str) -> None:
    real = files.expand(path)
    found = files.stat(real)
    if found is None:
        hint = f"create it with `ssh-keygen -t ed25519 -f {shell_word(real)}`, or fix the path"
        checker.add_at(where, f"identity_file {path} does not exist", hint)
    elif found.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        message = (
            f"identity_file {path} is open to other users (mode {_mode(found)}); OpenSSH refuses such a key"
        )
        checker.add_at(where, message, f"chmod 600 {shell_word(real)}")


def _secret_file(checker: Checker, files: ControllerFiles, where: Location, path: str) -> None:
    real = files.expand(path)
    found = files.stat(real)
    if found is None:
        checker.add_at(where, f"secret file {path} does not exist", "create it (mode 600), or fix the path")
    elif found.st_mode & (stat.S_IROTH | stat.S_IWOTH):
        message = f"secret file {path} is readable or writable by anyone (mode {_mode(found)})"
        checker.add_at(where, message, f"chmod 600 {shell_word(real)}")


def _pushed_folder(checker: Checker, files: ControllerFiles, where: Location, path: str) -> None:
    """A controller folder whose files vllmctl pushes to every host as root: where it really is, and that
    nobody but its owner can change what is in it. A folder not on the controller is the host's own copy."""
    if files.stat(path) is None:
        return
    real = files.realpath(path)
    if real != path and (why := system_directory(real)) is not None:
        checker.add_at(where, f"{path} resolves to {real}: {why}", "point it at the model folder itself")
        return
    if (why := _writable_by_others(files, real)) is not None:
        checker.add_at(
            where, f"{path} can be changed by other users on the controller: {why}", why_hint(why, real)
        )


def why_hint(why: str, real: str) -> str:
    if why.startswith(real + " is world-writable"):
        return f"chmod o-w {shell_word(real)}"
    return "keep the folder under a directory only you (or root) can write, e.g. /srv/models"


def _writable_by_others(files: ControllerFiles, real: str) -> str | None:
    """Why someone else could replace what `real` holds: it, or a folder above it, is world-writable (a
    sticky folder like /tmp protects only entries owned by us or root)."""
    parts = [part for part in real.split("/") if part]
    chain = ["/" + "/".join(parts[:depth]) for depth in range(len(parts) + 1)]
    for depth, folder in enumerate(chain):
        found = files.stat(folder)
        if found is None or not found.st_mode & stat.S_IWOTH:
            continue
        if folder == real:
            return f"{real} is world-writable"
        if not found.st_mode & stat.S_ISVTX:
            return f"{folder} is world-writable"
        below = files.stat(chain[depth + 1])
        if below is not None and below.st_uid not in (0, files.uid):
            return f"{chain[depth + 1]} belongs to another user, inside the world-writable {folder}"
    return None
