"""Reboots at the edge: wait for a host to come back over SSH with a new boot id, and the engine-gone check
that reboots the host when a stopped engine's processes are stuck (`engine.reboot_on_stale`)."""

from __future__ import annotations

import time
from collections.abc import Callable

from vllmctl.errors import TransportError
from vllmctl.ops.reboot import BOOT_ID, RebootWhenStale
from vllmctl.transport import Result, SshTransport

REBOOTED = "rebooted:"  # how a stale reboot's output begins: the runner notes it on the step


def wait_for_reboot(
    transport: SshTransport,
    old_boot_id: str,
    timeout: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Result:
    """The host is going down: reconnect until it answers with another boot id, or time out."""
    deadline = clock() + timeout
    transport.close()
    sleep(3)
    last = ""
    while clock() < deadline:
        try:
            seen = transport.run(["cat", BOOT_ID], timeout=10)
            if seen.ok and seen.stdout.strip() and seen.stdout.strip() != old_boot_id:
                return Result(f"back with boot id {seen.stdout.strip()}\n", "", 0)
            last = "still the old boot"
        except TransportError as exc:
            last = exc.message
        transport.close()
        sleep(2)
    name = transport.host.name
    return Result("", f"{name} did not come back within {timeout:g}s: {last}", 124, True)


def reboot_when_stale(
    transport: SshTransport,
    action: RebootWhenStale,
    timeout: float,
    wait: Callable[[SshTransport, str, float], Result] = wait_for_reboot,
) -> Result:
    """The check's result as it is, unless it found stuck processes: then the host is rebooted and waited
    for, and the result says what was stuck (a failed reboot or wait fails the step with it)."""
    check = transport.run(action.check.render(), sudo=action.check.sudo, timeout=timeout)
    if check.exited != action.stale_exit or check.timed_out:
        return check
    stuck = (check.stderr.strip() or check.stdout.strip()).splitlines()
    found = "\n".join(line for line in stuck if not line.startswith("fix:"))
    boot = transport.run(["cat", BOOT_ID], timeout=min(timeout, 30.0))
    scheduled = transport.run(action.reboot.render(), sudo=True, timeout=min(timeout, 30.0))
    if not boot.ok or not scheduled.ok:
        why = (scheduled.stderr or boot.stderr).strip()
        return Result(
            check.stdout, f"{found}\nthe reboot could not be scheduled: {why}", scheduled.exited or 1
        )
    back = wait(transport, boot.stdout.strip(), min(timeout, action.timeout_s))
    if not back.ok:
        return Result(check.stdout, f"{found}\nrebooted (engine.reboot_on_stale): {back.stderr}", 124, True)
    return Result(f"{REBOOTED} {found}\n{back.stdout}", "", 0)
