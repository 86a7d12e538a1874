"""The weights fan-out at the edge: before the per-host runs, each controller folder that several hosts
stage reaches the fleet once, by the controller's push to one host, and is then copied host to host
(fanout/schedule.py orders the copies, fanout/scripts.py is their shell). Every grant is revoked and every
one-time key removed when its copy ends, also when it fails; a host left without a copy gets the
controller's push in its own run, as before."""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import Any

from vllmctl.fanout import scripts
from vllmctl.fanout.schedule import Copy, FolderFanout, HostCopy, Schedule
from vllmctl.inventory.model import StagingSettings
from vllmctl.ops.model_stage import DISK_MARGIN, stale_files
from vllmctl.runner.core.results import HostResult
from vllmctl.runner.fanout.copies import Copier, CopyOutcome
from vllmctl.runner.fanout.hub import HubCopier, Lister, after_seeds, hub_listing, seeds_of, survey_hub
from vllmctl.runner.fleet.hosts import on_each_host
from vllmctl.tasks.adapters import staged_sources
from vllmctl.tasks.desired import HostContext
from vllmctl.tasks.playbooks import Playbook

Files = Sequence[Mapping[str, Any]]


def staged_folders(contexts: Mapping[str, HostContext]) -> dict[str, list[str]]:
    """Controller folder -> the hosts that stage it (model sources, adapters, drafts), inventory order."""
    folders: dict[str, list[str]] = {}
    for name, ctx in contexts.items():
        for model in ctx.staged_models():
            for source in (model.source, *staged_sources(model)):
                if ctx.local_files.get(source):
                    folders.setdefault(source, []).append(name)
    return folders


FANOUT_TIMEOUT_S = 6 * 3600.0  # one copy of a multi-hundred-GB folder; a dead source is found by keepalives
PEERS_READ = 8  # hosts outside --limit asked per folder whether they hold it (sources, never targets)


def peers_of(contexts: Mapping[str, HostContext]) -> dict[str, HostContext]:
    """The inventory's hosts that --limit left out, as contexts that may serve a folder they hold."""
    if not contexts:
        return {}
    first = next(iter(contexts.values()))
    return {
        name: HostContext(first.inventory, host, local_files=first.local_files)
        for name, host in first.inventory.hosts.items()
        if name not in contexts
    }


def survey(
    contexts: Mapping[str, HostContext],
    peers: Mapping[str, HostContext],
    settings: StagingSettings,
    forks: int,
    timeout: float,
) -> list[FolderFanout]:
    """The folders worth fanning out (two selected hosts need one, or one needs it and another host holds
    it, --limit or not), with what each host holds, read in one round trip per host."""
    selected = staged_folders(contexts)
    outside = {f: hosts[:PEERS_READ] for f, hosts in staged_folders(peers).items() if f in selected}
    wanted = {f: hosts for f, hosts in selected.items() if len(hosts) + len(outside.get(f, ())) >= 2}
    outside = {f: hosts for f, hosts in outside.items() if f in wanted}
    per_host: dict[str, tuple[str, ...]] = {}
    for folder, hosts in [*wanted.items(), *outside.items()]:
        for host in hosts:
            per_host[host] = (*per_host.get(host, ()), folder)
    everyone = {**contexts, **peers}
    subset = {name: everyone[name] for name in per_host}

    def read(remote: Any) -> dict[str, Any]:
        mine = per_host[remote.name]
        return {"facts": remote.gather({"model_manifests": mine, "disk_free": mine}, min(timeout, 120))}

    gathered = on_each_host(subset, read, forks)
    found = []
    for folder, hosts in wanted.items():
        fanout = FolderFanout(folder, list(contexts[hosts[0]].local_files[folder] or ()), [], {}, {})
        for host in hosts:
            _classify(fanout, host, gathered[host])
        for peer in outside.get(folder, ()):
            state = (gathered[peer].get("facts", {}).get("model_manifests") or {}).get(folder, {})
            if "facts" in gathered[peer] and not stale_files(fanout.files, state):
                fanout.holders.append(peer)
        if fanout.stale and (len(fanout.stale) >= 2 or fanout.holders):
            found.append(fanout)
    return found


