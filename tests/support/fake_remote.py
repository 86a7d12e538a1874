"""An in-memory host for runner tests: it answers facts from a dict and applies the actions ops emit."""

from __future__ import annotations

import shlex
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vllmctl.errors import TransportError
from vllmctl.ops import Action, Upload, sha256_text
from vllmctl.runner.core.remote import HostLockedError
from vllmctl.transport import Result


@dataclass
class FakeHost:
    name: str
    # path -> (content, mode, owner:group)
    files: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    dirs: dict[str, tuple[str, str]] = field(default_factory=dict)
    users: dict[str, dict[str, Any]] = field(default_factory=dict)
    units: dict[str, dict[str, str]] = field(default_factory=dict)
    lock: str | None = None
    lock_stale: bool = False  # the lock's owner died on this controller: SshRemote.begin would break it
    audit: list[str] = field(default_factory=list)
    executed: list[str] = field(default_factory=list)
    fail_on: str | None = None  # a substring of a command that fails
    drop_on: str | None = None  # a substring of a command during which the connection drops
    unreachable: bool = False
    gathers: int = 0
    kept: int = 0  # keep_facts calls: the runner found the facts of an unlocked begin plan no change


class FakeRemote:
    def __init__(self, host: FakeHost, clock: list[float], log: list[str]) -> None:
        self.host, self.clock, self.log = host, clock, log
        self.mutex = threading.Lock()
        self.stale_broken = ""

    def _facts(self, requests: Mapping[str, tuple[str, ...]]) -> dict[str, Any]:
        h = self.host
        paths: dict[str, Any] = {}
        for path in requests.get("paths", ()):
            if path in h.files:
                content, mode, owner = h.files[path]
                user, group = owner.split(":")
                paths[path] = {"type": "file", "mode": mode, "owner": user, "group": group}
                paths[path]["sha256"] = sha256_text(content)
            elif path in h.dirs:
                mode, owner = h.dirs[path]
                user, group = owner.split(":")
                paths[path] = {
                    "type": "directory",
                    "mode": mode,
                    "owner": user,
                    "group": group,
                    "sha256": None,
                }
            else:
                paths[path] = {"type": "absent"}
        applied = {
            p.rsplit("/", 1)[1].removesuffix(".applied"): c[0]
            for p, c in h.files.items()
            if p.endswith(".applied")
        }
        users = {u: v for u, v in h.users.items() if u in requests.get("users", ())}
        return {"paths": paths, "users": users, "units": dict(h.units), "applied": applied}

    def begin(
        self,
        requests: Mapping[str, tuple[str, ...]],
        lock_owner: str | None,
        break_lock: bool,
        timeout: float,
    ) -> dict[str, Any]:
        if self.host.unreachable:
            raise TransportError(f"{self.host.name}: unreachable (no answer within 1s)", "check the address")
        self.stale_broken = ""
        if break_lock:
            self.host.lock = None
        if self.host.lock is not None and self.host.lock_stale:
            self.stale_broken, self.host.lock, self.host.lock_stale = self.host.lock, None, False
        if self.host.lock is not None:
            raise HostLockedError(self.host.name, self.host.lock)
        if lock_owner:
            self.host.lock = lock_owner
        return self.gather(requests, timeout)

    def gather(self, requests: Mapping[str, tuple[str, ...]], timeout: float) -> dict[str, Any]:
        self.host.gathers += 1
        self.clock[0] += 0.01
        return self._facts(requests)

    def keep_facts(self) -> None:
        self.host.kept += 1

    def execute(self, action: Action, timeout: float) -> Result:
        self.clock[0] += 0.01
        text = action.render()
        self.host.executed.append(text)
        self.log.append(f"{self.host.name}: {text}")
        if self.host.drop_on and self.host.drop_on in text:
            raise TransportError(f"{self.host.name}: connection lost while running a command", "check sshd")
        if self.host.fail_on and self.host.fail_on in text:
            return Result("", "E: something broke\n", 1)
        if isinstance(action, Upload):
            self.host.files[action.path] = (action.content, action.mode, f"{action.owner}:{action.group}")
            return Result("", "", 0)
        argv = shlex.split(text)
        if argv[:2] == ["install", "-d"]:
            self.host.dirs[argv[-1]] = (argv[3], f"{argv[5]}:{argv[7]}")
        elif argv[0] == "useradd":
            self.host.users[argv[-1]] = {"uid": 999, "gid": 999, "home": argv[argv.index("--home-dir") + 1]}
            self.host.users[argv[-1]]["shell"] = argv[argv.index("--shell") + 1]
        elif argv[0] == "chmod":
            mode, path = argv[1], argv[2]
            if path in self.host.dirs:
                self.host.dirs[path] = (mode, self.host.dirs[path][1])
        elif argv[0] == "systemctl" and argv[1] in ("enable", "restart", "start", "stop", "disable"):
            unit = self.host.units.setdefault(
                argv[2], {"active_state": "inactive", "unit_file_state": "disabled"}
            )
            if argv[1] == "enable":
                unit["unit_file_state"] = "enabled"
            elif argv[1] in ("restart", "start"):
                unit["active_state"] = "active"
            elif argv[1] == "stop":
                unit["active_state"] = "inactive"
        return Result("", "", 0)

    def read_file(self, path: str, timeout: float) -> str | None:
        return self.host.files.get(path, ("", "", ""))[0] if path in self.host.files else None

    def finish(self, audit_line: str | None, release_lock: bool, timeout: float) -> None:
        if release_lock:
            self.host.lock = None
        if audit_line:
            self.host.audit.append(audit_line)

    def close(self) -> None:
        pass
