"""Reboots at the edge against a scripted transport: the wait for a new boot id, and the engine-gone check
that reboots the host only when it exits with stuck processes (engine.reboot_on_stale)."""

from __future__ import annotations

from typing import Any

from vllmctl.errors import TransportError
from vllmctl.ops import Command
from vllmctl.ops.engine_gone import EXIT_STALE
from vllmctl.ops.reboot import RebootWhenStale
from vllmctl.runner.core.reboot import REBOOTED, reboot_when_stale, wait_for_reboot
from vllmctl.transport import Result

CHECK = Command(argv=("python3", "/var/lib/vllmctl/bin/engine-gone.py", "30", "vllmctl-m-0.service"))
STUCK = (
    "vllmctl-m-0.service: not started: processes still there 30 s after the stop\n"
    "  pid 4242 (VLLM::Worker, state D (disk sleep)) is still in vllmctl-m-0.service's cgroup\n"
    "fix: kill -9 4242, then apply again; a process in state D (uninterruptible) cannot be killed: reboot\n"
)


class Host:
    name = "h1"


class Scripted:
    """Answers each command with the next result of its kind; records what ran."""

    host = Host()

    def __init__(self, check: Result, boots: list[Any] | None = None) -> None:
        self.check, self.boots, self.ran, self.closed = check, list(boots or []), list[str](), 0

    def run(self, command: Any, sudo: bool = False, timeout: float = 0.0, **_: Any) -> Result:
        text = command if isinstance(command, str) else " ".join(command)
        self.ran.append(text)
        if "engine-gone.py" in text:
            return self.check
        if text.startswith("cat /proc/sys/kernel/random/boot_id"):
            answer = self.boots.pop(0) if self.boots else "old"
            if isinstance(answer, Exception):
                raise answer
            return Result(answer + "\n", "", 0)
        return Result("", "", 0)

    def close(self) -> None:
        self.closed += 1


def action() -> RebootWhenStale:
    return RebootWhenStale(CHECK, EXIT_STALE, timeout_s=60)


def test_no_stuck_process_means_no_reboot() -> None:
    for check in (Result("", "", 0), Result("", "boom", 1)):
        transport = Scripted(check)
        assert reboot_when_stale(transport, action(), 60) is check  # type: ignore[arg-type]
        assert transport.ran == [CHECK.render()]


def test_stuck_processes_reboot_the_host_and_the_result_says_what_was_stuck() -> None:
    transport = Scripted(Result("", STUCK, EXIT_STALE), ["old"])
    waited: list[tuple[str, float]] = []

    def wait(t: Any, boot_id: str, timeout: float) -> Result:
        waited.append((boot_id, timeout))
        return Result("back with boot id new\n", "", 0)

    result = reboot_when_stale(transport, action(), 600, wait)  # type: ignore[arg-type]
    assert result.ok and result.stdout.startswith(REBOOTED)
    assert "pid 4242 (VLLM::Worker, state D" in result.stdout and "fix:" not in result.stdout
    assert any(r.endswith("systemctl reboot") for r in transport.ran)
    assert waited == [("old", 60)]  # the action's own limit under the step's


def test_a_host_that_does_not_come_back_fails_the_step_with_what_was_stuck() -> None:
    transport = Scripted(Result("", STUCK, EXIT_STALE), ["old"])
    gone = Result("", "h1 did not come back within 60s: refused", 124, True)
    result = reboot_when_stale(transport, action(), 600, lambda *a: gone)  # type: ignore[arg-type]
    assert not result.ok and "pid 4242" in result.stderr and "did not come back" in result.stderr


def test_the_wait_ends_at_a_new_boot_id_and_times_out_on_the_old_one() -> None:
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    down = TransportError("h1: connection refused", "")
    transport = Scripted(Result("", "", 0), [down, "old", "new"])
    back = wait_for_reboot(transport, "old", 60, sleep, lambda: now[0])  # type: ignore[arg-type]
    assert back.ok and back.stdout == "back with boot id new\n"
    stuck = Scripted(Result("", "", 0), ["old"] * 100)
    late = wait_for_reboot(stuck, "old", 10, sleep, lambda: now[0])  # type: ignore[arg-type]
    assert late.timed_out and "did not come back within 10s: still the old boot" in late.stderr
