"""The hub models' fan-out at the edge: a hub model several hosts stage crosses the hub's link once. A
host that holds it, or else a seed host whose own run goes first, serves it to the others host to host; each
blob is checked against the hub's own listing, which the controller reads. A host left without a copy
downloads it in its own run, as before."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlparse

from vllmctl.errors import TransportError
from vllmctl.fanout import hub
from vllmctl.fanout.schedule import Copy, FolderFanout
from vllmctl.ops.model_stage import DISK_MARGIN, hub_marker_content, hub_staged, staged_marker
from vllmctl.paths import HUB_CACHE
from vllmctl.runner.core.results import HostResult
from vllmctl.runner.fanout.copies import Copier, CopyFailed
from vllmctl.runner.fleet.hosts import on_each_host
from vllmctl.tasks.desired import HostContext
from vllmctl.tasks.provision import hub_downloads
from vllmctl.transport import SshTransport

Wants = dict[tuple[str, str], dict[str, list[dict[str, Any]]]]  # (repo, revision) -> host -> its downloads
Lister = Callable[[str, str, HostContext], hub.HubSnapshot]


def hub_wants(contexts: Mapping[str, HostContext], limit: int | None = None) -> Wants:
    """Each hub repo and revision the hosts stage, with each host's downloads of it (a repo may be staged
    under several keys); `limit` bounds the hosts read per repo."""
    wants: Wants = {}
    for name, ctx in contexts.items():
        for args in hub_downloads(ctx):
            hosts = wants.setdefault((str(args["repo"]), str(args.get("revision") or "main")), {})
            if limit is None or name in hosts or len(hosts) < limit:
                hosts.setdefault(name, []).append(args)
    return wants


def hub_listing(repo: str, revision: str, ctx: HostContext) -> hub.HubSnapshot:
    """The hub's own listing of `repo` at `revision`, read by the controller with the inventory's hub token
    and the hosts' HF_ENDPOINT (host var `env`), where the inventory gives them."""
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import RepoFile

    endpoint = str(ctx.host.vars.get("env", {}).get("HF_ENDPOINT") or os.environ.get("HF_ENDPOINT") or "")
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        raise ConnectionError("HF_HUB_OFFLINE is set on the controller")
    socket.getaddrinfo(urlparse(endpoint or "https://huggingface.co").hostname or "huggingface.co", 443)
    token = {name.upper(): value for name, value in ctx.secrets.items()}.get("HF_TOKEN")
    api = HfApi(endpoint=endpoint or None, token=token)
    commit = api.model_info(repo, revision=revision).sha or ""
    entries = [
        {"path": f.path, "size": f.size, "blob_id": f.blob_id, "lfs_sha256": f.lfs.sha256 if f.lfs else ""}
        for f in api.list_repo_tree(repo, revision=commit, recursive=True)
        if isinstance(f, RepoFile)
    ]
    return hub.snapshot_from(repo, revision, commit, entries)


def _holds(downloads: Sequence[Mapping[str, Any]], facts: Mapping[str, Any]) -> bool:
    """One of the host's downloads of this repo and revision is staged (ops/model_stage.py's own test)."""
    return any(hub_staged(a, facts.get("paths") or {}) for a in downloads)


def survey_hub(
    contexts: Mapping[str, HostContext],
    peers: Mapping[str, HostContext],
    forks: int,
    timeout: float,
    report: Callable[[str], None],
    peers_read: int,
    lister: Lister | None = hub_listing,
) -> tuple[list[FolderFanout], dict[str, dict[str, list[dict[str, Any]]]]]:
    """The hub models worth fanning out (two hosts stage one), what each host holds (one round trip per
    host; at most `peers_read` hosts outside --limit per model), and each folder's downloads per host (a
    copy stamps their markers; a source found corrupt forgets them)."""
    selected = hub_wants(contexts)
    outside = {k: v for k, v in hub_wants(peers, peers_read).items() if k in selected}
    wanted = {k: v for k, v in selected.items() if len(v) + len(outside.get(k, {})) >= 2}
    if lister is None:
        for repo, revision in wanted:
            report(f"hub fan-out {repo}@{revision}: not run (--offline: the hub's listing is not read); each "
                   "host downloads it in its own run")  # fmt: skip
        return [], {}
    everyone = {**contexts, **peers}
    markers: dict[str, set[str]] = {}
    for hosts in [*wanted.values(), *(v for k, v in outside.items() if k in wanted)]:
        for host, downloads in hosts.items():
            markers.setdefault(host, set()).update(staged_marker(str(a["model"])) for a in downloads)

    def read(remote: Any) -> dict[str, Any]:
        mine = tuple(sorted(markers[remote.name]))
        return {"facts": remote.gather({"paths": mine, "disk_free": (HUB_CACHE,)}, min(timeout, 120))}

    gathered = on_each_host({h: everyone[h] for h in markers}, read, forks)
    found, marked = [], {}
    for (repo, revision), hosts in wanted.items():
        outside_hosts = outside.get((repo, revision), {})
        held = [h for h, d in {**hosts, **outside_hosts}.items() if _holds(d, gathered[h].get("facts", {}))]
        needs = [h for h in hosts if h not in held]
        if not needs or (not held and len(needs) < 2):
            continue  # the listing is read only when a copy could be made
        try:
            snapshot = lister(repo, revision, contexts[next(iter(hosts))])
        except Exception as exc:  # the hub client raises many types (offline, gated, 404); all mean "unread"
            report(f"hub fan-out {repo}@{revision}: not run, the hub's listing is unread ({exc}); each host "
                   "downloads it in its own run")  # fmt: skip
            continue
        fanout = FolderFanout(snapshot.folder, snapshot.blobs(), held, {}, {}, hub=snapshot)
        for host in needs:
            _classify(fanout, host, gathered[host])
        if not fanout.holders and len(fanout.stale) >= 2:
            fanout.seed = next(iter(fanout.stale))
            del fanout.stale[fanout.seed]
        if fanout.stale and (fanout.holders or fanout.seed):
            found.append(fanout)
            marked[fanout.folder] = {**outside_hosts, **hosts}
    return found, marked


