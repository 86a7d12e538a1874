"""A host in a temp dir: commands run in a real bash with vllmctl's absolute paths moved under the dir,
and `systemctl`/`journalctl` replaced by scripts that record unit state as files."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vllmctl.ops import Command, Upload
from vllmctl.runner.core.remote import HostLockedError
from vllmctl.transport import Result

MOVED = ("/var/lib/vllmctl", "/etc/systemd/system", "/etc/vllmctl", "/opt/vllmctl")

SYSTEMCTL = """#!/bin/bash
echo "systemctl $*" >> "$ROOT/calls"
verb=$1; shift; [ "$1" = "-p" ] && shift 2; [ "$1" = "--" ] && shift
for u in "$@"; do case $verb in
  start) touch "$ROOT/active/$u";; stop) rm -f "$ROOT/active/$u";;
  show) state=inactive/dead; [ -e "$ROOT/active/$u" ] && state=active/running
        [ -e "$ROOT/crashed/$u" ] && state=failed/failed
        printf 'Id=%s\nActiveState=%s\n' "$u" "${state%/*}"
        printf 'SubState=%s\nNRestarts=0\n\n' "${state#*/}";; esac; done
true
"""
# Without root (`make unit`) the temp-dir host keeps modes but not owners: ownership is not what these tests
# check, and only root may give files away.
INSTALL_AS_USER = """#!/bin/bash
args=(); while [ $# -gt 0 ]; do case $1 in -o|-g) shift 2;; *) args+=("$1"); shift;; esac; done
exec /usr/bin/install "${args[@]}"
"""
CHOWN_AS_USER = "#!/bin/sh\nexit 0\n"
JOURNALCTL = """#!/bin/bash
echo "vllm: error: unrecognized arguments: --bogus"
"""


class LocalRemote:
    def __init__(self, root: Path, name: str = "gpu1", systemctl: str = SYSTEMCTL) -> None:
        self.root, self.name = root, name
        for sub in (
            "var/lib/vllmctl/releases",
            "var/lib/vllmctl/state",
            "etc/systemd/system",
            "active",
            "bin",
        ):
            (root / sub).mkdir(parents=True, exist_ok=True)
        tools = [("systemctl", systemctl), ("journalctl", JOURNALCTL)]
        if os.geteuid() != 0:
            tools += [("install", INSTALL_AS_USER), ("chown", CHOWN_AS_USER)]
        for tool, text in tools:
            (root / "bin" / tool).write_text(text)
            (root / "bin" / tool).chmod(0o755)
        self.audit: list[dict[str, Any]] = []
        self.closed = False
        self.stale_broken = ""

    def local(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def _moved(self, text: str) -> str:
        for prefix in MOVED:
            text = text.replace(prefix, str(self.local(prefix)))
        return text

    def units(self) -> dict[str, dict[str, str]]:
        unit_dir = self.local("/etc/systemd/system")
        return {
            u.name: {"active_state": "active" if (self.root / "active" / u.name).exists() else "inactive"}
            for u in sorted(unit_dir.glob("vllmctl-*"))
        }

    def begin(
        self, requests: Mapping[str, Any], lock_owner: str | None, break_lock: bool, timeout: float
    ) -> Any:
        lock = self.local("/var/lib/vllmctl/lock")
        if lock_owner:
            if lock.exists() and not break_lock:
                raise HostLockedError(self.name, (lock / "owner").read_text())
            lock.mkdir(exist_ok=True)
            (lock / "owner").write_text(lock_owner)
        return {"units": self.units()}

    def gather(self, requests: Mapping[str, Any], timeout: float) -> dict[str, Any]:
        return {"units": self.units()}

    def keep_facts(self) -> None:
        """No fact cache here: every begin reads the files."""

    def execute(self, action: Any, timeout: float) -> Result:
        """Release steps use only commands and uploads; anything else is a test bug."""
        if isinstance(action, Upload):
            target = Path(self._moved(action.path))
            target.write_text(action.content)
            return Result("", "", 0)
        assert isinstance(action, Command), action
        env = {**os.environ, "ROOT": str(self.root), "PATH": f"{self.root / 'bin'}:{os.environ['PATH']}"}
        done = subprocess.run(
            ["bash", "-c", self._moved(action.render())], capture_output=True, text=True, env=env, check=False
        )
        stdout = done.stdout
        for prefix in MOVED:  # the host reports its own paths, not the temp dir's
            stdout = stdout.replace(str(self.local(prefix)), prefix)
        return Result(stdout, done.stderr, done.returncode)

    def read_file(self, path: str, timeout: float) -> str | None:
        local = Path(self._moved(path))
        return local.read_text() if local.exists() else None

    def finish(self, audit_line: str | None, release_lock: bool, timeout: float) -> None:
        if release_lock:
            lock = self.local("/var/lib/vllmctl/lock")
            for child in lock.glob("*"):
                child.unlink()
            lock.rmdir()
        if audit_line:
            self.audit.append(json.loads(audit_line))

    def close(self) -> None:
        self.closed = True

    def calls(self) -> list[str]:
        calls = self.root / "calls"
        return calls.read_text().splitlines() if calls.exists() else []
