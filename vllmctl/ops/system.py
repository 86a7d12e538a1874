"""System operations: a service user, a service kept enabled/running (restarted from recorded state),
and a Python venv."""

from __future__ import annotations

from typing import Any

from vllmctl.ops.base import Args, Command, FactRequests, Facts, Operation, OpError, Step, Upload, noop, run
from vllmctl.ops.engine_gone import gone_or_reboot, wait_gone
from vllmctl.paths import HOME_DIR, STATE_DIR
from vllmctl.render.quoting import confined_path, path_component

NOLOGIN = "/usr/sbin/nologin"


def applied_path(unit: str) -> str:
    return confined_path(STATE_DIR, path_component(f"{unit}.applied"))


def _user_facts(args: Args) -> FactRequests:
    return {"users": (str(args["name"]),)}


def _plan_service_user(args: Args, facts: Facts) -> Step:
    name, home, shell = str(args["name"]), str(args["home"]), str(args["shell"])
    current = facts["users"].get(name)
    if current is None:
        return Step(
            "service_user",
            name,
            (
                run(
                    "useradd", "--system", "--user-group", "--home-dir", home,
                    "--no-create-home", "--shell", shell, name,
                ),
            ),
        )  # fmt: skip
    fixes: list[str] = []
    if current["shell"] != shell:
        fixes += ["--shell", shell]
    if current["home"] != home:
        fixes += ["--home", home]
    if fixes:
        return Step("service_user", name, (run("usermod", *fixes, name),))
    return noop("service_user", name, f"user {name} exists")


def _service_facts(args: Args) -> FactRequests:
    return {"units": (), "applied": ()}


def starts(name: str, applied: str, facts: Facts) -> bool:
    """Whether a running `service` (re)starts `name`: not active, or last started with another applied hash
    (its recorded one). `service_health` asks the same of the same facts."""
    active = (facts.get("units") or {}).get(name, {}).get("active_state") == "active"
    return not active or (facts.get("applied") or {}).get(name) != applied


def _plan_service(args: Args, facts: Facts) -> Step:
    """Restart when what the service was last started with (its recorded applied hash) differs from now."""
    name = str(args["name"])
    unit = facts["units"].get(name, {})
    active = unit.get("active_state") == "active"
    enabled = unit.get("unit_file_state") == "enabled"
    recorded = facts["applied"].get(name)
    actions: list[Any] = []  # commands, uploads and (engine.reboot_on_stale) a reboot when stale
    reasons: list[str] = []
    if args["enabled"] and not enabled:
        actions.append(run("systemctl", "enable", name))
    elif not args["enabled"] and enabled:
        actions.append(run("systemctl", "disable", name))
    if args["running"]:
        if starts(name, str(args["applied"]), facts):
            # stop, then start only once the last run's processes are gone (a stuck worker keeps its GPU
            # memory; a plain restart would start the new engine beside it)
            if active:
                actions.append(run("systemctl", "stop", name))
            actions += gone_or_reboot((name,)) if args["reboot_on_stale"] else wait_gone((name,))
            actions.append(run("systemctl", "start", name))
            # the record digests the env file: shown, even a short digest lets a short API key be guessed
            actions.append(Upload(applied_path(name), str(args["applied"]), secret=True))
    else:
        if active:
            actions.append(run("systemctl", "stop", name))
        if recorded is not None:
            actions.append(run("rm", "-f", applied_path(name)))
        reasons.append(str(args.get("why_stopped") or "kept stopped"))
    if actions:
        # a start counts too: the rollout is asked before a replica goes from not serving to loading
        moves = any(
            isinstance(a, Command) and a.argv[:1] == ("systemctl",) and a.argv[1:2] in (("stop",), ("start",))
            for a in actions
        )
        return Step("service", name, tuple(actions), stops_engines=moves)
    state = "running with its applied unit and release" if args["running"] else "; ".join(reasons)
    return noop("service", name, f"{name} {state}")


def _venv_facts(args: Args) -> FactRequests:
    return {"paths": (f"{args['path']}/pyvenv.cfg",), "engine_venvs": (), "python": ()}


def _plan_python_venv(args: Args, facts: Facts) -> Step:
    path = str(args["path"])
    system_python = facts.get("python")
    if system_python is None:
        raise OpError(f"no python3 on the host to create {path}", "install python3 and python3-venv")
    wanted = args.get("python_version")
    if wanted and not str(system_python).startswith(str(wanted)):
        raise OpError(
            f"{path} needs Python {wanted} but the host has {system_python}",
            "install that Python on the host or drop python_version",
        )
    exists = facts["paths"].get(f"{path}/pyvenv.cfg", {"type": "absent"})["type"] == "file"
    venv = facts["engine_venvs"].get(path.rstrip("/").rsplit("/", 1)[-1], {})
    if not exists:
        return Step("python_venv", path, (run("python3", "-m", "venv", path),))
    if venv.get("python") and venv["python"] != system_python:
        return Step("python_venv", path, (run("python3", "-m", "venv", "--upgrade", path),))
    return noop("python_venv", path, f"venv {path} exists with Python {system_python}")


SERVICE_USER = Operation(
    "service_user", _user_facts, _plan_service_user, {"home": HOME_DIR, "shell": NOLOGIN}
)
SERVICE = Operation(
    "service",
    _service_facts,
    _plan_service,
    {"enabled": True, "running": True, "applied": "", "reboot_on_stale": False},
)
PYTHON_VENV = Operation("python_venv", _venv_facts, _plan_python_venv)
