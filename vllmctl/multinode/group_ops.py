"""Group release steps, pure: what a node's group units are, activating a group release on one node
(units from the release dir; unchanged active Ray units keep running), recording it, pointers, verdicts, the
env file the head's engine last started with, and reading the engine unit's exit while health is awaited.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from vllmctl.ops.base import Command, Step, Upload, noop, run
from vllmctl.ops.engine_gone import wait_gone
from vllmctl.ops.release import create_release, record_verdict, swap_units
from vllmctl.paths import UNIT_DIR
from vllmctl.releases.group import GroupManifest, group_dir, group_releases_dir
from vllmctl.releases.host import HostReleases, pointer_switch, release_dir
from vllmctl.render.quoting import shell_word

UNIT_MARK = "@@vllmctl-unit"
ENV_MARK = "@@vllmctl-env"


def unit_state_script(units: Collection[str]) -> str:
    """Per unit: its `systemctl is-active` and the sha256 of its installed file (`-` when absent)."""
    lines = []
    for unit in sorted(units):
        name, path = shell_word(unit), shell_word(f"{UNIT_DIR}/{unit}")
        digest = f"$( [ -f {path} ] && sha256sum < {path} | cut -c1-64 || echo -)"
        lines.append(f"s=$(systemctl is-active {name} 2>/dev/null)")
        lines.append(f'printf \'{UNIT_MARK} %s %s %s\\n\' {name} "${{s:-unknown}}" "{digest}"')
    return "\n".join(lines) + "\n"


def parse_unit_state(output: str) -> dict[str, tuple[str, str | None]]:
    """unit -> (active state, sha256 of the installed file or None)."""
    found: dict[str, tuple[str, str | None]] = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == UNIT_MARK:
            found[parts[1]] = (parts[2], None if parts[3] == "-" else parts[3])
    return found


def engine_env_record(group: str) -> str:
    """Where the head keeps the sha256 of the env file its engine last started with and passed its gate."""
    return f"{group_dir(group)}/engine-env.sha256"


def env_state_script(env_file: str, record: str) -> str:
    """The sha256 of `env_file` now and the one `record` holds (`-` for either when absent)."""
    env, kept = shell_word(env_file), shell_word(record)
    return (
        f"now=$( [ -f {env} ] && sha256sum < {env} | cut -c1-64 || echo -)\n"
        f"was=$(cat {kept} 2>/dev/null || true)\n"
        f'printf \'{ENV_MARK} %s %s\\n\' "$now" "${{was:--}}"\n'
    )


@dataclass(frozen=True)
class EngineEnv:
    """The head's env file (sha256) now and as its engine last started with it; None when absent."""

    now: str | None
    started: str | None

    def changed(self, wanted: str | None = None) -> bool:
        """Would starting the engine with `wanted` (by default the file as it is now) differ from its last
        passed start: restarts come from this state, so a failed restart is tried again next time."""
        target = wanted if wanted is not None else self.now
        return target is not None and target != self.started


def parse_env_state(output: str) -> EngineEnv:
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == ENV_MARK:
            now, started = (None if part == "-" else part for part in parts[1:])
            return EngineEnv(now, started)
    return EngineEnv(None, None)


def env_record_step(group: str, digest: str) -> Step:
    # 0600: the digest of an env file holding a short API key could be guessed
    upload = Upload(engine_env_record(group), digest + "\n", mode="0600", secret=True)
    return Step("group_env", f"{group} engine env", (upload,))


@dataclass(frozen=True)
class NodeActivation:
    install: Step  # stop what changes, remove what the release lacks, units from the release dir, enable
    restart: tuple[str, ...]  # Ray units to (re)start, in the cluster's order (the engine comes after)


