"""A signal ends a run the way Ctrl-C does: each host stops at its next step boundary, and still unlocks
and writes its audit line; the run says it was interrupted and by which signal."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from executor_builders import inventory, model
from fake_remote import FakeHost, FakeRemote

from vllmctl import cli
from vllmctl.ops import Action
from vllmctl.runner.core import interrupt
from vllmctl.runner.core.execute import RunOptions
from vllmctl.runner.core.playbook_run import run_playbook
from vllmctl.runner.core.results import RunResult
from vllmctl.runner.fleet.hosts import host_contexts
from vllmctl.tasks.desired import HostContext
from vllmctl.tasks.playbooks import parse_playbook
from vllmctl.transport import Result

PLAYBOOK = parse_playbook(
    "name: t\nphases:\n"
    "  - name: base\n    tasks:\n      - task: base_layout\n      - task: service_user\n"
    "  - name: models\n    tasks:\n      - task: model_env_files\n      - task: model_units\n",
    "t.yml",
)


class Stopping(FakeRemote):
    """Runs `trigger` while executing the first command that contains `on`."""

    def __init__(self, host: FakeHost, clock: list[float], on: str, trigger: object) -> None:
        super().__init__(host, clock, [])
        self.on, self.trigger, self.fired = on, trigger, False

    def execute(self, action: Action, timeout: float) -> Result:
        result = super().execute(action, timeout)
        if self.on in action.render() and not self.fired:
            self.fired = True
            self.trigger()  # type: ignore[operator]
        return result


def run(hosts: dict[str, FakeHost], on: str, trigger: object, stop: threading.Event) -> RunResult:
    inv = inventory(list(hosts), {"tiny": model("tiny", tuple(hosts))})
    clock = [1000.0]

    def connect(ctx: HostContext) -> FakeRemote:
        return Stopping(hosts[ctx.host.name], clock, on, trigger)

    opts = RunOptions(lock_owner="me@ctl pid=1", stop=stop)
    return run_playbook(PLAYBOOK, host_contexts(inv, list(hosts), {}), connect, opts, lambda: clock[0])


def test_a_host_stops_at_the_next_step_and_still_unlocks_and_audits() -> None:
    stop = threading.Event()
    hosts = {"h1": FakeHost("h1")}
    result = run(hosts, "useradd", stop.set, stop)
    host = result.hosts["h1"]
    assert host.status == "failed" and "interrupted" in host.error
    assert "apply again" in host.hint
    assert result.aborted.startswith("interrupted")
    assert not any("vllmctl-" in command for command in hosts["h1"].executed)  # the models phase never ran
    assert hosts["h1"].lock is None and hosts["h1"].audit  # unlocked, audited


def sigterm() -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.5)  # a step takes a while: the main thread handles the signal before this one ends


def test_a_sigterm_while_the_batch_waits_stops_every_host_at_a_step_boundary() -> None:
    hosts = {"h1": FakeHost("h1"), "h2": FakeHost("h2")}
    before = signal.signal(signal.SIGTERM, cli._stop)
    try:
        result = run(hosts, "useradd", sigterm, interrupt.STOP)
        assert interrupt.received() == signal.SIGTERM and interrupt.STOP.is_set()
    finally:
        signal.signal(signal.SIGTERM, before)
        interrupt.reset()
    assert result.aborted == "interrupted by SIGTERM"
    for name in hosts:
        assert result.hosts[name].status == "failed", result.hosts[name]
        assert result.hosts[name].error.startswith("interrupted by SIGTERM before ")
        assert hosts[name].lock is None and hosts[name].audit


def test_a_second_signal_or_one_outside_a_batch_interrupts_like_ctrl_c() -> None:
    try:
        with pytest.raises(KeyboardInterrupt):
            cli._stop(signal.SIGTERM, None)
        assert interrupt.received() == signal.SIGTERM
        assert interrupt.reason() == "interrupted by SIGTERM"
        with interrupt.deferred():
            cli._stop(signal.SIGHUP, None)  # the first one in a batch only asks the hosts to stop
            assert interrupt.STOP.is_set()
            with pytest.raises(KeyboardInterrupt):
                cli._stop(signal.SIGHUP, None)
    finally:
        interrupt.reset()
    assert interrupt.received() is None and interrupt.reason() == "interrupted"
