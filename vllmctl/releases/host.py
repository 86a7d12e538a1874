"""Releases, pure: the manifest model and ids, what a host's release listing says, the `current` and
`known-good` pointers, pruning (never the current or known-good release), recovery and rollback targets."""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Literal

from vllmctl.errors import InputError, VllmctlError
from vllmctl.facts.lock import is_lock_line, lock_command, lock_from_line
from vllmctl.paths import LOCK_DIR, RELEASES_DIR, VENVS_DIR
from vllmctl.render.quoting import shell_word

MANIFEST = "manifest.json"
COMPLETE = "complete"  # written last: a release dir without it is half-made
VERDICT = "verdict.json"  # the gate's decision and the smoke-benchmark figures, written once
DEFAULT_KEEP = 5
POINTERS = ("current", "known-good")
LISTING_MARK = "@@vllmctl-release"
VENV_MARK = "@@vllmctl-venv"
POINTER_MARK = "@@vllmctl-pointer"
VERDICT_MARK = "@@vllmctl-verdict"

Status = Literal["incomplete", "pending", "good", "failed"]


class ReleaseError(VllmctlError):
    """A release cannot be used as asked (missing, not good, its venv gone)."""


@dataclass(frozen=True)
class Manifest:
    """What one release of one host serves, immutable once its `complete` marker is written; only the
    gate adds, once, the KV figures each engine measured beside their prediction in `plan` (kv_record.py)."""

    id: str
    host: str
    created_at: str  # ISO 8601 UTC, passed in from the edge
    created_by: str
    inventory_digest: str
    engine: str
    engine_version: str
    venv_path: str
    units: dict[str, str]  # unit file name -> content
    models: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> source, revision, port
    plan: dict[str, Any] = field(default_factory=dict)  # planner output and reasons per model

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @property
    def serving_digest(self) -> str:
        return serving_digest(self.units, self.venv_path)


