"""File-system operations: directory, file (content, mode, owner), env file (0600, secret), systemd unit."""

from __future__ import annotations

from vllmctl.ops.base import (
    Args,
    Command,
    FactRequests,
    Facts,
    FileChange,
    Operation,
    OpError,
    Step,
    Upload,
    make_dirs,
    noop,
    run,
)
from vllmctl.paths import UNIT_DIR
from vllmctl.render.quoting import confined_path, unit_file_name


def config_file(path: str, content: str, facts: Facts) -> tuple[tuple[Command, Upload], FileChange] | None:
    """A root-owned 0644 config file vllmctl writes whole (modprobe.d, apt.conf.d, modules-load.d): None when
    the host has this content; else its directory made and the upload, with the diff. Refuses a non-file."""
    current = (facts.get("paths") or {}).get(path, {"type": "absent"})
    if current["type"] not in ("absent", "file"):
        raise OpError(f"{path} is a {current['type']}, not a file", f"remove {path}")
    upload = Upload(path, content)
    if current["type"] == "file" and current.get("sha256") == upload.sha256:
        return None
    # a minimal system (the lab's) may lack the directory until its package is installed
    actions = (make_dirs(path.rsplit("/", 1)[0]), upload)
    return actions, FileChange(path, content, exists=current["type"] == "file")


def _path_fact(args: Args) -> FactRequests:
    return {"paths": (str(args["path"]),)}


def _ownership_fixes(path: str, args: Args, current: Facts) -> list[str]:
    reasons = []
    if current.get("mode") != args["mode"]:
        reasons.append("mode")
    if (current.get("owner"), current.get("group")) != (args["owner"], args["group"]):
        reasons.append("owner")
    return reasons


def _plan_directory(args: Args, facts: Facts) -> Step:
    path = str(args["path"])
    current = facts["paths"].get(path, {"type": "absent"})
    if current["type"] == "absent":
        return Step(
            "directory",
            path,
            (run("install", "-d", "-m", args["mode"], "-o", args["owner"], "-g", args["group"], path),),
        )
    if current["type"] != "directory":
        raise OpError(
            f"{path} exists and is a {current['type']}, not a directory",
            f"move it away on the host (e.g. `mv {path} {path}.bak`) and apply again",
        )
    return _fix_ownership("directory", path, args, current) or noop(
        "directory", path, f"directory {path} exists with mode {args['mode']}"
    )


def _fix_ownership(op: str, path: str, args: Args, current: Facts) -> Step | None:
    actions = []
    wrong = _ownership_fixes(path, args, current)
    if "mode" in wrong:
        actions.append(run("chmod", args["mode"], path))
    if "owner" in wrong:
        actions.append(run("chown", f"{args['owner']}:{args['group']}", path))
    return Step(op, path, tuple(actions)) if actions else None


def _plan_file(args: Args, facts: Facts, op: str = "file") -> Step:
    path = str(args["path"])
    content = str(args["content"])
    secret = bool(args.get("secret", False))
    current = facts["paths"].get(path, {"type": "absent"})
    if current["type"] not in ("absent", "file"):
        raise OpError(
            f"{path} exists and is a {current['type']}, not a file",
            f"remove {path} on the host and apply again",
        )
    upload = Upload(path, content, args["mode"], args["owner"], args["group"], secret)
    if current["type"] == "absent" or current.get("sha256") != upload.sha256:
        change = FileChange(path, content, exists=current["type"] == "file", secret=secret)
        return Step(op, path, (upload,), change=change)
    return _fix_ownership(op, path, args, current) or noop(op, path, f"{path} is up to date")


def _plan_env_file(args: Args, facts: Facts) -> Step:
    return _plan_file({**args, "mode": "0600", "secret": True}, facts, op="env_file")


def unit_path(name: str) -> str:
    return confined_path(UNIT_DIR, unit_file_name(name))


def _unit_facts(args: Args) -> FactRequests:
    return {"paths": (unit_path(str(args["name"])),), "units": ()}


def _plan_systemd_unit(args: Args, facts: Facts) -> Step:
    name = str(args["name"])
    file_args = {"path": unit_path(name), "content": args["content"], "mode": "0644", "owner": "root"}
    step = _plan_file({**file_args, "group": "root"}, facts, op="systemd_unit")
    if not step.changed:
        # the file is right but systemd still runs the old text (an apply died between upload and reload):
        # a restart now would start the old command line, so the reload comes from state too
        if facts.get("units", {}).get(name, {}).get("need_daemon_reload") == "yes":
            return Step("systemd_unit", name, (run("systemctl", "daemon-reload"),))
        return noop("systemd_unit", name, f"unit {name} is up to date")
    return Step("systemd_unit", name, (*step.actions, run("systemctl", "daemon-reload")), change=step.change)


OWNED = {"mode": "0644", "owner": "root", "group": "root"}

DIRECTORY = Operation("directory", _path_fact, _plan_directory, {**OWNED, "mode": "0755"})
FILE = Operation("file", _path_fact, _plan_file, OWNED)
ENV_FILE = Operation("env_file", _path_fact, _plan_env_file, OWNED)
SYSTEMD_UNIT = Operation("systemd_unit", _unit_facts, _plan_systemd_unit)
