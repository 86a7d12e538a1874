"""Controller side of model staging (an edge: it reads local files): the sha256 manifest of a local model
directory, cached by size and mtime so an unchanged multi-GB model is not hashed again on every apply."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from vllmctl.errors import InputError

FileEntry = Mapping[str, Any]  # {name, source, sha256, size}
CHUNK = 1 << 20
SKIPPED = (".vllmctl-manifest",)


def _cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "vllmctl" / "sha256.json"


def _load_cache(path: Path) -> dict[str, Any]:
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def local_manifest(directory: str, cache_file: Path | None = None) -> list[dict[str, Any]] | None:
    """Every regular file under `directory` (names relative, `/`-separated); None if it is not a directory."""
    root = Path(directory)
    if not root.is_dir():
        return None
    cache_file = cache_file or _cache_path()
    cache = _load_cache(cache_file)
    entries: list[dict[str, Any]] = []
    try:
        for path in sorted(p for p in root.rglob("*") if p.is_file() and p.name not in SKIPPED):
            stat = path.stat()
            key = str(path.resolve())
            seen = cache.get(key)
            if not (seen and seen["size"] == stat.st_size and seen["mtime_ns"] == stat.st_mtime_ns):
                seen = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha256_file(path)}
                cache[key] = seen
            name = path.relative_to(root).as_posix()
            entries.append(
                {"name": name, "source": str(path), "sha256": seen["sha256"], "size": stat.st_size}
            )
    except OSError as exc:
        raise InputError(
            f"cannot read model directory {directory}: {exc.strerror}", "check its permissions"
        ) from exc
    try:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        cache_file.write_text(json.dumps(cache))
    except OSError:
        pass  # the cache only saves time
    return entries


def local_models(sources: Iterable[str]) -> dict[str, list[dict[str, Any]] | None]:
    """Manifests of the absolute (local) model sources; hub ids are left to the hosts to download."""
    return {source: local_manifest(source) for source in sorted(set(sources)) if source.startswith("/")}
