"""The no-op fast path's witness: what a host's facts rest on, read without sudo or PID 1 (`stat` of the
files, unit directories, drop-ins, enablement links, invocation links and cgroups they come from), so a
later run can trust facts read under sudo for as long as the witness reads the same."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from vllmctl.paths import CGROUP_ROOTS, STATE_DIR, UNIT_DIR, UNIT_PREFIX
from vllmctl.render.quoting import shell_join

# facts whose own command reads nothing private: the fast path runs them as the SSH user, as they are
LIVE_FACTS = frozenset({"users"})
# inode, size, mtime and ctime in ns, raw mode, owner, group, and a symlink's target (`%N`)
STAT_FORMAT = "%n\\t%i\\t%s\\t%.9Y\\t%.9Z\\t%f\\t%u\\t%g\\t%N\\n"
# systemd's system unit search path (systemd.unit(5)), highest priority first: a fragment or drop-in of a
# managed unit appearing in any of them changes what PID 1 would load
UNIT_SEARCH_DIRS = (
    "/etc/systemd/system.control", "/run/systemd/system.control", "/run/systemd/transient",
    "/run/systemd/generator.early", UNIT_DIR, "/etc/systemd/system.attached", "/run/systemd/system",
    "/run/systemd/system.attached", "/run/systemd/generator", "/usr/local/lib/systemd/system",
    "/usr/lib/systemd/system", "/lib/systemd/system", "/run/systemd/generator.late",
)  # fmt: skip
# where PID 1 shows that a unit runs: its invocation link, and its cgroup (v2, or a container's hybrid tree)
RUNTIME_GLOBS = (
    f"/run/systemd/units/invocation:{UNIT_PREFIX}*",
    *(f"{root}/system.slice/{UNIT_PREFIX}*" for root in CGROUP_ROOTS),
)
SETTLE_S = 2.0  # a file changed this recently may change again within the same timestamp tick


def _unit_globs() -> list[str]:
    """Every managed unit's fragments and drop-ins in every search directory, the `service.d` drop-ins
    that apply to all services, and the `.wants`/`.requires` links that enable a managed unit."""
    globs = [UNIT_DIR]
    for base in UNIT_SEARCH_DIRS:
        globs += [f"{base}/{UNIT_PREFIX}*", f"{base}/{UNIT_PREFIX}*.d/*", f"{base}/service.d"]
        globs += [f"{base}/service.d/*", f"{base}/*.wants/{UNIT_PREFIX}*"]
        globs.append(f"{base}/*.requires/{UNIT_PREFIX}*")
    return globs + list(RUNTIME_GLOBS)


def live_requests(requests: Mapping[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """The requested facts the fast path reads afresh as the SSH user."""
    return {name: args for name, args in requests.items() if name in LIVE_FACTS}


def witness_words(requests: Mapping[str, tuple[str, ...]]) -> tuple[list[str], list[str]] | None:
    """(paths to stat, glob patterns to stat) covering every requested fact, or None when a requested fact
    has no witness (the run reads every fact under sudo, as without the fast path)."""
    paths: list[str] = []
    globs: list[str] = []
    for name, args in requests.items():
        if name in LIVE_FACTS:
            continue
        if name == "paths":
            if any(arg.startswith(STATE_DIR + "/") for arg in args):
                return None  # root's records: the SSH user cannot stat them, so no witness would match
            # owners and groups are shown by name: a uid that changes hands changes these files
            paths += [*args, "/etc/passwd", "/etc/group"]
        elif name == "applied":
            # the records are root's (0700): their directory changes with every record vllmctl writes
            # (written to a temp name and renamed, or removed); see docs/executor.md for what it misses
            paths.append(STATE_DIR)
        elif name == "units":
            globs += _unit_globs()
        else:
            return None
    return paths, globs


def witness_command(paths: Iterable[str], globs: Iterable[str]) -> str:
    """One `stat` of everything; globs are expanded by the shell (a pattern that matches nothing, or that
    the SSH user may not list, is stat'ed as itself and prints nothing). Paths are quoted, globs are ours."""
    words = " ".join([shell_join(sorted(set(paths))), *globs]).strip()
    return f"stat --printf '{STAT_FORMAT}' -- {words} 2>/dev/null; true" if words else "true"


def witness_lines(output: str) -> frozenset[str]:
    return frozenset(line for line in output.splitlines() if line.strip())


def witnessed_paths(lines: Iterable[str]) -> list[str]:
    """The paths a witness saw: the fast path stats them by name, so it needs no listing of root's dirs."""
    return sorted({line.split("\t", 1)[0] for line in lines})


def covers(lines: Iterable[str], requests: Mapping[str, tuple[str, ...]], facts: Mapping[str, Any]) -> bool:
    """The witness saw every path the facts found and the unit directory: a `stat` that printed nothing
    (another `stat`, a broken format) would otherwise read the same forever."""
    seen = set(witnessed_paths(lines))
    found = {path for path, info in facts.get("paths", {}).items() if info.get("type") != "absent"}
    return found <= seen and ("units" not in requests or UNIT_DIR in seen)


def settled(lines: Iterable[str], host_now: float) -> bool:
    """Every witnessed mtime and ctime is older than SETTLE_S before `host_now`: a change in the same
    timestamp tick as the last one would otherwise leave the witness as it was."""
    lines = list(lines)
    if not lines:
        return False
    for line in lines:
        fields = line.split("\t")
        if len(fields) < 5:
            return False
        try:
            if max(float(fields[3]), float(fields[4])) > host_now - SETTLE_S:
                return False
        except ValueError:
            return False
    return True
