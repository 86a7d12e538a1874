"""What `vllmctl rollback` does on each host, pure: whether a host runs a release (its unit files are the
release's, each unit running from its file), and the fleet's choice of target, activation or no-op."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from vllmctl.releases.host import HostReleases, Manifest, Release, ReleaseError, rollback_target

Action = Literal["activate", "stay", "refuse", "none"]


@dataclass(frozen=True)
class HostUnits:
    """What a host runs: each vllmctl unit file's sha256 on disk (the `unit_files` fact) and each unit's
    systemd state (the `units` fact)."""

    files: Mapping[str, str]
    states: Mapping[str, Mapping[str, str]]


@dataclass(frozen=True)
class HostChoice:
    """One host's part in a rollback: activate `target`, stay on it (`current` already runs and is only
    checked for serving), refuse (`why`, nothing touched), or none (no release and no engine unit)."""

    host: str
    action: Action
    current: str | None
    target: Release | None = None
    why: str = ""

    @property
    def target_id(self) -> str | None:
        return self.target.id if self.target is not None else None

    @property
    def shown(self) -> str:
        """The plan's "rolls back to" cell."""
        if self.action in ("refuse", "none"):
            return "(refused)" if self.action == "refuse" else "(nothing)"
        return f"{self.target_id} (already there)" if self.action == "stay" else str(self.target_id)


def unit_digest(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()


def units_changed(manifest: Manifest, units: HostUnits) -> str:
    """Why the unit files on disk are not `manifest`'s ("" when they are): a file that differs, one missing,
    or a unit the release does not have (activation would remove it)."""
    wanted = {name: unit_digest(content) for name, content in manifest.units.items()}
    found = {name: digest for name, digest in units.files.items() if name.endswith(".service")}
    parts = [
        (label, names)
        for label, names in (
            ("changed", sorted(n for n in wanted.keys() & found.keys() if wanted[n] != found[n])),
            ("missing", sorted(wanted.keys() - found.keys())),
            ("not in it", sorted(found.keys() - wanted.keys())),
        )
        if names
    ]
    if not parts:
        return ""
    listed = "; ".join(f"{label}: {', '.join(names)}" for label, names in parts)
    return f"the unit files on disk are not release {manifest.id}'s ({listed})"


def not_running(manifest: Manifest, units: HostUnits) -> str:
    """Why the release's units do not all run from their files ("" when they do): a unit not `active`, or
    one whose file changed on disk since systemd loaded it."""
    states = {name: units.states.get(name, {}) for name in sorted(manifest.units)}
    stopped = [f"{n} ({s.get('active_state') or 'unknown'})" for n, s in states.items()
               if s.get("active_state") != "active"]  # fmt: skip
    if stopped:
        return f"not running: {', '.join(stopped)}"
    stale = [name for name, s in states.items() if s.get("need_daemon_reload") == "yes"]
    return f"runs an older copy of {', '.join(stale)} (systemd was not reloaded)" if stale else ""


def left_current(state: HostReleases, units: HostUnits) -> str:
    """Why a host whose `current` release passed its gate does not run it ("" when it does, or when current
    is not good): what an apply interrupted between a host's restart and its gate leaves."""
    current = state.get(state.current)
    if current is None or current.status != "good" or current.manifest is None:
        return ""
    return units_changed(current.manifest, units)


def choose(
    states: Mapping[str, HostReleases], units: Mapping[str, HostUnits], to: str | None = None
) -> dict[str, HostChoice]:
    """Every host's part. `to`: that release everywhere. Else, when some host left its good `current` (an
    apply was interrupted after restarting it), every host returns to its `current`: one running it is
    left alone. Else each goes back to the release before a good `current` (the known-good one after a
    failed or unfinished one). A host that cannot is refused, alone: the others go on."""
    interrupted = any(left_current(states[h], units[h]) for h in states)
    return {host: _choose_host(host, states[host], units[host], to, interrupted) for host in states}


def _choose_host(host: str, state: HostReleases, units: HostUnits, to: str | None, back: bool) -> HostChoice:
    current = state.get(state.current)
    if not state.releases and not any(name.endswith(".service") for name in units.files):
        return HostChoice(host, "none", None, None, "no release and no engine unit here")
    try:
        if to is None and back and current is not None and current.status == "good":
            target = rollback_target(state, host, current.id)  # still there, with its venv
            assert target.manifest is not None
            why = units_changed(target.manifest, units) or not_running(target.manifest, units)
            if why:
                back_to = f"back to its current release {target.id}: {why}"
                return HostChoice(host, "activate", state.current, target, back_to)
            return HostChoice(
                host, "stay", state.current, target, f"already on its current release {target.id}"
            )
        if not state.releases:
            raise ReleaseError(f"{host}: no release recorded on the host", "apply the inventory first")
        target = rollback_target(state, host, to)
        return HostChoice(host, "activate", state.current, target)
    except ReleaseError as exc:
        serving = f"release {state.current}" if state.current else "what it runs"
        hint = f"\n  hint: {exc.hint}" if exc.hint else ""
        why = f"{exc.message}; not touched, it stays on {serving}{hint}"
        return HostChoice(host, "refuse", state.current, None, why)
