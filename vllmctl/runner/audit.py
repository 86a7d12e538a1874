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


def lock_owner(now_iso: str) -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # a container user with no passwd entry and no $USER
        user = f"uid{os.getuid()}"
    return f"{user}@{socket.gethostname()} pid={os.getpid()} since={now_iso}"


def local_audit_path(environ: Mapping[str, str]) -> Path:
    base = environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(base) / "vllmctl" / "audit.log"


def append_local_audit(path: Path, record: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        handle.write(json.dumps(record, sort_keys=True, default=str) + "\n")