def serving_digest(units: Mapping[str, str], venv_path: str) -> str:
    """What makes two releases serve the same thing: unit contents and the venv they run from."""
    body = json.dumps({"units": dict(sorted(units.items())), "venv": venv_path}, sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()


def inventory_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def release_id(created_at: datetime, serving: str) -> str:
    """Sortable by time (UTC seconds), then 8 hex of the serving digest so two applies in a second differ."""
    return f"{created_at.strftime('%Y%m%dT%H%M%SZ')}-{serving[:8]}"


def manifest_from_json(text: str, where: str, kind: type[Manifest] = Manifest) -> Manifest:
    try:
        doc = json.loads(text)
        return kind(**{k: doc[k] for k in kind.__dataclass_fields__ if k in doc})
    except (ValueError, TypeError) as exc:
        raise ReleaseError(
            f"{where}: unreadable release manifest ({exc})",
            "the release directory was edited by hand; remove it or restore the file",
        ) from exc


def release_dir(release: str, root: str = RELEASES_DIR) -> str:
    return f"{root}/{release}"


@dataclass(frozen=True)
class Release:
    """One release dir as the host reported it."""

    id: str
    complete: bool
    manifest: Manifest | None = None
    verdict: dict[str, Any] | None = None

    @property
    def status(self) -> Status:
        if not self.complete or self.manifest is None:
            return "incomplete"
        if self.verdict is None:
            return "pending"
        return "good" if self.verdict.get("passed") else "failed"


@dataclass(frozen=True)
class HostReleases:
    """Everything a host has under RELEASES_DIR, oldest first, plus its pointers and engine venvs."""

    releases: tuple[Release, ...] = ()
    current: str | None = None
    known_good: str | None = None
    venvs: frozenset[str] = frozenset()
    lock: str | None = None  # the host lock's owner line while held ("" when its owner cannot be read)

    def get(self, release: str | None) -> Release | None:
        return next((r for r in self.releases if r.id == release), None)


def listing_command(
    root: str = RELEASES_DIR, pointers_root: str | None = None, lock_dir: str = LOCK_DIR
) -> str:
    """One round trip: the host lock if held, every release's files and markers, the pointers, and which
    venvs exist. The lock comes first, so a host without releases still reports it.

    `pointers_root` is where `current` and `known-good` live when not beside the releases (group releases).
    """
    pointer = f"{shell_word(pointers_root)}/$p" if pointers_root else "$p"
    return (
        f"{lock_command(lock_dir)}; "
        f"cd {shell_word(root)} 2>/dev/null || exit 0; "
        f"for p in {' '.join(POINTERS)}; do "
        f'printf \'{POINTER_MARK} %s %s\\n\' "$p" "$(readlink {pointer})"; done; '
        'for d in */; do d=${d%/}; { [ -d "$d" ] && [ ! -L "$d" ]; } || continue; '
        f'm=no; [ -f "$d/{COMPLETE}" ] && m=yes; printf \'{LISTING_MARK} %s %s\\n\' "$d" "$m"; '
        f"cat \"$d/{MANIFEST}\" 2>/dev/null; printf '\\n{VERDICT_MARK}\\n'; "
        f"cat \"$d/{VERDICT}\" 2>/dev/null; printf '\\n'; done; "
        f'for v in {VENVS_DIR}/*/; do [ -x "$v/bin/python" ] && '
        f"printf '{VENV_MARK} %s\\n' \"${{v%/}}\"; done; "
        "true"
    )


def json_or_none(text: str | None) -> Any:
    """A JSON document read back from a host, or None when absent, empty or not JSON."""
    text = (text or "").strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def parse_listing(
    output: str, host: str, root: str = RELEASES_DIR, kind: type[Manifest] = Manifest
) -> HostReleases:
    """Parse `listing_command` output; a manifest that cannot be read marks its release incomplete."""
    pointers: dict[str, str | None] = {}
    venvs: set[str] = set()
    lock: str | None = None
    kept: list[str] = []
    for line in output.splitlines():
        if is_lock_line(line):
            lock = lock_from_line(line)
        elif line.startswith(f"{VENV_MARK} "):
            venvs.add(line.split(" ", 1)[1].strip())
        elif line.startswith(f"{POINTER_MARK} "):
            _, name, *target = line.split(" ", 2)
            pointers[name] = (target[0].strip().rstrip("/").rsplit("/", 1)[-1] or None) if target else None
        else:
            kept.append(line)
    releases: list[Release] = []
    for block in "\n".join(kept).split(f"{LISTING_MARK} ")[1:]:
        head, _, body = block.partition("\n")
        name, _, complete = head.partition(" ")
        manifest_text, _, verdict_text = body.partition(f"{VERDICT_MARK}\n")
        manifest = _manifest_or_none(manifest_text, f"{host}:{release_dir(name, root)}", kind)
        verdict = json_or_none(verdict_text)
        is_complete = complete.strip() == "yes" and manifest is not None
        releases.append(Release(name, is_complete, manifest, verdict if isinstance(verdict, dict) else None))
    return HostReleases(
        tuple(sorted(releases, key=lambda r: r.id)),
        pointers.get("current"),
        pointers.get("known-good"),
        frozenset(venvs),
        lock,
    )


def _manifest_or_none(text: str, where: str, kind: type[Manifest]) -> Manifest | None:
    if json_or_none(text) is None:
        return None
    try:
        return manifest_from_json(text, where, kind)
    except ReleaseError:
        return None


def pointer_switch(
    pointer: str, release: str, root: str = RELEASES_DIR, pointers_root: str | None = None
) -> str:
    """Atomic switch: a relative symlink made under a temp name, renamed over the pointer (`mv -T`).

    It refuses unless the release is complete, so a pointer never names a release that is not on disk.
    """
    if pointer not in POINTERS:
        raise ValueError(pointer)
    home = pointers_root or root
    target = posixpath.relpath(release_dir(release, root), home)
    root, rel = shell_word(home), shell_word(target)
    tmp = shell_word(f".{pointer}.tmp")
    return (
        f"cd {root} && test -f {rel}/{COMPLETE} && ln -sfn {rel} {tmp} && mv -T {tmp} {shell_word(pointer)}"
    )


def prune_candidates(state: HostReleases, keep: int) -> list[str]:
    """Oldest first: complete releases beyond the newest `keep`, and half-made ones nothing points at.

    Never the current or the known-good release, whatever `keep` says.
    """
    if keep < 1:
        raise InputError(f"releases.keep must be at least 1, got {keep}", "keep at least the serving release")
    protected = {state.current, state.known_good}
    finished = [r.id for r in state.releases if r.status != "incomplete"]
    newest = set(finished[-keep:])
    return [
        r.id
        for r in state.releases
        if r.id not in protected and (r.status == "incomplete" or r.id not in newest)
    ]


Recovery = Literal["none", "rollback", "gate"]


def recovery_needed(state: HostReleases) -> tuple[Recovery, str]:
    """What an interrupted apply left behind, and what to do: roll back, re-run the gate, or nothing."""
    current = state.get(state.current)
    if state.current is None:
        return "none", "no release is active"
    if current is None or current.status == "incomplete":
        return "rollback", f"current points at {state.current}, which is not a complete release on disk"
    if current.status == "failed":
        return "rollback", f"current release {current.id} failed its gate"
    if current.status == "pending":
        return "gate", f"current release {current.id} was activated but never passed the gate"
    return "none", f"current release {current.id} is known-good"


def rollback_target(state: HostReleases, host: str, wanted: str | None = None) -> Release:
    """The release a rollback activates: the named one, else the newest good one before the current."""
    if wanted is not None:
        found = state.get(wanted)
        if found is None:
            known = ", ".join(r.id for r in state.releases) or "none"
            raise ReleaseError(f"{host}: no release {wanted}", f"releases on the host: {known}")
        if found.status != "good":
            raise ReleaseError(
                f"{host}: release {wanted} is {found.status}, not known-good",
                "roll back to a release that passed its gate (see `vllmctl history`)",
            )
        return _with_venv(state, host, found)
    good = [r for r in state.releases if r.status == "good"]
    current = state.get(state.current)
    if current is not None and current.status == "good":
        good = [r for r in good if r.id < current.id]
    elif state.known_good is not None and state.get(state.known_good) is not None:
        good = [r for r in good if r.id <= state.known_good]
    if not good:
        raise ReleaseError(
            f"{host}: no earlier known-good release to roll back to",
            "see `vllmctl history`; fix the inventory and apply again",
        )
    return _with_venv(state, host, good[-1])


def required_venvs(manifest: Manifest) -> list[str]:
    """The host's engine venv and any per-model engine override's venv."""
    extra = {str(m["venv"]) for m in manifest.models.values() if m.get("venv")}
    return sorted({manifest.venv_path, *extra})


def _with_venv(state: HostReleases, host: str, release: Release) -> Release:
    assert release.manifest is not None
    gone = [venv for venv in required_venvs(release.manifest) if venv not in state.venvs]
    if gone:
        raise ReleaseError(
            f"{host}: release {release.id} runs from {', '.join(gone)}, which is gone",
            "rollback never reinstalls: apply an inventory with that engine version, "
            "or raise engine.keep_venvs so older venvs stay",
        )
    return release


def release_ports(manifest: Manifest) -> list[tuple[str, int]]:
    """(model, port) for every replica port the release serves on this host."""
    return [
        (name, port) for name, served in sorted(manifest.models.items()) for port in served.get("ports", [])
    ]


def release_endpoints(manifest: Manifest, url_of: Callable[[int], str]) -> list[tuple[str, str]]:
    """(model, base URL) for every replica port the release serves on this host; `url_of` gives a port's."""
    return [(name, url_of(port)) for name, port in release_ports(manifest)]
