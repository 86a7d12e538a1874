"""The host lock's owner line, written and read back: who holds it (`user@host pid=N`, for people) and the
controller's boot id and command, which let a later run on the same controller tell a dead owner (stale)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

_HEAD = re.compile(r"^(?P<user>[^@\s]+)@(?P<host>\S+) pid=(?P<pid>\d+)(?P<rest>.*)$")


@dataclass(frozen=True)
class Owner:
    user: str
    host: str
    pid: int
    since: str = ""
    boot: str = ""  # empty on an owner line written before the boot id was recorded: never judged stale
    command: str = ""


@dataclass(frozen=True)
class Controller:
    """The machine a run is started on, as far as a lock can tell: its host name and this boot's id."""

    host: str
    boot: str


def format_owner(owner: Owner) -> str:
    words = [f"{owner.user}@{owner.host} pid={owner.pid}"]
    words += [f"{key}={value}" for key, value in _fields(owner) if value]
    return " ".join(words)


def _fields(owner: Owner) -> tuple[tuple[str, str], ...]:
    return (("since", owner.since), ("boot", owner.boot), ("cmd", owner.command))


def parse_owner(line: str) -> Owner | None:
    """The owner a lock names, or None when the line is not one vllmctl wrote (then the lock is held)."""
    match = _HEAD.match(line.strip())
    if match is None:
        return None
    pairs = dict(word.split("=", 1) for word in match["rest"].split() if "=" in word)
    return Owner(
        match["user"],
        match["host"],
        int(match["pid"]),
        pairs.get("since", ""),
        pairs.get("boot", ""),
        pairs.get("cmd", ""),
    )


def is_stale(line: str, here: Controller, alive: Callable[[int], bool]) -> bool:
    """Stale only when this controller wrote it in this boot and its process is gone; anything else (another
    controller, another boot, an old-format or unreadable owner, a live process) holds."""
    owner = parse_owner(line)
    if owner is None or not owner.boot or not here.boot:
        return False
    return owner.host == here.host and owner.boot == here.boot and not alive(owner.pid)
