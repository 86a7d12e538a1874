"""Disk facts: free space under a path (its nearest existing parent) and the staged-model manifests
(recorded sha256 per file plus the sizes actually on disk), cheap enough to gather on every apply."""

from __future__ import annotations

from typing import Any

from vllmctl.facts.base import Fact, lines, quoted_words

MANIFEST_NAME = ".vllmctl-manifest"
DIR_MARK = "@@dir"


def disk_free_command(args: tuple[str, ...]) -> str:
    return (
        f"for p in {quoted_words(args)}; do q=$p; "
        'while [ ! -e "$q" ] && [ "$q" != / ]; do q=$(dirname -- "$q"); done; '
        'printf \'%s\\t\' "$p"; df -Pk -- "$q" | tail -n 1; done'
    )


def parse_disk_free(output: str, exit_code: int) -> dict[str, dict[str, int]]:
    free: dict[str, dict[str, int]] = {}
    for line in lines(output):
        path, _, row = line.partition("\t")
        words = row.split()
        if len(words) >= 6 and words[1].isdigit() and words[3].isdigit():
            free[path] = {"size_mib": int(words[1]) // 1024, "available_mib": int(words[3]) // 1024}
    return free


def manifest_command(args: tuple[str, ...]) -> str:
    """Per directory: the manifest vllmctl wrote after staging (`sha256  size  name`), then the sizes seen."""
    return (
        f"for d in {quoted_words(args)}; do printf '{DIR_MARK}\\t%s\\n' \"$d\"; "
        '[ -d "$d" ] || continue; '
        f'echo @@recorded; cat -- "$d/{MANIFEST_NAME}" 2>/dev/null; '
        f"echo @@seen; (cd -- \"$d\" && find . -type f ! -name {MANIFEST_NAME} -printf '%s\\t%P\\n'); done"
    )


def parse_manifests(output: str, exit_code: int) -> dict[str, dict[str, Any]]:
    """dir -> {exists, recorded: {name: {sha256, size}}, seen: {name: size}}."""
    dirs: dict[str, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    part = ""
    for line in output.splitlines():
        if line.startswith(DIR_MARK + "\t"):
            current = {"exists": False, "recorded": {}, "seen": {}}
            dirs[line[len(DIR_MARK) + 1 :]] = current
            part = ""
        elif current is None:
            continue
        elif line in ("@@recorded", "@@seen"):
            current["exists"] = True
            part = line[2:]
        elif part == "recorded":
            digest, _, rest = line.partition("  ")
            size, _, name = rest.partition("  ")
            if len(digest) == 64 and size.isdigit() and name:
                current["recorded"][name] = {"sha256": digest, "size": int(size)}
        elif part == "seen":
            size, _, name = line.partition("\t")
            if size.isdigit() and name:
                current["seen"][name] = int(size)
    return dirs


DISK_FREE = Fact("disk_free", disk_free_command, parse_disk_free, needs_args=True)
MODEL_MANIFESTS = Fact("model_manifests", manifest_command, parse_manifests, needs_args=True)
