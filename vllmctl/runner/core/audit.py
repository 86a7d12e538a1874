"""The controller's own record of what it did: who runs (the owner every host lock and audit line names)
and the local audit log, one JSON line per run."""

from __future__ import annotations

import getpass
import json
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vllmctl.facts.lock_owner import Controller, Owner, format_owner

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def lock_owner(now_iso: str, command: str = "apply") -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # a container user with no passwd entry and no $USER
        user = f"uid{os.getuid()}"
    here = this_controller()
    return format_owner(Owner(user, here.host, os.getpid(), now_iso, here.boot, command))


def this_controller() -> Controller:
    try:
        boot = BOOT_ID.read_text().strip()
    except OSError:  # no boot id (not Linux): no lock of ours is ever judged stale
        boot = ""
    return Controller(socket.gethostname(), boot)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists, owned by someone else
        return True
    return True


def local_audit_path(environ: Mapping[str, str]) -> Path:
    base = environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(base) / "vllmctl" / "audit.log"


def append_local_audit(path: Path, record: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        handle.write(json.dumps(record, sort_keys=True, default=str) + "\n")
