"""Waiting on a started engine at the edge: health polled from the controller while `systemctl show` says
whether the unit already exited (waiting longer cannot help then), and the gate's smoke benchmark."""

from __future__ import annotations

import time
from collections.abc import Callable

from vllmctl.bench.health import wait_healthy
from vllmctl.bench.readiness import HealthResult, Progress
from vllmctl.bench.report import EndpointReport
from vllmctl.bench.smoke import benchmark_endpoint
from vllmctl.errors import VllmctlError
from vllmctl.ops import Command
from vllmctl.releases.gate import SMOKE_INPUT_TOKENS, SMOKE_SPEC
from vllmctl.releases.unit_exit import SHOW_PROPERTIES, exited_units
from vllmctl.runner.core.remote import Remote


class EngineExitedError(VllmctlError):
    """A unit being waited on failed or was restarted by systemd: waiting longer cannot make it healthy."""


def wait_for_health(
    base_url: str,
    model: str,
    deadline_s: float,
    on_progress: Callable[[Progress], None],
    api_key: str | None = None,
) -> HealthResult:
    started = time.monotonic()
    try:
        return wait_healthy(
            base_url, model, deadline_s, time.monotonic, time.sleep, on_progress, api_key=api_key
        )
    except EngineExitedError as exc:
        return HealthResult(False, time.monotonic() - started, 0, "health", exc.message)


def watch_units(
    remote: Remote, units: list[str], timeout_s: float, restarts_before: int = 0
) -> Callable[[Progress], None]:
    """A health wait's progress hook that stops the wait once a unit has exited (releases/unit_exit.py);
    `restarts_before` is the count systemd showed when the wait began."""

    def check(_progress: Progress) -> None:
        show = ("systemctl", "show", "-p", SHOW_PROPERTIES, "--", *units)
        exited = exited_units(
            remote.execute(Command(argv=show, sudo=False), timeout_s).stdout, restarts_before
        )
        if exited:
            raise EngineExitedError(f"the engine exited: {', '.join(exited)}")

    return check


def smoke_bench(base_url: str, model: str, api_key: str | None = None) -> EndpointReport:
    return benchmark_endpoint(base_url, model, SMOKE_SPEC, SMOKE_INPUT_TOKENS, api_key=api_key)
