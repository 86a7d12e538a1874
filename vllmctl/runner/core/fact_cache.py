"""The controller's fact cache: per host, the facts a no-op run read under sudo, the fact requests they
answer and the witness read just before them (facts/witness.py). One 0600 JSON file per SSH target."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllmctl.transport.target import SshTarget


@dataclass(frozen=True)
class Snapshot:
    requests: dict[str, list[str]]
    witness: frozenset[str]
    facts: dict[str, Any]


def requests_json(requests: Mapping[str, tuple[str, ...]]) -> dict[str, list[str]]:
    return {name: list(args) for name, args in requests.items()}


def default_root(environ: Mapping[str, str]) -> Path:
    base = environ.get("XDG_CACHE_HOME") or str(Path(environ.get("HOME") or Path.home()) / ".cache")
    return Path(base) / "vllmctl" / "facts"


class FactCache:
    """Facts hold digests of env files, so the files are the controller user's alone (0600 in a 0700 dir)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, target: SshTarget) -> Path:
        via = ",".join(hop.spec for hop in target.jumps)
        key = f"{target.user}@{target.hostname}:{target.port} via {via} proxy {target.proxy_command or ''}"
        return self.root / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"

    def load(self, target: SshTarget) -> Snapshot | None:
        """None for a missing, unreadable or foreign file: the run then reads every fact under sudo."""
        try:
            doc = json.loads(self.path(target).read_text())
            return Snapshot(dict(doc["requests"]), frozenset(doc["witness"]), dict(doc["facts"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def store(self, target: SshTarget, snapshot: Snapshot) -> None:
        """Written to a temp file and renamed: a reader sees the old snapshot or the new, never half."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        doc = {"requests": snapshot.requests, "witness": sorted(snapshot.witness), "facts": snapshot.facts}
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".snapshot-")  # mkstemp makes it 0600
        try:
            with os.fdopen(fd, "w") as out:
                json.dump(doc, out)
            os.replace(tmp, self.path(target))
        except OSError:
            Path(tmp).unlink(missing_ok=True)
            raise

    def forget(self, target: SshTarget) -> None:
        self.path(target).unlink(missing_ok=True)
