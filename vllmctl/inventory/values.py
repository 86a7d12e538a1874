"""Checks on single values that reach hosts: addresses, SSH users, jump hosts and host folders.

Each returns a Finding (message and hint) or None; native and Ansible-imported values meet the same ones.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
from dataclasses import dataclass

from vllmctl.inventory.positions import escape_text
from vllmctl.paths import LIB_DIR, OPT_DIR


@dataclass(frozen=True)
class Finding:
    message: str
    hint: str


ADDRESS_HINT = (
    "an address is a DNS name (letters, digits, '-', '_' and '.'), an IPv4 address, or an IPv6 address "
    "(bare or in [brackets])"
)
_LABEL = re.compile(r"^(?!-)[A-Za-z0-9_-]{1,63}(?<!-)$")
_ZONE = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")  # an IPv6 zone is an interface name
USER = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}$")  # POSIX portable user names, as useradd takes them
USER_HINT = "a user name is letters, digits, '_', '.' and '-', starts with a letter or '_', at most 32 long"


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        found = ipaddress.ip_address(text)
    except ValueError:
        return None
    zone = found.scope_id if isinstance(found, ipaddress.IPv6Address) else None
    return None if zone is not None and not _ZONE.match(zone) else found


def _shown(text: str) -> str:
    return escape_text(text if len(text) <= 60 else text[:57] + "...")


def address_problem(text: str) -> Finding | None:
    """A host name (RFC 1123, underscores allowed), an IPv4 address or an IPv6 address (bare or bracketed)."""
    if text.startswith("-"):
        return Finding(
            f"address '{_shown(text)}' starts with '-': ssh would read it as an option", ADDRESS_HINT
        )
    if text.startswith("[") and text.endswith("]"):
        if isinstance(_ip(text[1:-1]), ipaddress.IPv6Address):
            return None
        return Finding(f"'{_shown(text)}' in brackets is not an IPv6 address", ADDRESS_HINT)
    if _ip(text) is not None:
        return None
    name = text[:-1] if text.endswith(".") else text
    labels = name.split(".")
    if len(name) <= 253 and all(_LABEL.match(label) for label in labels):
        if all(label.isdigit() for label in labels):
            return Finding(
                f"'{_shown(text)}' is not a valid IPv4 address", "an IPv4 address is four numbers 0-255"
            )
        return None
    odd = next((char for char in text if not (char.isascii() and (char.isalnum() or char in "-_.:[]"))), None)
    why = f" (it contains {escape_text(repr(odd))})" if odd else ""
    return Finding(f"'{_shown(text)}' is not a host name, IPv4 or IPv6 address{why}", ADDRESS_HINT)


def address_key(text: str) -> str:
    """One spelling per address, to find two hosts that are the same machine."""
    bare = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    found = _ip(bare)
    return found.compressed if found is not None else bare.lower().rstrip(".")


def bare_address(text: str) -> str:
    """The address as connect() takes it: an IPv6 address without its brackets."""
    return text[1:-1] if text.startswith("[") and text.endswith("]") else text


def user_problem(text: str) -> Finding | None:
    if USER.match(text):
        return None
    return Finding(f"'{_shown(text)}' is not a valid user name", USER_HINT)


def jump_host_problem(text: str) -> Finding | None:
    """`[user@]host[:port]`, split the way the SSH transport splits it."""
    hint = "write the bastion as [user@]host[:port], e.g. ops@bastion.example.com:2222"
    user, at, rest = text.rpartition("@")
    if at and ":" in user:
        return Finding(
            "jump_host carries a password", "vllmctl uses keys only: drop ':password' and use identity_file"
        )
    if at and user_problem(user) is not None:
        return Finding(f"jump_host user '{_shown(user)}' is not a valid user name", USER_HINT)
    if rest.startswith("[") or rest.count(":") > 1:
        return Finding(
            "jump_host cannot be an IPv6 address yet", "give the bastion's DNS name or IPv4 address"
        )
    host, colon, port = rest.partition(":")
    if colon and not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        return Finding(f"jump_host port '{_shown(port)}' is not a number from 1 to 65535", hint)
    if not host:
        return Finding("jump_host names no host", hint)
    found = address_problem(host)
    return Finding(f"jump_host {found.message}", found.hint) if found else None


# Host directories a model may never be synced into: vllmctl runs as root there, re-modes the folder and
# deletes files it no longer lists. Trees are refused with everything below them; shared roots only as such.
SYSTEM_TREES = (
    "/etc", "/root", "/boot", "/proc", "/sys", "/dev", "/usr", "/bin", "/sbin", "/run", "/snap",
    "/lost+found", "/var/run", "/var/lock", "/var/log", "/var/spool", "/var/mail", "/var/backups",
    LIB_DIR, "/var/lib/dpkg", "/var/lib/apt", "/var/lib/systemd", "/var/cache/apt", OPT_DIR,
)  # fmt: skip
SHARED_ROOTS = {
    "/", "/home", "/opt", "/srv", "/mnt", "/media", "/tmp", "/var", "/var/tmp", "/var/lib", "/var/cache",
    "/var/opt", "/var/local", "/data",
}  # fmt: skip
PATH_HINT = "use a folder of its own for the model, e.g. /srv/models/NAME or /models/NAME"


def system_directory(path: str) -> str | None:
    """Why a normalized absolute path is a system directory, or None."""
    if path in SHARED_ROOTS:
        return f"{path} is a shared system directory"
    parts = path.split("/")
    if parts[1].startswith("lib"):
        return f"{path} is inside the system directory /{parts[1]}"
    for tree in SYSTEM_TREES:
        if path == tree or path.startswith(tree + "/"):
            return f"{path} is inside the system directory {tree}"
    if len(parts) == 3 and parts[1] == "home":
        return f"{path} is a whole home directory"
    if ".ssh" in parts:
        return f"{path} is inside an .ssh directory"
    return None


def host_path_problem(path: str) -> Finding | None:
    """A folder vllmctl writes on a host as root: absolute, normalized, no '..', not a system directory."""
    shown = _shown(path)
    if not path.startswith("/"):
        return Finding(f"'{shown}' is not an absolute path", PATH_HINT)
    parts = path.split("/")
    if ".." in parts or "." in parts:
        return Finding(
            f"'{shown}' has a '.' or '..' component", "write the folder's own path, without '.' or '..'"
        )
    normal = posixpath.normpath(path)
    if normal != path or path.startswith("//"):
        return Finding(
            f"'{shown}' is not a normalized path", f"write it as {_shown(normal.replace('//', '/'))}"
        )
    why = system_directory(path)
    return (
        Finding(f"refusing a model folder where the system lives: {escape_text(why)}", PATH_HINT)
        if why
        else None
    )
