"""How a run is told to stop (SIGINT, SIGTERM, SIGHUP): the signal the CLI received, and the event worker
threads check between steps, so each host stops at a step boundary and still puts back and unlocks."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

from vllmctl.errors import VllmctlError

STOP = threading.Event()  # set by the runner when a signal reached it mid-run: its hosts stop
_received: list[int] = []
_deferring = threading.Event()  # a run's batch is waiting on its hosts: a signal asks them to stop instead


class Interrupted(VllmctlError):
    """The run was asked to stop before this host's next step."""


def on_signal(signum: int) -> None:
    """Records the signal; while a batch waits on its hosts (and no signal came before) it sets STOP, else
    it raises KeyboardInterrupt, as Ctrl-C does."""
    _received.append(signum)
    if _deferring.is_set() and not STOP.is_set():
        STOP.set()
        return
    raise KeyboardInterrupt


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """While a batch waits on its hosts: a signal stops them at their next step boundary, rather than
    interrupting the main thread at any bytecode (where a worker's future could be lost)."""
    _deferring.set()
    try:
        yield
    finally:
        _deferring.clear()


def reset() -> None:
    _received.clear()
    STOP.clear()


def received() -> int | None:
    """The first signal that asked the run to stop, if any."""
    return _received[0] if _received else None


def reason(signum: int | None = None) -> str:
    signum = signum if signum is not None else received()
    return f"interrupted by {signal.Signals(signum).name}" if signum else "interrupted"
