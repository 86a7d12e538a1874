"""Controller side of model staging (an edge: it reads local files): the sha256 manifest of a local model
directory, cached by size and mtime so an unchanged multi-GB model is not hashed again on every apply.
A symlink is followed only while it stays inside the directory: a model folder cannot push other files."""

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


def _refuse_link(root: Path, name: str, why: str) -> InputError:
    return InputError(
        f"model directory {root}: {name} is a symlink {why}",
        "copy the file into the model directory (e.g. `cp -L`) or remove the link: vllmctl follows no "
        "link out of a model directory, so a model cannot push other files from this machine",
    )


def model_files(root: Path) -> list[tuple[str, Path]]:
    """(name relative to `root`, the real file to read) for every regular file, sorted by name.

    A symlink inside `root` counts as the file or directory it points to, under the link's name; one that
    points outside `root`, nowhere, or back up its own path is refused with an InputError naming it.
    """
    top = root.resolve()
    found: list[tuple[str, Path]] = []

    def visit(directory: Path, prefix: str, ancestors: frozenset[Path]) -> None:
        for entry in sorted(os.scandir(directory), key=lambda e: e.name):
            name, path = prefix + entry.name, Path(entry.path)
            if "\n" in name or "\r" in name:
                raise InputError(
                    f"model directory {root}: {name!r} has a line break in its name", "rename it"
                )
            real = path.resolve() if entry.is_symlink() else path
            if entry.is_symlink():
                if real != top and top not in real.parents:
                    raise _refuse_link(root, name, f"to {real}, outside the model directory")
                if not real.exists():
                    raise _refuse_link(root, name, f"to {real}, which does not exist")
            if real.is_dir():
                if real.resolve() in ancestors:
                    raise _refuse_link(root, name, "to a directory that contains it (a loop)")
                visit(real, name + "/", ancestors | {real.resolve()})
            elif real.is_file() and entry.name not in SKIPPED:
                found.append((name, real))

    visit(top, "", frozenset({top}))
    return sorted(found)


def local_manifest(directory: str, cache_file: Path | None = None) -> list[dict[str, Any]] | None:
    """Every regular file under `directory` (names relative, `/`-separated); None if it is not a directory.
    `source` is the real file pushed (a link's target), read again when pushed and checked by sha256."""
    root = Path(directory)
    if not root.is_dir():
        return None
    cache_file = cache_file or _cache_path()
    cache = _load_cache(cache_file)
    entries: list[dict[str, Any]] = []
    try:
        for name, path in model_files(root):
            stat = path.stat()
            key = str(path)
            seen = cache.get(key)
            if not (seen and seen["size"] == stat.st_size and seen["mtime_ns"] == stat.st_mtime_ns):
                seen = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha256_file(path)}
                cache[key] = seen
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