def _classify(fanout: FolderFanout, host: str, result: Mapping[str, Any]) -> None:
    if "error" in result:
        fanout.skipped[host] = f"facts not read: {result['error']}"
        return
    facts = result["facts"]
    state = (facts.get("model_manifests") or {}).get(fanout.folder, {})
    stale = stale_files(fanout.files, state)
    if not stale:
        fanout.holders.append(host)
        return
    free = ((facts.get("disk_free") or {}).get(fanout.folder) or {}).get("available_mib")
    needed = sum(int(f["size"]) for f in stale) / 2**20 * DISK_MARGIN
    if free is not None and free < needed:
        fanout.skipped[host] = f"{free:,} MiB free, {needed:,.0f} MiB needed"
        return
    fanout.stale[host] = stale
    fanout.recorded[host] = dict(state.get("recorded", {}))


def run_fanout(
    fanout: FolderFanout,
    contexts: Mapping[str, HostContext],
    settings: StagingSettings,
    labels: Mapping[str, str],
    forks: int,
    timeout: float,
    report: Callable[[str], None],
    copier: Copier | None = None,
) -> None:
    """Every host in `fanout.stale` gets the folder from a host that holds it, or a clear error."""
    _install_rsync(fanout, contexts, forks, timeout)
    schedule = Schedule(
        list(fanout.holders),
        list(fanout.stale),
        settings.per_source,
        labels,
        controller=fanout.controller_serves,
    )
    copier = copier or Copier(fanout, contexts, timeout, secrets.token_hex(8))
    running: dict[Future[CopyOutcome], Copy] = {}
    numbers = itertools.count(1)
    with ThreadPoolExecutor(max_workers=max(1, forks)) as pool:
        while True:
            for copy in schedule.next_copies():
                running[pool.submit(copier.run, copy, next(numbers))] = copy
            if not running:
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                del running[future]
                _record(fanout, schedule, future.result(), report)
    for host in schedule.pending:
        schedule.failed[host] = "no source left"
    for host, why in schedule.failed.items():
        record = fanout.copies.setdefault(host, HostCopy("", "failed"))
        record.status, record.error = "failed", record.error or why


def _install_rsync(
    fanout: FolderFanout, contexts: Mapping[str, HostContext], forks: int, timeout: float
) -> None:
    """rsync (and rrsync) on every host taking part; one that cannot have it is no source, and gets the
    controller's push in its own run."""
    hosts = {h: contexts[h] for h in [*fanout.holders, *fanout.stale]}

    def install(remote: Any) -> dict[str, Any]:
        result = remote.transport.run(scripts.INSTALL, sudo=True, timeout=min(timeout, 600))
        return {} if result.ok else {"error": result.failure("installing rsync")}

    for host, outcome in on_each_host(hosts, install, forks).items():
        if "error" in outcome:
            fanout.skipped[host] = f"no rsync: {outcome['error']}"
            fanout.stale.pop(host, None)
            if host in fanout.holders:
                fanout.holders.remove(host)


def _record(
    fanout: FolderFanout, schedule: Schedule, done: CopyOutcome, report: Callable[[str], None]
) -> None:
    copy = done.copy
    record = fanout.copies.setdefault(copy.target, HostCopy(copy.source, "failed"))
    record.source = copy.source
    if not done.blame:
        schedule.finished(copy)
        record.status, record.error = "ok", ""
        record.bytes, record.seconds = done.bytes, round(done.seconds, 2)
        mib = done.bytes / 2**20
        report(f"{fanout.folder}: {copy.target} <- {copy.source} ({mib:,.0f} MiB in {done.seconds:.1f} s)")
        return
    record.attempts.append(f"{copy.source}: {done.error}")
    record.error = done.error
    report(f"{fanout.folder}: {copy.target} <- {copy.source} failed: {done.error}")
    if done.blame == "target":
        schedule.target_failed(copy, done.error)
        return
    schedule.source_failed(copy, done.error)
    if done.corrupt:
        fanout.stale[copy.source] = list(fanout.files)  # everything again: its files are not trusted
        fanout.recorded.setdefault(copy.source, {})
        schedule.requeue(copy.source)