def _classify(fanout: FolderFanout, host: str, result: Mapping[str, Any]) -> None:
    """A host that lacks the model: a target, or left to its own download (facts unread, no room)."""
    if "error" in result:
        fanout.skipped[host] = f"facts not read: {result['error']}"
        return
    free = ((result["facts"].get("disk_free") or {}).get(HUB_CACHE) or {}).get("available_mib")
    needed = sum(int(f["size"]) for f in fanout.files) / 2**20 * DISK_MARGIN
    if free is not None and free < needed:
        fanout.skipped[host] = f"{free:,} MiB free, {needed:,.0f} MiB needed"
    else:
        fanout.stale[host] = list(fanout.files)


class HubCopier(Copier):
    """A copy of a hub model's blobs, each checked by its hub hash, then laid out as the hub cache."""

    def __init__(
        self,
        fanout: FolderFanout,
        contexts: Mapping[str, HostContext],
        timeout: float,
        token: str,
        downloads: Mapping[str, Sequence[Mapping[str, Any]]],
    ) -> None:
        super().__init__(fanout, contexts, timeout, token)
        assert fanout.hub is not None
        self.snapshot: hub.HubSnapshot = fanout.hub
        self.downloads = downloads  # host -> the hub downloads of this repo its own run would make

    def extra_files(self, stale: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
        sums = hub.git_sums(self.snapshot, (str(f["name"]) for f in stale))
        laid = [
            ("git_check.py", hub.GIT_CHECK),
            ("lay_out.py", hub.LAY_OUT),
            (hub.LINKS, self.snapshot.links_json()),
        ]
        return [*laid, *([(hub.GIT_SUMS, sums)] if sums else [])]

    def finish(self, target: SshTransport, keydir: str, copy: Copy) -> None:
        laid = target.run(hub.lay_out(keydir, self.fanout.folder), sudo=True, timeout=120)
        if not laid.ok:
            raise CopyFailed("target", laid.failure("laying out the hub cache"))
        staged = [
            (staged_marker(str(a["model"])), hub_marker_content(a), a.get("link"))
            for a in self.downloads.get(copy.target, ())
        ]
        stamped = target.run(
            hub.stamp(self.fanout.folder, self.snapshot.commit, staged), sudo=True, timeout=60
        )
        if not stamped.ok:
            raise CopyFailed("target", stamped.failure("writing the staged markers"))

    def distrust(self, source: SshTransport, stderr: str) -> None:
        markers = [staged_marker(str(a["model"])) for a in self.downloads.get(source.target.name, ())]
        script = hub.forget(self.fanout.folder, markers, hub.failed_blobs(stderr))
        with contextlib.suppress(TransportError):
            source.run(script, sudo=True, timeout=60)


def seeds_of(found: Sequence[FolderFanout]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(f.seed for f in found if f.seed))


def after_seeds(
    found: Sequence[FolderFanout],
    contexts: Mapping[str, HostContext],
    downloads: Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]],
    start: Callable[[FolderFanout], None],
    timeout: float,
) -> Callable[[Mapping[str, HostResult]], None]:
    """The hook run once the seeds' own runs ended: each seed that now holds its model serves the others;
    a seed that failed leaves its model to each host's own download. `downloads`: the survey's, per folder
    and host."""

    def after(outcomes: Mapping[str, HostResult]) -> None:
        seeded = [f for f in found if f.seed]
        markers: dict[str, set[str]] = {}
        for fanout in seeded:
            mine = downloads[fanout.folder][fanout.seed]
            markers.setdefault(fanout.seed, set()).update(staged_marker(str(a["model"])) for a in mine)

        def read(remote: Any) -> dict[str, Any]:
            mine = tuple(sorted(markers[remote.name]))
            return {"facts": remote.gather({"paths": mine}, min(timeout, 120))}

        ok = [seed for seed in markers if seed in outcomes and outcomes[seed].status == "ok"]
        gathered = on_each_host({h: contexts[h] for h in ok}, read, len(ok) or 1)
        for fanout in seeded:
            facts = gathered.get(fanout.seed, {}).get("facts", {})
            if _holds(downloads[fanout.folder][fanout.seed], facts):
                fanout.holders.append(fanout.seed)
                start(fanout)
                continue
            why = outcomes[fanout.seed].error if fanout.seed in outcomes else "not run"
            for host in list(fanout.stale):
                fanout.skipped[host] = f"the seed {fanout.seed} holds no copy ({why or 'no marker'})"
            fanout.stale.clear()

    return after
