"""Release steps, pure: write a release (manifest, units, then the `complete` marker), activate one
(stop → units from the release dir → start, the state records rewritten for it, then switch `current`),
record the gate's verdict, prune."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence

from vllmctl.ops.base import Command, Step, Upload, noop, run
from vllmctl.ops.engine_gone import wait_gone
from vllmctl.ops.service_start import healthy_path
from vllmctl.ops.system import applied_path
from vllmctl.paths import RELEASES_DIR, STATE_DIR, UNIT_DIR
from vllmctl.releases.host import (
    COMPLETE,
    MANIFEST,
    VERDICT,
    HostReleases,
    Manifest,
    pointer_switch,
    release_dir,
)
from vllmctl.render.quoting import shell_word


def unit_copy_path(release: str, unit: str, root: str = RELEASES_DIR) -> str:
    return f"{release_dir(release, root)}/units/{unit}"


def create_release(manifest: Manifest, state: HostReleases, root: str = RELEASES_DIR) -> Step:
    """Releases are immutable: an existing complete one is never rewritten; a half-made one is redone."""
    existing = state.get(manifest.id)
    target = release_dir(manifest.id, root)
    if existing is not None and existing.complete:
        return noop("release", target, f"release {manifest.id} is already on the host")
    actions: list[Command | Upload] = []
    if existing is not None:
        actions.append(run("rm", "-rf", "--", target))
    actions += [
        run("install", "-d", "-m", "0755", "-o", "root", "-g", "root", target, f"{target}/units"),
        Upload(f"{target}/{MANIFEST}", manifest.to_json()),
        *(
            Upload(unit_copy_path(manifest.id, name, root), content)
            for name, content in sorted(manifest.units.items())
        ),
        run("touch", f"{target}/{COMPLETE}"),
    ]
    return Step("release", target, tuple(actions))


def swap_units(
    release: str, running: Sequence[str], gone: Sequence[str], wanted: Sequence[str], root: str = RELEASES_DIR
) -> list[Command]:
    """Stop what runs, remove units the release does not have, install its copies, reload systemd."""
    actions = [run("systemctl", "stop", "--", *running)] if running else []
    if gone:
        actions.append(run("systemctl", "disable", "--", *gone))
        actions.append(run("rm", "-f", "--", *(f"{UNIT_DIR}/{name}" for name in gone)))
    for name in wanted:
        actions.append(
            run("install", "-m", "0644", "-o", "root", "-g", "root",
                unit_copy_path(release, name, root), f"{UNIT_DIR}/{name}")
        )  # fmt: skip
    actions.append(run("systemctl", "daemon-reload"))
    return actions


def reinstall_units(manifest: Manifest) -> Step:
    """The release's own unit copies back in place and systemd reloaded, nothing stopped or started: a host
    the rollout held back after apply wrote new units keeps running (and restarting) the release it serves."""
    wanted = sorted(manifest.units)
    return Step("release_units", release_dir(manifest.id), tuple(swap_units(manifest.id, [], [], wanted)))


def activate_release(
    manifest: Manifest,
    running_units: Iterable[str],
    installed_units: Iterable[str],
    env_files: Mapping[str, str] | None = None,
) -> Step:
    """Stop → units from the release dir → start: on a GPU the old and new engines cannot share memory.

    Each started unit's applied record is rewritten from the unit and env file it was started with
    (`env_files`: unit -> env file), so the next apply of the inventory that serves it restarts nothing;
    its `.healthy` record goes until `mark_healthy` (a rollback that never served is polled again). Units
    no longer in the release are disabled and removed with their records.
    """
    wanted = sorted(manifest.units)
    running = sorted(set(running_units))
    gone = sorted(set(installed_units) - set(wanted))
    actions: list[Command | Upload] = [*swap_units(manifest.id, running, gone, wanted)]
    if wanted or gone:
        # Both records describe the release being left; an interruption before the rewrite restarts next time.
        names = sorted({*wanted, *gone})
        records = [path for name in names for path in (applied_path(name), healthy_path(name))]
        actions.append(run("rm", "-f", "--", *records))
    if wanted:
        actions.append(run("systemctl", "enable", "--", *wanted))
        actions += wait_gone(wanted)
        actions.append(run("systemctl", "start", "--", *wanted))
        files = env_files or {}
        actions += [applied_record(name, files.get(name, "")) for name in wanted]
    actions.append(Command(shell=pointer_switch("current", manifest.id)))
    return Step("release_activate", release_dir(manifest.id), tuple(actions))


def applied_record(unit: str, env_file: str) -> Command:
    """`applied_hash` computed on the host: sha256 of the installed unit, a NUL, the env file (as apply's
    `desired.applied_hash` renders them), written 0600 under a temp name and renamed into place."""
    record, tmp = shell_word(applied_path(unit)), shell_word(f"{STATE_DIR}/.{unit}.applied.tmp")
    env = f"cat -- {shell_word(env_file)} 2>/dev/null; " if env_file else ""
    return Command(
        shell=f"umask 077 && {{ cat -- {shell_word(f'{UNIT_DIR}/{unit}')} && printf '\\000' && {env}true; }}"
        f" | sha256sum | cut -c1-64 | tr -d '\\n' > {tmp} && mv -f -- {tmp} {record}"
    )


def mark_healthy(units: Iterable[str]) -> Step:
    """The applied records of units that answered health become their `.healthy` records (same content)."""
    names = sorted(units)
    copies = [
        Command(shell=f"umask 077 && cp -f -- {shell_word(applied_path(n))} {shell_word(healthy_path(n))}")
        for n in names
    ]
    if not copies:
        return noop("release_healthy", "units", "no unit to mark")
    return Step("release_healthy", " ".join(names), tuple(copies))


def record_verdict(
    release: str, verdict: Mapping[str, object], root: str = RELEASES_DIR, pointers_root: str | None = None
) -> Step:
    """The verdict is written once; a passing one also moves `known-good` to this release."""
    target = release_dir(release, root)
    actions: list[Command | Upload] = [
        Upload(f"{target}/{VERDICT}", json.dumps(verdict, indent=2, sort_keys=True) + "\n")
    ]
    if verdict.get("passed"):
        actions.append(Command(shell=pointer_switch("known-good", release, root, pointers_root)))
    return Step("release_verdict", target, tuple(actions))


def prune_releases(release_ids: Iterable[str]) -> Step:
    ids = sorted(release_ids)
    if not ids:
        return noop("release_prune", "releases", "no release to prune")
    return Step("release_prune", "releases", (run("rm", "-rf", "--", *(release_dir(i) for i in ids)),))


def journal_tail_command(units: Iterable[str], lines: int = 40) -> Command:
    flags = " ".join(f"-u {shell_word(u)}" for u in sorted(units))
    return Command(shell=f"journalctl {flags} -n {lines} --no-pager -o short-iso 2>&1; true")
