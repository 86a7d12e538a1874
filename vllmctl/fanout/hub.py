"""A hub model's fan-out (pure): its snapshot as the hub lists it (commit, each file's git blob id and, for
LFS files, sha256), the blobs a target copies from a host that holds them, and the scripts that check each
blob against the hash the hub named it by and lay out huggingface_hub's cache (snapshot links, ref)."""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from vllmctl.fanout.scripts import GIT_SUMS as GIT_SUMS
from vllmctl.paths import HUB_CACHE
from vllmctl.render.quoting import QuotingError, confined_path, host_path, shell_join, shell_word

COMMIT = re.compile(r"[0-9a-f]{40}")
SHA256 = re.compile(r"[0-9a-f]{64}")
LINKS = "links.json"


@dataclass(frozen=True)
class HubFile:
    path: str  # in the repo, e.g. "config.json" or "tokenizer/vocab.json"
    size: int
    blob_id: str  # git's blob id (sha1): the cache's blob name of a file kept in git
    lfs_sha256: str = ""  # the cache's blob name of an LFS file, and its sha256

    @property
    def blob(self) -> str:
        return self.lfs_sha256 or self.blob_id


@dataclass(frozen=True)
class HubSnapshot:
    """One revision of a repo as the hub lists it: what every copy is checked against."""

    repo: str
    revision: str  # as the inventory gives it ("main" when none)
    commit: str
    files: tuple[HubFile, ...]

    @property
    def folder(self) -> str:
        return hub_folder(self.repo)

    def blobs(self) -> list[dict[str, Any]]:
        """The files a copy brings, as the fan-out's file entries (`blobs/<name>`, one per distinct blob);
        a git blob has no sha256 from the hub: its git id is checked instead (`git_sums`)."""
        seen: dict[str, dict[str, Any]] = {}
        for f in self.files:
            seen.setdefault(f.blob, {"name": f"blobs/{f.blob}", "size": f.size, "sha256": f.lfs_sha256})
        return sorted(seen.values(), key=lambda entry: str(entry["name"]))

    def links_json(self) -> str:
        links = sorted({(f.path, f.blob) for f in self.files})
        return json.dumps({"commit": self.commit, "revision": self.revision, "links": links})


def hub_folder(repo: str) -> str:
    """huggingface_hub's cache folder of a model repo (`models--org--name`)."""
    return confined_path(HUB_CACHE, "models--" + repo.replace("/", "--"))


def _checked_path(path: object) -> str:
    text = str(path)
    try:
        confined_path("/r", text)
    except QuotingError as exc:
        raise ValueError(f"hub file {text[:60]!r}: {exc.message}") from exc
    return text


def snapshot_from(repo: str, revision: str, commit: str, entries: Iterable[Mapping[str, Any]]) -> HubSnapshot:
    """The hub's listing (`list_repo_tree` entries: path, size, blob_id, lfs_sha256), every name and hash
    checked, since each becomes a path on the hosts."""
    if not COMMIT.fullmatch(commit):
        raise ValueError(f"{repo}: the hub's commit {commit[:60]!r} is not a commit hash")
    files = []
    for entry in entries:
        blob_id, lfs = str(entry.get("blob_id") or ""), str(entry.get("lfs_sha256") or "")
        if not COMMIT.fullmatch(blob_id) or (lfs and not SHA256.fullmatch(lfs)):
            raise ValueError(f"{repo}: {str(entry.get('path'))[:60]!r} has no valid blob id or sha256")
        files.append(HubFile(_checked_path(entry["path"]), int(entry["size"]), blob_id, lfs))
    if not files:
        raise ValueError(f"{repo}@{revision}: the hub lists no files")
    _checked_path(f"refs/{revision}")
    return HubSnapshot(repo, revision, commit, tuple(sorted(files, key=lambda f: f.path)))


def git_sums(snapshot: HubSnapshot, names: Iterable[str]) -> str:
    """`<blob id>  blobs/<id>` for each git-kept blob among `names`: checked on the target as git hashes."""
    wanted = set(names)
    return "".join(
        f"{f.blob_id}  blobs/{f.blob_id}\n"
        for f in snapshot.files
        if not f.lfs_sha256 and f"blobs/{f.blob_id}" in wanted
    )


# Run on the target in the copy's incoming directory: a git blob's id is sha1("blob <size>\0" + content).
GIT_CHECK = """import hashlib, os, sys
bad = []
for line in open(sys.argv[1]):
    oid, name = line.rstrip("\\n").split("  ", 1)
    with open(name, "rb") as handle:
        data = handle.read()
    if hashlib.sha1(b"blob %d\\0" % len(data) + data).hexdigest() != oid:
        bad.append(name)
        os.remove(name)
if bad:
    sys.exit("git blob id mismatch: " + " ".join(name + ": FAILED" for name in bad))
"""

# Run on the target as root once every blob is in place: huggingface_hub's own layout, so the host's
# download finds each file cached and fetches none (snapshots/<commit>/<path> -> ../../blobs/<blob>).
LAY_OUT = """import json, os, sys
folder, spec = sys.argv[1], json.load(open(sys.argv[2]))
top = os.path.realpath(folder)
def inside(path):
    # the directory resolved, never the name: an existing link must be replaced, not followed
    real = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
    if not real.startswith(top + os.sep):
        sys.exit("not writing outside " + folder + ": " + path)
    return real
snapshot = os.path.join(folder, "snapshots", spec["commit"])
for path, blob in spec["links"]:
    link = inside(os.path.join(snapshot, path))
    os.makedirs(os.path.dirname(link), exist_ok=True)
    target = os.path.relpath(os.path.join(folder, "blobs", blob), os.path.dirname(link))
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(target, link)
if spec["revision"] != spec["commit"]:
    ref = inside(os.path.join(folder, "refs", spec["revision"]))
    os.makedirs(os.path.dirname(ref), exist_ok=True)
    with open(ref, "w") as handle:
        handle.write(spec["commit"])
"""


def lay_out(keydir: str, folder: str) -> str:
    return "umask 022; " + shell_join(["python3", f"{keydir}/lay_out.py", folder, f"{keydir}/{LINKS}"])


def stamp(folder: str, commit: str, staged: Iterable[tuple[str, str, str | None]]) -> str:
    """Run on the target as root once the cache is laid out: each download's marker (path, content) as the
    host's own run would write it, after an adapter's link to the snapshot, so that run has nothing left to
    do and asks the hub nothing."""
    snapshot = shell_word(f"{folder}/snapshots/{commit}")
    parts = ["set -e", "umask 022"]
    for marker, content, link in staged:
        if link:
            where = host_path(link)
            parts.append(f"mkdir -p -- {shell_word(posixpath.dirname(where))}")
            parts.append(f"ln -sfn -- {snapshot} {shell_word(where)}")
        parts.append(f"mkdir -p -- {shell_word(posixpath.dirname(marker))}")
        parts.append(f"printf %s {shell_word(content)} > {shell_word(marker)}")
    return "; ".join(parts)


def forget(folder: str, markers: Iterable[str], names: Iterable[str]) -> str:
    """Run on a source found corrupt: its markers and the blobs that failed go, so its own run downloads
    them again (huggingface_hub skips a file whose blob is present)."""
    paths = [*markers, *(confined_path(folder, n) for n in names)]
    return "rm -f -- " + " ".join(shell_word(p) for p in paths)


FAILED = re.compile(r"(blobs/[0-9a-f]{40,64}): FAILED")


def failed_blobs(stderr: str) -> list[str]:
    """The blobs a pull found corrupt, from the sha256 or git check's message."""
    return sorted(set(FAILED.findall(stderr)))
