"""Host reboots as step actions: the command that schedules one, the controller-side wait for the host to come
back, and the engine-gone check that reboots the host when it finds a stopped engine's processes stuck."""

from __future__ import annotations

from dataclasses import dataclass

from vllmctl.ops.base import Command, run

REBOOT_WAIT_S = 600.0
BOOT_ID = "/proc/sys/kernel/random/boot_id"


def schedule_reboot() -> Command:
    """Scheduled a moment later so the command returns before sshd goes down."""
    return run("systemd-run", "--on-active=2", "--timer-property=AccuracySec=100ms", "systemctl", "reboot")


@dataclass(frozen=True)
class WaitForReboot:
    """Controller-side: wait until SSH answers again with a boot id other than `boot_id`."""

    boot_id: str
    timeout_s: float = REBOOT_WAIT_S

    def render(self) -> str:
        return f"wait for the host to come back over SSH (new boot, up to {self.timeout_s:g}s)"


@dataclass(frozen=True)
class RebootWhenStale:
    """`check` (the engine-gone helper); when it exits `stale_exit` (a stopped engine's processes outlived
    SIGKILL), the host is rebooted (`engine.reboot_on_stale`) and waited for, and the step goes on."""

    check: Command
    stale_exit: int
    timeout_s: float = REBOOT_WAIT_S

    def render(self) -> str:
        wait = f"up to {self.timeout_s:g}s"
        return f"{self.check.render()} (on stuck processes: reboot the host and wait for it, {wait})"

    @property
    def reboot(self) -> Command:
        return schedule_reboot()