@dataclass
class Staged:
    """What the fan-outs before the per-host runs leave to the run: the hub models' seeds run first, and
    `after_seeds` fans out from them."""

    found: list[FolderFanout] = field(default_factory=list)
    seeds: tuple[str, ...] = ()
    after_seeds: Callable[[Mapping[str, HostResult]], None] | None = None


def stage_folders(
    contexts: Mapping[str, HostContext],
    settings: StagingSettings,
    check: bool,
    forks: int,
    timeout: float,
    report: Callable[[str], None],
    lister: Lister | None = hub_listing,
) -> Staged:
    """Before the per-host runs: the fan-out of each folder worth it, shown (`--check`) or run; a hub model
    no host holds waits for its seed's own run."""
    if not settings.fanout:
        return Staged()
    peers = peers_of(contexts)
    found = survey(contexts, peers, settings, forks, timeout)
    hub_found, downloads = survey_hub(contexts, peers, forks, timeout, report, PEERS_READ, lister)
    found += hub_found
    everyone = {**contexts, **peers}
    labels = (
        {h: str(ctx.host.vars.get(settings.locality, "")) for h, ctx in everyone.items()} if found else {}
    )

    def start(fanout: FolderFanout) -> None:
        copier = None
        if fanout.hub is not None:
            copier = HubCopier(fanout, everyone, timeout, secrets.token_hex(8), downloads[fanout.folder])
        run_fanout(fanout, everyone, settings, labels, forks, timeout, report, copier)

    for fanout in found:
        _show(fanout, settings, labels, report)
        if not check and not fanout.seed:
            start(fanout)
    seeds = seeds_of(found)
    hook = after_seeds(found, everyone, downloads, start, timeout) if seeds and not check else None
    return Staged(found, () if check else seeds, hook)


def _show(
    fanout: FolderFanout, settings: StagingSettings, labels: Mapping[str, str], report: Callable[[str], None]
) -> None:
    what = fanout.folder if fanout.hub is None else f"{fanout.hub.repo}@{fanout.hub.revision}"
    held = ", ".join(fanout.holders) or "no host"
    seed = f"; {fanout.seed} downloads it from the hub first, in its own run" if fanout.seed else ""
    report(f"fan-out {what}: {len(fanout.stale)} hosts need it, held by {held}{seed}")
    for number, copies in enumerate(fanout.rounds(settings.per_source, labels), 1):
        fanout.planned.update({c.target: c.source for c in copies})
        report(f"  round {number}: " + ", ".join(f"{c.target} <- {c.source}" for c in copies))
    for host, why in fanout.skipped.items():
        report(f"  {host}: left to its own {'push' if fanout.hub is None else 'download'} ({why})")


def with_fanned_out(
    contexts: Mapping[str, HostContext], found: Sequence[FolderFanout]
) -> dict[str, HostContext]:
    """--check: each target's context names the folders the fan-out brings it, so its plan pushes none."""
    folders: dict[str, set[str]] = {}
    for fanout in found:
        for target in fanout.planned:
            folders.setdefault(target, set()).add(fanout.folder)
    return {n: replace(c, fanned_out=frozenset(folders.get(n, ()))) for n, c in contexts.items()}


def fan_out_first(
    playbook: Playbook,
    contexts: dict[str, HostContext],
    settings: StagingSettings,
    check: bool,
    forks: int,
    report: Callable[[str], None],
    offline: bool = False,
) -> tuple[Staged, dict[str, HostContext]]:
    """apply's step before the per-host runs, for a playbook that stages models: the fan-outs (shown or
    run, the hub seeds' left to the run), and the contexts the runs get (with --check, each names what
    the fan-out brings it)."""
    if not playbook.runs("model_staging"):
        return Staged(), contexts
    lister = None if offline else hub_listing
    staged = stage_folders(contexts, settings, check, forks, FANOUT_TIMEOUT_S, report, lister)
    return staged, with_fanned_out(contexts, staged.found) if check else contexts
