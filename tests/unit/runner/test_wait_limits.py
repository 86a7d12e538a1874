"""Each wait gets the time it is given: the on-host health wait runs for its own deadline (--health-timeout,
or the startup deadline) plus a margin, not the one-command --timeout; the host's deadline still caps it; a
wait that runs out is named with the limit it hit, and a failure after it (the rollback) does not hide it."""

from __future__ import annotations

from typing import Any

from executor_builders import inventory, model
from fake_remote import FakeHost, FakeRemote

from vllmctl.errors import VllmctlError
from vllmctl.ops import Action
from vllmctl.runner.core.execute import WAIT_MARGIN_S, RunOptions
from vllmctl.runner.core.playbook_run import run_playbook
from vllmctl.runner.core.results import RunResult
from vllmctl.runner.fleet.hosts import host_contexts
from vllmctl.tasks.desired import HostContext
from vllmctl.tasks.playbooks import parse_playbook, with_task_params
from vllmctl.transport import Result

PLAYBOOK = parse_playbook(
    "name: t\nphases:\n"
    "  - name: models\n    tasks:\n      - task: model_env_files\n      - task: model_units\n"
    "  - name: services\n    tasks:\n      - task: model_services\n      - task: health_check\n",
    "t.yml",
)
HEALTH = "wait-healthy.py"


class Timed(FakeRemote):
    """Records each command's deadline; the health wait runs out when `runs_out` is set."""

    def __init__(self, host: FakeHost, runs_out: bool) -> None:
        super().__init__(host, [0.0], [])
        self.given: list[tuple[str, float]] = []
        self.runs_out = runs_out

    def execute(self, action: Action, timeout: float) -> Result:
        self.given.append((action.render(), timeout))
        if self.runs_out and HEALTH in action.render() and action.render().startswith("python3"):
            return Result("vllmctl-tiny-0.service: not ready after 1229s", "", 124, True)
        return super().execute(action, timeout)


def converge(runs_out: bool = False, after_host: Any = None, **opts: Any) -> tuple[RunResult, Timed]:
    inv = inventory(["a"], {"tiny": model("tiny", ("a",))})
    remote = Timed(FakeHost("a"), runs_out)
    playbook = with_task_params(PLAYBOOK, "health_check", {"deadline_s": 1200})
    options = RunOptions(command_timeout_s=600, after_host=after_host, **opts)
    result = run_playbook(playbook, host_contexts(inv, ["a"], {}), lambda ctx: remote, options, lambda: 0.0)
    return result, remote


def test_the_health_wait_gets_its_own_deadline_and_other_commands_get_timeout() -> None:
    result, remote = converge()
    assert result.hosts["a"].status == "ok", result.hosts["a"].error
    (health,) = [t for text, t in remote.given if text.startswith("python3") and HEALTH in text]
    assert health == 1200 + WAIT_MARGIN_S  # --health-timeout 1200 under the default --timeout 600
    assert {t for text, t in remote.given if text.startswith("systemctl")} == {600}


def test_the_hosts_deadline_still_caps_a_wait_and_is_named_when_it_runs_out() -> None:
    result, remote = converge(runs_out=True, host_timeout_s=900)
    (health,) = [t for text, t in remote.given if text.startswith("python3") and HEALTH in text]
    assert health == 900
    assert result.hosts["a"].error.endswith(": timed out after 900 s (the host's --host-timeout 900)")


def test_a_health_wait_that_runs_out_is_named_and_a_failed_rollback_after_it_does_not_hide_it() -> None:
    def after_host(ctx: HostContext, remote: Any, lock: Any, failure: str) -> dict[str, Any]:
        assert failure.startswith("service_health vllmctl-tiny-0.service: python3 ")
        raise VllmctlError("a: `systemctl stop -- vllmctl-tiny-0.service` timed out (exit 124)", "stderr: -")

    result, _ = converge(runs_out=True, after_host=after_host)
    error = result.hosts["a"].error
    assert error.startswith("service_health vllmctl-tiny-0.service: python3 "), error
    wait = f"timed out after {1200 + WAIT_MARGIN_S:.0f} s (its own 1200 s wait + {WAIT_MARGIN_S:g} s)"
    assert error.endswith(f"{wait}; then a: `systemctl stop -- vllmctl-tiny-0.service` timed out (exit 124)")


class Slow:
    """A rollout guard whose turn comes after `wait_s` on the run's clock (peers restarting before it)."""

    stopped = ""

    def __init__(self, clock: list[float], wait_s: float) -> None:
        self.clock, self.wait_s = clock, wait_s

    def take_out(self, host: str, waiting: Any = None) -> str:
        self.clock[0] += self.wait_s
        return ""

    def put_back(self, host: str, failure: str) -> str:
        return ""

    def fail(self, name: str, why: str) -> None:
        pass


def test_a_long_wait_for_its_turn_does_not_spend_the_hosts_deadline() -> None:
    inv = inventory(["a"], {"tiny": model("tiny", ("a",))})
    remote = Timed(FakeHost("a"), runs_out=False)
    playbook = with_task_params(PLAYBOOK, "health_check", {"deadline_s": 1200})
    clock = [0.0]
    # its peers take 5,000 s to come back, far past the host's own 900 s: it still gets all of its 900 s
    guard: Any = Slow(clock, 5000)
    options = RunOptions(command_timeout_s=600, host_timeout_s=900, guard=guard)
    contexts = host_contexts(inv, ["a"], {})
    result = run_playbook(playbook, contexts, lambda ctx: remote, options, lambda: clock[0])
    assert result.hosts["a"].status == "ok", result.hosts["a"].error
    (health,) = [t for text, t in remote.given if text.startswith("python3") and HEALTH in text]
    assert health == 900  # the host's own time, whole, after its 5,000 s wait
