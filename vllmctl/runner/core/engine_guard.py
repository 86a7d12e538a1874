"""The seam where engines stop: what every flow that stops, restarts or reboots a host's engines calls
around it (`runner/releases/rollout.py` implements it for the rollout); the executor asks it for each step
that declares `stops_engines`, whatever its phase is called."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

Waiting = Callable[[str], None]  # why a host waits for its turn, said when that changes


class EngineGuard(Protocol):
    """What a run calls around stopping a host's engines."""

    def take_out(self, host: str, waiting: Waiting | None = None) -> str:
        """Block until `host` may stop its engines (then it is out of service, drained from the gateway):
        "" then, or why it must not (the run was interrupted, the rollout stopped, or a model would lose its
        last replicas). `waiting` is told why the host waits, each time that changes."""
        ...

    def put_back(self, host: str, failure: str) -> str:
        """After its release is decided (`failure` "" when it passed): back into rotation, counted; returns
        why the host is given up as failed when its release passed but it did not come back."""
        ...

    def fail(self, name: str, why: str) -> None:
        """A failure outside take_out/put_back (a group release) counted against --max-fail."""
        ...

    @property
    def stopped(self) -> str: ...
