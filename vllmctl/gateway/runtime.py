"""HAProxy's runtime API, pure: the commands that drain a server, set it ready and read `show stat`, sent
through `socat` to the admin socket, and the parser of what `show stat` answers."""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass

from vllmctl.ops.base import Command
from vllmctl.paths import HAPROXY_ADMIN_SOCKET, HAPROXY_FILES_DIR, HAPROXY_STATE_LOCK
from vllmctl.render.quoting import haproxy_word, shell_word

# Printed instead of an answer on a host where vllmctl has not set HAProxy up (yet): a first apply's engine
# hosts can reach their release before the gateway host has installed it.
NOT_SET_UP = "@@vllmctl-gateway-not-set-up"


def runtime_command(commands: Iterable[str], locked: bool = False) -> Command:
    """One admin-socket session running `commands` in order (HAProxy splits a line on `;`), or NOT_SET_UP
    where vllmctl's gateway files or socat are not there yet (its packages go in before its files).
    `locked`: under the state lock the config's reload holds (ops/gateway.py), so a state set never lands
    between the dump of the servers' states and the reload that reads it back (it would be lost)."""
    line = "; ".join(commands)
    socket = f"UNIX-CONNECT:{HAPROXY_ADMIN_SOCKET}"
    absent = f"[ -d {shell_word(HAPROXY_FILES_DIR)} ] && command -v socat >/dev/null"
    session = f"printf '%s\\n' {shell_word(line)} | socat -t 10 - {shell_word(socket)}"
    if locked:
        session = f"( flock -w 60 9 && {session} ) 9>{shell_word(HAPROXY_STATE_LOCK)}"
    return Command(shell=f"if {absent}; then {session}; else echo {NOT_SET_UP}; fi")


def set_state(refs: Iterable[str], state: str) -> Command:
    """`state` is `drain` (no new requests; those in flight finish) or `ready`."""
    assert state in ("drain", "ready", "maint")
    return runtime_command((f"set server {haproxy_word(ref)} state {state}" for ref in refs), locked=True)


SHOW_STAT = runtime_command(["show stat"])


@dataclass(frozen=True)
class ServerStat:
    """A server's row of `show stat`: status UP, DOWN, DRAIN, MAINT, `no check`, ...; sessions in flight."""

    backend: str
    name: str
    status: str
    sessions: int
    queued: int
    check: str = ""
    requests: int = 0  # HTTP requests it was sent since HAProxy started (`req_tot`)
    errors: int = 0  # 5xx responses and response errors since HAProxy started (`hrsp_5xx` + `eresp`)
    ttime_ms: int = 0  # average session time over about its last 1024 requests (`ttime`)
    downs: int = 0  # times its health checks took it from UP to DOWN (`chkdown`)

    @property
    def ref(self) -> str:
        return f"{self.backend}/{self.name}"

    def to_json(self) -> dict[str, object]:
        return {"status": self.status, "sessions": self.sessions, "queued": self.queued, "check": self.check}


def _int(text: str | None) -> int:
    return int(text) if text and text.isdigit() else 0


def parse_stat(output: str) -> dict[str, ServerStat]:
    """`backend/server` -> its row, for server rows only (not FRONTEND/BACKEND totals)."""
    text = output.lstrip()
    if text.startswith("# "):
        text = text[2:]
    found: dict[str, ServerStat] = {}
    for row in csv.DictReader(text.splitlines()):
        name = row.get("svname") or ""
        if not name or name in ("FRONTEND", "BACKEND") or row.get("type") not in (None, "2"):
            continue
        stat = ServerStat(
            row.get("pxname") or "",
            name,
            (row.get("status") or "").strip(),
            _int(row.get("scur")),
            _int(row.get("qcur")),
            (row.get("check_status") or "").strip(),
            _int(row.get("req_tot")),
            _int(row.get("hrsp_5xx")) + _int(row.get("eresp")),
            _int(row.get("ttime")),
            _int(row.get("chkdown")),
        )
        found[stat.ref] = stat
    return found
