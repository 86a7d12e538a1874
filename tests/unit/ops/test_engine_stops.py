"""'An engine stops here' is one seam: every operation is listed below with whether its steps stop, restart or
reboot what serves, and each of its recorded cases (tests/unit/ops/<op>/*.json) is read for the commands
that do (a `systemctl stop/restart/kill/disable --now` of any unit but the known non-engine ones, a reboot):
such a step must say so (`Step.stops_engines`), or the runner would not ask the rollout guard before it."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from vllmctl.ops import OPERATIONS, Command, Step
from vllmctl.ops.dcgm import EXPORTER_SERVICE, HOSTENGINE
from vllmctl.ops.fabric import FM_SERVICE
from vllmctl.ops.persistence import PERSISTENCED
from vllmctl.ops.reboot import RebootWhenStale, WaitForReboot
from vllmctl.paths import HAPROXY_UNIT, KEEPALIVED_UNIT

CASES = Path(__file__).parent

# every operation, and whether any of its steps stops, restarts or reboots what serves
STOPS_ENGINES = {
    "directory": False,
    "file": False,
    "env_file": False,
    "systemd_unit": False,
    "service_user": False,
    "service": True,  # the engine units: stop, start (the rollout counts a start too)
    "python_venv": False,
    "gateway_config": False,
    "keepalived_config": False,
    "kernel_modules": False,
    "nvidia_driver": False,
    "nouveau_blacklist": False,
    "unattended_upgrades": False,
    "driver_reboot": True,
    "nvlsm": False,
    "fabric_manager": False,
    "persistence": False,
    "system_packages": False,
    "engine_venv": False,
    "engine_prune": False,
    "model_download": False,
    "model_sync": False,
    "service_health": False,
    "gpu_health": False,
    "gpu_memory": False,
    "dcgm_diag": False,
    "dcgm_exporter": False,
}
# units that serve no engine: restarting them stops no replica
NOT_ENGINES = {HAPROXY_UNIT, KEEPALIVED_UNIT, FM_SERVICE, PERSISTENCED, EXPORTER_SERVICE, HOSTENGINE}
STOPPING = {"stop", "restart", "try-restart", "reload-or-restart", "kill", "isolate"}
REBOOTING = {"reboot", "poweroff", "halt", "kexec", "shutdown"}


def stops_what_serves(action: Any) -> bool:
    """Whether one action stops, restarts or reboots what serves, read from what it runs."""
    if isinstance(action, WaitForReboot | RebootWhenStale):
        return True
    if not isinstance(action, Command):
        return False
    words = action.argv or tuple(shlex.split(action.shell.replace(";", " ; ").replace("&&", " && ")))
    if any(word in REBOOTING for word in words):
        return True
    for at, word in enumerate(words):
        if word != "systemctl" or at + 1 >= len(words):
            continue
        verb, rest = words[at + 1], [w for w in words[at + 2 :] if not w.startswith("-")]
        stops = verb in STOPPING or (verb == "disable" and "--now" in words[at + 2 :])
        units = [u for u in rest if u not in (";", "&&", "||")][:1]
        if stops and not set(units) <= NOT_ENGINES:
            return True
    return False


def case_steps(op: str) -> list[Step]:
    steps = []
    for case in sorted((CASES / op).glob("*.json")):
        doc = json.loads(case.read_text())
        steps.append(OPERATIONS[op](doc["args"], doc["facts"]))
    return steps


def test_every_operation_is_listed() -> None:
    assert set(STOPS_ENGINES) == set(OPERATIONS), "list a new operation in STOPS_ENGINES"


@pytest.mark.parametrize("op", sorted(OPERATIONS))
def test_a_step_that_stops_engines_says_so(op: str) -> None:
    steps = case_steps(op)
    assert steps, f"{op} has no recorded case"
    for step in steps:
        stopping = [a.render() for a in step.actions if stops_what_serves(a)]
        if stopping:
            assert STOPS_ENGINES[op], f"{op} stops what serves ({stopping}) but is listed as not stopping"
            assert step.stops_engines, f"{op} {step.target}: {stopping} without Step.stops_engines"
        if not STOPS_ENGINES[op]:
            assert not step.stops_engines, f"{op} is listed as never stopping engines"
    if STOPS_ENGINES[op]:
        assert any(s.stops_engines for s in steps), f"no case of {op} shows the step that stops engines"


def test_the_reader_sees_stops_in_argv_and_in_shell_text() -> None:
    assert stops_what_serves(Command(argv=("systemctl", "stop", "vllmctl-m-0.service")))
    assert stops_what_serves(Command(argv=("systemctl", "disable", "--now", "vllmctl-m-0.service")))
    assert stops_what_serves(Command(shell="sync && systemctl restart vllmctl-m-0.service"))
    assert stops_what_serves(Command(argv=("systemd-run", "--on-active=2", "systemctl", "reboot")))
    assert not stops_what_serves(Command(argv=("systemctl", "restart", HAPROXY_UNIT)))
    assert not stops_what_serves(Command(argv=("systemctl", "enable", "vllmctl-m-0.service")))
