"""The runner asks the rollout guard before exactly the steps that say they stop engines, whatever their
phase is called: a driver reboot of two hosts of one model goes one host at a time, each taken out (drained)
before its reboot and put back after; a stale reboot is noted on its step."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from executor_builders import inventory, model
from fake_remote import FakeHost, FakeRemote

from vllmctl.inventory.model import DriverSpec, EngineSpec
from vllmctl.ops.reboot import RebootWhenStale
from vllmctl.releases.rollout import MaxFail
from vllmctl.runner.core.execute import RunOptions
from vllmctl.runner.core.playbook_run import run_playbook
from vllmctl.runner.core.reboot import REBOOTED
from vllmctl.runner.fleet.hosts import host_contexts
from vllmctl.runner.releases.rollout import RolloutGuard, rollout_guard
from vllmctl.tasks.playbooks import parse_playbook
from vllmctl.transport import Result

UNIT = "vllmctl-tiny-0.service"
DRIVER_FACTS = {
    "driver_packages": {
        "apt": True,
        "boot_id": "b0",
        "held": [],
        "installed": {"nvidia-driver-580": "580.95.05-1"},
        "reboot_required": True,
        "tools": ["apt-get"],
    },
    "gpu_health": {"held": [], "nouveau_loaded": False, "nvswitch": [], "packages": {}, "xid": []},
    "gpus": {"status": "ok", "gpus": [{"driver_version": "580.95.05", "index": 0, "name": "NVIDIA H100"}]},
    "os_release": {"id": "debian", "version_id": "12"},
}


def playbook(phase: str, task: str) -> Any:
    return parse_playbook(f"name: t\nphases:\n  - name: {phase}\n    tasks:\n      - task: {task}\n", "t.yml")


class Rebooting(FakeRemote):
    """A host with a reboot pending; a stale check that finds stuck processes reboots it."""

    def _facts(self, requests: Any) -> dict[str, Any]:
        return {**super()._facts(requests), **DRIVER_FACTS}

    def execute(self, action: Any, timeout: float) -> Result:
        done = super().execute(action, timeout)
        if isinstance(action, RebootWhenStale):
            return Result(f"{REBOOTED} pid 4242 (VLLM::Worker, state D)\nback with boot id b1\n", "", 0)
        return done


class Recorded:
    """The run's guard, each take-out and put-back written into the hosts' shared log."""

    def __init__(self, guard: RolloutGuard, log: list[str]) -> None:
        self.guard, self.log = guard, log

    def take_out(self, host: str, waiting: Any = None) -> str:
        refused = self.guard.take_out(host)
        self.log.append(f"{host}: out")
        return refused

    def put_back(self, host: str, failure: str) -> str:
        self.log.append(f"{host}: back")
        return self.guard.put_back(host, failure)

    def fail(self, name: str, why: str) -> None:
        self.guard.fail(name, why)

    @property
    def stopped(self) -> str:
        return self.guard.stopped


def run(phase: str, task: str, engine: EngineSpec | None = None, **driver: Any) -> tuple[Any, list[str]]:
    inv = inventory(["a", "b"], {"tiny": model("tiny", ("a", "b"))})
    hosts = {
        n: replace(h, driver=DriverSpec(**driver), engine=engine or h.engine) for n, h in inv.hosts.items()
    }
    inv = replace(inv, hosts=hosts)
    log: list[str] = []
    fakes = {
        n: FakeHost(n, units={UNIT: {"active_state": "active", "unit_file_state": "enabled"}}) for n in "ab"
    }
    rollout = rollout_guard(inv, {}, 2, MaxFail(), None, wait_s=30.0)
    rollout.probe = lambda r: r.host not in rollout.ledger.out  # a replica serves while its host is in
    rollout.poll_s = 0.01
    options = RunOptions(forks=2, guard=Recorded(rollout, log))
    connect = lambda ctx: Rebooting(fakes[ctx.host.name], [0.0], log)  # noqa: E731
    result = run_playbook(
        playbook(phase, task), host_contexts(inv, ["a", "b"], {}), connect, options, time.monotonic
    )
    return result, log


def test_a_driver_reboot_takes_out_one_host_of_a_model_at_a_time() -> None:
    result, log = run("reboot", "driver_reboot", branch="580", reboot=True)
    assert {h.status for h in result.hosts.values()} == {"ok"}, result.to_json()
    order = [line for line in log if line.endswith((": out", ": back")) or "systemctl reboot" in line]
    first, second = order[0].split(":")[0], order[3].split(":")[0]
    assert {first, second} == {"a", "b"}
    assert [line.split(": ", 1)[1].split()[0] for line in order] == ["out", "systemd-run", "back"] * 2, order
    assert order[0].startswith(first) and order[2].startswith(first), order
    # the host is back once its engine serves: the wait comes before it is put back
    polls = [
        i for i, line in enumerate(log) if line.startswith(f"{first}: python3") and "wait-healthy" in line
    ]
    assert polls and polls[-1] < log.index(f"{first}: back")


def test_a_step_that_stops_engines_is_guarded_in_a_phase_of_any_name() -> None:
    # the engines run with no applied record: the release restarts them
    result, log = run("restart-engines", "model_services")
    assert {h.status for h in result.hosts.values()} == {"ok"}, result.to_json()
    for host in "ab":
        assert log.index(f"{host}: out") < log.index(f"{host}: systemctl stop {UNIT}")


def test_a_reboot_for_stuck_processes_is_noted_on_its_step() -> None:
    result, _ = run("services", "model_services", EngineSpec(reboot_on_stale=True))
    for host in "ab":
        (step,) = [s for s in result.hosts[host].steps if s.step.op == "service"]
        assert step.status == "changed" and step.note.startswith(f"{REBOOTED} pid 4242")
        assert step.to_json()["note"] == step.note
        assert any("on stuck processes: reboot the host" in c for c in step.step.rendered())