def activation(
    manifest: GroupManifest, installed: Mapping[str, tuple[str, str | None]], engine_unit: str
) -> NodeActivation:
    """A Ray unit that is active with the release's exact text keeps running (restarting the head drops
    the whole cluster); the engine unit is always restarted after the barrier, so it is stopped here."""
    root = group_releases_dir(manifest.group)
    wanted = sorted(manifest.units)
    same = {
        unit
        for unit, (state, digest) in installed.items()
        if unit in manifest.units and unit != engine_unit and state == "active"
        and digest == hashlib.sha256(manifest.units[unit].encode()).hexdigest()
    }  # fmt: skip
    present = {unit for unit, (state, digest) in installed.items() if digest is not None or state == "active"}
    gone = sorted(present - set(wanted))
    running = sorted(
        u for u, (state, _d) in installed.items() if state in ("active", "activating") and u not in same
    )
    actions = swap_units(manifest.id, running, gone, wanted, root)
    if wanted:
        actions.append(run("systemctl", "enable", "--quiet", "--", *wanted))
    restart = tuple(u for u in wanted if u != engine_unit and u not in same)
    return NodeActivation(Step("group_activate", f"{manifest.group} {manifest.id}", tuple(actions)), restart)


def started_as(manifest: GroupManifest, node: str, index: int) -> str:
    """How the log names one node's engine start: the head's shape, or the headless node's ranks (`index`:
    its place among the group's nodes)."""
    dp = manifest.plan.get("data_parallel")
    if not isinstance(dp, Mapping):
        return f"PP {manifest.pp} x TP {manifest.tp}" if node == manifest.head else f"headless rank {index}"
    if node == manifest.head:
        return f"API server, DP {dp.get('data_parallel_size')} x TP {manifest.tp}"
    first = int(dp.get("start_ranks", {}).get(node, 0))
    return f"headless, DP ranks {first}-{first + int(dp.get('data_parallel_size_local', 1)) - 1}"


def create_group_release(manifest: GroupManifest, state: HostReleases) -> Step:
    return create_release(manifest, state, group_releases_dir(manifest.group))


def restart_step(units: Sequence[str]) -> Step:
    """Stopped, then started only once their last run's processes are gone and their GPUs free: a
    plain restart would start the new engine or Ray worker beside a stuck one."""
    if not units:
        return noop("group_start", "units", "nothing to restart")
    stop, start = run("systemctl", "stop", "--", *units), run("systemctl", "start", "--", *units)
    return Step("group_start", " ".join(units), (stop, *wait_gone(units), start))


def stop_step(units: Sequence[str]) -> Step:
    """The group's units stopped and disabled: a failed release with nothing to roll back to."""
    if not units:
        return noop("group_stop", "units", "nothing to stop")
    return Step("group_stop", " ".join(units), (run("systemctl", "disable", "--now", "--", *units),))


def prune_step(group: str, release_ids: Sequence[str]) -> Step:
    """Old group releases removed from this node (ids from `group_prune_candidates`)."""
    if not release_ids:
        return noop("group_prune", group, "no group release to prune")
    root = group_releases_dir(group)
    paths = (release_dir(i, root) for i in sorted(release_ids))
    return Step("group_prune", group, (run("rm", "-rf", "--", *paths),))


def pointer_step(group: str, pointer: str, release: str) -> Step:
    switch = pointer_switch(pointer, release, group_releases_dir(group), group_dir(group))
    return Step("group_pointer", f"{group} {pointer} -> {release}", (Command(shell=switch),))


def verdict_step(group: str, release: str, verdict: Mapping[str, object]) -> Step:
    return record_verdict(release, verdict, group_releases_dir(group), group_dir(group))


_EXCEPTION = re.compile(r"(?:^|\s)(?P<line>[A-Za-z_][\w.]*(?:Error|Exception): .+)$")


def journal_errors(journal: str, limit: int = 5) -> list[str]:
    """The exception lines (`ValueError: ...`) a journal holds, in order, each once: the engine's root cause
    often lies above the last lines, under the traceback of the process that reported it."""
    found: list[str] = []
    for raw in journal.splitlines():
        match = _EXCEPTION.search(raw)
        if match and match.group("line") not in found:
            found.append(match.group("line").strip())
    return found[-limit:]


def engine_journal_command(unit: str, since_epoch: str) -> str:
    """The unit's whole journal since it was started (`date +%s` on the head, read before the start)."""
    since = shell_word(f"@{since_epoch}")
    return f"journalctl -u {shell_word(unit)} --since {since} --no-pager -o cat 2>&1 | tail -n 2000; true"
