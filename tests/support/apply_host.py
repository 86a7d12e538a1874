"""A temp-dir host that whole applies run against: LocalRemote's real bash for every step, plus the facts
the playbook's operations read (paths, units, applied records) from its files, a health helper that passes
unless the unit asks for `--bogus`, and a kill switch that stops a run dead, its lock left behind."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from local_remote import LocalRemote

from vllmctl.ops import Upload
from vllmctl.transport import Result

SYSTEMCTL = """#!/bin/bash
echo "systemctl $*" >> "$ROOT/calls"
verb=$1; shift; [ "$1" = "--" ] && shift
for u in "$@"; do case $verb in
  start|restart) touch "$ROOT/active/$u";; stop) rm -f "$ROOT/active/$u";;
  enable) touch "$ROOT/enabled/$u";; disable) rm -f "$ROOT/enabled/$u";;
  show) state=inactive; [ -e "$ROOT/active/$u" ] && state=active
        printf 'Id=%s\\nActiveState=%s\\nNRestarts=0\\n\\n' "$u" "$state";; esac; done
true
"""
# the host's python3 runs only the helpers here: no old engine is ever left (`engine-gone.py`), and the health
# helper (`python3 HELPER base model deadline unit ...`) passes unless the unit asks for `--bogus`
HEALTH_HELPER = """#!/bin/bash
case $1 in */engine-gone.py) exit 0;; esac
[ -e "$ROOT/active/$5" ] && ! grep -q -- --bogus "$ROOT/etc/systemd/system/$5"
"""


class Killed(BaseException):
    """The controller died mid-run (kill -9): nothing after this runs, not even the unlock."""


class ApplyHost(LocalRemote):
    def __init__(self, root: Path, venv: str, name: str = "gpu1") -> None:
        super().__init__(root, name, SYSTEMCTL)
        for sub in ("enabled", "etc/vllmctl"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        (root / "bin" / "python3").write_text(HEALTH_HELPER)
        (root / "bin" / "python3").chmod(0o755)
        python = self.local(venv) / "bin" / "python"
        python.parent.mkdir(parents=True, exist_ok=True)
        python.touch(mode=0o755)
        self.modes: dict[str, tuple[str, str, str]] = {}
        self.kill_in: int | None = None  # actions left before the run is killed
        self.dead = False

    def _alive(self) -> None:
        if self.dead:
            raise Killed()

    def begin(
        self, requests: Mapping[str, Any], lock_owner: str | None, break_lock: bool, timeout: float
    ) -> Any:
        self._alive()
        super().begin(requests, lock_owner, break_lock, timeout)
        return self.gather(requests, timeout)

    def gather(self, requests: Mapping[str, Any], timeout: float) -> dict[str, Any]:
        self._alive()
        paths = {path: self._path(path) for path in requests.get("paths", ())}
        state = self.local("/var/lib/vllmctl/state")
        applied = {p.name.removesuffix(".applied"): p.read_text().strip() for p in state.glob("*.applied")}
        enabled = {p.name for p in (self.root / "enabled").iterdir()}
        units = {
            name: {**found, "unit_file_state": "enabled" if name in enabled else "disabled"}
            for name, found in self.units().items()
        }
        return {"paths": paths, "units": units, "applied": applied, "users": {}}

    def _path(self, path: str) -> dict[str, Any]:
        local = Path(self._moved(path))
        if local.is_dir():
            return {"type": "directory", "mode": "0755", "owner": "root", "group": "root", "sha256": None}
        if not local.is_file():
            return {"type": "absent"}
        mode, owner, group = self.modes.get(path, ("0644", "root", "root"))
        digest = hashlib.sha256(local.read_bytes()).hexdigest()
        return {"type": "file", "mode": mode, "owner": owner, "group": group, "sha256": digest}

    def execute(self, action: Any, timeout: float) -> Result:
        self._alive()
        if self.kill_in is not None:
            self.kill_in -= 1
            if self.kill_in < 0:
                self.dead, self.kill_in = True, None
                raise Killed()
        if isinstance(action, Upload):
            Path(self._moved(action.path)).parent.mkdir(parents=True, exist_ok=True)
            self.modes[action.path] = (action.mode, action.owner, action.group)
        return super().execute(action, timeout)

    def finish(self, audit_line: str | None, release_lock: bool, timeout: float) -> None:
        self._alive()
        super().finish(audit_line, release_lock, timeout)

    def revive(self) -> None:
        self.dead, self.kill_in = False, None
