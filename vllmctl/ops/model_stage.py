"""Model staging: hub models downloaded on the host (huggingface_hub in the engine venv, token read from
the 0600 env file, never argv) and controller directories synced by sha256 manifest, after a disk check."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vllmctl.facts.disk import MANIFEST_NAME
from vllmctl.ops.base import (
    Args,
    Command,
    FactRequests,
    Facts,
    Operation,
    OpError,
    Step,
    Upload,
    make_dirs,
    noop,
    sha256_text,
)
from vllmctl.ops.env_reader import READ_ENV
from vllmctl.paths import HUB_CACHE, HUB_DOWNLOAD_HELPER
from vllmctl.render.quoting import (
    QuotingError,
    confined_path,
    host_path,
    path_component,
    shell_join,
    shell_word,
)

DISK_MARGIN = 1.1  # room for the temp files a download or an upload writes before renaming

# Runs in the engine venv as root: the env file (0600) is read here so the token never reaches argv.
HUB_DOWNLOAD = (
    READ_ENV
    + """
import os, sys
env_file, repo, revision, cache = sys.argv[1:5]
env = read_env(env_file)
os.environ.update({k: v for k, v in env.items() if k.startswith(("HF_", "HUGGING"))})
os.environ.pop("HF_HUB_OFFLINE", None)
from huggingface_hub import snapshot_download
path = snapshot_download(repo, revision=revision or None, cache_dir=cache, token=env.get("HF_TOKEN") or None)
print(path)
"""
)


@dataclass(frozen=True)
class PushFile:
    """A controller file streamed to the host (SFTP to a temp name, then moved into place): never argv."""

    source: str
    path: str
    size: int
    sha256: str
    mode: str = "0644"
    owner: str = "root"
    group: str = "root"
    root: str = ""  # the file is written only where its directory resolves inside this one

    def render(self) -> str:
        return f"push {self.source} -> {self.path} ({self.size} bytes, sha256 {self.sha256[:12]})"


def staged_marker(model: str) -> str:
    return confined_path(f"{HUB_CACHE}/.vllmctl-staged", path_component(model))


def _hub_facts(args: Args) -> FactRequests:
    return {"paths": (staged_marker(str(args["model"])),), "disk_free": (HUB_CACHE,)}


def _check_space(where: str, needed_mib: float, facts: Facts, what: str) -> None:
    free = (facts.get("disk_free") or {}).get(where)
    if free is None or needed_mib <= 0:
        return
    if free["available_mib"] < needed_mib * DISK_MARGIN:
        raise OpError(
            f"not enough disk for {what}: {needed_mib:,.0f} MiB needed (+10% margin) under {where}, "
            f"{free['available_mib']:,} MiB free",
            f"free space on the filesystem holding {where}, or put fewer models on this host",
        )


def hub_marker_content(args: Args) -> str:
    link = f" -> {args['link']}" if args.get("link") else ""
    return f"{args['repo']}@{args.get('revision') or 'main'}{link}\n"


def hub_staged(args: Args, paths: Facts) -> bool:
    """The download's staged marker (a `paths` fact) holds what this download writes: nothing to do."""
    current = paths.get(staged_marker(str(args["model"])), {})
    return bool(current.get("sha256") == sha256_text(hub_marker_content(args)))


def _plan_hub(args: Args, facts: Facts) -> Step:
    model, repo = str(args["model"]), str(args["repo"])
    marker = staged_marker(model)
    content = hub_marker_content(args)
    if hub_staged(args, facts["paths"]):
        return noop(
            "model_download", model, f"{repo}@{args.get('revision') or 'main'} is staged in {HUB_CACHE}"
        )
    if args.get("fanned_out"):  # --check: the fan-out's copy comes first and marks it staged
        return noop("model_download", model, f"{repo}@{args.get('revision') or 'main'} copied by the fan-out")
    _check_space(HUB_CACHE, float(args.get("size_mib") or 0), facts, f"{repo}")
    python = f"{args['venv']}/bin/python"
    revision = str(args.get("revision") or "")
    argv = [python, HUB_DOWNLOAD_HELPER, str(args["env_file"]), repo, revision, HUB_CACHE]
    dirs = [posixpath.dirname(HUB_DOWNLOAD_HELPER), HUB_CACHE, posixpath.dirname(marker)]
    download = f"umask 022 && {shell_join(argv)} >/dev/null"
    if args.get("link"):  # an adapter: its snapshot linked at a fixed path the unit names
        link = _link_path(args["link"])
        dirs.append(posixpath.dirname(link))
        download = f'umask 022 && p=$({shell_join(argv)}) && ln -sfn -- "$p" {shell_word(link)}'
    return Step(
        "model_download",
        model,
        (
            make_dirs(*dirs),
            Upload(HUB_DOWNLOAD_HELPER, HUB_DOWNLOAD, "0755"),
            Command(shell=download),
            Upload(marker, content),
        ),
    )


def _link_path(link: Any) -> str:
    try:
        return host_path(link)
    except QuotingError as exc:
        raise OpError(f"adapter link: {exc.message}", "give an absolute path without `..`") from exc


