"""When an engine counts as started: the startup deadline, the growing waits between probes, and what a wait
reports (pure; the HTTP poller is bench/health.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal, Protocol

# The startup deadline is a fixed part plus a part per GiB of weights:
# - FLOOR_S covers what every start pays whatever the size: Python and CUDA initialisation (~20 s),
#   torch.compile on a cold cache (~30-90 s), CUDA graph capture (~10-60 s), KV profiling; measured 36-57 s
#   for the lab's tiny model on 2 CPU cores, and 1-3 min for 7-8B models on one GPU.
# - SLOPE_S_PER_GIB is reading the weights at ~256 MiB/s, a slow disk or network filesystem with a cold
#   page cache (local NVMe is 5-10x faster): 16 GiB (8B bf16) adds 64 s, 131 GiB (70B bf16) adds 524 s.
FLOOR_S = 300.0
SLOPE_S_PER_GIB = 4.0
FIRST_WAIT_S = 0.5
WAIT_GROWTH = 1.5
# The cap bounds how late a ready engine is noticed: with 10 s, a host's restart waited ~5 s on average
# after its engine was ready (a rolling release of many hosts pays that on each). A probe is one HTTP
# request and one `systemctl show` on an open SSH connection, so probing every 2 s costs next to nothing.
MAX_WAIT_S = 2.0
PROBE_TIMEOUT_S = 5.0

Stage = Literal["health", "models", "ready"]


def startup_deadline_s(weights_gib: float) -> float:
    """Seconds to wait for an engine holding `weights_gib` of weights (per node) to become ready."""
    return FLOOR_S + SLOPE_S_PER_GIB * max(0.0, weights_gib)


def growing_waits(
    first_s: float = FIRST_WAIT_S, growth: float = WAIT_GROWTH, cap_s: float = MAX_WAIT_S
) -> Iterator[float]:
    """0.5, 0.75, 1.125, ... seconds, never above `cap_s`."""
    wait = first_s
    while True:
        yield min(wait, cap_s)
        wait *= growth


@dataclass(frozen=True)
class Progress:
    """What one failed attempt found, and how long the poller waits before the next."""

    attempt: int
    elapsed_s: float
    stage: Stage
    error: str
    next_wait_s: float


class HealthCheck(Protocol):
    """How the gate waits for health: on_progress may raise to stop (the unit died); api_key goes to /v1."""

    def __call__(
        self,
        base_url: str,
        model: str,
        deadline_s: float,
        on_progress: Callable[[Progress], None],
        api_key: str | None = None,
    ) -> HealthResult: ...


@dataclass(frozen=True)
class HealthResult:
    ok: bool
    elapsed_s: float
    attempts: int
    stage: Stage  # how far the last attempt got: "ready" when ok
    last_error: str = ""
