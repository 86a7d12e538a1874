"""The host lock as `history` and `status` show it: the one shell snippet that reads its owner line (used by
the `lock` fact and by the release listing, so both read it in the round trip they already make), and a
held lock described for people and for JSON: who holds it, since when, and how it gets broken."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from vllmctl.facts.base import Fact
from vllmctl.facts.lock_owner import Owner, parse_owner
from vllmctl.paths import LOCK_DIR
from vllmctl.render.quoting import shell_word

LOCK_MARK = "@@vllmctl-lock"


def lock_command(lock_dir: str = LOCK_DIR) -> str:
    """Prints `LOCK_MARK <owner line>` only while the lock is held; an unreadable owner prints the mark
    alone. It always exits 0, so it can lead a longer command."""
    where = shell_word(lock_dir)
    owner = f'"$(head -n 1 {where}/owner 2>/dev/null)"'
    return f"if [ -d {where} ]; then printf '{LOCK_MARK} %s\\n' {owner}; fi"


def is_lock_line(line: str) -> bool:
    return line == LOCK_MARK or line.startswith(f"{LOCK_MARK} ")


def lock_from_line(line: str) -> str:
    """The owner line a `lock_command` line carries ("" when the owner could not be read)."""
    return line[len(LOCK_MARK) :].strip()


def parse_lock(output: str, exit_code: int) -> str | None:
    """The held lock's owner line ("" when unreadable), or None when the host is not locked."""
    found = [lock_from_line(line) for line in output.splitlines() if is_lock_line(line)]
    return found[-1] if found else None


LOCK = Fact("lock", lambda args: lock_command(), parse_lock)


@dataclass(frozen=True)
class HeldLock:
    """A lock one host reported: its raw owner line, the owner read from it, and its age when known."""

    host: str
    line: str
    owner: Owner | None
    age_s: int | None

    def to_json(self) -> dict[str, Any]:
        owner = self.owner
        return {
            "owner": self.line,
            "user": owner.user if owner else None,
            "host": owner.host if owner else None,
            "pid": owner.pid if owner else None,
            "command": (owner.command or None) if owner else None,
            "since": (owner.since or None) if owner else None,
            "age_s": self.age_s,
        }

    def sentence(self) -> str:
        """One line: who holds it, for how long, and what breaks it if its run is gone."""
        owner = self.owner
        if owner is None:
            who = f"locked by {self.line}" if self.line else "locked (owner unreadable)"
        else:
            who = f"locked by {owner.user}@{owner.host} pid={owner.pid}"
            who += f" ({owner.command})" if owner.command else ""
        held = f"for {age_text(self.age_s)}" if self.age_s is not None else "(age unknown)"
        return f"{self.host}: {who} {held} — {_how_it_breaks(owner)}"


def _how_it_breaks(owner: Owner | None) -> str:
    # a run breaks a lock by itself only when its own controller wrote it in this boot (lock_owner.is_stale)
    if owner is None or not owner.boot:
        return "if that run is gone, run again with --break-lock"
    return (
        f"if that run is gone, the next run on {owner.host} breaks it "
        f"(from elsewhere, or after {owner.host} rebooted: --break-lock)"
    )


def held_lock(host: str, line: str, now: datetime | None) -> HeldLock:
    owner = parse_owner(line)
    return HeldLock(host, line.strip(), owner, lock_age_s(owner, now))


def lock_age_s(owner: Owner | None, now: datetime | None) -> int | None:
    """Seconds since the owner took the lock; None when it did not say when (or not in a form with a
    zone), or no `now` was given. The clock that wrote `since` may run ahead of `now`'s: the age is then 0,
    never negative."""
    if owner is None or not owner.since or now is None:
        return None
    try:
        since = datetime.fromisoformat(owner.since)
    except ValueError:
        return None
    if since.tzinfo is None or now.tzinfo is None:
        return None
    return max(0, int((now - since).total_seconds()))


def age_text(seconds: int) -> str:
    """Short and exact enough: 45s, 4m12s, 3h05m, 2d07h."""
    minutes, secs = divmod(seconds, 60)
    hours, mins = divmod(minutes, 60)
    days, hrs = divmod(hours, 24)
    if days:
        return f"{days}d{hrs:02d}h"
    if hours:
        return f"{hours}h{mins:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def held_locks(locks: Mapping[str, str | None], now: datetime | None) -> list[HeldLock]:
    """The held ones of per-host lock readings (None: not locked), in the order given."""
    return [held_lock(host, line, now) for host, line in locks.items() if line is not None]