def manifest_text(files: Sequence[Mapping[str, Any]]) -> str:
    """The host-side record, `sha256  size  name` per line, written after every file arrived."""
    return "".join(
        f"{f['sha256']}  {f['size']}  {f['name']}\n" for f in sorted(files, key=lambda f: f["name"])
    )


def stale_files(files: Sequence[Mapping[str, Any]], host: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The controller's files the host lacks: not in its manifest with that sha256, or not that size on disk
    (`host`: a `model_manifests` entry, {recorded, seen})."""
    recorded, seen = host.get("recorded", {}), host.get("seen", {})
    return [
        f
        for f in files
        if recorded.get(f["name"], {}).get("sha256") != f["sha256"] or seen.get(f["name"]) != f["size"]
    ]


def _sync_facts(args: Args) -> FactRequests:
    dest = str(args["dest"])
    return {"model_manifests": (dest,), "disk_free": (dest,)}


def delete_under(dest: str, names: Sequence[str]) -> Command:
    """`rm -f` of each name only where its directory resolves on the host (symlinks followed) inside `dest`,
    so a link planted there cannot aim the delete elsewhere; `rm` never follows the name itself."""
    return Command(
        shell=f"d=$(realpath -e -- {shell_word(dest)}) || exit 0; for n in {shell_join(names)}; do "
        'p=$(realpath -m -- "$(dirname -- "$d/$n")"); case "$p/" in "$d"/*) rm -f -- "$p/${n##*/}" ;; '
        '*) echo "not deleted: $n resolves outside $d" >&2 ;; esac; done'
    )  # the same test as quoting.shell_resolves_under, on each name of the loop


def _confined_names(dest: str, names: Iterable[str]) -> tuple[list[str], list[str]]:
    """(names inside dest, names that are not), for names read back from the host's manifest."""
    inside, outside = [], []
    for name in names:
        try:
            confined_path(dest, name)
            inside.append(name)
        except QuotingError:
            outside.append(name)
    return inside, outside


def _sync_dest(args: Args) -> str:
    try:
        return host_path(args["dest"])
    except QuotingError as exc:
        raise OpError(f"model directory: {exc.message}", "give an absolute path without `..`") from exc


def _local_names(dest: str, files: Sequence[Mapping[str, Any]]) -> None:
    for f in files:
        try:
            confined_path(dest, f["name"])
        except QuotingError as exc:
            raise OpError(f"model file from the controller: {exc.message}", "rename the file") from exc


def _plan_sync(args: Args, facts: Facts) -> Step:
    """`files`: [{name, source, sha256, size}] measured on the controller; None when the source is absent.

    Names in the host's manifest are host data: one that is not a relative path inside dest (`../x`,
    `/etc/shadow`) is never deleted, only reported, and the rewritten manifest drops it."""
    dest = _sync_dest(args)
    host: Facts = (facts.get("model_manifests") or {}).get(
        dest, {"exists": False, "recorded": {}, "seen": {}}
    )
    files = args.get("files")
    if files is None:
        if host["exists"] and host["seen"]:
            return noop(
                "model_sync", dest, f"{dest} is not on the controller; the host has {len(host['seen'])} files"
            )
        raise OpError(
            f"model directory {dest} exists neither on the controller nor on the host",
            "fix the model's source path, or copy the model to the host yourself",
        )
    _local_names(dest, files)
    stale = stale_files(files, host)
    known, ignored = _confined_names(dest, host["recorded"])
    gone = sorted(set(known) - {f["name"] for f in files})
    manifest = posixpath.join(dest, MANIFEST_NAME)
    warnings = tuple(
        f"{manifest} on the host names {name!r}: not a relative path inside {dest}; ignored, never deleted"
        for name in sorted(ignored)
    )
    if not stale and not gone and not ignored and host["exists"]:
        return noop("model_sync", dest, f"{len(files)} files in {dest} match their sha256")
    if args.get("fanned_out") and not gone and not ignored:  # --check: the fan-out's copy comes first
        return noop("model_sync", dest, f"{len(stale)} files copied by the fan-out before this run")
    _check_space(dest, sum(f["size"] for f in stale) / 2**20, facts, f"model files for {dest}")
    owner, group = str(args.get("owner", "root")), str(args.get("group", "root"))
    dirs = sorted({posixpath.dirname(posixpath.join(dest, f["name"])) for f in stale} | {dest})
    actions: list[Any] = [make_dirs(*dirs)]
    actions += [delete_under(dest, gone)] if gone else []
    actions += [
        PushFile(
            f["source"], posixpath.join(dest, f["name"]), f["size"], f["sha256"], "0644", owner, group, dest
        )
        for f in sorted(stale, key=lambda f: f["name"])
    ]
    actions.append(Upload(posixpath.join(dest, MANIFEST_NAME), manifest_text(files)))
    return Step("model_sync", dest, tuple(actions), warnings=warnings)


MODEL_DOWNLOAD = Operation(
    "model_download", _hub_facts, _plan_hub, {"revision": None, "size_mib": 0, "link": None}
)
MODEL_SYNC = Operation("model_sync", _sync_facts, _plan_sync, {"fanned_out": False})
